"""A live session driven directly, without HTTP: a real local kernel built by the session
factory, the queue, typed events, the notebook, the restart budget and closing."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from interpreter import backends
from interpreter.errors import SessionBusy, SessionClosed
from interpreter.handle import Done, OutputAdded, StreamText
from interpreter.launch import SessionFactory
from interpreter.metrics import Metrics
from interpreter.models import CreateSessionRequest, Execution
from interpreter.session import LiveSession
from interpreter.store import Store, Writer
from tests.conftest import require_docker
from tests.conftest import test_settings as settings_for

pytestmark = pytest.mark.slow


class Parts:
    def __init__(self, data_dir: Path, backend: str = "local", **overrides: object) -> None:
        self.settings = settings_for(data_dir, **overrides)
        self.store = Store(self.settings.db_path)
        self.writer = Writer()
        self.factory = SessionFactory(
            self.settings,
            backends.create(backend, self.settings),
            self.store,
            self.writer,
            Metrics(lambda: {}),
            "test-broker",
        )

    async def session(self) -> LiveSession:
        session = await self.factory.new("owner", CreateSessionRequest())
        await session.start()
        return session

    def close(self) -> None:
        self.writer.close()
        self.store.close()


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Parts]:
    made = Parts(tmp_path, queue_size=2, restart_limit=1)
    yield made
    made.close()


async def test_executions_run_in_order_and_are_recorded(parts: Parts) -> None:
    session = await parts.session()
    try:
        assert session.status == "idle" and session.generation == 1
        handles = [await session.submit(f"print({i}); {i} * 10", 30) for i in range(3)]
        for handle in handles:
            await asyncio.wait_for(handle.finished.wait(), 30)
        assert [h.execution.stdout for h in handles] == ["0\n", "1\n", "2\n"]
        assert [h.execution.execution_count for h in handles] == [1, 2, 3]
        assert [h.execution.outputs[0].data["text/plain"] for h in handles] == ["0", "10", "20"]
        nb = await session.notebook.snapshot()
        assert [c["metadata"]["interp"]["execution_id"] for c in nb["cells"]] == [
            h.execution.id for h in handles
        ]
        stored = parts.store.get_execution(session.id, handles[-1].execution.id)
        assert stored is not None and stored.status == "ok"
        record = parts.store.get_session(session.id)
        assert record is not None and record.generation == 1 and record.connection
    finally:
        await session.close()
    record = parts.store.get_session(session.id)
    assert record is not None and record.status == "closed" and record.closed_reason == "deleted"
    assert session.notebook.path.is_file()


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
async def test_the_first_notebook_write_waits_for_the_launch_not_for_the_handshake(
    tmp_path: Path, backend: str
) -> None:
    """The notebook's first write starts once the kernel is launched (not beside a
    warm-pool claim's renames into the same directory) and is on disk before the session
    is handed out; it overlaps the handshake instead of adding to the start. Only the
    Docker case can tell the order apart: a local launch never yields to the loop."""
    if backend == "docker":
        require_docker()
    parts = Parts(tmp_path, backend)
    session = await parts.factory.new("owner", CreateSessionRequest())
    kernel = session.kernel
    connect = kernel._connect
    at_handshake: list[bool] = []

    async def observed(**kwargs: bool) -> None:
        notebook = session.notebook  # whether its first write has begun, or is done
        at_handshake.append(notebook._write_lock.locked() or notebook.path.exists())
        await connect(**kwargs)

    kernel._connect = observed  # type: ignore[method-assign]
    try:
        await session.start()
        assert at_handshake == [False]
        assert session.notebook.path.is_file()
    finally:
        await session.close()
        parts.close()


async def test_an_execution_is_counted_once_on_record_and_before_its_answer(
    parts: Parts,
) -> None:
    """The finished count (and the log line beside it) follows the final record: at the
    final write nothing has counted the execution yet; when its waiter wakes, it has.
    Counted earlier, the log line was formatted on the log thread during the write and
    held the answer up."""
    session = await parts.session()
    executions = session.metrics.executions.labels("ok")
    save = parts.store.save_execution
    counted_at_final_write: list[float] = []

    def observed(seq: int, execution: Execution, **kwargs: Any) -> None:
        if execution.status == "ok":
            counted_at_final_write.append(executions._value.get())
        save(seq, execution, **kwargs)

    parts.store.save_execution = observed  # type: ignore[method-assign]
    try:
        before = executions._value.get()
        handle = await session.submit("1+1", 30)
        await asyncio.wait_for(handle.finished.wait(), 30)
        assert counted_at_final_write == [before]
        assert executions._value.get() == before + 1
    finally:
        await session.close()


async def test_a_streaming_watcher_sees_typed_events_in_order(parts: Parts) -> None:
    session = await parts.session()
    try:
        handle = await session.submit(
            "import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.05)\n"
            "from IPython.display import display\ndisplay({'text/plain': 'shown'}, raw=True)",
            30,
            stream=True,
        )
        assert handle.stream is not None
        events = []
        while (event := await asyncio.wait_for(handle.stream.get(), 30)) is not None:
            events.append(event)
        text = "".join(e.text for e in events if isinstance(e, StreamText))
        assert text == "0\n1\n2\n"
        assert [type(e) for e in events if not isinstance(e, StreamText)] == [OutputAdded, Done]
        assert isinstance(events[-1], Done) and events[-1].execution.status == "ok"
    finally:
        await session.close()


async def test_a_full_queue_is_refused_and_closing_fails_what_waits(parts: Parts) -> None:
    session = await parts.session()
    running = await session.submit("import time; time.sleep(30)", 60)
    queued = [await session.submit("1", 60) for _ in range(2)]
    with pytest.raises(SessionBusy):
        await session.submit("1", 60)
    await session.close()
    assert (
        running.execution.status == "interrupted" and running.execution.reason == "session_closed"
    )
    # Its notebook cell says so (it read as a cell that had finished).
    error = running.execution.error
    assert error is not None and error.ename == "SessionClosed"
    last = session.notebook.recorder.nb.cells[-1].outputs[-1]
    assert (last.output_type, last.ename) == ("error", "SessionClosed")
    assert [h.execution.status for h in queued] == ["cancelled", "cancelled"]
    with pytest.raises(SessionClosed):
        await session.submit("1", 60)


async def test_a_kernel_that_keeps_dying_spends_the_budget_and_fails_once(parts: Parts) -> None:
    session = await parts.session()
    failed: list[str] = []
    session.on_failed = lambda s: failed.append(s.failed_reason or "")
    try:
        first = await session.submit("import os; os._exit(1)", 30)
        await asyncio.wait_for(first.finished.wait(), 60)
        assert first.execution.status == "kernel_died" and first.execution.state_lost
        assert session.generation == 2 and failed == []
        second = await session.submit("import os; os._exit(1)", 30)
        await asyncio.wait_for(second.finished.wait(), 60)
        assert second.execution.status == "kernel_died"
        assert failed == ["restart_limit"] and session.status == "dead"
        assert "more than 1 automatic restarts" in (second.execution.error.evalue or "")  # type: ignore[union-attr]
        with pytest.raises(SessionClosed):
            await session.submit("1", 30)
    finally:
        await session.close()


async def test_requested_restarts_never_count_against_the_budget(parts: Parts) -> None:
    session = await parts.session()
    try:
        first = await session.submit("x = 1", 30)
        await asyncio.wait_for(first.finished.wait(), 30)
        for _ in range(3):
            await session.restart()
        assert session.generation == 4 and session.failed_reason is None
        handle = await session.submit("'x' in dir()", 30)
        await asyncio.wait_for(handle.finished.wait(), 30)
        assert handle.execution.outputs[0].data["text/plain"] == "False"
    finally:
        await session.close()


async def test_a_closed_session_is_freed_at_once_not_by_the_cyclic_collector(
    parts: Parts,
) -> None:
    """A closed session, with its notebook and its executions' output, is freed as soon as
    nothing refers to it: the kernel lets go of the session's callbacks when closed, so no
    reference cycle waits for the cyclic collector (whose full runs, after a burst of
    sessions, can be long in coming; the load suite measures the broker's memory)."""
    session = await parts.session()
    handle = await session.submit("print('x' * 100_000)", 30)
    await asyncio.wait_for(handle.finished.wait(), 30)
    assert handle.execution.status == "ok"
    alive = weakref.ref(session)
    notebook = weakref.ref(session.notebook)
    gc.collect()
    gc.disable()
    try:
        await session.close()
        del session, handle
        assert alive() is None, [type(r).__qualname__ for r in gc.get_referrers(alive())]
        assert notebook() is None
    finally:
        gc.enable()
