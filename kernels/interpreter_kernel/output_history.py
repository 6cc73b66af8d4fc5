"""No copy of a cell's output kept in the kernel's memory for the kernel's lifetime.

IPython 9 records the output of every cell in ``HistoryManager.outputs``, for
``%history -o``: each piece of text the code writes to stdout or stderr (the very strings
it wrote), and each result's formatted data. It keeps each result's text again in
``HistoryManager.output_hist_reprs`` (not truncated: a long string's is as long) and each
failed cell's formatted traceback in ``HistoryManager.exceptions``. Nothing ever removes
them while the kernel runs, so a kernel's memory grew by everything its cells had printed:
a cell that printed 100 MiB left the kernel 100 MiB larger once it was done, and a loop
printing without end had its container killed for memory within seconds, however fast the
broker read the output. The broker keeps every output in the session's notebook; the
kernel need not.

:func:`forget_outputs` gives the history manager mappings that store nothing; IPython
writes into them as before, and ``%history -o`` shows the inputs without their outputs.
It also stops IPython wrapping ``sys.stdout.write`` and ``sys.stderr.write`` for each cell
to copy every write into that history (``InteractiveShell._tee``): with nothing kept, the
wrapper only cost time, about 1.5 us a write (300,000 ``print`` calls: 4.1 s with it,
3.3 s without).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from IPython.core.interactiveshell import InteractiveShell


class ForgottenOutputs(dict[int, Any]):
    """A mapping from cells to their outputs that keeps none: looking a cell up gives a
    fresh empty list each time, and nothing put in is stored."""

    def __missing__(self, key: int) -> list[Any]:
        return []

    def __setitem__(self, key: int, value: Any) -> None:
        pass

    def setdefault(self, key: int, default: Any = None) -> Any:
        return [] if default is None else default


@contextlib.contextmanager
def _no_copy(channel: str) -> Iterator[None]:
    """In place of ``InteractiveShell._tee``: leaves the stream ``channel`` alone."""
    yield


def forget_outputs(shell: InteractiveShell) -> None:
    """Stop ``shell``'s history manager keeping the outputs and tracebacks of its cells,
    and ``shell`` copying each write of a cell into it."""
    manager = getattr(shell, "history_manager", None)
    for kept in ("outputs", "exceptions", "output_hist_reprs"):
        if manager is not None and hasattr(manager, kept):
            setattr(manager, kept, ForgottenOutputs())
    if hasattr(shell, "_tee"):
        shell._tee = _no_copy  # type: ignore[method-assign]
