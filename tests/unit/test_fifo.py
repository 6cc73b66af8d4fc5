"""A session's execution queue: what a request that asked not to queue is refused for."""

from __future__ import annotations

from interpreter.fifo import ExecutionQueue
from interpreter.handle import ExecutionHandle
from interpreter.models import Execution


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
