"""Event ids of an execution taken over from an earlier broker are never reused."""

from __future__ import annotations

import asyncio

from interpreter.handle import ExecutionHandle, StreamText
from interpreter.models import Execution


def _drain(queue: asyncio.Queue[object]) -> list[object]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def test_a_taken_over_execution_numbers_on_past_the_earlier_brokers_ids() -> None:
    """A resumed cell's ids restarted at 1: a client resuming with the id it last had from
    the earlier broker (8) skipped the new broker's first eight events."""
    handle = ExecutionHandle(
        Execution(id="ex_1", session_id="s_1", status="unknown"), 1, 60, resumed=True
    )
    handle.continue_ids(1000)
    handle.publish(StreamText("stdout", "a\n"))
    handle.publish(StreamText("stdout", "b\n"))
    first, queue = handle.watch(after=8)  # an id the earlier broker gave
    assert first == 1001
    assert _drain(queue) == [StreamText("stdout", "a\n"), StreamText("stdout", "b\n")]
    first, queue = handle.watch(after=1001)
    assert (first, _drain(queue)) == (1002, [StreamText("stdout", "b\n")])
