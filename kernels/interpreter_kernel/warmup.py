"""``warm_up(shell)``: do at start what the first cell would otherwise pay for.

IPython and ipykernel build several things the first time a cell runs: the display
formatters' default printers, the shell's logger (an import), the compiler's directory for
cell files, the first compile of the cell machinery. A session's first cell took about 5 ms
longer than its second for it (a local kernel, ``1+1``, p50 of ten kernels). A warm pool's
kernel is claimed after its start, so that work is better done while nobody waits
(issue 10's warm create).

Nothing here is seen from outside: the cell runs silently (no displayhook, no events, no
history, no execution count), and the formatting result is thrown away.
"""

from __future__ import annotations

import logging

from IPython.core.interactiveshell import InteractiveShell

log = logging.getLogger(__name__)

#: The cell run silently at start: an expression, so that the expression path compiles.
WARM_UP_CELL = "0"


def warm_up(shell: InteractiveShell) -> None:
    """Run the first-cell work of ``shell`` once, invisibly; never raises."""
    count = shell.execution_count
    try:
        if shell.display_formatter is not None:
            shell.display_formatter.format(0)  # type: ignore[no-untyped-call]
        shell.logger  # noqa: B018 - a lazily made attribute: reading it makes it
        shell.run_cell(WARM_UP_CELL, store_history=False, silent=True)  # type: ignore[no-untyped-call]
    except Exception:  # a kernel that starts cold is still a kernel
        log.debug("warm-up failed", exc_info=True)
    finally:
        shell.execution_count = count
