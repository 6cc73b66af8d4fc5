"""``%pip``, ``%conda`` and ``!pip`` in a kernel that has no pip: a clear error, and a list.

The kernel image carries no pip and runs without network (images/README.md), so nothing can
be installed in a session. IPython's own ``%pip install x`` then printed "No module named
pip" and "Note: you may need to restart the kernel to use updated packages." and the cell
succeeded, which reads as if the install had worked. Where pip is missing, the packaging
magics (``%pip``, ``%conda``, ``%mamba``, ``%micromamba``, ``%uv``) and ``!pip ...`` shell
lines raise a ``UsageError`` saying so instead; ``%pip list`` and ``%pip freeze`` (and their
``!pip`` forms) list the installed distributions. A kernel whose interpreter has pip (the
local backend, in the service's own environment) keeps IPython's magics.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

#: What a model reads when it tries to install a package.
NO_INSTALL = (
    "packages cannot be installed in this session: the kernel has no pip and no network. "
    "Use the packages already installed (`%pip list` lists them with their versions); "
    "a package that is missing has to be in the kernel's image (ask the operator)."
)

#: IPython's packaging magics.
MAGICS = ("pip", "conda", "mamba", "micromamba", "uv")

#: A shell line that runs a package manager: ``pip install x``, ``python -m pip ...``,
#: ``conda ...``, ``uv pip ...``; group ``tool`` is the manager, ``args`` the rest.
_MANAGER = re.compile(
    r"^\s*(?:sudo\s+)?(?:\S*python[\d.]*\s+-m\s+)?"
    r"(?P<tool>pip[\d.]*|conda|mamba|micromamba|uv)(?:\s+(?P<args>.*))?$",
    re.DOTALL,
)


def install_package_magics(shell: InteractiveShell, *, has_pip: bool | None = None) -> bool:
    """Replace the packaging magics and wrap ``shell.system`` when pip is missing.

    Called from :func:`interpreter_kernel.configure.setup`.

    Args:
        shell: the kernel's shell.
        has_pip: whether the kernel's interpreter can import pip; looked up when ``None``.

    Returns:
        Whether the replacements were installed.
    """
    if has_pip is None:
        has_pip = importlib.util.find_spec("pip") is not None
    if has_pip:
        return False
    # IPython's decorators hide the signature from a type checker.
    register: Any = shell.register_magic_function
    for name in MAGICS:
        register(_magic(name), magic_kind="line", magic_name=name)
    if not getattr(shell.system, "guards_installs", False):
        shell.system = _guarded(shell.system)  # type: ignore[method-assign]
    return True


def installed() -> str:
    """The installed distributions as ``name==version`` lines, sorted by name."""
    versions: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions.setdefault(str(name), str(dist.version))
    return "\n".join(f"{n}=={v}" for n, v in sorted(versions.items(), key=lambda i: i[0].lower()))


def _answer(tool: str, args: str) -> None:
    """List for ``pip list``/``pip freeze``; anything else cannot work here."""
    words = args.split()
    if tool == "uv" and words[:1] == ["pip"]:
        tool, words = "pip", words[1:]
    if tool.startswith("pip") and words and words[0] in ("list", "freeze"):
        print(installed())
        return
    raise UsageError(NO_INSTALL)


def _magic(name: str) -> Callable[[str], None]:
    def magic(line: str) -> None:
        _answer(name, line)

    magic.__doc__ = f"%{name}: {NO_INSTALL}"
    return magic


def _guarded(system: Callable[[str], Any]) -> Callable[[str], Any]:
    def guarded(cmd: str) -> Any:
        found = _MANAGER.match(cmd)
        if found is None:
            return system(cmd)
        tool, args = found["tool"], found["args"] or ""
        if tool == "uv" and not args.lstrip().startswith("pip"):
            return system(cmd)
        return _answer(tool, args)

    guarded.guards_installs = True  # type: ignore[attr-defined]
    return guarded
