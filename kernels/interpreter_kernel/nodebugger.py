"""The kernel is made without ipykernel's debugger.

Whenever debugpy is installed (ipykernel depends on it), ipykernel 7 imports it, with the
pydevd it vendors, while it creates the kernel object: the kernel's ``debugger_class`` is
resolved, and the kernel asks whether a debugger is available. That import took 120 ms of
each kernel's start on the development VM, about an eighth of a local kernel's time to
its first ``kernel_info`` reply. It bought nothing here: both kernelspecs declare
``"debugger": false``, and the broker relays no ``debug_request``.

:func:`debugger_hidden` hides debugpy while the kernel is made, so ipykernel finds no
debugger (and ``kernel_info`` no longer lists one among its supported features). The
module is hidden for that moment only: a cell can still ``import debugpy``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: The package ipykernel's debugger is built on.
DEBUGGER_PACKAGE = "debugpy"


@contextmanager
def debugger_hidden() -> Iterator[None]:
    """Make ``import debugpy`` fail inside the block, as if it were not installed, and
    leave ``sys.modules`` as it was afterwards."""
    missing = object()
    before = sys.modules.get(DEBUGGER_PACKAGE, missing)
    sys.modules[DEBUGGER_PACKAGE] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if before is missing:
            del sys.modules[DEBUGGER_PACKAGE]
        else:
            sys.modules[DEBUGGER_PACKAGE] = before  # type: ignore[assignment]
