"""The small pure parts around a live session: the restart budget, execution events and
their wire form (read as the SDK reads it), and a handle's subscriptions."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import EventSource

from interpreter.api.events import sse_frame
from interpreter.client.protocol import decode_event
from interpreter.handle import (
    Done,
    ErrorRaised,
    Event,
    ExecutionHandle,
    OutputAdded,
    OutputCleared,
    StreamText,
)
from interpreter.kernel import RestartBudget
from interpreter.models import ErrorInfo, Execution, Output


@pytest.mark.parametrize(
    ("limit", "window", "times", "allowed"),
    [
        (3, 10.0, [0, 1, 2, 3], [True, True, True, False]),
        # The oldest restart leaves the window: room again.
        (3, 10.0, [0, 1, 2, 10.5, 11], [True, True, True, True, False]),
        (2, 5.0, [0, 100, 200], [True, True, True]),
        (0, 5.0, [0], [False]),
        # A refused restart is not counted.
        (1, 10.0, [0, 1, 2, 10.5], [True, False, False, True]),
    ],
)
def test_restart_budget(limit: int, window: float, times: list[float], allowed: list[bool]) -> None:
    budget = RestartBudget(limit, window)
    assert [budget.allow(t) for t in times] == allowed


EXECUTION = Execution(id="ex_1", session_id="s_1", status="ok", stdout="hi\n")
EVENTS: list[Event] = [
    StreamText("stdout", "line one\nline two\n"),
    StreamText("stderr", "warn\n\n\ndata: fake\n"),
    OutputAdded(Output(type="display_data", data={"text/plain": "x"})),
    OutputCleared(wait=True),
    ErrorRaised(ErrorInfo(ename="ValueError", evalue="bad", traceback=["a", "b"])),
    Done(EXECUTION),
]


def decode(frame: str) -> object:
    resp = httpx.Response(
        200, content=frame.encode(), headers={"content-type": "text/event-stream"}
    )
    events = list(EventSource(resp).iter_sse())
    assert len(events) == 1, frame
    return decode_event(events[0])


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_survives_the_wire_as_the_sdk_reads_it(event: Event) -> None:
    got = decode(sse_frame(event))
    if isinstance(event, StreamText):
        assert type(got).__name__ == ("StdoutEvent" if event.name == "stdout" else "StderrEvent")
        assert got.text == event.text  # type: ignore[attr-defined]
    elif isinstance(event, OutputAdded):
        assert got.output == event.output  # type: ignore[attr-defined]
    elif isinstance(event, OutputCleared):
        assert got.wait is True  # type: ignore[attr-defined]
    elif isinstance(event, ErrorRaised):
        assert got.error == event.error  # type: ignore[attr-defined]
    else:
        assert got == EXECUTION


async def test_a_subscriber_gets_every_event_then_done_then_the_end() -> None:
    handle = ExecutionHandle(execution=EXECUTION.model_copy(), seq=1, timeout_s=1)
    early = handle.subscribe()
    handle.publish(EVENTS[0])
    late = handle.subscribe()
    handle.publish(EVENTS[1])
    handle.finish()
    got_early = [early.get_nowait() for _ in range(early.qsize())]
    got_late = [late.get_nowait() for _ in range(late.qsize())]
    assert got_early[:2] == EVENTS[:2] and isinstance(got_early[2], Done) and got_early[3] is None
    assert got_late[0] == EVENTS[1] and isinstance(got_late[1], Done) and got_late[2] is None
    after = handle.subscribe()
    assert isinstance(after.get_nowait(), Done) and after.get_nowait() is None
    assert handle.finished.is_set()


async def test_a_finished_handle_from_the_store_answers_at_once() -> None:
    handle = ExecutionHandle.finished_with(EXECUTION)
    await asyncio.wait_for(handle.finished.wait(), 1)
    queue = handle.subscribe()
    assert queue.get_nowait() == Done(EXECUTION) and queue.get_nowait() is None


def _msg(msg_type: str, content: dict[str, object], parent: str = "m1") -> dict[str, object]:
    return {
        "header": {"msg_type": msg_type},
        "parent_header": {"msg_id": parent},
        "content": content,
    }


def _never_started_kernel() -> Any:
    """A kernel that was never started: it cannot be interrupted nor asked anything."""
    from interpreter.backends.base import LaunchOptions
    from interpreter.backends.local import LocalBackend
    from interpreter.kernel import Kernel, RestartBudget

    async def ignore(channel: str, msg: dict[str, object]) -> None:
        return None

    where = Path(tempfile.mkdtemp())
    return Kernel(
        name="s_test",
        backend=LocalBackend(None),
        options=LaunchOptions("s_test", "o", where, where / "ws", where / "run"),
        start_timeout_s=1,
        budget=RestartBudget(1, 1),
        on_message=ignore,
    )


async def _after_timeout(messages: list[tuple[str, dict[str, object]]], grace_s: float) -> bool:
    from interpreter.execution import ExecutionRecorder
    from interpreter.waiting import after_timeout

    rec = ExecutionRecorder("m1")
    for msg_type, content in messages:
        rec.feed_iopub(_msg(msg_type, content))
    handle = ExecutionHandle(execution=EXECUTION.model_copy(), seq=1, timeout_s=5)
    return await after_timeout(handle, rec, _never_started_kernel(), grace_s)


async def test_a_timed_out_cell_whose_idle_came_without_a_reply_keeps_its_state() -> None:
    # The timeout's SIGINT landed in ipykernel's handling of the request, after the cell's
    # code: no reply comes, the idle does, and the kernel goes on with its state. Before,
    # only a reply counted, and the kernel was restarted (3 of 20 cells ending at their
    # 2 s deadline lost the session's state).
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await _after_timeout(STARTED + IDLE, grace_s=30)
    assert loop.time() - started < 5  # not the grace: the idle says the kernel is done


async def test_a_timed_out_cell_with_no_answer_at_all_needs_a_restart() -> None:
    assert not await _after_timeout(STARTED, grace_s=0.3)


async def _ending(
    messages: list[tuple[str, dict[str, object]]],
    *,
    reply: bool,
    interrupted: bool = False,
    no_reply_grace_s: float = 0.1,
    iopub_grace_s: float = 0.05,
    deadline_s: float = 5,
) -> str:
    from interpreter.execution import ExecutionRecorder
    from interpreter.waiting import until_end

    rec = ExecutionRecorder("m1")
    for msg_type, content in messages:
        rec.feed_iopub(_msg(msg_type, content))
    if reply:
        rec.feed_reply(_msg("execute_reply", {"status": "ok", "execution_count": 1}))
    handle = ExecutionHandle(execution=EXECUTION.model_copy(), seq=1, timeout_s=5)
    handle.interrupt_requested = interrupted
    # A kernel that was never started: these endings come before anyone asks if it lives.
    kernel = _never_started_kernel()
    loop = asyncio.get_running_loop()
    ending = await until_end(
        handle,
        rec,
        kernel,
        deadline=loop.time() + deadline_s,
        iopub_grace_s=iopub_grace_s,
        no_reply_grace_s=no_reply_grace_s,
    )
    return ending.kind


STARTED = [("status", {"execution_state": "busy"}), ("execute_input", {"execution_count": 1})]
IDLE = [("status", {"execution_state": "idle"})]


async def test_a_cell_ends_with_its_reply_and_idle() -> None:
    assert await _ending(STARTED + IDLE, reply=True) == "done"


async def test_a_reply_without_idle_ends_the_cell_after_the_grace() -> None:
    assert await _ending(STARTED, reply=True) == "done"


async def test_an_idle_without_reply_ends_the_cell_after_the_grace() -> None:
    # ipykernel sends no reply when a SIGINT reaches its request handling, not the cell.
    assert await _ending(STARTED + IDLE, reply=False) == "done"


async def test_an_interrupted_cell_idle_without_reply_ends_soon() -> None:
    # The SIGINT landed in ipykernel's request handling: no reply will come, so the cell
    # does not wait out the long grace for one (nor is its kernel asked whether it
    # lives, which this never-started kernel could not answer).
    ending = _ending(STARTED + IDLE, reply=False, interrupted=True, no_reply_grace_s=60)
    assert await ending == "done"


async def test_a_cell_answered_before_its_deadline_is_done_though_output_may_follow() -> None:
    # The kernel replied (the cell's code ended in time); only the wait for its trailing
    # output (the idle, within iopub_grace_s) reached past the deadline. It was reported
    # "timeout", interrupted, and its output cut: a cell ending within the grace of its
    # limit. Both halves of the end count the same way.
    assert await _ending(STARTED, reply=True, iopub_grace_s=60, deadline_s=0.1) == "done"
    idle_only = _ending(STARTED + IDLE, reply=False, no_reply_grace_s=60, deadline_s=0.1)
    assert await idle_only == "done"


async def test_a_cell_unanswered_at_its_deadline_times_out() -> None:
    assert await _ending(STARTED, reply=False, deadline_s=0.1) == "timeout"
