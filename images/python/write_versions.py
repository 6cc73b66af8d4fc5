"""Record what is installed in the kernel image, and refuse to build if it is not what was pinned.

Runs inside the image build with the kernel venv's interpreter:

    /opt/kernel/bin/python write_versions.py requirements.txt /etc/interp/versions.json

The output lets a notebook say exactly what ran: the Python version, the operating system of
the base, and every distribution in the kernel's environment with its version. The same
package map is put on the image as the ``org.interp.packages`` label by the host, which reads
it from ``requirements.txt``; the equality check here is what makes the two agree.
"""

from __future__ import annotations

import json
import platform
import re
import sys
from importlib import metadata
from pathlib import Path


def _normalize(name: str) -> str:
    # PEP 503 normalization, so "typing_extensions" and "typing-extensions" are one name.
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(requirements: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in requirements.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise SystemExit(f"not an exact pin: {raw!r}")
        pins[_normalize(name)] = version.strip()
    return pins


def _installed() -> dict[str, str]:
    return {_normalize(dist.metadata["Name"]): dist.version for dist in metadata.distributions()}


def _os_release() -> str:
    try:
        text = Path("/etc/os-release").read_text(encoding="utf-8")
    except OSError:
        return "unknown"
    fields = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    return fields.get("PRETTY_NAME", "unknown").strip('"')


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    requirements, output = Path(argv[0]), Path(argv[1])
    pinned, installed = _pins(requirements), _installed()
    if pinned != installed:
        missing = sorted(set(pinned) - set(installed))
        extra = sorted(set(installed) - set(pinned))
        differ = sorted(
            f"{name} {pinned[name]} != {installed[name]}"
            for name in set(pinned) & set(installed)
            if pinned[name] != installed[name]
        )
        print(
            f"installed packages differ from the pins: missing={missing} extra={extra} "
            f"differ={differ}",
            file=sys.stderr,
        )
        return 1
    record = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "machine": platform.machine(),
        "os": _os_release(),
        "packages": dict(sorted(installed.items())),
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
