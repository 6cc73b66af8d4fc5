"""``!cmd`` reads no input: its standard input is ``/dev/null``.

IPython runs ``!cmd`` in a pseudo-terminal, so a command that reads input (``read``, a
``[Y/n]`` prompt, ``cat`` with no file) waits for a person who is never there, and the
cell hangs until its timeout. ``input()`` in Python code fails at once in this kernel; a
shell command now gets end-of-file at once the same way, and still writes to the terminal
(progress bars and colours behave as before). ``x = !cmd``, ``%%bash`` and ``subprocess``
already get no terminal input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from IPython.core.interactiveshell import InteractiveShell


def no_terminal_input(shell: InteractiveShell) -> None:
    """Give every ``!cmd`` of ``shell`` ``/dev/null`` as its input (``shell.system``, which
    ``!cmd`` calls: wrap it before anything else does). Safe to call twice."""
    run = shell.system
    if getattr(run, "_no_input", False):
        return
    shell.system = _without_input(run)  # type: ignore[method-assign]


def _without_input(run: Callable[[str], Any]) -> Callable[[str], Any]:
    def system(cmd: str) -> Any:
        if cmd.rstrip().endswith("&"):
            return run(cmd)  # refused there: no background processes
        # A prefix, so that nothing follows cmd (a comment at its end would swallow it);
        # on one line (IPython's expansion of $x and {x} keeps only a command's last line).
        return run(f"exec </dev/null; {cmd}")

    system._no_input = True  # type: ignore[attr-defined]
    return system
