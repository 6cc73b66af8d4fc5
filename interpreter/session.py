"""One live session: its FIFO execution queue, the worker that runs it, and message routing.

Per session there is one :class:`~interpreter.kernel.Kernel` and one worker that runs
queued executions one at a time. The kernel's readers hand every message to
:meth:`LiveSession._on_message`, which routes it by the ``msg_id`` the broker issued to
the running execution (messages with any other parent are ignored: docs/security.md H-34;
stream output of a recently finished cell is recorded under that cell).

Completion of an execution needs the shell ``execute_reply`` *and* the iopub ``idle``; if
the idle never comes (a flood may drop it, H-33) the reply plus a short grace ends it.
Timeouts interrupt, then restart if the kernel stays busy; a dead kernel is reported as
``kernel_died`` and replaced, so the next call works (R-02, R-05).

What else a session needs lives beside it: the kernel lifecycle in ``kernel.py``, the
translation of recorded messages into API and notebook outputs in ``outputs.py``, the
execution handle and its typed events in ``handle.py``, the notebook and its autosave in
``notebook.py``. ``launch.py`` builds sessions.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from functools import partial
from typing import Any, Literal

from interpreter import endings, storage_floor, waiting
from interpreter.artifacts import ArtifactStore, remove_temporaries
from interpreter.backends import Backend
from interpreter.backends.base import LaunchOptions
from interpreter.displays import EarlierDisplays
from interpreter.errors import (
    AuditDegraded,
    GenerationMismatch,
    KernelStartFailed,
    SessionBusy,
    SessionClosed,
    SessionRunning,
    StorageFull,
)
from interpreter.execution import CutText, ExecutionRecorder, split_cut
from interpreter.fifo import ExecutionQueue
from interpreter.handle import ApprovalRequired, ExecutionHandle, Saved
from interpreter.ids import new_id
from interpreter.kernel import Kernel, RestartBudget
from interpreter.late import LateWrites
from interpreter.metrics import Metrics
from interpreter.models import (
    ErrorInfo,
    Execution,
    ExecutionStatus,
    PolicyResult,
    SessionStatus,
)
from interpreter.models import Session as SessionModel
from interpreter.notebook import LiveNotebook
from interpreter.notes import broker_restart_note
from interpreter.outputs import OutputCapture, closed_while_running, conclude
from interpreter.policy.approvals import PendingApproval
from interpreter.policy.held import PolicyStage
from interpreter.release import release_disk
from interpreter.restarts import KernelLifecycle
from interpreter.restore_cells import layout_of, outputs_of
from interpreter.routing import MessageRouting
from interpreter.settings import Settings
from interpreter.snapshot import output_so_far
from interpreter.spill import StreamSpill
from interpreter.store import Activity, SessionRecord, Store, Writer, utcnow
from interpreter.upload import remove_leftovers
from interpreter.workspace import Workspace
from interpreter.write_gate import WriteGate, refusal

log = logging.getLogger(__name__)

#: Notebook note on a cell that was running when the broker stopped.
RESUMED_NOTE = (
    "The broker restarted while this cell ran: its outcome is unknown. Output it printed "
    "before the restart is lost; output printed after it is kept here."
)
#: The same, for a cell whose output before the restart was kept (the broker shut down).
RESUMED_KEPT_NOTE = (
    "The broker restarted while this cell ran: its outcome is unknown. Its output before "
    "the restart and after the new broker attached is kept here; a line in its output marks "
    "where what it printed in between is missing."
)
#: What a cell sent while the Docker engine does not answer is told (it is not run).
BACKEND_DOWN_TEXT = (
    "Not run: the session's kernel had ended, and the Docker engine does not answer, so no "
    "new kernel could start. Variables, imports and loaded data are gone; workspace files "
    "are kept. Send the code again once the engine answers (/healthz says "
    "backend_reachable): the next cell starts a new kernel."
)
#: Seconds between two writes of a running cell's output so far (when it printed).
PROGRESS_SAVE_S = 2.0
#: Where a kept cell's output goes on after a broker restart (printed meanwhile: lost).
RESUMED_GAP = "\n[the service restarted here: what the cell printed meanwhile is missing]\n"


def as_message(output: dict[str, Any]) -> dict[str, Any]:
    """A notebook output as the iopub message that records it again (error outputs, which
    the broker reports itself, as nothing)."""
    kind = output.get("output_type")
    if kind not in ("stream", "display_data", "execute_result"):
        return {}
    content = {k: v for k, v in output.items() if k != "output_type"}
    return {"header": {"msg_type": kind}, "content": content}


class LiveSession(KernelLifecycle, MessageRouting, PolicyStage):
    """A session whose kernel is (or is being) run by this broker.

    Build it with :class:`~interpreter.launch.SessionFactory`, which also starts or
    attaches its kernel.

    Args:
        record: the session as stored.
        settings: the broker settings.
        backend: where its kernel runs.
        options: the kernel's launch options.
        notebook: the session's live notebook.
        store: the durable registry; ``writer`` runs its writes in order.
        metrics: broker metrics.
    """

    def __init__(
        self,
        record: SessionRecord,
        *,
        settings: Settings,
        backend: Backend,
        options: LaunchOptions,
        notebook: LiveNotebook,
        store: Store,
        writer: Writer,
        metrics: Metrics,
        state_lost_pending: bool = False,
    ) -> None:
        self.record = record
        self.id = record.id
        self.owner = record.owner
        self.created_at: datetime = record.created_at
        self.last_activity_at: datetime = record.last_activity_at
        self.execution_count = record.execution_count
        self.idle_timeout_s = record.idle_timeout_s
        #: Kernel incarnation (R-08): 1 for the first kernel, +1 at every restart.
        self.generation = record.generation
        self.status: SessionStatus = "starting"
        self.settings = settings
        self.options = options
        self.notebook = notebook
        #: Its files through the API; uploads in progress count as activity.
        self.workspace = Workspace(options.workspace, WriteGate(on_activity=self.touch))
        self.store = store
        self.writer = writer
        self.metrics = metrics
        self.kernel = Kernel(
            name=self.id,
            backend=backend,
            options=options,
            start_timeout_s=settings.kernel_start_timeout_s,
            budget=RestartBudget(settings.restart_limit, settings.restart_window_s),
            on_message=self._on_message,
            heartbeat_s=settings.heartbeat_interval_s,
            heartbeat_misses=settings.heartbeat_misses,
            on_unresponsive=self._kernel_unresponsive,
        )
        self.kernel.info = record.kernel
        self.kernel.max_message_bytes = settings.max_kernel_message_bytes
        self.capture = OutputCapture(
            ArtifactStore(
                options.session_dir / "artifacts",
                self.id,
                budget_bytes=settings.max_session_artifact_bytes,
            ),
            inline_bytes=settings.inline_rich_bytes,
            output_bytes=settings.max_output_bytes,
            notebook_bytes=settings.max_notebook_bytes,
        )
        # What a notebook read back (a restarted broker's) already holds counts.
        self.capture.budget.load(notebook.recorder.nb.cells)
        self.displays = EarlierDisplays(self.capture)
        # Counted from this broker's start: what earlier brokers spilled is not.
        self.spilled_bytes = 0
        #: Writes of running cells' output so far (:meth:`_save_progress`), issued.
        self.progress_writes = 0
        self.late = LateWrites(self._write_late)
        #: A note for the notebook (a restart), written after the cell it happened in.
        self._note: str | None = None
        self._note_restarts: list[str] = []
        self._worker: asyncio.Task[None] | None = None
        self.executions = ExecutionQueue(settings.queue_size)
        #: The next cell runs on a kernel that started empty after a loss (it reports
        #: ``state_lost``); a restored session learns it from its record
        #: (:meth:`Store.state_lost_pending`).
        self._state_lost_pending = state_lost_pending
        self.backend_down = False
        #: Clear while the kernel is being replaced: the worker starts no cell meanwhile.
        self._replaced = asyncio.Event()
        self._replaced.set()
        self._replacing: str | None = None
        self._restart_requested = False
        #: Requested restarts (each with its recovery) and rebuilds take turns.
        self._restart_turn = asyncio.Lock()
        self._watches: set[asyncio.Task[None]] = set()
        #: Set when the session has given up on its kernel (e.g. ``restart_limit``).
        self.failed_reason: str | None = None
        #: Why :meth:`close` was called, once it was.
        self.closed_reason: str | None = None
        #: Called once when the session fails; the broker then closes it.
        self.on_failed: Callable[[LiveSession], None] | None = None
        #: Replaces a kernel whose heartbeat stopped while no cell ran.
        self._recovery: asyncio.Task[None] | None = None
        #: Finished executions whose final record did not fit on the data disk, oldest
        #: first; written before any new code runs (:meth:`_record_final`).
        self._unrecorded: collections.deque[ExecutionHandle] = collections.deque()
        self._flushing = asyncio.Lock()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the kernel and the worker. Raises KernelStartFailed.

        The notebook's first write runs during the kernel's handshake, so the file is on
        disk (valid; the kernel's language info follows with the first cell) before the
        session is handed out, without the start waiting for the disk after the kernel
        (issue 10). Not before the kernel is launched: its syncs would run in the session
        directory while a warm-pool claim renames the workspace into it.
        """
        first_write: list[asyncio.Task[bool]] = []

        def launched() -> None:
            if not first_write:
                save = self.notebook.save()
                first_write.append(asyncio.create_task(save, name=f"first-save-{self.id}"))

        try:
            await self.kernel.start(launched)
        except KernelStartFailed:
            if self.status == "closed":
                raise self._closed_while_starting() from None
            self.status = "dead"
            launched()  # the record of a session whose kernel never came up
            await first_write[0]
            raise
        if self.status == "closed":
            # Closed (deleted, the broker stopping) while its kernel started: the close
            # stops that kernel once the start has ended, and the session is not handed out.
            if first_write:
                await first_write[0]
            raise self._closed_while_starting()
        launched()
        await first_write[0]
        self._kernel_ready()  # its language info goes to disk with the first cell's save
        self.generation += 1
        self.touch()  # idle time counts from when the session became usable
        await self._persist_kernel()

    def _closed_while_starting(self) -> SessionClosed:
        reason = self.closed_reason or "deleted"
        return SessionClosed(
            f"Session '{self.id}' was closed ({reason}) while its kernel started; it was "
            "never usable. Create a new session."
        )

    async def attach(
        self,
        connection: dict[str, Any],
        provisioner: dict[str, Any],
        in_flight: list[tuple[int, Execution]] | None = None,
    ) -> None:
        """Reconnect to a kernel that outlived a previous broker process (R-07).

        ``in_flight``: (seq, execution) of the cell the previous broker had sent to the
        kernel. It stays ``unknown``; the worker first waits for it to end (new cells
        queue behind it) and attaches what it still prints (:meth:`_resume`), under the
        timeout it was submitted with. Its events are numbered after every id an earlier
        broker could have given it (:meth:`ExecutionHandle.continue_ids`).
        """
        await self.kernel.attach(connection, provisioner)
        # What the previous broker was writing when it stopped (a spill, half an artifact,
        # half an upload).
        await asyncio.to_thread(remove_temporaries, self.capture.artifacts.root)
        await asyncio.to_thread(remove_leftovers, self.options.workspace)
        for seq, execution in in_flight or []:
            timeout_s = await asyncio.to_thread(self.store.timeout_of, execution.id)
            meta = await asyncio.to_thread(self.store.cell_meta_of, execution.id)
            handle = ExecutionHandle(
                execution, seq, timeout_s or self.settings.max_timeout_s, resumed=True
            )
            handle.continue_ids(_ids_spent(execution))
            # A rebuild's or recovery's re-run stays marked as one.
            handle.extra_meta.update(meta, note=RESUMED_NOTE)
            if execution.policy is not None and "policy" not in meta:
                # Brokers up to c737bbf kept no cell metadata; the cell shows its decision
                # as every other does (and as its chain links cover it).
                handle.extra_meta["policy"] = execution.policy.model_dump(mode="json")
            self.executions.put(handle)
        self._kernel_ready()
        if in_flight:
            # Busy from the moment it is served again, not from when the worker first runs:
            # a client asking in between must not see an idle session with a cell running.
            self.status = "busy"

    async def revive(self) -> None:
        """Start a fresh kernel for a session whose kernel did not outlive an earlier
        broker process (R-07): as after a death, its next cell reports ``state_lost``.
        Raises KernelStartFailed."""
        self._state_lost_pending = True  # before the start, which records it with the kernel
        await self.start()

    async def cancel_queued(self, reason: str) -> None:
        """Cancel the cells that never reached the kernel: those waiting in the queue and
        the one at its head held for approval (its approval is withdrawn)."""
        waiting = self.executions.drain()  # at once: none starts while the held one ends
        held = self.executions.held()
        for handle in [held, *waiting] if held is not None else waiting:
            await self._abandon(handle, "cancelled", reason)

    def _kernel_ready(self) -> None:
        self.notebook.set_kernel_info(self.kernel.language_info)
        if self._worker is None:
            self._worker = asyncio.create_task(self._work(), name=f"worker-{self.id}")
        self.status = "idle"

    async def _persist_kernel(self) -> None:
        connection, provisioner = await self.kernel.record()
        await self.writer.run(
            partial(
                self.store.save_kernel,
                self.id,
                status=self.status,
                kernel=self.kernel.info,
                connection=connection,
                provisioner=provisioner,
                generation=self.generation,
                state_lost=self._state_lost_pending,
            )
        )

    async def close(self, *, reason: str = "deleted", keep_kernel: bool = False) -> None:
        """Stop the session: cancel queued work, stop (or detach from) the kernel, flush.

        A stopped kernel's running cell is interrupted (``interrupted``). With
        ``keep_kernel`` (a broker shutting down, kernels kept for the next one) it goes on
        running, so it is recorded ``unknown`` (reason ``broker_shutdown``): the next
        broker reattaches it, waits for it and attaches what it prints.
        """
        if self.status == "closed":
            return
        previous = self.status
        self.status = "closed"
        self.closed_reason = reason
        # Uploads still arriving are refused and removed before the files are copied out.
        await asyncio.to_thread(self.workspace.gate.close, refusal(self.id, reason))
        if self._recovery is not None:
            self._recovery.cancel()
        closed_by = "broker_shutdown" if reason == "broker_shutdown" else "session_closed"
        await self.cancel_queued(closed_by)
        current = self.executions.current
        if current is not None and current.finished.is_set():
            current = None  # held for approval, cancelled above: nothing runs
        if self._worker is not None:
            if current is not None and not keep_kernel:
                with contextlib.suppress(Exception):
                    await self.kernel.interrupt()
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
        if current is not None and not current.finished.is_set():
            await self._end_unfinished(
                current, "unknown" if keep_kernel else "interrupted", closed_by
            )
        if keep_kernel:
            await self.kernel.detach()
        else:
            await self.kernel.stop()
            # Nothing of a closed session's kernel is left behind (its runtime directory).
            await asyncio.to_thread(shutil.rmtree, self.options.runtime_dir, True)
        await self.late.close()  # late output not yet written (no kernel sends more)
        await self.notebook.flush()
        if self._unrecorded and not await self._write_unrecorded():
            log.error(
                "session %s: the data disk is still full; the records of %s are lost (they "
                "stay as they were last written)",
                self.id,
                ", ".join(h.execution.id for h in self._unrecorded),
            )
        if keep_kernel:
            write = partial(self.store.save_activity, self.id, self._activity(previous))
        else:
            write = partial(
                self.store.close_session, self.id, reason, last_activity_at=self.last_activity_at
            )
        await self.writer.run(write)
        self.kernel.close()
        if not keep_kernel:
            await asyncio.to_thread(release_disk, self.options)

    # ------------------------------------------------------------------ state

    def info(self) -> SessionModel:
        return SessionModel(
            id=self.id,
            status=self.status,
            backend=self.record.backend,
            created_at=self.created_at,
            last_activity_at=self.last_activity_at,
            execution_count=self.execution_count,
            kernel=self.kernel.info,
            metadata=self.record.metadata,
            idle_timeout_s=self.idle_timeout_s,
            limits=self.record.limits,
            rebuild=self.record.rebuild,
            generation=self.generation,
            closed_reason=self.failed_reason,
            image=self.options.image if self.record.backend == "docker" else None,
            packages=dict(self.notebook.recorder.nb.metadata.get("interp", {}).get("packages", {})),
        )

    def check_generation(self, expected: int | None) -> None:
        """Refuse an operation meant for an earlier kernel (R-08); None checks nothing."""
        if expected is not None and expected != self.generation:
            raise GenerationMismatch.of(self.id, expected, self.generation)

    @property
    def idle(self) -> bool:
        """Nothing runs or waits: the idle timeout counts (also for a dead session, whose
        kernel could not be replaced: it would hold its place until its lifetime ended)."""
        return self.executions.empty and self.status in ("idle", "dead")

    @property
    def audit_degraded(self) -> bool:
        """The notebook could not be written; no new code runs until it can (R-12)."""
        return self.notebook.degraded

    def touch(self) -> None:
        self.last_activity_at = utcnow()

    async def retry_audit(self) -> None:
        if self.notebook.degraded:
            await self.notebook.save()

    # ------------------------------------------------------------------ submit / queue

    async def submit(
        self,
        code: str,
        timeout_s: float,
        *,
        extra_meta: dict[str, Any] | None = None,
        stream: bool = False,
        request_id: str | None = None,
        reject_if_busy: bool = False,
        policy: PolicyResult | None = None,
        hold: Callable[[Execution], PendingApproval] | None = None,
        first: bool = False,
    ) -> ExecutionHandle:
        """Queue one execution; raises SessionClosed, SessionBusy, SessionRunning (with
        ``reject_if_busy``) or AuditDegraded. ``policy`` is the policy's decision on it;
        with ``hold`` it waits in the queue, ``pending_approval``, for the approval that
        ``hold`` opens. With ``first`` (a recovery's re-run cell) it goes ahead of the
        waiting cells and the queue bound does not apply to it."""
        if self.failed_reason is not None:
            raise SessionClosed(self._failed_message())
        # A dead session (its kernel's replacement failed) takes code: the cell starts a
        # kernel first, as after a death while idle, and fails only if that fails again.
        if self.status == "closed":
            raise SessionClosed.cannot_run(self.id, self.status)
        # A client retrying after freeing space is served at once (the save is retried).
        if self.notebook.degraded and not await self.notebook.save():
            if self.notebook.invalid:
                raise AuditDegraded.notebook_invalid(self.id)
            raise AuditDegraded.notebook_unwritable()
        if self._unrecorded and not await self._write_unrecorded():
            raise StorageFull.unrecorded(self.id, len(self._unrecorded))
        storage_floor.check(self.settings.data_dir, self.settings.min_free_mb)
        ahead = self.executions.ahead() if reject_if_busy else None
        if ahead is not None:
            raise SessionRunning.not_queued(self.id, ahead.execution.id, _running_for(ahead))
        if self.executions.full and not first:
            raise SessionBusy.queue_full(self.id, self.executions.waiting)
        self.touch()
        execution = Execution(
            id=new_id("ex"), session_id=self.id, status="queued", code=code, policy=policy
        )
        handle = ExecutionHandle(
            execution, 0, timeout_s, extra_meta=dict(extra_meta or {}), request_id=request_id
        )
        if stream:
            # Subscribe before queueing, so not even the first event can be missed.
            handle.stream = handle.subscribe()
        if hold is not None:
            handle.approval = hold(execution)
            execution.status = "pending_approval"
        if policy is not None:
            handle.extra_meta["policy"] = policy.model_dump(mode="json")
        if first:
            self.executions.put_first(handle)
        else:
            self.executions.put(handle)
        if handle.approval is not None:
            handle.publish(ApprovalRequired(handle.approval.model()))
        # Awaited: an execution id handed to a client is on record even if the broker is
        # killed right after (it then comes back as `unknown`, R-07). An idle worker takes
        # the cell in the loop's next step, before this one resumes, and writes it down as
        # running as it sends it: that write puts it on record, one transaction instead of
        # two (queued, then running; issue 10). A cell that waits is written as queued.
        await asyncio.sleep(0)
        try:
            if handle.running_write is not None:
                await asyncio.wrap_future(handle.running_write)
            else:
                await self.writer.run(*self._save_keyed(handle, execution.id))
        except Exception as exc:
            if storage_floor.failure_reason(exc) != "storage_full":
                raise
            if execution.status in ("queued", "pending_approval"):
                # Not sent, and not on record: it never runs and its id is never handed
                # out. The client is told to retry once space is freed (507).
                self._withdraw(handle)
                raise StorageFull.not_queued(self.id) from None
            # Sent as the write was made, and the disk filled up meanwhile (with no
            # free-space floor, the cell itself can fill it). It runs: its final record
            # waits for space like any other, and its answer says that it is not on
            # record, never a 500 for a cell that ran.
            log.error(
                "session %s: the data disk is full; %s runs before it is on record",
                self.id,
                execution.id,
            )
        return handle

    def _withdraw(self, handle: ExecutionHandle) -> None:
        """End a queued cell that could not be put on record (the disk is full): never
        run, never recorded, its approval (if any) withdrawn; the queue skips it."""
        ex = handle.execution
        if handle.approval is not None:
            handle.approval.withdraw("storage_full")
        ex.status, ex.reason = "cancelled", "storage_full"
        handle.finish()

    @contextlib.asynccontextmanager
    async def rebuilding(self) -> AsyncIterator[None]:
        """A rebuild on request (``POST .../rebuild``): only in a quiet session, and alone.

        Refused at once (SessionRunning, 409 ``session_running``) while a cell runs or
        waits, or while a restart or another rebuild is under way, rather than queued
        behind them: the re-run cells would then race with that work (or with each other),
        and whether the report's "every cell matched" holds would depend on timing. While
        it runs, the queue is held as for a recovery (:meth:`restarting`): its cells, put
        first, run back to back, and cells sent meanwhile wait for the whole rebuild.
        Requested restarts wait for it too (they take the same turn).
        """
        turn = self._restart_turn
        if turn.locked():
            ahead = self.executions.ahead()
            raise SessionRunning.before_rebuild(
                self.id,
                ahead.execution.id if ahead is not None else None,
                _running_for(ahead) if ahead is not None else 0.0,
                rebuilding=True,
            )
        async with turn:  # free, so taken without yielding to another task
            ahead = self.executions.ahead()
            if ahead is not None:
                raise SessionRunning.before_rebuild(
                    self.id, ahead.execution.id, _running_for(ahead), rebuilding=False
                )
            self.executions.hold()
            try:
                yield
            finally:
                self.executions.release()

    def _activity(self, status: SessionStatus) -> Activity:
        """The session's activity as of now, with its status as given."""
        return Activity(status, self.execution_count, self.last_activity_at)

    def _save_now(
        self, handle: ExecutionHandle, activity: Activity | None = None
    ) -> Callable[[], None]:
        """The write of ``handle``'s execution as it is now, for the writer's thread, with
        the session's ``activity`` in the same transaction if given.

        The execution is copied here, on the loop: the loop goes on changing it (output,
        its end) while the write waits and runs, and a write that read it there could save
        a state that never was (its status ended, its cell's digest not yet made: a chain
        link of its own).
        """
        return partial(self._save_execution, handle, handle.saved(), activity)

    def _save_keyed(self, handle: ExecutionHandle, key: str) -> tuple[Callable[[], None], str]:
        """A write of ``handle``'s execution as it is now that joins a waiting write with
        the same ``key`` (:class:`~interpreter.store.Writer`): the write that runs saves
        the copy issued last. Returns the write and its key, for the writer."""
        handle.to_save[key] = handle.saved()
        return partial(self._save_waiting, handle, key), key

    def _save_waiting(self, handle: ExecutionHandle, key: str) -> None:
        saved = handle.to_save.pop(key, None)
        if saved is not None:  # else one issued after it started saved its copy already
            self._save_execution(handle, saved)

    def _save_execution(
        self, handle: ExecutionHandle, saved: Saved, activity: Activity | None = None
    ) -> None:
        """Write ``saved``, a copy of ``handle``'s execution, on the writer's thread."""
        if handle.seq == 0:
            handle.seq = self.store.next_seq(self.id)
        self.store.save_execution(
            handle.seq,
            saved.execution,
            notebook_sha256=saved.notebook_sha256,
            activity=activity,
            timeout_s=handle.timeout_s or None,
            cell_layout=saved.cell_layout,
            cell_meta=saved.cell_meta,
            data_json=saved.execution_json,
        )

    async def _work(self) -> None:
        """Run the queued executions one by one, for as long as the session lives: a
        failure inside the broker ends the execution it hit (answered), never the loop."""
        while True:
            handle = await self.executions.next()
            try:
                if self._unrecorded and not await self._write_unrecorded():
                    # Queued before the disk filled up: it does not start while earlier
                    # records wait for space (new ones are refused, 507 storage_full).
                    handle.execution.error = storage_floor.failure_error("storage_full")
                    await self._abandon(handle, "cancelled", "storage_full")
                else:
                    await self._run(handle)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("execution %s failed inside the broker", handle.execution.id)
                if not handle.finished.is_set():
                    reason = storage_floor.failure_reason(exc)
                    handle.execution.error = storage_floor.failure_error(reason, _ran(handle))
                    await self._keep_cell(handle, reason)
                    await self._abandon(handle, "error", reason)
            finally:
                self.executions.done()

    async def _keep_cell(self, handle: ExecutionHandle, reason: str) -> None:
        """Give a cell that reached the kernel its notebook cell when the broker failed
        while it handled the cell's outputs (an artifact it could not write, say): what the
        kernel sent, as the notebook keeps it (pictures inline), then the broker's error.
        Without it the cell was in the store and in no notebook, and ``audit verify``
        could not tell. The record that follows carries the cell's digest."""
        ex, rec = handle.execution, handle.recorder
        if rec is None or ex.started_at is None:
            return  # never reached the kernel: nothing of it is a cell
        ex.status, ex.reason = "error", reason
        ex.duration_ms = round((utcnow() - ex.started_at).total_seconds() * 1000, 3)
        if rec.execution_count is not None:
            ex.execution_count = rec.execution_count
            self.execution_count = max(self.execution_count, rec.execution_count)
        try:
            outputs = rec.notebook_outputs(stream_limit=self.settings.max_output_bytes)
        except Exception:
            log.exception("session %s: the outputs of %s are lost", self.id, ex.id)
            outputs = []
        if ex.error is not None:
            # Its traceback says what failed: JupyterLab shows an error by its traceback.
            outputs.append(endings.error_output(ex.error))
        digest = self.notebook.cell_digest(ex.code, outputs, handle.extra_meta)
        try:
            await self._add_cell(handle, rec, outputs, digest)
        except Exception:
            log.exception("session %s: no notebook cell for %s", self.id, ex.id)
            return
        handle.notebook_sha256 = digest
        handle.cell_layout = layout_of(outputs)

    async def _record_final(self, handle: ExecutionHandle, activity: Activity | None) -> bool:
        """Write ``handle``'s final record (with the session's ``activity``, if given) after
        any that wait; True once it is on record.

        When the data disk is full (sqlite's "database or disk is full", ENOSPC) the record
        waits in memory, in order, and is written before any new code runs (at the next
        submission or turn of the worker, and at close); until then the session refuses new
        code with 507 ``storage_full``. Other write failures raise.
        """
        if not self._unrecorded:
            # None waits (the usual case): written at once; it waits only if it does not fit.
            # (Finals can be recorded from several tasks at once: a held execution cancelled
            # by an interrupt while the worker turns, so only a waiting one is listed.)
            try:
                await self.writer.run(self._save_now(handle, activity))
            except Exception as exc:
                if storage_floor.failure_reason(exc) != "storage_full":
                    raise
                self._unrecorded.append(handle)
            else:
                return True
        else:
            self._unrecorded.append(handle)
            await self._write_unrecorded()
        if handle not in self._unrecorded:
            return True
        ex = handle.execution
        log.error(
            "session %s: the data disk is full; the record of %s (%s) waits in memory until "
            "space is freed, and no new code runs until then",
            self.id,
            ex.id,
            ex.status,
        )
        return False

    async def _write_unrecorded(self) -> bool:
        """Write the final records that waited for disk space, oldest first; True when
        none is left waiting. A failure other than a full disk raises."""
        async with self._flushing:  # one writer of the waiting records at a time
            while self._unrecorded:
                handle = self._unrecorded[0]
                write = self._save_now(handle, self._activity(self.status))
                try:
                    await self.writer.run(write)
                except Exception as exc:
                    if storage_floor.failure_reason(exc) == "storage_full":
                        return False
                    self._unrecorded.popleft()
                    raise
                self._unrecorded.popleft()
                handle.answer = None  # from now on it is told as recorded
                log.warning(
                    "session %s: the record of %s (%s) is written now that the data disk has space",
                    self.id,
                    handle.execution.id,
                    handle.execution.status,
                )
        return True

    async def _abandon(self, handle: ExecutionHandle, status: ExecutionStatus, reason: str) -> None:
        ex = handle.execution
        if handle.approval is not None:
            handle.approval.withdraw(reason)  # no-op once decided
            self._record_outcome(handle)
        if handle.spill is not None:
            # Never finished: its spilled text goes (the record keeps no artifact).
            spill, handle.spill = handle.spill, None
            await spill.discard()
        ex.status = status
        ex.reason = reason
        if ex.started_at is not None and handle.notebook_sha256 is None:
            # (A cell already in the notebook keeps the duration it was written with: its
            # record says the same, which ``interp audit verify`` compares.)
            ex.duration_ms = (utcnow() - ex.started_at).total_seconds() * 1000
        self._report(handle)
        try:
            await self._record_final(handle, None)
        except Exception:
            log.exception("session %s: could not record execution %s", self.id, ex.id)
        finally:
            handle.finish()  # answered whatever the store did

    async def _end_unfinished(
        self, handle: ExecutionHandle, status: Literal["interrupted", "unknown"], reason: str
    ) -> None:
        """End a cell the close leaves unfinished, what it printed so far kept, in its
        record and as its notebook cell, as for any finished cell: ``interrupted`` when
        the close stops its kernel; ``unknown`` when the kernel goes on running for the
        next broker, whose :meth:`_resume` continues that cell."""
        ex, rec = handle.execution, handle.recorder
        if rec is None or ex.started_at is None:
            await self._abandon(handle, status, reason)  # never reached the kernel
            return
        ex.status, ex.reason = status, reason
        if status == "interrupted":
            closed_while_running(ex, rec, reason)
        ex.duration_ms = round((utcnow() - ex.started_at).total_seconds() * 1000, 3)
        if rec.execution_count is not None:
            ex.execution_count = rec.execution_count
            self.execution_count = max(self.execution_count, rec.execution_count)
        try:
            await self._finalize(handle, rec)
        except Exception:
            log.exception("session %s: could not record the output of %s", self.id, ex.id)
            if not handle.finished.is_set():
                await self._abandon(handle, status, reason)

    # ------------------------------------------------------------------ running

    async def _run(self, handle: ExecutionHandle) -> None:
        if handle.resumed:
            await self._resume(handle)
            return
        ex = handle.execution
        loop = asyncio.get_running_loop()
        if not await self._await_approval(handle):
            return
        await self._replaced.wait()  # a restart in progress finishes first
        if self.failed_reason is None and (
            self.status == "dead" or not await self.kernel.is_alive()
        ):
            # The kernel died while nobody was running anything: replace it first.
            self._state_lost_pending = True
            await self._restart("died_idle")
            await self._write_note()
        if self.failed_reason is not None:
            await self._cancel_failed(handle)  # no kernel: the session gave up on it
            return
        if self.status == "dead" and self.backend_down:
            # Not run: no kernel could start; the code may be sent again once one can.
            handle.execution.error = ErrorInfo(
                ename="BackendUnavailable",
                evalue=BACKEND_DOWN_TEXT,
                traceback=[],
            )
            await self._abandon(handle, "cancelled", "backend_unavailable")
            return
        if self.status == "dead":
            await self._abandon(handle, "kernel_died", "restart_failed")
            return
        if handle.finished.is_set():
            return  # withdrawn meanwhile: its record could not be written (disk full)
        state_lost_before = self._state_lost_pending
        self._state_lost_pending = False
        self.status = "busy"
        ex.status = "running"
        ex.generation = self.generation
        ex.started_at = utcnow()
        started = loop.time()
        incarnation = self.kernel.restarts
        rec = self._record(handle, await self.kernel.execute(ex.code, ex.id))
        # Issued once the request has left: the writer's thread, woken before the send,
        # took the GIL from it (0.50 against 0.30 ms from the call to the send, p50).
        handle.running_write = self.writer.later(*self._save_keyed(handle, ex.id))
        progress = asyncio.ensure_future(self._save_progress(handle, rec))
        try:
            ending = await waiting.until_end(
                handle,
                rec,
                self.kernel,
                deadline=started + handle.timeout_s,
                iopub_grace_s=self.settings.iopub_grace_s,
            )
        finally:
            progress.cancel()
        ex.duration_ms = round((loop.time() - started) * 1000, 3)
        state_lost, restart = False, None
        if ending.kind == "timeout":
            grace = self.settings.interrupt_grace_s
            state_lost = not await waiting.after_timeout(handle, rec, self.kernel, grace)
            restart = "timeout" if state_lost else None
            if state_lost and (self._restart_requested or self.kernel.restarts != incarnation):
                # A restart was requested in the interrupt's grace: it is the one
                # replacement, and it ends the cell.
                ending, state_lost = waiting.Ending("restarted"), False
        elif ending.kind == "died":
            restart = ending.reason or "died"
        elif rec.asked_exit:
            restart = "exit"  # docs/security.md decision 5: state is lost
        if restart is not None and self._restart_requested:
            await self._replaced.wait()  # the requested restart replaces the kernel
        elif restart is not None:
            await self._restart(restart)
        conclude(
            ex,
            rec,
            ending=ending.kind,
            reason=ending.reason,
            state_lost=state_lost,
            interrupted=handle.interrupt_requested,
            timeout_s=handle.timeout_s,
            gave_up=self._failed_message() if self.failed_reason is not None else None,
        )
        if state_lost_before:
            ex.state_lost = True
        if rec.execution_count is not None:
            ex.execution_count = rec.execution_count
            self.execution_count = max(self.execution_count, rec.execution_count)
        if self.status == "busy":
            self.status = "idle"
        if self.late.pending:
            # What this cell changed in earlier ones (a display it updated) is on record
            # when it is: only output that comes after a cell ended waits for an interval.
            await self.late.flush()
        await self._finalize(handle, rec)

    def _record(self, handle: ExecutionHandle, msg_id: str) -> ExecutionRecorder:
        """The recorder of ``handle``'s messages (request ``msg_id``), with its spill: text
        past ``max_output_hard_bytes`` goes to disk, up to ``max_output_spill_bytes``."""
        settings = self.settings
        spill = None
        if settings.max_output_spill_bytes > 0:
            # What the session may still put on the data disk bounds the cell's share.
            left = max(settings.max_session_spill_bytes - self.spilled_bytes, 0)
            spill = StreamSpill(
                self.capture.artifacts.root,
                limit=min(settings.max_output_spill_bytes, left),
                min_free_mb=settings.min_free_mb,
                tail_chars=settings.max_output_bytes,
                limit_reason="limit"
                if left >= settings.max_output_spill_bytes
                else "session_limit",
            )
        rec = ExecutionRecorder(
            msg_id,
            hard_limit=settings.max_output_hard_bytes,
            rich_limit=settings.max_rich_output_bytes,
            overflow=spill,
        )
        handle.recorder, handle.spill = rec, spill
        return rec

    async def _save_progress(self, handle: ExecutionHandle, rec: ExecutionRecorder) -> None:
        """While the cell runs, every :data:`PROGRESS_SAVE_S` in which it printed, write its
        record with its output so far (cut as a result is): a broker killed mid-cell lost
        everything the cell had printed, which the client had seen, even with its kernel
        still running it. Cancelled when the cell ends; its final record comes after."""
        seen = rec.taken
        while True:
            await asyncio.sleep(PROGRESS_SAVE_S)
            if rec.taken == seen:
                continue
            seen = rec.taken
            ex = output_so_far(handle, output_bytes=self.settings.max_output_bytes)
            if rec.execution_count is not None:
                ex = ex.model_copy(update={"execution_count": rec.execution_count})
            key = handle.execution.id
            handle.to_save[key] = Saved(ex.model_dump_json(), None)
            self.writer.later(partial(self._save_waiting, handle, key), key)
            self.progress_writes += 1

    async def _resume(self, handle: ExecutionHandle) -> None:
        """Wait out a cell an earlier broker left running; record what it still prints.

        Its status stays ``unknown`` (reason ``broker_restarted``): what it did before
        this broker attached is not known. It is bounded like any cell: what is left of its
        ``timeout_s`` (as stored; the service's maximum for a row without one) from when it
        started, then interrupted, then the kernel replaced.
        """
        ex = handle.execution
        loop = asyncio.get_running_loop()
        rec = self._record(handle, ex.id)
        # What it printed before a shutdown that kept its kernel (``_end_unfinished``) goes on.
        before = await self.notebook.outputs_of(ex.id)
        if before is None and (ex.stdout or ex.stderr or ex.outputs):
            # A broker killed mid-cell: its record holds its last progress write.
            root = self.capture.artifacts.root
            before = await asyncio.to_thread(outputs_of, ex, root, None)
        for output in before or []:
            cut = _cut_stream(output) if ex.truncated else None
            if cut is None:
                rec.feed_iopub(as_message(output))
            else:
                rec.seed_cut(str(output.get("name")), cut)
        if rec.cut_before and handle.spill is not None:
            # Its full text is lost: none of what it prints now is kept on disk for it.
            rec.overflow, spill, handle.spill = None, handle.spill, None
            await spill.discard()
        if before is not None:
            handle.extra_meta["note"] = RESUMED_KEPT_NOTE
            gap = {"output_type": "stream", "name": "stderr", "text": RESUMED_GAP}
            rec.feed_iopub(as_message(gap))
        self.status = "busy"
        started = ex.started_at or utcnow()
        ran_for = (utcnow() - started).total_seconds()
        settled = asyncio.ensure_future(self.kernel.settle())
        # Its output so far is written as it comes, as for any running cell: a broker
        # killed again lost all this one had received, though clients had been shown it.
        progress = asyncio.ensure_future(self._save_progress(handle, rec))
        try:
            ending = await waiting.until_settled(
                handle,
                settled,
                self.kernel,
                deadline=loop.time() + max(handle.timeout_s - ran_for, 0.0),
                interrupt_grace_s=self.settings.interrupt_grace_s,
            )
        finally:
            settled.cancel()
            progress.cancel()
        if ending.kind in ("timeout", "died"):
            await self._restart("timeout" if ending.kind == "timeout" else ending.reason or "died")
        ex.state_lost = ending.kind != "done"
        ex.status, ex.reason = "unknown", "broker_restarted"
        ex.duration_ms = round((utcnow() - started).total_seconds() * 1000, 3)
        if rec.execution_count is not None:
            ex.execution_count = rec.execution_count
        if self.status == "busy":
            self.status = "idle"
        # Shown after the cell (then the note of a restart that ended it, if any).
        resumed = broker_restart_note(kernel_survived=True, kept_before=before is not None)
        self._note = resumed if self._note is None else f"{resumed}\n\n{self._note}"
        await self._finalize(handle, rec)


#: The largest event id an SSE ``id:`` may carry (the API takes up to 12 digits).
_MAX_EVENT_ID = 10**12 - 1


def _ran(handle: ExecutionHandle) -> storage_floor.Ran:
    """How far ``handle``'s code got when the broker failed on it."""
    rec = handle.recorder
    if rec is None or handle.execution.started_at is None:
        return "not_run"
    return "ended" if rec.done else "started"


def _cut_stream(output: dict[str, Any]) -> CutText | None:
    """A stream output as a broker kept it cut (:func:`split_cut`), or None."""
    if output.get("output_type") != "stream":
        return None
    text = output.get("text")
    if isinstance(text, list):
        text = "".join(part for part in text if isinstance(part, str))
    return split_cut(text) if isinstance(text, str) else None


def _running_for(handle: ExecutionHandle) -> float:
    """Seconds ``handle`` has run (0 while it waits to start)."""
    started = handle.execution.started_at
    return (utcnow() - started).total_seconds() if started is not None else 0.0


def _ids_spent(execution: Execution) -> int:
    """An event id no broker can have given ``execution`` yet: the microseconds since it
    started. Each broker numbers its events from 1 past where it took over, and publishes
    far fewer than one event per microsecond, so ids grow across any number of restarts
    and a client resuming with an earlier broker's id never skips live events. Kept
    within the 12 digits an id has (a cell would have to run for 11 days to reach them)."""
    if execution.started_at is None:
        return 0
    spent = int((utcnow() - execution.started_at).total_seconds() * 1_000_000)
    return min(max(spent, 0), _MAX_EVENT_ID // 2)
