"""The session broker: sessions by id and owner, capacity, culling, restart reconciliation.

No HTTP here: the API layer calls these methods and maps :mod:`interpreter.errors` to
status codes. Every lookup is by (owner, session id); another owner's session is reported
exactly like a missing one (security.md H-42).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from interpreter.artifacts import ArtifactStore
from interpreter.backends.base import LaunchOptions
from interpreter.errors import (
    BadRequest,
    ExecutionNotFound,
    KernelStartFailed,
    SessionClosed,
    SessionExpired,
    SessionNotFound,
    ShuttingDown,
    TooManySessions,
    ValidationFailed,
)
from interpreter.idempotency import IdempotencyKeys, request_hash
from interpreter.kernelspecs import KERNEL_NAMES
from interpreter.metrics import Metrics
from interpreter.models import (
    CreateSessionRequest,
    Execution,
    KernelInfo,
    RebuildReport,
)
from interpreter.models import Session as SessionModel
from interpreter.notebook import NOTEBOOK_NAME, NotebookRecorder, good_code_cells
from interpreter.session import ExecutionHandle, LiveSession, new_id
from interpreter.settings import Settings
from interpreter.store import SessionRow, Store, utcnow
from interpreter.workspace import Workspace, copy_tree_safely

log = logging.getLogger(__name__)

#: Closed reasons that mean the service ended the session on its own: 410 session_expired.
EXPIRY_REASONS = frozenset({"idle_timeout", "max_lifetime"})
T = TypeVar("T")


def owner_of(api_key: str | None) -> str:
    """A stable, non-reversible owner id for an API key (``anonymous`` without keys)."""
    if not api_key:
        return "anonymous"
    return hashlib.sha256(api_key.encode()).hexdigest()[:24]


class SessionBroker:
    """All sessions of one service. Create with :meth:`open`, end with :meth:`shutdown`."""

    def __init__(self, settings: Settings, backend: str) -> None:
        self.settings = settings
        self.backend = backend
        self.kernel_name = KERNEL_NAMES[backend]
        self.store = Store(settings.db_path)
        self.broker_id = hashlib.sha256(str(settings.data_dir.resolve()).encode()).hexdigest()[:16]
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        self.live: dict[str, LiveSession] = {}
        self.metrics = Metrics(self._status_counts)
        self.closing = False
        self._creating = 0
        self._cull_task: asyncio.Task[None] | None = None
        self.reconcile_report: dict[str, list[str]] = {}
        self.pool: Any = None
        #: Exact package versions of the kernel environment (from the image), for notebooks.
        self.kernel_packages: dict[str, str] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.idempotency = IdempotencyKeys(self.store, self.write, settings.idempotency_ttl_s)

    def write_nowait(self, fn: Callable[[], object]) -> None:
        """Queue a store write behind the earlier ones without waiting for it."""
        future = self._writer.submit(fn)
        future.add_done_callback(_log_write_failure)

    async def write(self, fn: Callable[[], T]) -> T:
        """Run a store write on the single writer thread (keeps writes in order)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, fn)

    # ---------------------------------------------------------------- start / stop

    async def open(self) -> None:
        """Reconcile with what an earlier broker left behind and start background tasks."""
        self.settings.sessions_dir.mkdir(parents=True, exist_ok=True)
        unknown = await self.write(self.store.mark_unfinished_unknown)
        if unknown:
            log.warning(
                "%d executions were in flight when the broker stopped: outcome "
                "unknown (not re-run)",
                len(unknown),
            )
        self.reconcile_report = await self._reconcile()
        self._cull_task = asyncio.create_task(self._cull_loop(), name="cull")

    async def _reconcile(self) -> dict[str, list[str]]:
        """Reattach to surviving kernels, close records whose kernel is gone (R-07)."""
        from interpreter.backends import reconcile

        return await reconcile.reconcile(self)

    async def shutdown(self) -> None:
        """Stop culling, close or detach every live session, flush notebooks."""
        self.closing = True
        if self._cull_task is not None:
            self._cull_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._cull_task
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        keep = self.backend == "docker" and self.settings.keep_containers_on_shutdown
        await asyncio.gather(
            *(
                s.close(reason="broker_shutdown", keep_kernel=keep)
                for s in list(self.live.values())
            ),
            return_exceptions=True,
        )
        self.live.clear()
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await self.pool.close()
        self._writer.shutdown(wait=True)
        self.store.close()

    def _status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for session in self.live.values():
            counts[session.status] = counts.get(session.status, 0) + 1
        return counts

    # ---------------------------------------------------------------- sessions

    def launch_options(
        self, session_id: str, owner: str, req: CreateSessionRequest
    ) -> LaunchOptions:
        s = self.settings
        limits = req.limits
        memory = (
            limits.memory_mb if limits and limits.memory_mb is not None else s.default_memory_mb
        )
        cpus = limits.cpus if limits and limits.cpus is not None else s.default_cpus
        pids = limits.pids if limits and limits.pids is not None else s.default_pids
        problems = []
        if memory > s.max_memory_mb:
            problems.append(
                f"limits.memory_mb {memory} exceeds the server maximum {s.max_memory_mb}"
            )
        if cpus > s.max_cpus:
            problems.append(f"limits.cpus {cpus:g} exceeds the server maximum {s.max_cpus:g}")
        if pids > s.max_pids:
            problems.append(f"limits.pids {pids} exceeds the server maximum {s.max_pids}")
        if problems:
            raise ValidationFailed("; ".join(problems) + ".")
        session_dir = s.session_dir(session_id)
        return LaunchOptions(
            session_id=session_id,
            owner=owner,
            session_dir=session_dir,
            workspace=session_dir / "workspace",
            runtime_dir=s.data_dir / "run" / session_id[-12:],
            env=dict(req.env),
            memory_mb=memory,
            cpus=cpus,
            pids=pids,
            tmp_size_mb=s.tmp_size_mb,
            image=s.docker_image,
            runtime=s.docker_runtime,
            extra={"broker_id": self.broker_id},
        )

    async def create(self, owner: str, req: CreateSessionRequest) -> SessionModel:
        """Create a session (optionally rebuilt from another session or a notebook)."""
        if self.closing:
            raise ShuttingDown("The service is shutting down; retry shortly.", retry_after=5)
        live_count = len(self.live) + self._creating
        if live_count >= self.settings.max_sessions:
            raise TooManySessions(
                f"The service runs its maximum of {self.settings.max_sessions} sessions; "
                "delete idle sessions or retry later.",
                retry_after=10,
            )
        mine = sum(1 for s in self.live.values() if s.owner == owner)
        if mine >= self.settings.max_sessions_per_key:
            raise TooManySessions(
                f"This API key already has {mine} live sessions (the maximum); delete some.",
                retry_after=10,
            )
        source_nb, source_desc, source_ws = await self._rebuild_source(owner, req)
        session_id = new_id("s")
        options = self.launch_options(session_id, owner, req)
        self._creating += 1
        try:
            session = await self._start_session(session_id, owner, req, options, source_desc)
        finally:
            self._creating -= 1
        if source_ws is not None:
            await asyncio.to_thread(copy_tree_safely, source_ws, options.workspace)
        if source_nb is not None:
            report = await self._replay_into(session, source_nb, source_desc or "notebook")
            session.rebuild = report.model_dump()
            rebuild_json = json.dumps(session.rebuild)
            await self.write(
                lambda: self.store.update_session(session_id, rebuild_json=rebuild_json)
            )
        return session.info()

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
        self,
        session_id: str,
        owner: str,
        req: CreateSessionRequest,
        options: LaunchOptions,
        source_desc: str | None,
    ) -> LiveSession:
        now = utcnow().isoformat()
        limits = {"memory_mb": options.memory_mb, "cpus": options.cpus, "pids": options.pids}
        row: dict[str, Any] = {
            "id": session_id,
            "owner": owner,
            "status": "starting",
            "backend": self.backend,
            "created_at": now,
            "last_activity_at": now,
            "execution_count": 0,
            "metadata_json": json.dumps(req.metadata),
            "limits_json": json.dumps(limits),
            "env_json": json.dumps(req.env),
            "idle_timeout_s": req.idle_timeout_s,
        }
        await asyncio.to_thread(self._make_dirs, options)
        await self.write(lambda: self.store.insert_session(row))
        notebook = NotebookRecorder.create(
            options.session_dir / NOTEBOOK_NAME,
            session_id=session_id,
            kernel_name=self.kernel_name,
            backend=self.backend,
            source={"from": source_desc} if source_desc else None,
        )
        if self.kernel_packages:
            notebook.nb.metadata["interp"]["packages"] = self.kernel_packages
            notebook.nb.metadata["interp"]["image"] = self.settings.docker_image
        session = LiveSession(
            row={**row, "metadata": req.metadata, "limits": limits},
            settings=self.settings,
            store=self.store,
            options=options,
            kernel_name=self.kernel_name,
            notebook=notebook,
            metrics=self.metrics,
            writer=self.write,
            writer_nowait=self.write_nowait,
        )
        self.watch(session)
        self.live[session_id] = session
        try:
            await session.start()
        except KernelStartFailed as exc:
            log.warning("session %s: kernel start failed: %s", session_id, exc.message)
            self.live.pop(session_id, None)
            await self.write(
                lambda: self.store.update_session(
                    session_id, status="closed", closed_reason="start_failed"
                )
            )
            raise
        await session.flush()
        return session

    @staticmethod
    def _make_dirs(options: LaunchOptions) -> None:
        options.session_dir.mkdir(parents=True, exist_ok=True)
        options.session_dir.chmod(0o700)
        options.workspace.mkdir(exist_ok=True)
        (options.session_dir / "artifacts").mkdir(exist_ok=True)
        options.runtime_dir.mkdir(parents=True, exist_ok=True)
        options.runtime_dir.chmod(0o700)

    async def _rebuild_source(
        self, owner: str, req: CreateSessionRequest
    ) -> tuple[dict[str, Any] | None, str | None, Path | None]:
        if req.from_session and req.from_notebook is not None:
            raise ValidationFailed("Give either from_session or from_notebook, not both.")
        if req.from_session:
            row = await self._row(owner, req.from_session)
            path = self.settings.session_dir(row["id"]) / NOTEBOOK_NAME
            live = self.live.get(row["id"])
            if live is not None:
                await live.flush()
            nb = await asyncio.to_thread(_read_json, path)
            return nb, f"session:{row['id']}", self.settings.session_dir(row["id"]) / "workspace"
        if req.from_notebook is not None:
            import nbformat

            try:
                nbformat.validate(nbformat.from_dict(req.from_notebook))  # type: ignore[no-untyped-call]
            except Exception as exc:
                raise ValidationFailed(
                    f"from_notebook is not a valid nbformat v4 notebook: {str(exc)[:300]}"
                ) from exc
            return dict(req.from_notebook), "notebook", None
        return None, None, None

    async def _replay_into(
        self, session: LiveSession, nb: dict[str, Any], source: str, *, skip_meta: bool = False
    ) -> RebuildReport:
        """Re-run the good code cells of ``nb`` in ``session``, in order."""
        sources, skipped = good_code_cells(nb)
        report = RebuildReport(
            source=source, cells_total=len(sources) + skipped, cells_skipped=skipped
        )
        for index, code in enumerate(sources):
            handle = await session.submit(
                code,
                self.settings.default_timeout_s,
                extra_meta={"replay_of": index, "replay_source": source},
            )
            await handle.finished.wait()
            report.cells_ran += 1
            if handle.execution.status != "ok":
                report.failed.append(index)
        return report

    async def _row(self, owner: str, session_id: str) -> SessionRow:
        if len(session_id) > 100:
            raise SessionNotFound("No such session.")
        row = await asyncio.to_thread(self.store.get_session, session_id)
        if row is None or row["owner"] != owner:
            raise SessionNotFound(
                f"No session '{session_id}' for this API key; it may never have existed or "
                "belong to another key. List yours with GET /v1/sessions."
            )
        return row

    def _live(self, owner: str, session_id: str) -> LiveSession | None:
        session = self.live.get(session_id)
        if session is not None and session.owner == owner:
            return session
        return None

    async def get(self, owner: str, session_id: str) -> SessionModel:
        live = self._live(owner, session_id)
        if live is not None:
            return live.info()
        return _closed_model(await self._row(owner, session_id))

    async def list_for(self, owner: str) -> list[SessionModel]:
        rows = await asyncio.to_thread(self.store.list_sessions, owner)
        out = []
        for row in rows:
            live = self.live.get(row["id"])
            out.append(live.info() if live is not None else _closed_model(row))
        return out

    async def require_live(self, owner: str, session_id: str) -> LiveSession:
        live = self._live(owner, session_id)
        if live is not None:
            return live
        row = await self._row(owner, session_id)
        reason = row.get("closed_reason") or "stopped"
        tail = (
            "; its notebook and artifacts stay readable. Create a new session (from_session "
            "can rebuild its state) to run code."
        )
        if reason in EXPIRY_REASONS:
            raise SessionExpired(f"Session '{session_id}' expired ({reason}){tail}")
        raise SessionClosed(f"Session '{session_id}' is closed ({reason}){tail}")

    async def delete(
        self, owner: str, session_id: str, *, generation: int | None = None
    ) -> None:
        live = self._live(owner, session_id)
        if live is None:
            await self._row(owner, session_id)  # 404 when unknown; closed: no-op
            return
        live.check_generation(generation)
        await self._close(live, "deleted")

    def watch(self, session: LiveSession) -> None:
        """Close ``session`` once it fails (R-03), after its running execution is recorded."""

        def failed(failing: LiveSession) -> None:
            async def close_after_current() -> None:
                current = failing.current
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
        away nor the broker shutting down can cut the close (and its records) short."""
        # Recorded first: once the session leaves `live`, readers answer from the store.
        await self.write(
            lambda: self.store.update_session(session.id, status="closed", closed_reason=reason)
        )
        self.live.pop(session.id, None)
        task = asyncio.create_task(session.close(reason=reason), name=f"close-{session.id}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        await asyncio.shield(task)

    # ---------------------------------------------------------------- execution

    async def execute(
        self,
        owner: str,
        session_id: str,
        code: str,
        timeout_s: float | None,
        *,
        stream: bool = False,
    ) -> ExecutionHandle:
        if self.closing:
            raise ShuttingDown("The service is shutting down; retry shortly.", retry_after=5)
        timeout = timeout_s if timeout_s is not None else self.settings.default_timeout_s
        if timeout > self.settings.max_timeout_s:
            raise ValidationFailed(
                f"timeout_s {timeout:g} exceeds the server maximum {self.settings.max_timeout_s:g}."
            )
        session = await self.require_live(owner, session_id)
        return await session.submit(code, timeout, stream=stream)

    async def execute_once(
        self,
        owner: str,
        session_id: str,
        code: str,
        timeout_s: float | None,
        idempotency_key: str,
        *,
        stream: bool = False,
    ) -> tuple[ExecutionHandle, bool]:
        """:meth:`execute` under an Idempotency-Key: a retry gets the first run, never a new one.

        Returns the handle and whether it is a replay. A replayed handle may be one that is
        still running (watch it like the original) or a finished one rebuilt from the store.
        """
        fingerprint = request_hash("execute", code, repr(timeout_s))
        started: list[ExecutionHandle] = []

        async def action() -> str:
            started.append(await self.execute(owner, session_id, code, timeout_s, stream=stream))
            return started[0].execution.id

        execution_id, replayed = await self.idempotency.run(
            owner, f"execute:{session_id}", idempotency_key, fingerprint, action
        )
        if not replayed:
            return started[0], False
        live = self._live(owner, session_id)
        handle = live.handle(execution_id) if live is not None else None
        if handle is None:
            execution = await self.execution(owner, session_id, execution_id)
            # Finished (the live session keeps every unfinished handle), or left unknown
            # by an earlier broker: either way it is final.
            handle = ExecutionHandle(execution=execution, seq=0, timeout_s=0)
            handle.finished.set()
        return handle, True

    async def execution(self, owner: str, session_id: str, execution_id: str) -> Execution:
        live = self._live(owner, session_id)
        if live is not None:
            handle = live.handle(execution_id)
            if handle is not None:
                return handle.execution
        else:
            await self._row(owner, session_id)
        found = await asyncio.to_thread(self.store.get_execution, session_id, execution_id)
        if found is None:
            raise ExecutionNotFound(f"No execution '{execution_id}' in session '{session_id}'.")
        return found

    async def interrupt(
        self, owner: str, session_id: str, *, generation: int | None = None
    ) -> SessionModel:
        session = await self.require_live(owner, session_id)
        session.check_generation(generation)
        await session.interrupt()
        return session.info()

    async def restart(
        self, owner: str, session_id: str, *, recover: bool, generation: int | None = None
    ) -> SessionModel:
        session = await self.require_live(owner, session_id)
        session.check_generation(generation)
        snapshot: dict[str, Any] | None = None
        if recover:
            async with session._nb_lock:
                snapshot = json.loads(session.notebook.to_json())
        await session.restart()
        if snapshot is not None:
            report = await self._replay_into(session, snapshot, f"session:{session_id}")
            session.rebuild = report.model_dump()
            rebuild_json = json.dumps(session.rebuild)
            await self.write(
                lambda: self.store.update_session(session_id, rebuild_json=rebuild_json)
            )
        return session.info()

    # ---------------------------------------------------------------- files, notebook

    async def session_dir(self, owner: str, session_id: str) -> Path:
        live = self._live(owner, session_id)
        if live is not None:
            return live.options.session_dir
        await self._row(owner, session_id)
        return self.settings.session_dir(session_id)

    async def workspace(self, owner: str, session_id: str) -> Workspace:
        live = self._live(owner, session_id)
        if live is not None:
            return Workspace(live.options.workspace)
        await self._row(owner, session_id)
        path = self.settings.session_dir(session_id) / "workspace"
        if not path.is_dir():
            raise BadRequest("This session has no workspace left.")
        return Workspace(path)

    async def notebook_json(self, owner: str, session_id: str) -> str:
        live = self._live(owner, session_id)
        if live is not None:
            async with live._nb_lock:
                return live.notebook.to_json()
        await self._row(owner, session_id)
        path = self.settings.session_dir(session_id) / NOTEBOOK_NAME
        return await asyncio.to_thread(path.read_text, encoding="utf-8")

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
                await self.idempotency.expire()
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
            if (now - session.last_activity_at).total_seconds() >= timeout:
                await self._close(session, "idle_timeout")
                culled.append(session.id)
                log.info("culled idle session %s", session.id)
        return culled


def _log_write_failure(future: Future[object]) -> None:
    exc = future.exception()
    if exc is not None:
        log.error("a store write failed: %r", exc)


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    assert isinstance(data, dict)
    return data


def _closed_model(row: SessionRow) -> SessionModel:
    return SessionModel(
        id=row["id"],
        status="closed",
        backend=row["backend"],
        created_at=datetime.fromisoformat(row["created_at"]),
        last_activity_at=datetime.fromisoformat(row["last_activity_at"]),
        execution_count=row["execution_count"],
        kernel=KernelInfo(**(row.get("kernel") or {})),
        metadata=row.get("metadata") or {},
        idle_timeout_s=row.get("idle_timeout_s"),
        limits=row.get("limits") or {},
        rebuild=RebuildReport(**row["rebuild"]) if row.get("rebuild") else None,
        generation=row.get("generation") or 0,
        closed_reason=row.get("closed_reason"),
    )


def remove_tree(path: Path) -> None:
    """Symlink-safe recursive delete (shutil.rmtree avoids symlink attacks on Linux)."""
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
