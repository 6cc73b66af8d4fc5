"""A session's execution queue: what a request that asked not to queue is refused for."""

from __future__ import annotations

import asyncio

from interpreter.fifo import KEPT_EVENT_LOGS, KEPT_HANDLES, ExecutionQueue
from interpreter.handle import KEPT_CHARS, ExecutionHandle
from interpreter.models import Execution, Output


def handle(n: int) -> ExecutionHandle:
    execution = Execution(id=f"ex_{n}", session_id="s_1", status="queued", code="1")
    return ExecutionHandle(execution, 0, 10.0)


async def test_the_running_execution_is_ahead_until_its_outcome_is_set() -> None:
    queue = ExecutionQueue(4)
    assert queue.ahead() is None
    first, second = handle(1), handle(2)
    queue.put(first)
    assert queue.ahead() is first  # waiting
    assert await queue.next() is first
    first.execution.status = "running"
    assert queue.ahead() is first
    # Its outcome is decided; the broker still writes it down before the queue moves on.
    # A client can already read "interrupted" and must not be refused for it.
    first.execution.status = "interrupted"
    assert queue.current is first
    assert queue.ahead() is None
    queue.put(second)
    assert queue.ahead() is second
    first.finish()
    queue.done()
    assert await queue.next() is second
    assert queue.ahead() is second


async def test_a_cancelled_waiting_execution_is_not_ahead() -> None:
    queue = ExecutionQueue(4)
    first, second = handle(1), handle(2)
    queue.put(first)
    queue.put(second)
    first.execution.status = "cancelled"
    first.finish()
    assert queue.ahead() is second


async def test_after_each_cell_only_the_oldest_kept_log_is_let_go(monkeypatch) -> None:
    """The newest KEPT_EVENT_LOGS finished cells keep their event logs and the newest
    KEPT_HANDLES stay found by id, as before; but each finished cell releases one log,
    not every log older than the window again (the old scan did that after each cell,
    over up to 65 kept handles)."""
    released: list[str] = []
    original = ExecutionHandle.release_log

    def counting(self: ExecutionHandle) -> None:
        released.append(self.execution.id)
        original(self)

    monkeypatch.setattr(ExecutionHandle, "release_log", counting)
    queue = ExecutionQueue(4)
    handles = [handle(n) for n in range(200)]
    for h in handles:
        queue.put(h)
        assert await queue.next() is h
        h.finish()
        queue.done()
    assert len(released) == len(handles) - KEPT_EVENT_LOGS
    assert released == [h.execution.id for h in handles[:-KEPT_EVENT_LOGS]]
    assert all(h._log is None for h in handles[:-KEPT_EVENT_LOGS])
    assert all(h._log is not None for h in handles[-KEPT_EVENT_LOGS:])
    assert [queue.get(h.execution.id) for h in handles[-KEPT_HANDLES:]] == handles[-KEPT_HANDLES:]
    assert all(queue.get(h.execution.id) is None for h in handles[:-KEPT_HANDLES])


async def test_cancelled_and_drained_cells_let_their_logs_go_once_finished() -> None:
    queue = ExecutionQueue(KEPT_EVENT_LOGS + 4)
    cancelled = handle(0)
    queue.put(cancelled)
    cancelled.finish()  # cancelled while it waited: skipped by next()
    ran = [handle(n) for n in range(1, 3)]
    for h in ran:
        queue.put(h)
    assert await queue.next() is ran[0]
    drained = [handle(n) for n in range(3, 3 + KEPT_EVENT_LOGS)]
    for h in drained:
        queue.put(h)
    assert queue.drain() == [ran[1], *drained]
    ran[0].finish()
    queue.done()
    # The skipped one is past the window; the drained ones, not finished yet, are not let go
    # (the oldest of them holds the rest back until it is finished).
    assert cancelled._log is None and ran[0]._log is not None
    assert released_none(drained)
    for h in [ran[1], *drained]:
        h.finish()  # ended by the session, as cancel_queued does
    later = handle(99)
    queue.put(later)
    assert await queue.next() is later
    later.finish()
    queue.done()
    # Once finished, the oldest drained ones go, the newest KEPT_EVENT_LOGS to end stay.
    assert ran[1]._log is None and drained[0]._log is None and drained[1]._log is None
    assert released_none([*drained[2:], ran[0], later])


def released_none(handles: list[ExecutionHandle]) -> bool:
    return all(h._log is not None for h in handles)


async def test_cells_put_first_run_first_outside_the_bound_and_alone_while_held() -> None:
    """A recovery's re-run cells (exploration c, bugs 1 and 2): ahead of the waiting
    cells, never refused for the bound, and while the queue is held the only ones taken."""
    queue = ExecutionQueue(1)
    waiting = handle(1)
    queue.put(waiting)
    assert queue.full
    queue.hold()
    rerun = [handle(2), handle(3)]
    for h in rerun:
        queue.put_first(h)
    assert queue.full and queue.waiting == 3  # the bound counts only the others
    for h in rerun:
        assert await queue.next() is h
        h.finish()
        queue.done()
    taken = asyncio.ensure_future(queue.next())
    await asyncio.sleep(0)
    assert not taken.done()  # held: the waiting cell is not taken
    queue.release()
    assert await taken is waiting


def test_withdraw_takes_a_waiting_execution_out_before_the_worker_can() -> None:
    """An interrupt by id of a queued cell takes it out of the queue at once: it used to
    be cancelled while still queued, and a worker free at that moment ran it."""
    queue = ExecutionQueue(5)
    first, second = handle(1), handle(2)
    queue.put(first)
    queue.put(second)
    assert queue.withdraw(second) is True
    assert queue.withdraw(second) is False  # no longer there
    assert asyncio.run(queue.next()) is first
    assert queue.withdraw(first) is False  # taken by the worker: it runs
    assert queue.waiting == 0


async def test_finished_cells_are_kept_only_as_far_as_their_output_fits() -> None:
    """F11: 64 finished cells were kept by count alone, each answer of small displays up to
    67 MB, and 8 event logs holding the same outputs: 4 GB of the broker per session. Past
    KEPT_CHARS the oldest go (a lookup reads the store); the newest stays, however big."""
    queue = ExecutionQueue(4)
    value = "v" * 60_000
    per_cell = 200 * len(value)  # 12 MB of small values
    handles = [handle(n) for n in range(12)]
    for h in handles:
        queue.put(h)
        assert await queue.next() is h
        h.execution.outputs = [Output(type="display_data", data={"text/html": value})] * 200
        h.finish()
        queue.done()
    kept = [h for h in handles if queue.get(h.execution.id) is not None]
    logged = [h for h in handles if h._log is not None]
    assert len(kept) * per_cell <= KEPT_CHARS and kept == handles[-len(kept) :]
    assert len(logged) * per_cell <= KEPT_CHARS and logged == handles[-len(logged) :]
    assert len(kept) == KEPT_CHARS // per_cell
    # One cell larger than the bound is kept alone.
    big = handle(99)
    queue.put(big)
    assert await queue.next() is big
    big.execution.outputs = [Output(type="display_data", data={"text/html": value})] * (
        KEPT_CHARS // len(value) + 1
    )
    big.finish()
    queue.done()
    assert queue.get("ex_99") is big and big._log is not None
    assert all(queue.get(h.execution.id) is None for h in handles)
    assert all(h._log is None for h in handles)
