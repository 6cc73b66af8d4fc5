"""Pure parts of reading outputs in pieces: byte ranges of artifacts, and the event log an
interrupted stream resumes from."""

from __future__ import annotations

import asyncio

import pytest

from interpreter.api.ranges import byte_range
from interpreter.errors import RangeNotSatisfiable
from interpreter.handle import Done, ExecutionHandle, StreamText
from interpreter.models import Execution


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 10, None),
        ("", 10, None),
        ("bytes=0-3", 10, (0, 3)),
        ("bytes=4-", 10, (4, 9)),
        ("bytes=-3", 10, (7, 9)),
        ("bytes=-30", 10, (0, 9)),
        ("bytes=5-100", 10, (5, 9)),
        ("BYTES = 1 - 2", 10, (1, 2)),
        ("bytes=0-1,4-5", 10, None),  # several ranges: the whole body
        ("items=0-1", 10, None),
        ("bytes=5-2", 10, None),
        ("bytes=-", 10, None),
    ],
)
def test_byte_ranges(header: str | None, size: int, expected: tuple[int, int] | None) -> None:
    assert byte_range(header, size) == expected


@pytest.mark.parametrize(("header", "size"), [("bytes=10-", 10), ("bytes=-0", 10), ("bytes=0-", 0)])
def test_unsatisfiable_ranges(header: str, size: int) -> None:
    with pytest.raises(RangeNotSatisfiable, match=f"has {size} bytes"):
        byte_range(header, size)


def drain(queue: asyncio.Queue[object]) -> list[object]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


async def test_watch_replays_after_an_id_then_goes_on_live() -> None:
    handle = ExecutionHandle(Execution(id="e", session_id="s", status="running"), 1, 10)
    events = [StreamText("stdout", f"{n}\n") for n in range(4)]
    for event in events[:3]:
        handle.publish(event)
    first, queue = handle.watch(after=1)
    assert first == 2 and drain(queue) == events[1:3]  # ids 2 and 3
    now_first, from_now = handle.watch()
    assert now_first == 4 and drain(from_now) == []
    handle.publish(events[3])
    handle.finish()
    done = Done(handle.execution)
    assert drain(queue) == [events[3], done, None]
    assert drain(from_now) == [events[3], done, None]
    # After the end: the missed events, and always the final Done.
    first, queue = handle.watch(after=2)
    assert first == 3 and drain(queue) == [*events[2:], done, None]
    first, queue = handle.watch(after=99)
    assert first == 5 and drain(queue) == [done, None]
    handle.release_log()
    first, queue = handle.watch(after=1)
    assert first == 5 and drain(queue) == [done, None]


async def test_the_event_log_of_a_flood_is_bounded_and_an_old_resume_is_told_so() -> None:
    from interpreter.errors import EventsExpired
    from interpreter.handle import LOG_BUDGET_CHARS, ExecutionHandle, StreamText
    from interpreter.models import Execution

    handle = ExecutionHandle(Execution(id="ex_f", session_id="s", status="running"), 1, 60)
    chunk = "x" * 1000
    for _ in range(5 * LOG_BUDGET_CHARS // len(chunk)):
        handle.publish(StreamText("stdout", chunk))
    kept = handle._log
    assert kept is not None and sum(len(e.text) for e in kept) <= LOG_BUDGET_CHARS  # type: ignore[union-attr]
    last = handle._published
    with pytest.raises(EventsExpired):
        handle.watch(0)
    first, queue = handle.watch(last - 3)
    assert first == last - 2 and queue.qsize() == 3
