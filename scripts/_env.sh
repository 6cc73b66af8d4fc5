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
        # pip byte-compiles file by file: more than half of a 2-minute install. Compiled
        # here on every core instead (files that do not compile are skipped, as pip does).
        # Compiling is not optional: kernels run with PYTHONDONTWRITEBYTECODE, so a module
        # left uncompiled is compiled again at every kernel's start (measured: a kernel's
        # imports took 4.7-6.0 s of CPU uncompiled against 1.5-1.7 s compiled).
        "$VENV/bin/python" -m pip install -q --no-compile -e "$ROOT[$extras]" >&2
        # Packages' own test suites (pandas/tests, scipy's, sympy's: a quarter of the
        # source) are never imported by a kernel: left out, a third of the compiling time.
        "$VENV/bin/python" -m compileall -q -j 0 -x '/tests?/' \
            "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
            >/dev/null 2>&1 || true
        touch "$stamp"
    fi
    # The kernel-side package is imported from this checkout (an editable install), by
    # kernels that may not write bytecode: compiled here, and again whenever it changes
    # (quick when nothing did). About 50 ms of CPU less per local kernel start.
    "$VENV/bin/python" -m compileall -q "$ROOT/kernels/interpreter_kernel" >/dev/null 2>&1 || true
}
