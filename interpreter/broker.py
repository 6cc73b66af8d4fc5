"""The session broker: sessions by id and owner, capacity, culling, restart reconciliation.

No HTTP here: the API layer calls these methods and maps :mod:`interpreter.errors` to
status codes. Every lookup is by (owner, session id); another owner's session is reported
exactly like a missing one (docs/security.md H-42).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import logging
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Literal

from interpreter import memory, quota, rebuild, storage_floor
from interpreter.artifacts import ArtifactStore
from interpreter.backends import Backend
from interpreter.errors import (
    BadRequest,
    DiskQuotaExceeded,
    ExecutionNotFound,
    InterpreterError,
    KernelStartFailed,
    SessionClosed,
    SessionExpired,
    SessionNotFound,
    SessionPurged,
    SessionReattaching,
    ShuttingDown,
    TooManySessions,
    ValidationFailed,
)
from interpreter.handle import ExecutionHandle
from interpreter.idempotency import IdempotencyKeys, request_hash
from interpreter.ids import broker_id_for
from interpreter.launch import SessionFactory
from interpreter.metrics import Metrics
from interpreter.models import CreateSessionRequest, Execution, Limits, RebuildReport
from interpreter.models import Session as SessionModel
from interpreter.notebook import NOTEBOOK_NAME, read_notebook_file
from interpreter.policy.gate import PolicyGate
from interpreter.policy.loader import PolicyWatcher, load
from interpreter.recovery import Recovery
from interpreter.release import release_disk
from interpreter.retention import Retention
from interpreter.session import LiveSession
from interpreter.settings import Settings
from interpreter.snapshot import output_so_far
from interpreter.store import SessionRecord, Store, Writer, utcnow
from interpreter.tree import MAX_COPY_DEPTH, TreeTooDeep
from interpreter.workspace import Workspace, copy_tree_safely
from interpreter.write_gate import refusal

log = logging.getLogger(__name__)

#: How long a shutdown waits for the rebuilds it stopped to record that they stopped.
REPLAY_END_S = 10.0
#: Closed reasons that mean the service ended the session on its own: 410 session_expired.
EXPIRY_REASONS = frozenset({"idle_timeout", "max_lifetime"})


def owner_of(api_key: str | None) -> str:
    """A stable, non-reversible owner id for an API key (``anonymous`` without keys)."""
    if not api_key:
        return "anonymous"
    return hashlib.sha256(api_key.encode()).hexdigest()[:24]


class SessionBroker:
    """All sessions of one service. Create with :meth:`open`, end with :meth:`shutdown`."""

    def __init__(self, settings: Settings, backend: Backend) -> None:
        self.settings = settings
        self.backend = backend
        self.store = Store(settings.db_path)
        self.writer = Writer()
        self.broker_id = broker_id_for(settings.data_dir)
        self.live: dict[str, LiveSession] = {}
        self.metrics = Metrics(
            self._status_counts,
            queued=lambda: sum(s.executions.waiting for s in self.live.values()),
            warm_kernels=backend.warm_kernels,
            max_timeout_s=settings.max_timeout_s,
        )
        self.factory = SessionFactory(
            settings, backend, self.store, self.writer, self.metrics, self.broker_id
        )
        self.closing = False
        #: Sessions being created, by owner: they count against the caps until adopted.
        self._creating: Counter[str] = Counter()
        #: Creations under way (past the shutdown check); the drain waits for them.
        self._creates_in_flight = 0
        self._no_creates = asyncio.Event()
        self._no_creates.set()
        #: Set to cut the shutdown's grace for running cells short (a second Ctrl-C).
        self._hurry = asyncio.Event()
        self._cull_task: asyncio.Task[None] | None = None
        self.recovery: Recovery | None = None
        self._recovery_task: asyncio.Task[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self.reconcile_report: dict[str, list[str]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        #: Rebuilds and recoveries under way: each is set once it has recorded its end.
        self._replays: set[asyncio.Event] = set()
        #: Sessions out of ``live`` whose close is under way: their notebook file may still
        #: lack cells its in-memory notebook holds (saves are paced) until the close flushes.
        self._closing_sessions: dict[str, LiveSession] = {}
        #: The task closing each of them.
        self._close_tasks: dict[str, asyncio.Task[None]] = {}
        self.idempotency = IdempotencyKeys(self.store, self.writer.run, settings.idempotency_ttl_s)
        self.retention = Retention(
            self.store, self.writer, settings.sessions_dir, settings.retain_closed_days
        )
        #: The policy stage; without a policy file it allows everything.
        self.policy = PolicyGate(None)

    # ---------------------------------------------------------------- start / stop

    async def open(self) -> None:
        """Deal with what an earlier broker left behind and start background tasks.

        Returns quickly: sessions of an earlier broker are reattached in the background
        (:mod:`interpreter.recovery`) while the broker serves; their requests get 503 with
        ``Retry-After`` until then. Call before the backend's warm pool starts (its
        kernels would otherwise look like leftovers).

        Raises PolicyFileError when the policy file cannot be used.
        """
        if self.settings.policy_file is not None:
            loaded = await asyncio.to_thread(load, self.settings.policy_file)
            watcher = PolicyWatcher(loaded, self.settings.policy_poll_s)
            self.policy = PolicyGate(watcher)
            watcher.start()
        self.settings.sessions_dir.mkdir(parents=True, exist_ok=True)
        unfinished = await self.writer.run(self.store.mark_unfinished)
        if unfinished:
            log.warning(
                "%d executions were queued or running when the broker stopped: running "
                "ones are unknown, queued ones cancelled (none is re-run)",
                len(unfinished),
            )
        records = await asyncio.to_thread(self.store.list_sessions)
        open_records = [r for r in records if r.status != "closed"]
        # Quotas of sessions closed before this start (a crashed broker's, say); those of
        # the open ones are dealt with as each is reattached or closed.
        await asyncio.to_thread(
            quota.sweep,
            self.settings.sessions_dir,
            {r.id for r in open_records},
            copy=copy_tree_safely,
        )
        self.recovery = Recovery(
            records=open_records,
            leftovers=await self.backend.leftovers(self.broker_id),
            unfinished=unfinished,
            backend=self.backend,
            factory=self.factory,
            store=self.store,
            writer=self.writer,
            adopt=self._adopt,
            on_closed=self._count_recovered_closed,
        )
        self._recovery_task = asyncio.create_task(self._recover(), name="recovery")
        self._cull_task = asyncio.create_task(self._cull_loop(), name="cull")
        self.factory.prime()  # the first session then starts as fast as the next

    async def _recover(self) -> None:
        assert self.recovery is not None
        report = await self.recovery.run()
        self.reconcile_report = report.as_dict()

    @property
    def reattaching(self) -> int:
        """Sessions of an earlier broker not yet reattached or closed."""
        return len(self.recovery.pending) if self.recovery is not None else 0

    @property
    def recovery_done(self) -> bool:
        """Startup recovery has finished (leftover kernels removed included)."""
        return self._recovery_task is None or self._recovery_task.done()

    async def recovered(self) -> None:
        """Wait until startup recovery is done."""
        if self._recovery_task is not None:
            await asyncio.shield(self._recovery_task)

    def _count_recovered_closed(self, ids: list[str]) -> None:
        self.metrics.sessions_closed.labels("broker_restarted").inc(len(ids))

    def _adopt(self, session: LiveSession) -> None:
        self.watch(session)
        self.live[session.id] = session

    async def drain(self) -> None:
        """Refuse new work (503 ``shutting_down``), close or detach every live session and
        flush notebooks; reads keep working. Idempotent."""
        self.closing = True
        if self._drained is None:
            self._drained = asyncio.ensure_future(self._drain())
        await asyncio.shield(self._drained)

    async def shutdown(self) -> None:
        """:meth:`drain`, then stop the backend and close the store."""
        await self.drain()
        with contextlib.suppress(Exception):
            await self.backend.close()
        self.writer.close()
        self.store.close()

    async def _drain(self) -> None:
        await self.factory.stop_priming()
        if self._recovery_task is not None and not self._recovery_task.done():
            self._recovery_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._recovery_task
            if self.recovery is not None and not self.backend.keep_on_shutdown:
                await self.recovery.abandon()
        if self.policy.watcher is not None:
            await self.policy.watcher.stop()
        if self._cull_task is not None:
            self._cull_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cull_task
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        # Creations already accepted finish first (each is bounded by the kernel's start
        # deadline), so their sessions are closed or kept below like the others rather than
        # cut off half made.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.kernel_start_timeout_s):
                await self._no_creates.wait()
        await self._let_running_cells_finish(self.settings.shutdown_grace_s)
        keep = self.backend.keep_on_shutdown
        await asyncio.gather(
            *(
                s.close(reason="broker_shutdown", keep_kernel=keep)
                for s in list(self.live.values())
            ),
            return_exceptions=True,
        )
        if self._replays:
            # A rebuild the closes cut off says so (its report, a notebook note) first.
            waits = [asyncio.ensure_future(done.wait()) for done in self._replays]
            _, pending = await asyncio.wait(waits, timeout=REPLAY_END_S)
            for wait in pending:
                wait.cancel()
        self.live.clear()

    async def _let_running_cells_finish(self, grace_s: float) -> None:
        """Give running cells up to ``grace_s`` to finish (R-11); queued cells, which would
        start meanwhile, are cancelled first. What still runs after it is dealt with by
        the sessions' close: interrupted, or left running on a kept kernel."""
        if grace_s <= 0:
            return
        sessions = list(self.live.values())
        for session in sessions:
            await session.cancel_queued("broker_shutdown")
        running = [
            handle.finished.wait()
            for session in sessions
            if (handle := session.executions.current) is not None and not handle.finished.is_set()
        ]
        if running:
            hurried: asyncio.Future[Any] = asyncio.ensure_future(self._hurry.wait())
            finished: asyncio.Future[Any] = asyncio.gather(*running)
            try:
                await asyncio.wait(
                    [finished, hurried], timeout=grace_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                hurried.cancel()
                finished.cancel()

    def hurry(self) -> None:
        """Stop waiting for running cells to finish (the shutdown's grace), if it does."""
        self._hurry.set()

    def _status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for session in self.live.values():
            counts[session.status] = counts.get(session.status, 0) + 1
        return counts

    # ---------------------------------------------------------------- sessions

    async def create(self, owner: str, req: CreateSessionRequest) -> SessionModel:
        """Create a session (optionally rebuilt from another session or a notebook).

        A creation under way when the service starts to shut down is waited for (the drain
        closes or keeps its session like any other); one the drain could not wait for ends
        in 503 ``shutting_down``, never in an error of its half-closed session.
        """
        if self.closing:
            raise ShuttingDown("The service is shutting down; retry shortly.", retry_after=5)
        self._creates_in_flight += 1
        self._no_creates.clear()
        try:
            return await self._create(owner, req)
        except Exception as exc:
            cut_off = isinstance(exc, SessionClosed) or not isinstance(exc, InterpreterError)
            if cut_off and self._shutting_down():
                raise ShuttingDown(
                    "The service shut down while this session was being created; it was not "
                    "kept. Retry shortly.",
                    retry_after=5,
                ) from exc
            raise
        finally:
            self._creates_in_flight -= 1
            if not self._creates_in_flight:
                self._no_creates.set()

    def _shutting_down(self) -> bool:
        return self.closing

    async def _create(self, owner: str, req: CreateSessionRequest) -> SessionModel:
        live_count = len(self.live) + self._creating.total()
        if live_count >= self.settings.max_sessions:
            raise TooManySessions(
                f"The service runs its maximum of {self.settings.max_sessions} sessions; "
                "delete idle sessions or retry later.",
                retry_after=10,
            )
        mine = sum(1 for s in self.live.values() if s.owner == owner) + self._creating[owner]
        if mine >= self.settings.max_sessions_per_key:
            raise TooManySessions(
                f"This API key already has {mine} live or starting sessions (the maximum); "
                "delete some.",
                retry_after=10,
            )
        storage_floor.check(self.settings.data_dir, self.settings.min_free_mb)
        limits = self.policy.session_limits(owner, req.limits, self._default_limits(), mine)
        if limits is not req.limits:
            req = req.model_copy(update={"limits": limits})
        # Counted from here, before anything awaits, so that concurrent creations see it;
        # until adopted by _start_session, from then on it counts as live.
        self._creating[owner] += 1
        try:
            source = await self._rebuild_source(owner, req)
        except BaseException:
            self._created(owner)
            raise
        session = await self._start_session(owner, req, source.description if source else None)
        if source is not None:
            try:
                if source.workspace is not None:
                    await self._copy_workspace(session, source.workspace, req.from_session)
                await self._rebuild(session, source.notebook, source.description)
            except BaseException:
                # The client never learns this session's id: it must not stay running.
                if self.live.get(session.id) is session:
                    await self._close(session, "start_failed")
                raise
        return session.info()

    def _default_limits(self) -> Limits:
        s = self.settings
        return Limits(memory_mb=s.default_memory_mb, cpus=s.default_cpus, pids=s.default_pids)

    async def _copy_workspace(
        self, session: LiveSession, source: Path, source_id: str | None
    ) -> None:
        """Copy a forked session's files into ``session``; raises a clear error when they
        cannot be (the caller then closes ``session``)."""
        try:
            await asyncio.to_thread(
                copy_tree_safely, source, session.options.workspace, skip_too_deep=False
            )
        except TreeTooDeep as exc:
            raise TreeTooDeep(
                f"The files of session '{source_id}' cannot be copied: it has directories "
                f"nested more than {MAX_COPY_DEPTH} levels deep. Remove or flatten them in "
                "that session, then fork it again. The new session was closed."
            ) from exc
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskQuotaExceeded(
                    f"The files of the session it is rebuilt from do not fit in limits.disk_mb "
                    f"{session.options.disk_mb}; the new session was closed. Ask for more "
                    "disk_mb."
                ) from exc
            log.exception("session %s: copying the files of %s failed", session.id, source_id)
            raise InterpreterError(
                f"The files of session '{source_id}' could not be copied; the new session was "
                "closed. The service logged why."
            ) from exc

    async def create_once(
        self, owner: str, req: CreateSessionRequest, idempotency_key: str
    ) -> tuple[SessionModel, bool]:
        """:meth:`create` under an Idempotency-Key; returns (session, whether replayed)."""
        fingerprint = request_hash("create", req.model_dump_json())

        async def action() -> str:
            return (await self.create(owner, req)).id

        session_id, replayed = await self.idempotency.run(
            owner, "sessions", idempotency_key, fingerprint, action
        )
        return await self.get(owner, session_id), replayed

    async def _start_session(
        self, owner: str, req: CreateSessionRequest, source: str | None
    ) -> LiveSession:
        try:
            session = await self.factory.new(owner, req, source=source)
        finally:
            self._created(owner)  # a session being created counts once, not twice
        self._adopt(session)
        began = asyncio.get_running_loop().time()
        try:
            await session.start()
        except KernelStartFailed as exc:
            log.warning("session %s: kernel start failed: %s", session.id, exc.message)
            self.live.pop(session.id, None)
            await self.writer.run(partial(self.store.close_session, session.id, "start_failed"))
            self.metrics.sessions_closed.labels("start_failed").inc()
            await asyncio.to_thread(release_disk, session.options)
            if not await self.backend.reachable(fresh=True):
                # "Check the service logs" is not what a client can act on.
                raise KernelStartFailed(
                    "The kernel did not start: the Docker engine does not answer. Try "
                    "again once it does (/healthz says backend_reachable)."
                ) from exc
            raise
        elapsed = asyncio.get_running_loop().time() - began
        self.metrics.kernel_start.labels(self.backend.name).observe(elapsed)
        return session

    def _created(self, owner: str) -> None:
        self._creating[owner] -= 1
        if self._creating[owner] <= 0:
            del self._creating[owner]

    async def _rebuild_source(
        self, owner: str, req: CreateSessionRequest
    ) -> rebuild.RebuildSource | None:
        if req.from_session and req.from_notebook is not None:
            raise ValidationFailed("Give either from_session or from_notebook, not both.")
        if req.from_session:
            record = await self._record(owner, req.from_session)
            session_dir = self.settings.session_dir(record.id)
            live = self._with_notebook(owner, record.id)
            if live is not None:
                await live.notebook.flush()
            nb = await asyncio.to_thread(_read_json, session_dir / NOTEBOOK_NAME)
            return rebuild.RebuildSource(
                notebook=nb, description=f"session:{record.id}", workspace=session_dir / "workspace"
            )
        if req.from_notebook is not None:
            return await asyncio.to_thread(rebuild.from_notebook, req.from_notebook)
        return None

    async def _rebuild(
        self, session: LiveSession, nb: dict[str, Any], source: str, *, first: bool = False
    ) -> None:
        """Re-run ``nb``'s good cells in ``session``; with ``first``, each ahead of the
        waiting cells and outside the queue bound (a recovery, a rebuild on request).

        Those (``first``) stop where the broker starts to shut down: the report and the
        notebook say how far they got, and the caller is answered 503 ``shutting_down``
        (the drain waits for them to say so). As they run, the report they would end with
        if the broker were killed is kept on record, for the next broker to complete
        (:mod:`interpreter.recovery`).
        """
        submit = partial(self._submit, session, first=first)
        earlier = session.record.rebuild

        async def progress(cut: RebuildReport) -> None:
            await self.writer.run(partial(self.store.save_rebuild, session.id, cut, running=True))

        done = asyncio.Event()
        self._replays.add(done)
        try:
            try:
                report = await rebuild.replay_into(
                    session,
                    nb,
                    source,
                    self.settings.default_timeout_s,
                    submit,
                    stopping=self._stop_reason if first else None,
                    progress=progress,
                )
            except BaseException:
                # Not cut by a broker stop: the report it kept while it ran is not one.
                with contextlib.suppress(Exception):
                    await self.writer.run(partial(self.store.save_rebuild, session.id, earlier))
                raise
            session.record.rebuild = report
            await self.writer.run(partial(self.store.save_rebuild, session.id, report))
            if report.stopped == "broker_shutdown":
                await session.notebook.flush()  # its close flushed it before the note
        finally:
            done.set()
            self._replays.discard(done)
        if report.stopped == "broker_shutdown":
            raise ShuttingDown(
                "The service is shutting down: it stopped this rebuild; "
                f"{report.summary().rstrip('.')}. The session's rebuild report says the same.",
                retry_after=5,
            )

    def _stop_reason(self) -> str | None:
        return "broker_shutdown" if self.closing else None

    async def _record(self, owner: str, session_id: str) -> SessionRecord:
        if len(session_id) > 100:
            raise SessionNotFound("No such session.")
        row = await asyncio.to_thread(self.store.get_session, session_id)
        if row is None:
            await self._check_purged(owner, session_id)
        if row is None or row.owner != owner:
            raise SessionNotFound(
                f"No session '{session_id}' for this API key; it may never have existed or "
                "belong to another key. List yours with GET /v1/sessions."
            )
        return row

    async def _check_purged(self, owner: str, session_id: str) -> None:
        """Raise 410 ``session_purged`` when ``owner``'s session was removed by the retention."""
        gone = await asyncio.to_thread(self.store.purged, session_id)
        if gone is not None and gone.owner == owner:
            raise SessionPurged(
                f"Session '{session_id}' closed at {gone.closed_at.isoformat(timespec='seconds')}"
                f" and its record (notebook, files, executions) was removed at "
                f"{gone.purged_at.isoformat(timespec='seconds')}, after the service's "
                "retention of closed sessions. Download what you need to keep before then."
            )

    def _live(self, owner: str, session_id: str) -> LiveSession | None:
        session = self.live.get(session_id)
        if session is not None and session.owner == owner:
            return session
        return None

    async def get(self, owner: str, session_id: str) -> SessionModel:
        live = self._live(owner, session_id)
        if live is not None:
            return live.info()
        model = (await self._record(owner, session_id)).to_model()
        if self.recovery is not None and session_id in self.recovery.pending:
            model.status = "starting"  # being reattached
        return model

    async def list_for(
        self,
        owner: str,
        *,
        state: Literal["open", "closed", "all"] = "all",
        after: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[SessionModel], str | None]:
        """``owner``'s sessions (see :meth:`Store.list_sessions`), and the id to list the
        next ones after when ``limit`` left some out (else None). An ``after`` that is
        not one of ``owner``'s sessions raises ``BadRequest``."""
        if after is not None and not await asyncio.to_thread(self.store.owns, owner, after):
            raise BadRequest(
                f"after={after[:80]!r} is not one of your sessions: give the id of the last "
                "session of the previous page (its 'next')."
            )
        more = None if limit is None else limit + 1
        records = await asyncio.to_thread(
            partial(self.store.list_sessions, owner, state=state, after=after, limit=more)
        )
        following = None
        if limit is not None and len(records) > limit:
            records = records[:limit]
            following = records[-1].id
        out = []
        for record in records:
            live = self.live.get(record.id)
            out.append(live.info() if live is not None else record.to_model())
        return out, following

    async def require_live(self, owner: str, session_id: str) -> LiveSession:
        """``owner``'s session ``session_id`` if it is live and not being closed; else the
        error that says why not (404, 409 ``session_closed``, 410 ``session_expired``,
        503 ``session_reattaching``)."""
        live = self._live(owner, session_id)
        if live is not None:
            return _not_closing(live)
        record = await self._record(owner, session_id)
        # Recovery may have adopted it while the record was read (it was in neither place).
        live = self._live(owner, session_id)
        if live is not None:
            return _not_closing(live)
        if self.recovery is not None and session_id in self.recovery.pending:
            raise SessionReattaching.of(session_id)
        raise _closed_error(session_id, record.closed_reason or "stopped")

    async def delete(self, owner: str, session_id: str, *, generation: int | None = None) -> None:
        live = self._live(owner, session_id)
        if live is None:
            await self._record(owner, session_id)  # 404 when unknown; closed: no-op
            live = self._live(owner, session_id)  # adopted by recovery meanwhile
        if live is None:
            if self.recovery is not None and session_id in self.recovery.pending:
                raise SessionReattaching.of(session_id)
            closing = self._close_tasks.get(session_id)
            if closing is not None:
                # Closed by another request (or culled) still under way: answered once the
                # kernel is stopped, as that request will be.
                await asyncio.shield(closing)
            return
        live.check_generation(generation)
        await self._close(live, "deleted")

    async def set_idle_timeout(self, owner: str, session_id: str, seconds: float) -> None:
        """Cull ``session_id`` after ``seconds`` without activity from now on (0: never)."""
        session = await self.require_live(owner, session_id)
        session.idle_timeout_s = seconds
        session.touch()

    def watch(self, session: LiveSession) -> None:
        """Close ``session`` once it fails (R-03), after its running execution is recorded."""

        def failed(failing: LiveSession) -> None:
            async def close_after_current() -> None:
                current = failing.executions.current
                if current is not None:
                    await current.finished.wait()
                if self.live.get(failing.id) is failing:
                    await self._close(failing, failing.failed_reason or "failed")

            task = asyncio.create_task(close_after_current(), name=f"fail-{failing.id}")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

        session.on_failed = failed

    async def _close(self, session: LiveSession, reason: str) -> None:
        """Close a session in a task of the broker's own, so that neither a client going
        away nor the broker shutting down can cut the close (and its records) short.

        One close per session: a second caller (two DELETEs at once, a cull meeting a
        DELETE) waits for the close under way, with its reason, and returns when it has
        ended (it answered at once, while the kernel was still being stopped).
        """
        task = self._close_tasks.get(session.id)
        if task is None:
            # Closing from now on: no new work is accepted (require_live).
            session.closed_reason = reason
            task = asyncio.create_task(self._close_now(session, reason), name=f"close-{session.id}")
            self._close_tasks[session.id] = task
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            task.add_done_callback(lambda done: self._closed(session, done))
        await asyncio.shield(task)

    async def _close_now(self, session: LiveSession, reason: str) -> None:
        # Recorded first: once the session leaves `live`, readers answer from the store.
        await self.writer.run(partial(self.store.close_session, session.id, reason))
        self.live.pop(session.id, None)
        self._closing_sessions[session.id] = session
        self.metrics.sessions_closed.labels(reason).inc()
        await session.close(reason=reason)

    def _closed(self, session: LiveSession, task: asyncio.Task[None]) -> None:
        if self._close_tasks.get(session.id) is task:
            del self._close_tasks[session.id]
        if self.live.get(session.id) is session and session.status != "closed":
            session.closed_reason = None  # its close failed before it began: still usable
        if self._closing_sessions.get(session.id) is session:
            del self._closing_sessions[session.id]

    def _with_notebook(self, owner: str, session_id: str) -> LiveSession | None:
        """The live or closing session whose in-memory notebook is the session's current
        one (the file may lag behind it until the close has flushed it), if any."""
        session = self.live.get(session_id) or self._closing_sessions.get(session_id)
        if session is not None and session.owner == owner:
            return session
        return None

    # ---------------------------------------------------------------- execution

    async def execute(
        self,
        owner: str,
        session_id: str,
        code: str,
        timeout_s: float | None,
        *,
        stream: bool = False,
        request_id: str | None = None,
        reject_if_busy: bool = False,
        extra_meta: dict[str, Any] | None = None,
    ) -> ExecutionHandle:
        """Queue ``code`` in a session; ``extra_meta`` goes into its notebook cell's metadata
        (e.g. the surface it came through)."""
        if self.closing:
            raise ShuttingDown("The service is shutting down; retry shortly.", retry_after=5)
        timeout = self.policy.timeout(owner, timeout_s, self.settings.default_timeout_s)
        if timeout > (most := self.settings.max_timeout_s):
            raise ValidationFailed(
                f"timeout_s {timeout:g} exceeds the server maximum {most:g}; give at most {most:g}."
            )
        session = await self.require_live(owner, session_id)
        self.policy.count_execution(owner)
        return await self._submit(
            session,
            code,
            timeout,
            stream=stream,
            request_id=request_id,
            reject_if_busy=reject_if_busy,
            extra_meta=extra_meta,
        )

    async def _submit(
        self, session: LiveSession, code: str, timeout_s: float, **options: Any
    ) -> ExecutionHandle:
        """Queue ``code`` after the policy stage (policy/held.py)."""
        return await session.submit_checked(self.policy, code, timeout_s, **options)

    async def execute_once(
        self,
        owner: str,
        session_id: str,
        code: str,
        timeout_s: float | None,
        idempotency_key: str,
        *,
        stream: bool = False,
        request_id: str | None = None,
        reject_if_busy: bool = False,
    ) -> tuple[ExecutionHandle, bool]:
        """:meth:`execute` under an Idempotency-Key: a retry gets the first run, never a new one.

        Returns the handle and whether it is a replay. A replayed handle may be one that is
        still running (watch it like the original) or a finished one rebuilt from the store.
        """
        fingerprint = request_hash("execute", code, repr(timeout_s))
        started: list[ExecutionHandle] = []

        async def action() -> str:
            started.append(
                await self.execute(
                    owner,
                    session_id,
                    code,
                    timeout_s,
                    stream=stream,
                    request_id=request_id,
                    reject_if_busy=reject_if_busy,
                )
            )
            return started[0].execution.id

        execution_id, replayed = await self.idempotency.run(
            owner, f"execute:{session_id}", idempotency_key, fingerprint, action
        )
        if not replayed:
            return started[0], False
        live = self._live(owner, session_id)
        handle = live.executions.get(execution_id) if live is not None else None
        if handle is None:
            execution = await self.execution(owner, session_id, execution_id)
            # Finished (the live session keeps every unfinished handle), or left unknown
            # by an earlier broker: either way it is final.
            handle = ExecutionHandle.finished_with(execution)
        return handle, True

    async def execution(self, owner: str, session_id: str, execution_id: str) -> Execution:
        live = self._live(owner, session_id)
        if live is not None:
            handle = live.executions.get(execution_id)
            if handle is not None:  # while it runs: the output so far
                return output_so_far(handle, output_bytes=self.settings.max_output_bytes)
        else:
            await self._record(owner, session_id)
        found = await asyncio.to_thread(self.store.get_execution, session_id, execution_id)
        if found is None:
            raise ExecutionNotFound(f"No execution '{execution_id}' in session '{session_id}'.")
        return found

    async def execution_handle(
        self, owner: str, session_id: str, execution_id: str
    ) -> ExecutionHandle:
        """The live handle of an execution (for its events), or one made from its final
        record when it is no longer in memory."""
        live = self._live(owner, session_id)
        handle = live.executions.get(execution_id) if live is not None else None
        if handle is not None:
            return handle
        record = await self.execution(owner, session_id, execution_id)
        live = self._live(owner, session_id)  # reattached meanwhile
        handle = live.executions.get(execution_id) if live is not None else None
        if handle is not None:
            return handle
        if live is None and self.recovery is not None and session_id in self.recovery.pending:
            # Its stored record is not final yet (a cell the earlier broker left running
            # may still run): a stream resumed now would end early with nothing.
            raise SessionReattaching.of(session_id)
        return ExecutionHandle.finished_with(record)

    async def interrupt(
        self,
        owner: str,
        session_id: str,
        *,
        generation: int | None = None,
        execution_id: str | None = None,
    ) -> SessionModel:
        """Interrupt what runs, or only ``execution_id`` (cancelled if still queued)."""
        session = await self.require_live(owner, session_id)
        session.check_generation(generation)
        if execution_id is not None and session.executions.get(execution_id) is None:
            found = await asyncio.to_thread(self.store.get_execution, session_id, execution_id)
            if found is None:
                raise ExecutionNotFound(f"No execution '{execution_id}' in session '{session_id}'.")
        await session.interrupt(execution_id)
        return session.info()

    async def restart(
        self,
        owner: str,
        session_id: str,
        *,
        recover: bool,
        generation: int | None = None,
        keep_queued: bool = False,
    ) -> SessionModel:
        """Restart a session's kernel on request; with ``recover``, re-run its good cells
        ahead of every other cell (kept ones and those sent meanwhile wait for them).
        Raises SessionClosed when the session is closed, also while it restarts."""
        session = await self.require_live(owner, session_id)
        session.check_generation(generation)
        async with session.restarting(recover=recover):
            session.check_generation(generation)  # another restart may have gone first
            snapshot = await session.notebook.snapshot() if recover else None
            await session.restart(keep_queued=keep_queued)
            if snapshot is not None:
                await self._rebuild(session, snapshot, f"session:{session_id}", first=True)
        return session.info()

    async def rebuild(
        self,
        owner: str,
        session_id: str,
        notebook: dict[str, Any],
        *,
        generation: int | None = None,
    ) -> SessionModel:
        """Re-run ``notebook``'s good cells in a live session (``POST .../rebuild``).

        The same rebuild as creation's ``from_notebook`` (the same check of the notebook,
        the same replay and report, which replaces any earlier one on the session), but in
        a session the caller already has: files can be uploaded first, and the cells that
        read them then work. It runs on top of the session's current state; the kernel is
        not restarted (restart first for a clean one).

        A busy session is refused (409 ``session_running``), not queued behind: a rebuild
        restores state, and its cells racing with others (or its report depending on what
        ran in between) is not what a caller who asks for it expects; nor is a request
        left waiting behind someone else's long cell. While it runs, cells sent meanwhile
        wait for all of it (:meth:`LiveSession.rebuilding`).

        Raises SessionNotFound, SessionClosed or SessionExpired as the other session
        calls do, ValidationFailed (422) for a notebook that is no nbformat v4 notebook
        (before anything runs), SessionRunning, GenerationMismatch, and what running a
        cell raises (AuditDegraded, StorageFull, SessionClosed if it is closed meanwhile).
        """
        if self.closing:
            raise ShuttingDown("The service is shutting down; retry shortly.", retry_after=5)
        session = await self.require_live(owner, session_id)
        session.check_generation(generation)
        source = await asyncio.to_thread(rebuild.from_notebook, notebook, "notebook")
        async with session.rebuilding():
            session.check_generation(generation)  # restarted while the notebook was checked
            await self._rebuild(session, source.notebook, source.description, first=True)
        return session.info()

    # ---------------------------------------------------------------- files, notebook

    async def session_dir(self, owner: str, session_id: str) -> Path:
        live = self._live(owner, session_id)
        if live is not None:
            return live.options.session_dir
        await self._record(owner, session_id)
        return self.settings.session_dir(session_id)

    async def workspace(self, owner: str, session_id: str) -> Workspace:
        """A session's workspace; a closed session's is read-only (its writes: 409
        ``session_closed``)."""
        live = self._live(owner, session_id)
        if live is not None:
            return live.workspace
        record = await self._record(owner, session_id)
        path = self.settings.session_dir(session_id) / "workspace"
        if not path.is_dir():
            raise BadRequest("This session has no workspace left.")
        if self.recovery is not None and session_id in self.recovery.pending:
            # Readable meanwhile; writes wait for the session to be back (503).
            return Workspace.read_only(path, lambda: SessionReattaching.of(session_id))
        return Workspace.read_only(path, refusal(session_id, record.closed_reason or "stopped"))

    async def notebook_json(self, owner: str, session_id: str) -> str:
        live = self._with_notebook(owner, session_id)
        if live is not None:
            return await live.notebook.to_json()
        await self._record(owner, session_id)
        path = self.settings.session_dir(session_id) / NOTEBOOK_NAME
        return await asyncio.to_thread(read_notebook_file, path, session_id)

    async def artifact(
        self, owner: str, session_id: str, artifact_id: str
    ) -> tuple[Path, str, int]:
        directory = await self.session_dir(owner, session_id)
        store = ArtifactStore(directory / "artifacts", session_id)
        return await asyncio.to_thread(store.open, artifact_id)

    # ---------------------------------------------------------------- culling

    async def _cull_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.cull_interval_s)
            try:
                await self.cull_once()
                await self.backend.tidy()
                await self.purge_once()
                await self.idempotency.expire()
                await asyncio.to_thread(memory.trim)
            except Exception:
                log.exception("culling failed")

    async def cull_once(self) -> list[str]:
        """Close sessions idle too long or alive too long (R-09); returns their ids."""
        now = utcnow()
        culled = []
        lifetime = self.settings.max_lifetime_s
        for session in list(self.live.values()):
            if lifetime and (now - session.created_at).total_seconds() >= lifetime:
                # Regardless of activity: whatever runs is interrupted, the notebook kept.
                await self._close(session, "max_lifetime")
                culled.append(session.id)
                log.info("closed session %s: maximum lifetime reached", session.id)
                continue
            await session.retry_audit()
            timeout = session.idle_timeout_s
            if timeout is None:
                timeout = self.settings.idle_timeout_s
            if not timeout or not session.idle:
                continue
            if session.workspace.gate.uploads:
                continue  # an upload still arriving is activity (it touches when it ends)
            if (now - session.last_activity_at).total_seconds() >= timeout:
                await self._close(session, "idle_timeout")
                culled.append(session.id)
                log.info("culled idle session %s", session.id)
        return culled

    async def purge_once(self) -> list[str]:
        """Remove closed sessions older than the retention; returns their ids."""
        removed = await self.retention.sweep(utcnow(), self._in_use)
        if removed:
            self.metrics.sessions_purged.inc(len(removed))
        return removed

    def _in_use(self, session_id: str) -> bool:
        return session_id in self.live or session_id in self._closing_sessions


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    assert isinstance(data, dict)
    return data


def _not_closing(live: LiveSession) -> LiveSession:
    """``live``, unless its close has begun: it stays in ``live`` while the close is
    written down, and a cell accepted then was cut short as the close went on (a cull that
    found the session idle as the cell came in)."""
    if live.closed_reason is not None:
        raise _closed_error(live.id, live.closed_reason)
    return live


def _closed_error(session_id: str, reason: str) -> SessionClosed | SessionExpired:
    """409 ``session_closed`` or 410 ``session_expired`` for a session closed for ``reason``."""
    tail = (
        "; its notebook and artifacts stay readable. Create a new session (from_session "
        "can rebuild its state) to run code."
    )
    if reason in EXPIRY_REASONS:
        return SessionExpired(f"Session '{session_id}' expired ({reason}){tail}")
    return SessionClosed(f"Session '{session_id}' is closed ({reason}){tail}")
