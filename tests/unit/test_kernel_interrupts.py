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


def test_no_request_running_means_no_wakes(woken: list[int]) -> None:
    waker = InterruptWaker(wake_after_s=(0.0,))
    assert waker.interrupted() is None
    token = waker.started()
    waker.finished(token)
    assert waker.interrupted() is None
    assert woken == []


def test_each_wake_reaches_the_main_thread_while_its_request_runs(woken: list[int]) -> None:
    waker = InterruptWaker(wake_after_s=(0.0, 0.01, 0.02))
    waker.started()
    thread = waker.interrupted()
    assert thread is not None
    thread.join(timeout=30)  # the main thread waits here; each wake breaks the wait off
    assert not thread.is_alive()
    assert woken == [WAKE_SIGNAL] * 3


def test_a_later_request_is_not_woken_for_an_earlier_interrupt(woken: list[int]) -> None:
    waker = InterruptWaker(wake_after_s=(0.0,))
    first = waker.started()
    waker.finished(first)
    waker.started()
    waker.finished(first)  # a late end of the first request does not end the second
    thread = waker.interrupted()
    assert thread is not None
    thread.join(timeout=30)
    assert woken == [WAKE_SIGNAL]


def test_no_wakes_when_user_code_handles_the_wake_signal_itself() -> None:
    theirs: list[int] = []
    previous = signal.signal(WAKE_SIGNAL, lambda signum, frame: theirs.append(signum))
    try:
        waker = InterruptWaker(wake_after_s=(0.0,))
        waker.started()
        assert waker.interrupted() is None
    finally:
        signal.signal(WAKE_SIGNAL, previous)
    assert theirs == []
