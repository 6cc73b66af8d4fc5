"""An interrupt ends the cell, even one that is blocked in a call such as ``time.sleep``.

ipykernel interrupts a cell by sending SIGINT to its own process group from its control
thread. CPython's C-level handler only records a signal. The main thread raises
``KeyboardInterrupt`` at its next check, and a thread blocked in a call (``time.sleep``, a
socket read, a lock wait) checks only when the signal breaks that call off (EINTR). Two
ways an interrupt can leave such a call running, each seen here with ``perf`` and
``py-spy`` (the CI failure that led here fits either):

1. **Another thread took the signal.** Linux hands a process-directed signal to any
   thread that does not block it, and a thread whose signal mask changes at that moment
   (``pthread_create`` changes it, to start a thread) may take it first. CPython records
   it but, off the main thread, does not flag the main thread, and nothing breaks off
   the main thread's ``time.sleep(600)``: the cell runs for ten minutes. (A build that
   started a thread on the control thread right after the SIGINT lost 2 of 10 that way.)
   Here every thread but the main one blocks SIGINT (:func:`block_sigint`, before the
   kernel starts any thread; :func:`open_sigint` on the main thread once it runs
   requests), so it can go only to the main thread.
2. **It arrived as the main thread entered the call.** If the signal comes after the
   main thread released the GIL on its way into a blocking call but before the call
   starts, nothing breaks the call off either. With that timing forced, 15 interrupts in
   30 were missed; untimed, about 1 in 1,200 under CPU load. Here a
   thread of the kernel learns of every SIGINT as CPython's C handler records it
   (:func:`signal.set_wakeup_fd`), whoever sent it: the broker (the local backend
   signals the process group), ipykernel's control thread (``interrupt_request``) or
   anyone else. While the interrupted request still runs, it wakes the main thread a few
   times (:data:`WAKE_AFTER_S`) with a signal of its own (:data:`WAKE_SIGNAL`, SIGURG,
   ignored by default, here handled by a function that does nothing). Each wake breaks
   the blocking call off; Python then runs the pending SIGINT handler, which raises
   ``KeyboardInterrupt``. A wake that finds no SIGINT pending changes nothing: Python
   retries the call it broke off (PEP 475). If user code installed its own SIGURG
   handler, no wakes are sent, so we never call that handler; if it took the wakeup fd
   over (asyncio's ``add_signal_handler`` does), no wakes are sent either, and only the
   first remedy holds.

One more place lost an interrupt after the cell was announced (``execute_input``): the
``pre_execute`` and ``pre_run_cell`` callbacks IPython runs before the cell's code. Its
event manager catches ``KeyboardInterrupt`` from a callback, prints the traceback and goes
on, so the code then ran to its end as if never interrupted (1 interrupt in 15 was lost so
on a loaded machine). Here an interrupt in those callbacks ends the cell
(:func:`interrupt_before_code`); IPython records it as the cell's error. Callbacks after
the code (``post_execute``) keep IPython's handling: the code has run by then.

A shell command (``!sleep 30``) took an interrupt too: IPython stops the command, prints
``^C`` and runs the rest of the cell, which the broker then reported interrupted. Here
the cell ends there (:func:`interrupt_shell_commands`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from IPython.core.events import EventManager
from IPython.core.interactiveshell import InteractiveShell

#: The signal that breaks a blocking call off without doing anything else.
WAKE_SIGNAL = signal.SIGURG

#: When to wake the main thread, in seconds after the interrupt, while its request runs.
#: The gap lasts microseconds; the later wakes cover a main thread that the scheduler kept
#: off the CPU on its way into the call.
WAKE_AFTER_S = (0.02, 0.25, 1.0)


def block_sigint() -> None:
    """Block SIGINT on the calling (main) thread, so that every thread it starts blocks it.

    Call before the kernel starts its threads. SIGINT is ignored until the first request
    anyway (ipykernel's own setting); :func:`open_sigint` lets it in again.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def open_sigint() -> None:
    """Unblock SIGINT on the calling (main) thread.

    Call while SIGINT is still ignored: a SIGINT that came while it was blocked is then
    delivered and dropped, not raised in the request that opens it.
    """
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _do_nothing(signum: int, frame: FrameType | None) -> None:
    """The wake-up signal's handler: being delivered is its whole purpose."""


def install_wake() -> None:
    """Install the wake-up signal's handler. Call on the main thread, before any cell."""
    signal.signal(WAKE_SIGNAL, _do_nothing)


class InterruptWaker:
    """Knows whether the main thread runs a request; wakes it after each SIGINT."""

    def __init__(self, wake_after_s: tuple[float, ...] = WAKE_AFTER_S) -> None:
        self._wake_after_s = wake_after_s
        self._running: object | None = None
        #: SIGINTs the process received so far (:func:`interrupt_shell_commands`).
        self.sigints = 0

    def started(self) -> object:
        """Record that the main thread started a request; returns its token."""
        token = object()
        self._running = token
        return token

    def finished(self, token: object) -> None:
        """Record that the request ``token`` stands for has ended."""
        if self._running is token:
            self._running = None

    def watch(self) -> threading.Thread:
        """Make CPython report every signal on a pipe, and start the thread that reads it.

        Call on the main thread (``set_wakeup_fd`` allows no other), after
        :func:`block_sigint`, so that the thread blocks SIGINT too.
        """
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        os.register_at_fork(after_in_child=lambda: _unwatch_in_child(read_fd, write_fd))
        thread = threading.Thread(
            target=self._read_signals, args=(read_fd,), name="interp-sigint-watch", daemon=True
        )
        thread.start()
        return thread

    def _read_signals(self, read_fd: int) -> None:
        while numbers := os.read(read_fd, 64):
            self.on_signals(numbers)

    def on_signals(self, numbers: bytes) -> None:
        """Handle signal numbers CPython reported: after a SIGINT, wake the main thread
        while the request that was running then still runs (this blocks meanwhile)."""
        self.sigints += numbers.count(signal.SIGINT)
        token = self._running
        if signal.SIGINT not in numbers or token is None or not self._ours():
            return
        main = threading.main_thread().ident
        waited = 0.0
        for at in self._wake_after_s:
            time.sleep(at - waited)
            waited = at
            if main is None or self._running is not token or not self._ours():
                return
            signal.pthread_kill(main, WAKE_SIGNAL)

    @staticmethod
    def _ours() -> bool:
        return signal.getsignal(WAKE_SIGNAL) is _do_nothing


#: The events IPython triggers after announcing a cell and before running its code.
BEFORE_CODE = frozenset({"pre_execute", "pre_run_cell"})


class _InterruptibleEvents(EventManager):
    """IPython's event manager, except that ``KeyboardInterrupt`` in a callback of
    :data:`BEFORE_CODE` propagates (IPython then ends the cell with it)."""

    def trigger(self, event: str, *args: Any, **kwargs: Any) -> None:
        if event not in BEFORE_CODE:
            super().trigger(event, *args, **kwargs)
            return
        for callback in list(self.callbacks[event]):
            try:
                callback(*args, **kwargs)
            except KeyboardInterrupt:
                raise
            except Exception:
                # As IPython does: report the broken callback, run the cell all the same.
                if self.print_on_error:
                    print(f"Error in callback {callback} (for {event}):")
                self.shell.showtraceback()


def interrupt_before_code(shell: InteractiveShell) -> None:
    """Let an interrupt that lands in the callbacks run before a cell's code end the cell
    (see the module docs). Callbacks already registered stay registered."""
    if type(shell.events) is EventManager:
        shell.events.__class__ = _InterruptibleEvents


#: The shell's methods that run a shell command (``!cmd``, ``x = !cmd``, ``%sx``): IPython
#: catches the KeyboardInterrupt of an interrupt while the command runs, prints ``^C``
#: and goes on with the rest of the cell.
SHELL_COMMANDS = ("system", "getoutput")


def interrupt_shell_commands(shell: InteractiveShell, sigints: Callable[[], int]) -> None:
    """Let an interrupt that lands while a shell command runs end the cell: once the
    command is stopped (IPython stops it), ``KeyboardInterrupt`` is raised as for any
    other line, where the rest of the cell used to run. ``sigints`` counts the SIGINTs
    received (:attr:`InterruptWaker.sigints`)."""
    for name in SHELL_COMMANDS:
        run = getattr(shell, name, None)
        if run is None or getattr(run, "_ends_on_interrupt", False):
            continue
        setattr(shell, name, _ending_on_interrupt(run, sigints))


def _ending_on_interrupt(run: Callable[..., Any], sigints: Callable[[], int]) -> Any:
    def command(*args: Any, **kwargs: Any) -> Any:
        before = sigints()
        # Counted here too, on this (the main) thread, as the SIGINT is handled: the
        # count of ``sigints`` is kept by a thread that reads the signal pipe, which may
        # not have run yet when the command returns (on a loaded machine the rest of the
        # cell then ran, reported ok: 1 CI run in about 20).
        seen: list[int] = []
        previous = signal.getsignal(signal.SIGINT)
        counting = callable(previous)
        if counting:

            def counted(signum: int, frame: FrameType | None) -> Any:
                seen.append(signum)
                return previous(signum, frame)  # type: ignore[operator]

            signal.signal(signal.SIGINT, counted)
        try:
            result = run(*args, **kwargs)
        finally:
            if counting and signal.getsignal(signal.SIGINT) is counted:
                signal.signal(signal.SIGINT, previous)
        if seen or sigints() != before:
            raise KeyboardInterrupt
        return result

    command._ends_on_interrupt = True  # type: ignore[attr-defined]
    return command


def _unwatch_in_child(read_fd: int, write_fd: int) -> None:
    """In a forked child: report signals nowhere, and drop the parent's pipe."""
    with contextlib.suppress(ValueError, OSError):
        previous = signal.set_wakeup_fd(-1)
        if previous not in (-1, write_fd):  # someone else's: leave it in place
            signal.set_wakeup_fd(previous)
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)
