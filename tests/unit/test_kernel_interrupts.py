"""The kernel's interrupt wakes, in this process: real signals to pytest's main thread."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

from interpreter_kernel import interrupts
from interpreter_kernel.interrupts import WAKE_SIGNAL, InterruptWaker


@pytest.fixture
def woken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count the wakes the main thread receives (the handler stands in for the kernel's)."""
    assert threading.current_thread() is threading.main_thread()
    seen: list[int] = []

    def count(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    monkeypatch.setattr(interrupts, "_do_nothing", count)
    previous = signal.signal(WAKE_SIGNAL, count)
    try:
        yield seen
    finally:
        signal.signal(WAKE_SIGNAL, previous)


def on_signals_beside(waker: InterruptWaker, numbers: bytes) -> None:
    """Run ``on_signals`` on a thread of its own (as the kernel's watcher does) while the
    main thread waits for it: each wake breaks that wait off."""
    thread = threading.Thread(target=waker.on_signals, args=(numbers,))
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()


SIGINT = bytes([signal.SIGINT])


def test_no_request_running_means_no_wakes(woken: list[int]) -> None:
    waker = InterruptWaker(wake_after_s=(0.0,))
    on_signals_beside(waker, SIGINT)
    waker.finished(waker.started())
    on_signals_beside(waker, SIGINT)
    assert woken == []


def test_each_wake_reaches_the_main_thread_while_its_request_runs(woken: list[int]) -> None:
    waker = InterruptWaker(wake_after_s=(0.0, 0.01, 0.02))
    waker.started()
    on_signals_beside(waker, SIGINT)
    # Three wakes; two that both arrive before the main thread runs a handler count once.
    assert set(woken) == {WAKE_SIGNAL} and 1 <= len(woken) <= 3


def test_only_a_sigint_brings_wakes(woken: list[int]) -> None:
    waker = InterruptWaker(wake_after_s=(0.0,))
    waker.started()
    on_signals_beside(waker, bytes([signal.SIGTERM, WAKE_SIGNAL]))
    assert woken == []
    on_signals_beside(waker, bytes([WAKE_SIGNAL, signal.SIGINT]))
    assert woken == [WAKE_SIGNAL]


def test_a_later_request_is_not_woken_for_an_earlier_interrupt(woken: list[int]) -> None:
    waker = InterruptWaker(wake_after_s=(0.0,))
    first = waker.started()
    waker.finished(first)
    waker.started()
    waker.finished(first)  # a late end of the first request does not end the second
    on_signals_beside(waker, SIGINT)
    assert woken == [WAKE_SIGNAL]


def test_no_wakes_when_user_code_handles_the_wake_signal_itself() -> None:
    theirs: list[int] = []
    previous = signal.signal(WAKE_SIGNAL, lambda signum, frame: theirs.append(signum))
    try:
        waker = InterruptWaker(wake_after_s=(0.0,))
        waker.started()
        on_signals_beside(waker, SIGINT)
    finally:
        signal.signal(WAKE_SIGNAL, previous)
    assert theirs == []


def test_a_shell_command_stopped_by_sigint_ends_the_cell_before_the_watcher_counts_it() -> None:
    """IPython stops a shell command on SIGINT, prints ``^C`` and returns; the wrapper then
    ends the cell with ``KeyboardInterrupt``. It knew of the SIGINT only from the watcher
    thread's count, which may lag (the thread had not yet read the signal pipe): the rest
    of the cell ran, reported ok (a CI run on a loaded machine). The count here never
    moves, as when the thread lags, and a real SIGINT stops the command."""
    import os

    from interpreter_kernel.interrupts import _ending_on_interrupt

    assert threading.current_thread() is threading.main_thread()
    returned: list[str] = []

    def system(cmd: str) -> None:  # as IPython's: the interrupt is caught, ^C printed
        try:
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(5)  # the command, stopped by the signal
        except KeyboardInterrupt:
            returned.append("^C")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        command = _ending_on_interrupt(system, lambda: 0)
        with pytest.raises(KeyboardInterrupt):
            command("sleep 30")
        assert returned == ["^C"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        # Without a SIGINT the command's result is the result.
        assert _ending_on_interrupt(lambda cmd: cmd.upper(), lambda: 0)("ok") == "OK"
    finally:
        signal.signal(signal.SIGINT, previous)
