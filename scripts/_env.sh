# Shared by scripts/serve and scripts/test: make (or reuse) the project's virtualenv.
# The environment lives in .venv next to the repo (INTERP_VENV overrides) and is refreshed
# when pyproject.toml changes.
set -eu
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${INTERP_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"

ensure_venv() {
    extras="$1"
    if [ ! -x "$VENV/bin/python" ]; then
        echo "Creating a virtual environment in $VENV ..." >&2
        "$PY" -m venv "$VENV"
        "$VENV/bin/python" -m pip install -q --upgrade pip >&2
    fi
    stamp="$VENV/.interp-installed-$extras"
    if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
        echo "Installing interp[$extras] and its dependencies ..." >&2
        # Not byte-compiled here: pip compiles all 12,600 files, more than half of a
        # 2-minute install, and most are never imported (sympy, statsmodels, most of scipy).
        # Python compiles a module on its first import and keeps the result.
        "$VENV/bin/python" -m pip install -q --no-compile -e "$ROOT[$extras]" >&2
        touch "$stamp"
    fi
}
