"""The IPython kernel class: ipykernel's, except that it never waits for user input and
an interrupt ends a cell even when it is blocked in a call."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any, TextIO

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelbase import Kernel
from IPython.core.error import StdinNotImplementedError

from .interrupts import InterruptWaker, open_sigint

#: What ``input()`` and ``getpass()`` raise (as ``StdinNotImplementedError``).
INPUT_NOT_SUPPORTED = (
    "Interactive input is not supported: input() and getpass() cannot read from a user "
    "in this interpreter. Pass data in code (assign it to a variable) or read it from a "
    "file in the working directory instead."
)

#: Shell requests that run no code, and so do not decide where output goes.
_NO_CODE = frozenset({"kernel_info_request", "comm_info_request", "is_complete_request"})


class InterpreterKernel(IPythonKernel):
    """ipykernel's IPython kernel whose ``input()`` and ``getpass()`` fail at once, and
    which wakes its main thread after a SIGINT that left it blocked in a call.

    Nobody is there to answer an input request: the broker sends ``allow_stdin=False``, and
    even a client that allowed it would leave the cell waiting until its timeout. ipykernel
    already raises in that case; this only makes the error say what to do instead, and makes
    it independent of what the client asked for.

    Interrupts: see :mod:`interpreter_kernel.interrupts`. The requests it wakes the main
    thread for are the ones ipykernel opens to SIGINT: those between its pre- and
    post-handler hooks on the main thread.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        # IPython shows the frame an exception was raised in even when it is hidden
        # (``__tracebackhide__``), so the traceback of ``input()`` ended in this module.
        if self.shell is not None:
            self.shell.set_custom_exc((StdinNotImplementedError,), _without_our_frame)
        self._waker = InterruptWaker()
        self._request: object | None = None
        self._sigint_open = False

    def pre_handler_hook(self) -> None:
        """ipykernel's hook (SIGINT raises from here on), then note that a request runs.

        The first time, SIGINT is unblocked on the main thread first (the app blocked it
        before the kernel started its threads), while it is still ignored.
        """
        main = threading.current_thread() is threading.main_thread()
        if main and not self._sigint_open:
            open_sigint()
            self._sigint_open = True
        super().pre_handler_hook()  # type: ignore[no-untyped-call]
        if main:
            self._request = self._waker.started()

    def post_handler_hook(self) -> None:
        """Note that the request ended, then ipykernel's hook (SIGINT ignored again)."""
        if self._request is not None and threading.current_thread() is threading.main_thread():
            self._waker.finished(self._request)
            self._request = None
        super().post_handler_hook()  # type: ignore[no-untyped-call]

    def set_parent(self, ident: Any, parent: dict[str, Any], channel: str = "shell") -> None:
        """ipykernel's, except that a request that runs no code (``kernel_info_request``,
        the broker's probe after a timeout or an interrupt, a client's readiness check)
        leaves where output goes as it was: the streams and displays stay with the last
        cell. Output a cell's thread printed after such a probe carried the probe's id,
        which no cell has, so it was lost from the record (a timed-out cell's background
        thread); with the cell's id it is that cell's late output. The request's own
        status and reply still name it."""
        header = parent.get("header") if isinstance(parent, dict) else None
        msg_type = header.get("msg_type") if isinstance(header, dict) else None
        if channel == "shell" and msg_type in _NO_CODE:
            Kernel.set_parent(self, ident, parent, channel)  # type: ignore[no-untyped-call]
            return
        super().set_parent(ident, parent, channel)  # type: ignore[no-untyped-call]

    def watch_interrupts(self) -> None:
        """Start waking the main thread after each SIGINT (call once, on the main thread)."""
        self._waker.watch()

    def raw_input(self, prompt: str = "") -> str:
        """Replace ``input()`` in user code: always raise.

        Raises:
            StdinNotImplementedError: always, with :data:`INPUT_NOT_SUPPORTED`.
        """
        raise StdinNotImplementedError(INPUT_NOT_SUPPORTED)

    def getpass(
        self,
        prompt: str = "",
        stream: TextIO | None = None,
        *,
        echo_char: str | None = None,
    ) -> str:
        """Replace ``getpass.getpass()`` in user code: always raise.

        Raises:
            StdinNotImplementedError: always, with :data:`INPUT_NOT_SUPPORTED`.
        """
        raise StdinNotImplementedError(INPUT_NOT_SUPPORTED)


def _without_our_frame(
    shell: Any,
    etype: type[BaseException],
    value: BaseException,
    tb: TracebackType | None,
    tb_offset: int | None = None,
) -> None:
    """Show IPython's traceback of ``value`` (as for any error), less its last frame when
    that is :meth:`InterpreterKernel.raw_input` or :meth:`~InterpreterKernel.getpass`:
    the cell's ``input()`` call is where it ends, as for a built-in that fails."""
    before, last = None, tb
    while last is not None and last.tb_next is not None:
        before, last = last, last.tb_next
    if before is not None and last is not None and last.tb_frame.f_code in _OURS:
        before.tb_next = None
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)


_OURS = frozenset({InterpreterKernel.raw_input.__code__, InterpreterKernel.getpass.__code__})
