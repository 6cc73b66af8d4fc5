"""One live session: a kernel, its message readers and its FIFO execution queue.

Per session there is exactly one kernel (an ``AsyncKernelManager`` whose provisioner is the
backend), one ``AsyncKernelClient``, one task reading iopub and one reading shell replies,
both routing by the ``msg_id`` the broker issued (messages with any other parent are
ignored: security.md H-34), and one worker that runs queued executions one at a time.

Completion of an execution needs the shell ``execute_reply`` *and* the iopub ``idle``; if
the idle never comes (a flood may drop it, H-33) the reply plus a short grace ends it.
Timeouts interrupt, then restart if the kernel stays busy; a dead kernel is reported as
``kernel_died`` and replaced, so the next call works (R-02, R-05).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.session import Session as JupyterSession

from interpreter.artifacts import ArtifactStore, decode_value
from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions
from interpreter.errors import (
    AuditDegraded,
    GenerationMismatch,
    KernelStartFailed,
    SessionBusy,
    SessionClosed,
)
from interpreter.execution import (
    BINARY_MIMES,
    ClearEvent,
    ErrorEvent,
    ExecutionRecorder,
    RichEvent,
    StreamEvent,
    cut_middle,
)
from interpreter.kernelspecs import kernel_spec_manager
from interpreter.metrics import Metrics
from interpreter.models import (
    ArtifactRef,
    ErrorInfo,
    Execution,
    KernelInfo,
    Output,
    SessionStatus,
)
from interpreter.models import Session as SessionModel
from interpreter.notebook import NotebookRecorder
from interpreter.settings import Settings
from interpreter.store import Store, utcnow

log = logging.getLogger(__name__)

#: MIME types that always stay inline (text forms an agent reads without a second request).
INLINE_MIMES = frozenset({"text/plain", "application/vnd.dataframe+json"})
#: Largest single ZMQ message the broker accepts from a kernel (H-33).
MAX_ZMQ_MESSAGE = 128 << 20

#: AF_UNIX socket paths are limited to 108 bytes, the terminating NUL included (unix(7)).
UNIX_PATH_MAX = 107


#: Kernels tried for one session start before giving up.
START_ATTEMPTS = 2


def new_id(prefix: str) -> str:
    """A 144-bit random identifier (security.md H-42)."""
    return f"{prefix}_{secrets.token_urlsafe(18)}"


@dataclass
class ExecutionHandle:
    """An execution while it is queued or running, and the streams that watch it."""

    execution: Execution
    seq: int
    timeout_s: float
    extra_meta: dict[str, Any] = field(default_factory=dict)
    subscribers: list[asyncio.Queue[tuple[str, str] | None]] = field(default_factory=list)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    recorder: ExecutionRecorder | None = None
    api_outputs: dict[int, Output] = field(default_factory=dict)
    interrupt_requested: bool = False
    last_iopub_at: float = 0.0
    stream: asyncio.Queue[tuple[str, str] | None] | None = None

    def subscribe(self) -> asyncio.Queue[tuple[str, str] | None]:
        """A queue of ``(event name, JSON data)``; ``None`` after the ``done`` event."""
        queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        if self.finished.is_set():
            queue.put_nowait(("done", self.execution.model_dump_json()))
            queue.put_nowait(None)
        else:
            self.subscribers.append(queue)
        return queue

    def publish(self, name: str, data: str) -> None:
        for queue in self.subscribers:
            queue.put_nowait((name, data))

    def finish(self) -> None:
        self.publish("done", self.execution.model_dump_json())
        for queue in self.subscribers:
            queue.put_nowait(None)
        self.subscribers.clear()
        self.finished.set()


class LiveSession:
    """A session whose kernel is (or is being) run by this broker.

    Args:
        row: the session's fields as stored (id, owner, backend, times, metadata, limits).
        settings: the broker settings.
        store: the durable registry (written through its single writer thread).
        options: launch options for the kernel provisioner.
        kernel_name: ``python3`` (local) or ``python3-docker``.
        notebook: the session's notebook recorder.
        metrics: broker metrics.
        writer: runs a blocking callable on the store's writer thread, in order.
    """

    def __init__(
        self,
        *,
        row: dict[str, Any],
        settings: Settings,
        store: Store,
        options: LaunchOptions,
        kernel_name: str,
        notebook: NotebookRecorder,
        metrics: Metrics,
        writer: Callable[[Callable[[], Any]], Awaitable[Any]],
        writer_nowait: Callable[[Callable[[], Any]], None],
    ) -> None:
        self.id: str = row["id"]
        self.owner: str = row["owner"]
        self.backend: str = row["backend"]
        self.created_at: datetime = datetime.fromisoformat(row["created_at"])
        self.last_activity_at: datetime = datetime.fromisoformat(row["last_activity_at"])
        self.execution_count: int = row.get("execution_count", 0)
        self.metadata: dict[str, Any] = row.get("metadata") or {}
        self.limits: dict[str, Any] = row.get("limits") or {}
        self.idle_timeout_s: float | None = row.get("idle_timeout_s")
        self.rebuild: dict[str, Any] | None = row.get("rebuild")
        self.kernel = KernelInfo(**(row.get("kernel") or {}))
        #: Kernel incarnation (R-08): 1 for the first kernel, +1 at every restart.
        self.generation: int = int(row.get("generation") or 0)
        self.settings = settings
        self.store = store
        self.options = options
        self.kernel_name = kernel_name
        self.notebook = notebook
        self.metrics = metrics
        self._write = writer
        # Queued behind earlier writes on the same ordered writer thread, not awaited.
        self._write_later = writer_nowait
        self._save_task: asyncio.Task[None] | None = None
        self._save_again = False
        self.status: SessionStatus = "starting"
        self.artifacts = ArtifactStore(options.session_dir / "artifacts", self.id)
        self.km: AsyncKernelManager | None = None
        self.kc: Any = None
        self._ctx: zmq.asyncio.Context | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._worker: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[ExecutionHandle] = asyncio.Queue(maxsize=settings.queue_size)
        self._current: ExecutionHandle | None = None
        self._handles: dict[str, ExecutionHandle] = {}
        #: Recently finished executions by request msg_id, for output that arrives late.
        self._finished: dict[str, ExecutionHandle] = {}
        self._nb_lock = asyncio.Lock()
        self._restart_lock = asyncio.Lock()
        self._state_lost_pending = False
        self._resend: asyncio.Task[None] | None = None
        self.audit_degraded = False
        self.restarts = 0
        #: Loop times of recent automatic restarts, for the restart budget (R-03).
        self._auto_restarts: deque[float] = deque()
        #: Set when the session has given up on its kernel (e.g. ``restart_limit``).
        self.failed_reason: str | None = None
        #: Called once when the session fails; the broker then closes it.
        self.on_failed: Callable[[LiveSession], None] | None = None
        self._bad_messages = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the kernel and the session's tasks. Raises KernelStartFailed.

        A kernel that dies before it answers is replaced once by a fresh one: under heavy
        load a start was seen to fail that way and the next attempt to work. What the
        failed kernel said is logged either way.
        """
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await self._start_once()
                break
            except RuntimeError as exc:  # jupyter_client: the kernel died before replying
                if attempt < START_ATTEMPTS:
                    log.warning("session %s: %s; starting a fresh kernel", self.id, exc)
                    continue
                raise self._start_failed(exc) from exc
            except KernelStartFailed:
                raise
            except Exception as exc:
                raise self._start_failed(exc) from exc
        self._worker = asyncio.create_task(self._work(), name=f"worker-{self.id}")
        self.status = "idle"
        self.generation += 1
        self.touch()  # idle time counts from when the session became usable
        await self._persist_kernel()

    async def _start_once(self) -> None:
        self.km = self._new_manager()
        try:
            await asyncio.wait_for(
                self.km.start_kernel(**{LAUNCH_KWARG: self.options}),
                self.settings.kernel_start_timeout_s,
            )
            await self._connect()
        except Exception as exc:
            await self._log_start_failure(exc)
            await self._kill_quietly()
            self.status = "dead"
            raise

    @staticmethod
    def _start_failed(exc: Exception) -> KernelStartFailed:
        msg = str(exc) if isinstance(exc, RuntimeError) else ""
        return KernelStartFailed(
            "The kernel did not start"
            + (f": {msg}" if msg else "")
            + ". Try again; if it keeps failing, check the service logs."
        )

    async def attach(self, connection: dict[str, Any], provisioner: dict[str, Any]) -> None:
        """Reconnect to a kernel container that outlived a previous broker process (R-07)."""
        from interpreter.backends.docker import reattach

        km = self._new_manager()
        conn = dict(connection)
        if isinstance(conn.get("key"), str):
            conn["key"] = conn["key"].encode()
        # The connection info is stored once, in its own column; the provisioner wants it too.
        await reattach(km, {**provisioner, "connection_info": conn}, self.options)
        self.km = km
        await self._connect()
        self._worker = asyncio.create_task(self._work(), name=f"worker-{self.id}")
        self.status = "idle"

    def _new_manager(self) -> AsyncKernelManager:
        km = AsyncKernelManager(
            kernel_name=self.kernel_name, kernel_spec_manager=kernel_spec_manager()
        )
        km.connection_file = str(self.options.session_dir / "connection.json")
        if self.backend == "local":
            # ipc sockets in the session's runtime dir: no ports to race for, nothing on the
            # network; tcp on loopback only when the path would not fit AF_UNIX's limit.
            prefix = self.options.runtime_dir / "kernel"
            if len(str(prefix)) + 8 < UNIX_PATH_MAX:
                km.transport = "ipc"
                km.ip = str(prefix)
            else:
                km.transport = "tcp"
                km.ip = "127.0.0.1"
        return km

    async def _connect(self) -> None:
        assert self.km is not None
        if self._ctx is None:
            ctx = zmq.asyncio.Context()
            # Never drop iopub messages under floods (default HWM 1000 did; see issue 2).
            ctx.setsockopt(zmq.RCVHWM, 0)
            ctx.setsockopt(zmq.MAXMSGSIZE, MAX_ZMQ_MESSAGE)
            ctx.setsockopt(zmq.LINGER, 0)
            self._ctx = ctx
        # A fresh jupyter Session per client: same key, new id. Every client of one manager
        # would otherwise share a ZMQ identity, and a lingering socket of an earlier client
        # can hold it on the kernel's ROUTER so the new client's requests go unanswered.
        session = JupyterSession(
            key=self.km.session.key, signature_scheme=self.km.session.signature_scheme
        )
        kc = self.km.client(context=self._ctx, session=session)
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=self.settings.kernel_start_timeout_s)
            reply = await kc.kernel_info(reply=True, timeout=10)
        except Exception:
            kc.stop_channels()
            raise
        content = reply.get("content", {})
        lang = content.get("language_info") or {}
        self.kernel = KernelInfo(
            language=str(lang.get("name", "python")), version=str(lang.get("version", ""))
        )
        self.notebook.set_kernel_info(lang, {})
        self.kc = kc
        self._readers = [
            asyncio.create_task(self._read_iopub(kc), name=f"iopub-{self.id}"),
            asyncio.create_task(self._read_shell(kc), name=f"shell-{self.id}"),
        ]

    async def _disconnect(self) -> None:
        for task in self._readers:
            task.cancel()
        for task in self._readers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._readers = []
        if self.kc is not None:
            with contextlib.suppress(Exception):
                self.kc.stop_channels()
            self.kc = None

    async def _persist_kernel(self) -> None:
        assert self.km is not None
        raw = self.km.get_connection_info()
        conn = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in raw.items()}
        info: dict[str, Any] = {}
        if self.km.provisioner is not None:
            info = dict(await self.km.provisioner.get_provisioner_info())
        info.pop("connection_info", None)  # kept (once) in connection_json
        info["kernel_id"] = self.km.kernel_id
        await self._write(
            partial(
                self.store.update_session,
                self.id,
                status=self.status,
                kernel_json=self.kernel.model_dump_json(),
                connection_json=json.dumps(conn),
                provisioner_json=json.dumps(info, default=str),
                generation=self.generation,
            )
        )

    async def close(self, *, reason: str = "deleted", keep_kernel: bool = False) -> None:
        """Stop the session: fail queued work, stop (or detach from) the kernel, flush."""
        if self.status == "closed":
            return
        previous = self.status
        self.status = "closed"
        while not self._queue.empty():
            handle = self._queue.get_nowait()
            await self._abandon(handle, "interrupted", "session_closed")
        current = self._current
        if self._worker is not None:
            if current is not None and not keep_kernel and self.km is not None:
                with contextlib.suppress(Exception):
                    await self.km.interrupt_kernel()
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
        if current is not None and not current.finished.is_set():
            await self._abandon(current, "interrupted", "session_closed")
        await self._disconnect()
        if not keep_kernel:
            await self._kill_quietly()
        await self.flush()
        await self._write(
            partial(
                self.store.update_session,
                self.id,
                status="closed" if not keep_kernel else previous,
                closed_reason=reason if not keep_kernel else None,
                last_activity_at=self.last_activity_at.isoformat(),
            )
        )
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
            self._ctx = None

    async def _kill_quietly(self) -> None:
        if self.km is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.km.shutdown_kernel(now=True), 30)

    # ------------------------------------------------------------------ submit/queue

    def info(self) -> SessionModel:
        from interpreter.models import RebuildReport

        return SessionModel(
            id=self.id,
            status=self.status,
            backend=self.backend,
            created_at=self.created_at,
            last_activity_at=self.last_activity_at,
            execution_count=self.execution_count,
            kernel=self.kernel,
            metadata=self.metadata,
            idle_timeout_s=self.idle_timeout_s,
            limits=self.limits,
            rebuild=RebuildReport(**self.rebuild) if self.rebuild else None,
            generation=self.generation,
            closed_reason=self.failed_reason,
        )

    def check_generation(self, expected: int | None) -> None:
        """Refuse an operation meant for an earlier kernel (R-08); None checks nothing."""
        if expected is not None and expected != self.generation:
            raise GenerationMismatch(
                f"The request was for kernel generation {expected}, but session '{self.id}' "
                f"now runs generation {self.generation} (it was restarted meanwhile). Fetch "
                "the session, decide again, and retry with the current generation."
            )

    @property
    def current(self) -> ExecutionHandle | None:
        """The execution running now, if any."""
        return self._current

    @property
    def idle(self) -> bool:
        return self._current is None and self._queue.empty() and self.status == "idle"

    def touch(self) -> None:
        self.last_activity_at = utcnow()

    async def submit(
        self,
        code: str,
        timeout_s: float,
        *,
        extra_meta: dict[str, Any] | None = None,
        stream: bool = False,
    ) -> ExecutionHandle:
        """Queue one execution; raises SessionClosed, SessionBusy or AuditDegraded."""
        if self.failed_reason is not None:
            raise SessionClosed(self._failed_message())
        if self.status in ("closed", "dead"):
            raise SessionClosed(
                f"Session '{self.id}' is {self.status}; create a new session to run code."
            )
        if self.audit_degraded:
            raise AuditDegraded(
                "The session's notebook cannot be written (disk full or unwritable), so no "
                "new code runs until it can; free space and retry.",
                retry_after=30,
            )
        if self._queue.full():
            raise SessionBusy(
                f"Session '{self.id}' already has {self._queue.qsize()} executions queued "
                "behind the running one; wait for them to finish or interrupt.",
                retry_after=1,
            )
        self.touch()
        execution = Execution(id=new_id("ex"), session_id=self.id, status="queued", code=code)
        handle = ExecutionHandle(
            execution=execution, seq=0, timeout_s=timeout_s, extra_meta=extra_meta or {}
        )
        if stream:
            # Subscribe before queueing, so not even the first event can be missed.
            handle.stream = handle.subscribe()
        self._queue.put_nowait(handle)
        self._handles[execution.id] = handle
        # Awaited: an execution id handed to a client is on record even if the broker is
        # killed right after (it then comes back as `unknown`, R-07).
        await self._write(partial(self._save_execution, handle))
        return handle

    def _save_execution(self, handle: ExecutionHandle) -> None:
        if handle.seq == 0:
            handle.seq = self.store.next_seq(self.id)
        self.store.save_execution(handle.seq, handle.execution)

    def handle(self, execution_id: str) -> ExecutionHandle | None:
        return self._handles.get(execution_id)

    async def _work(self) -> None:
        while True:
            handle = await self._queue.get()
            self._current = handle
            try:
                await self._run(handle)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("execution %s failed inside the broker", handle.execution.id)
                await self._abandon(handle, "error", "broker_error")
            finally:
                self._current = None
                # Keep a bounded number of finished handles in memory; the store has all.
                if len(self._handles) > 64:
                    for key in list(self._handles)[:-64]:
                        if self._handles[key].finished.is_set():
                            del self._handles[key]

    async def _abandon(self, handle: ExecutionHandle, status: str, reason: str) -> None:
        ex = handle.execution
        ex.status = status  # type: ignore[assignment]
        ex.reason = reason
        if ex.started_at is not None:
            ex.duration_ms = (utcnow() - ex.started_at).total_seconds() * 1000
        self.metrics.executions.labels(status).inc()
        await self._write(lambda: self._save_execution(handle))
        handle.finish()

    # ------------------------------------------------------------------ running

    async def _run(self, handle: ExecutionHandle) -> None:
        assert self.km is not None
        ex = handle.execution
        loop = asyncio.get_running_loop()
        if self.status == "dead" or not await self.km.is_alive():
            # The kernel died while nobody was running anything: replace it first.
            self._state_lost_pending = True
            await self._restart("died_idle")
            if self.status == "dead":
                await self._abandon(handle, "kernel_died", self.failed_reason or "restart_failed")
                return
        state_lost_before = self._state_lost_pending
        self._state_lost_pending = False
        self.status = "busy"
        ex.status = "running"
        ex.generation = self.generation
        ex.started_at = utcnow()
        started = loop.time()
        self._write_later(partial(self._save_execution, handle))
        msg_id = self.kc.execute(
            ex.code, silent=False, store_history=True, allow_stdin=False, stop_on_error=False
        )
        rec = ExecutionRecorder(
            msg_id,
            hard_limit=self.settings.max_output_hard_bytes,
            rich_limit=self.settings.max_output_hard_bytes * 3,
        )
        handle.recorder = rec
        outcome, reason = await self._wait(handle, rec, started + handle.timeout_s)
        ex.duration_ms = round((loop.time() - started) * 1000, 3)
        if outcome == "timeout":
            state_lost = await self._settle_timeout(handle, rec)
            ex.state_lost = state_lost
            ex.reason = "timeout"
            tail = "restarted: its state was lost" if state_lost else "interrupted: state kept"
            self._set_error(
                ex,
                rec,
                "ExecutionTimeout",
                f"Execution exceeded timeout_s={handle.timeout_s:g}; the kernel was {tail}.",
            )
            ex.status = "timeout"
        elif outcome == "died":
            ex.state_lost = True
            ex.reason = reason
            await self._restart(reason or "died")
            self._set_error(
                ex,
                rec,
                "KernelDied",
                f"The kernel died ({reason}). A fresh kernel was started; the "
                "session's variables are gone, re-run the setup code.",
            )
            ex.status = "kernel_died"
        elif rec.asked_exit:
            # Decision 5: exit() restarts the kernel and the execution says state was lost.
            ex.status = "ok"
            ex.state_lost = True
            ex.reason = "exit"
            await self._restart("exit")
        else:
            status = rec.reply_status or "error"
            if status == "ok":
                ex.status = "ok"
            elif handle.interrupt_requested:
                ex.status = "interrupted"
                ex.reason = "interrupted"
            else:
                ex.status = "error"
        if state_lost_before:
            ex.state_lost = True
        if self.failed_reason is not None and ex.error is not None:
            ex.error.evalue += " " + self._failed_message()
        if rec.execution_count is not None:
            ex.execution_count = rec.execution_count
            self.execution_count = max(self.execution_count, rec.execution_count)
        if self.status == "busy":
            self.status = "idle"
        await self._finalize(handle, rec)

    async def _wait(
        self, handle: ExecutionHandle, rec: ExecutionRecorder, deadline: float
    ) -> tuple[str, str | None]:
        """Wait for completion, the deadline or the kernel's death."""
        assert self.km is not None
        loop = asyncio.get_running_loop()
        reply_seen_at: float | None = None
        last_check = loop.time()
        while True:
            if rec.done:
                return "done", None
            now = loop.time()
            if rec.reply is not None:
                reply_seen_at = reply_seen_at or now
                # The idle may have been dropped (H-33), but output can also still be in
                # flight behind the reply: give up only once iopub has been quiet a while.
                quiet_since = max(reply_seen_at, handle.last_iopub_at)
                if now - quiet_since >= self.settings.iopub_grace_s:
                    log.warning("session %s: no iopub idle after the reply; moving on", self.id)
                    return "done", None
            if now >= deadline:
                return "timeout", None
            step = min(deadline - now, 0.25 if reply_seen_at else 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(handle.changed.wait(), step)
            handle.changed.clear()
            if loop.time() - last_check >= 1.0 and not rec.done:
                last_check = loop.time()
                if not await self.km.is_alive():
                    return "died", await self._exit_reason()

    async def _log_start_failure(self, exc: Exception) -> None:
        """Say why a kernel did not start: its exit reason and last output, when known."""
        reason, tail = "unknown", ""
        if self.km is not None and self.km.provisioner is not None:
            with contextlib.suppress(Exception):
                reason = await asyncio.wait_for(self._exit_reason(), 10)
            logs_tail = getattr(self.km.provisioner, "logs_tail", None)
            if logs_tail is not None:
                with contextlib.suppress(Exception):
                    tail = await asyncio.wait_for(logs_tail(), 10)
        log.warning(
            "session %s: kernel start failed (%s: %s); kernel state %s; last output:\n%s",
            self.id, type(exc).__name__, exc, reason, tail or "(none)",
        )

    async def _exit_reason(self) -> str:
        assert self.km is not None
        prov = self.km.provisioner
        exit_reason = getattr(prov, "exit_reason", None)
        if exit_reason is not None:
            with contextlib.suppress(Exception):
                reason = await exit_reason()
                if reason:
                    return str(reason)
        code = None
        if prov is not None:
            with contextlib.suppress(Exception):
                code = await prov.poll()
        if isinstance(code, int):
            return f"signal:{-code}" if code < 0 else f"exit:{code}"
        return "unresponsive"

    async def _settle_timeout(self, handle: ExecutionHandle, rec: ExecutionRecorder) -> bool:
        """Interrupt; restart if still busy after the grace. Returns whether state was lost."""
        assert self.km is not None
        loop = asyncio.get_running_loop()
        with contextlib.suppress(Exception):
            await self.km.interrupt_kernel()
        grace_end = loop.time() + self.settings.interrupt_grace_s
        while rec.reply is None and loop.time() < grace_end:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(handle.changed.wait(), 0.1)
            handle.changed.clear()
        if rec.reply is not None:
            # Give the idle (and the KeyboardInterrupt traceback) a moment to arrive.
            end = loop.time() + 0.5
            while not rec.idle and loop.time() < end:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(handle.changed.wait(), 0.1)
                handle.changed.clear()
            return False
        await self._restart("timeout")
        return True

    @staticmethod
    def _set_error(ex: Execution, rec: ExecutionRecorder, ename: str, evalue: str) -> None:
        traceback = rec.error.traceback if rec.error else []
        ex.error = ErrorInfo(ename=ename, evalue=evalue, traceback=traceback)

    async def _restart(self, reason: str) -> None:
        """Replace the kernel (a fresh process or container); the session keeps going.

        Automatic restarts (every reason but ``requested``) are budgeted (R-03): one more
        than ``restart_limit`` within ``restart_window_s`` fails the session instead, so a
        kernel that crashes at every start cannot loop forever.
        """
        assert self.km is not None
        async with self._restart_lock:
            if self.failed_reason is not None:
                return
            if reason != "requested" and not self._restart_allowed():
                await self._fail("restart_limit")
                return
            self.status = "starting"
            self.restarts += 1
            self.metrics.restarts.labels(reason.split(":")[0]).inc()
            await self._disconnect()
            try:
                await asyncio.wait_for(
                    self.km.restart_kernel(now=True), self.settings.kernel_start_timeout_s
                )
                await self._connect()
            except Exception:
                log.exception("session %s: kernel restart failed", self.id)
                self.status = "dead"
                await self._write(partial(self.store.update_session, self.id, status="dead"))
                return
            self.status = "idle"
            self.generation += 1
            self.touch()
            await self._persist_kernel()

    def _restart_allowed(self) -> bool:
        now = asyncio.get_running_loop().time()
        window = self.settings.restart_window_s
        while self._auto_restarts and now - self._auto_restarts[0] > window:
            self._auto_restarts.popleft()
        if len(self._auto_restarts) >= self.settings.restart_limit:
            return False
        self._auto_restarts.append(now)
        return True

    async def _fail(self, reason: str) -> None:
        """Give up on the kernel: the session is dead and the broker will close it."""
        log.warning("session %s failed: %s", self.id, reason)
        self.failed_reason = reason
        self.status = "dead"
        self.metrics.restarts.labels("gave_up").inc()
        await self._write(partial(self.store.update_session, self.id, status="dead"))
        if self.on_failed is not None:
            self.on_failed(self)

    def _failed_message(self) -> str:
        if self.failed_reason == "restart_limit":
            return (
                f"Session '{self.id}' failed: its kernel needed more than "
                f"{self.settings.restart_limit} automatic restarts within "
                f"{self.settings.restart_window_s:g} s (it keeps crashing, running out of "
                "memory or timing out). Its notebook stays readable; create a new session."
            )
        return f"Session '{self.id}' failed ({self.failed_reason}); create a new session."

    async def interrupt(self) -> None:
        """Interrupt the running execution (state is kept)."""
        if self.status == "closed" or self.km is None:
            raise SessionClosed(f"Session '{self.id}' is closed.")
        handle = self._current
        if handle is not None:
            handle.interrupt_requested = True
            rec = handle.recorder
            # A SIGINT that lands before the kernel starts the cell is lost: wait (briefly)
            # until the kernel has announced the cell (execute_input) before sending it.
            deadline = asyncio.get_running_loop().time() + 5
            while (rec is None or rec.execution_count is None) and not handle.finished.is_set():
                if asyncio.get_running_loop().time() > deadline:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(handle.changed.wait(), 0.05)
                rec = handle.recorder
            if handle.finished.is_set():
                return
        await self.km.interrupt_kernel()
        if handle is not None:
            # An interrupt can still be lost (a message-mode interrupt under heavy load was
            # seen to be): resend while the same cell keeps running, a few times.
            self._resend = asyncio.create_task(self._resend_interrupt(handle))

    async def _resend_interrupt(self, handle: ExecutionHandle) -> None:
        for _ in range(3):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(handle.finished.wait()), 2.0)
                return
            if self._current is not handle or self.km is None:
                return
            log.info("session %s: interrupt had no effect yet; sending it again", self.id)
            with contextlib.suppress(Exception):
                await self.km.interrupt_kernel()

    async def restart(self) -> None:
        """Restart on request: a fresh kernel, state cleared, same session and notebook."""
        if self.failed_reason is not None:
            raise SessionClosed(self._failed_message())
        if self.status == "closed" or self.km is None:
            raise SessionClosed(f"Session '{self.id}' is closed; create a new session.")
        if self._current is not None:
            self._current.interrupt_requested = True
        await self._restart("requested")
        if self.status == "dead":
            raise KernelStartFailed("The kernel could not be restarted; delete the session.")
        self._state_lost_pending = False

    # ------------------------------------------------------------------ message readers

    async def _read_iopub(self, kc: Any) -> None:
        await self._read(kc.get_iopub_msg, "iopub")

    async def _read_shell(self, kc: Any) -> None:
        await self._read(kc.get_shell_msg, "shell")

    async def _read(self, receive: Callable[[], Awaitable[dict[str, Any]]], channel: str) -> None:
        """Route one channel's messages to the running execution, by the broker's msg_id."""
        while True:
            try:
                msg = await receive()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # bad signature, bad JSON: hostile input (H-34)
                self._note_bad_message(exc)
                continue
            parent = msg.get("parent_header") or {}
            parent_id = parent.get("msg_id") if isinstance(parent, dict) else None
            handle = self._current
            if handle is None or handle.recorder is None or parent_id != handle.recorder.msg_id:
                if channel == "iopub" and parent_id in self._finished:
                    await self._late_output(self._finished[parent_id], msg)
                continue
            rec = handle.recorder
            if channel == "iopub":
                handle.last_iopub_at = asyncio.get_running_loop().time()
                events = rec.feed_iopub(msg)
            elif (msg.get("header") or {}).get("msg_type") == "execute_reply":
                events = rec.feed_reply(msg)
            else:
                continue
            try:
                await self._apply(handle, events)
            except Exception:
                log.exception("session %s: could not apply a %s message", self.id, channel)
            handle.changed.set()

    async def _late_output(self, handle: ExecutionHandle, msg: dict[str, Any]) -> None:
        """Output of a finished cell (a background thread printing while no cell runs):
        record it under that cell, in the execution and the notebook (decision 4)."""
        rec = handle.recorder
        header = msg.get("header") or {}
        if rec is None or header.get("msg_type") != "stream":
            return
        if not rec.feed_iopub(msg):
            return
        ex = handle.execution
        limit = self.settings.max_output_bytes
        ex.stdout, ex.stderr = rec.stream_text("stdout"), rec.stream_text("stderr")
        if len(ex.stdout) + len(ex.stderr) > limit:
            ex.truncated = True
            ex.stdout, ex.stderr = (
                cut_middle(ex.stdout, limit // 2),
                cut_middle(ex.stderr, limit // 2),
            )
        outputs = rec.notebook_outputs(stream_limit=self.settings.max_output_bytes)
        async with self._nb_lock:
            for cell in reversed(self.notebook.nb.cells):
                if cell.metadata.get("interp", {}).get("execution_id") == ex.id:
                    cell.outputs = [nbformat.from_dict(o) for o in outputs]  # type: ignore[no-untyped-call]
                    break
        self._write_later(partial(self._save_execution, handle))
        self.request_save()

    def _note_bad_message(self, exc: Exception) -> None:
        self._bad_messages += 1
        if self._bad_messages <= 5 or self._bad_messages % 1000 == 0:
            log.warning(
                "session %s: dropped a bad kernel message (%s, %d so far)",
                self.id,
                type(exc).__name__,
                self._bad_messages,
            )

    async def _apply(self, handle: ExecutionHandle, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, StreamEvent):
                handle.publish(event.name, json.dumps({"text": event.text}))
            elif isinstance(event, RichEvent):
                out = await self._capture(handle, event.index)
                handle.publish("output", out.model_dump_json())
            elif isinstance(event, ClearEvent):
                handle.api_outputs.clear()
                handle.publish("clear", json.dumps({"wait": event.wait}))
            elif isinstance(event, ErrorEvent):
                info = ErrorInfo(ename=event.ename, evalue=event.evalue, traceback=event.traceback)
                handle.publish("error", info.model_dump_json())

    async def _capture(self, handle: ExecutionHandle, index: int) -> Output:
        """The API form of a rich output: binaries and big values moved to artifacts."""
        assert handle.recorder is not None
        raw = handle.recorder.output(index)
        data: dict[str, Any] = {}
        refs: list[ArtifactRef] = []
        for mime, value in raw["data"].items():
            size = len(value) if isinstance(value, str) else len(json.dumps(value))
            is_image = mime in BINARY_MIMES or mime.startswith("image/")
            if is_image or (mime not in INLINE_MIMES and size > self.settings.inline_rich_bytes):
                refs.append(await asyncio.to_thread(self._put_value, mime, value))
            elif mime == "text/plain" and size > self.settings.inline_rich_bytes:
                refs.append(await asyncio.to_thread(self._put_value, mime, value))
                data[mime] = cut_middle(str(value), self.settings.inline_rich_bytes)
            else:
                data[mime] = value
        out = Output(
            type=raw["output_type"],
            data=data,
            artifacts=refs,
            display_id=raw.get("_display_id"),
        )
        handle.api_outputs[index] = out
        return out

    def _put_value(self, mime: str, value: object) -> ArtifactRef:
        return self.artifacts.put(decode_value(mime, value), mime)

    # ------------------------------------------------------------------ finishing

    async def _finalize(self, handle: ExecutionHandle, rec: ExecutionRecorder) -> None:
        ex = handle.execution
        limit = self.settings.max_output_bytes
        stdout, stderr = rec.stream_text("stdout"), rec.stream_text("stderr")
        total = len(stdout) + len(stderr)
        if total > limit or rec.streams.dropped:
            ex.truncated = True
            for _name, text in (("stdout", stdout), ("stderr", stderr)):
                if text:
                    ref = await asyncio.to_thread(
                        self.artifacts.put, text.encode("utf-8"), "text/plain"
                    )
                    ex.artifacts.append(ref)
            share_out = max(limit * len(stdout) // max(total, 1), 1000)
            share_err = max(limit - share_out, 1000)
            stdout, stderr = cut_middle(stdout, share_out), cut_middle(stderr, share_err)
            if rec.streams.dropped:
                stderr += (
                    f"\n[output limit reached: {rec.streams.dropped} more characters "
                    "were produced and not kept]\n"
                )
        if rec.rich_dropped:
            ex.truncated = True
        ex.stdout, ex.stderr = stdout, stderr
        outputs = []
        for idx in rec.rich_indexes():
            out = handle.api_outputs.get(idx)
            if out is None:
                out = await self._capture(handle, idx)
            outputs.append(out)
        ex.outputs = outputs
        if ex.error is None and rec.error is not None:
            ex.error = ErrorInfo(
                ename=rec.error.ename, evalue=rec.error.evalue, traceback=rec.error.traceback
            )
        nb_outputs = rec.notebook_outputs(stream_limit=limit)
        if ex.status in ("timeout", "kernel_died") and ex.error is not None:
            nb_outputs = [o for o in nb_outputs if o["output_type"] != "error"]
            nb_outputs.append(
                {
                    "output_type": "error",
                    "ename": ex.error.ename,
                    "evalue": ex.error.evalue,
                    "traceback": ex.error.traceback,
                }
            )
        self.touch()
        async with self._nb_lock:
            self.notebook.add_cell(
                ex.code,
                nb_outputs,
                execution_id=ex.id,
                execution_count=ex.execution_count,
                status=ex.status,
                started_at=ex.started_at,
                duration_ms=ex.duration_ms,
                state_lost=ex.state_lost,
                reason=ex.reason,
                extra=handle.extra_meta,
            )
        self.metrics.executions.labels(ex.status).inc()
        if ex.duration_ms is not None:
            self.metrics.duration.observe(ex.duration_ms / 1000)
        self._write_later(partial(self._save_execution, handle))
        self._write_later(
            partial(
                self.store.update_session,
                self.id,
                execution_count=self.execution_count,
                last_activity_at=self.last_activity_at.isoformat(),
                status=self.status,
            )
        )
        # The cell is in the in-memory notebook (which the API serves); the file follows
        # in the background, coalescing saves when cells finish quickly.
        handle.finish()
        self._finished[rec.msg_id] = handle
        while len(self._finished) > 8:
            del self._finished[next(iter(self._finished))]
        self.request_save()

    def request_save(self) -> None:
        """Save the notebook soon (one save in flight at a time, the latest state wins)."""
        if self._save_task is not None and not self._save_task.done():
            self._save_again = True
            return
        self._save_task = asyncio.create_task(self._save_loop(), name=f"save-{self.id}")

    async def _save_loop(self) -> None:
        while True:
            self._save_again = False
            await self._save_notebook()
            if not self._save_again:
                return

    async def flush(self) -> bool:
        """Wait until the notebook on disk holds every recorded cell."""
        if self._save_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._save_task)
        return await self._save_notebook()

    async def _save_notebook(self) -> bool:
        """Write the notebook atomically off the loop; on failure, fail closed (R-12)."""
        async with self._nb_lock:
            try:
                await asyncio.to_thread(self.notebook.save)
            except Exception:
                log.exception("session %s: notebook write failed; refusing new work", self.id)
                self.audit_degraded = True
                return False
        self.audit_degraded = False
        return True

    async def retry_audit(self) -> None:
        if self.audit_degraded:
            await self._save_notebook()

    @property
    def notebook_path(self) -> Path:
        return self.notebook.path
