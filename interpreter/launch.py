"""The one place a live session is built: for a new session, and for one whose kernel
outlived an earlier broker process.

Both paths go from a typed :class:`~interpreter.store.SessionRecord` to launch options, a
notebook and a :class:`~interpreter.session.LiveSession` the same way, so they cannot
drift apart (the notebook metadata of a reattached session, for example, names the
kernel's packages exactly as a new one does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from interpreter import quota, restore_cells
from interpreter.backends import Backend
from interpreter.backends.base import LaunchOptions
from interpreter.errors import ValidationFailed
from interpreter.ids import new_id
from interpreter.image.packages import environment_packages, image_packages
from interpreter.metrics import Metrics
from interpreter.models import CreateSessionRequest, Limits
from interpreter.notebook import (
    NOTEBOOK_NAME,
    LiveNotebook,
    NotebookRecorder,
    prime_validator,
    set_aside,
)
from interpreter.session import LiveSession
from interpreter.settings import Settings
from interpreter.store import SessionRecord, Store, Writer, utcnow

log = logging.getLogger(__name__)


class SessionFactory:
    """Builds live sessions (not started): records, directories, options, notebooks.

    Args:
        settings: the broker settings (defaults and maximums of limits, paths).
        backend: where kernels run.
        store, writer: the durable registry and its ordered writer.
        metrics: broker metrics, shared by every session.
        broker_id: this broker's id, labelled on its kernels (to find leftovers).
    """

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        store: Store,
        writer: Writer,
        metrics: Metrics,
        broker_id: str,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.store = store
        self.writer = writer
        self.metrics = metrics
        self.broker_id = broker_id
        self._primed: asyncio.Task[None] | None = None

    def prime(self) -> None:
        """Start doing, off the loop, what a process's first session would do first:
        building nbformat's validator and, for a backend without an image, reading the
        environment's distributions (importlib caches them until site-packages changes).
        The first local session took about 170 ms longer than the next without it. A create
        waits for it if it has not finished (:meth:`new`)."""
        if self._primed is None:
            self._primed = asyncio.create_task(self._prime(), name="prime")

    async def stop_priming(self) -> None:
        if self._primed is not None and not self._primed.done():
            self._primed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._primed

    async def _prime(self) -> None:
        try:
            await asyncio.to_thread(prime_validator)
            if not self.backend.isolated:
                await asyncio.to_thread(environment_packages)
        except Exception:  # only a head start: the first create does it if this fails
            log.warning("could not prepare for the first session", exc_info=True)

    def launch_options(
        self,
        session_id: str,
        owner: str,
        limits: Limits | None = None,
        env: dict[str, str] | None = None,
        image: str | None = None,
    ) -> LaunchOptions:
        """The launch options of a session; raises ValidationFailed for limits over the
        server's maximums or an image not on the allowlist."""
        s = self.settings
        memory = limits.memory_mb if limits and limits.memory_mb is not None else None
        cpus = limits.cpus if limits and limits.cpus is not None else None
        pids = limits.pids if limits and limits.pids is not None else None
        memory = s.default_memory_mb if memory is None else memory
        cpus = s.default_cpus if cpus is None else cpus
        pids = s.default_pids if pids is None else pids
        problems = []
        if memory > s.max_memory_mb:
            problems.append(
                f"limits.memory_mb {memory} exceeds the server maximum {s.max_memory_mb}"
            )
        if cpus > s.max_cpus:
            problems.append(f"limits.cpus {cpus:g} exceeds the server maximum {s.max_cpus:g}")
        if pids > s.max_pids:
            problems.append(f"limits.pids {pids} exceeds the server maximum {s.max_pids}")
        problem = self._image_problem(image)
        if problem:
            problems.append(problem)
        disk = self._disk_mb(limits.disk_mb if limits else None, problems)
        if problems:
            raise ValidationFailed("; ".join(problems) + ".")
        session_dir = s.session_dir(session_id)
        return LaunchOptions(
            session_id=session_id,
            owner=owner,
            session_dir=session_dir,
            workspace=session_dir / "workspace",
            runtime_dir=self.backend.runtime_dir(session_id),
            env=dict(env or {}),
            memory_mb=memory,
            cpus=cpus,
            pids=pids,
            tmp_size_mb=s.tmp_size_mb,
            disk_mb=disk,
            image=image or s.docker_image,
            runtime=s.docker_runtime,
            cgroup_parent=s.docker_cgroup_parent,
            extra={
                "broker_id": self.broker_id,
                "data_dir": str(s.data_dir),
                "orphan_after_s": s.orphan_kernel_timeout_s,
            },
        )

    def _image_problem(self, image: str | None) -> str | None:
        """Why a session may not run ``image``; ``None`` when it may (or none was asked)."""
        if image is None:
            return None
        allowed = [self.settings.docker_image, *self.settings.docker_images]
        if not self.backend.isolated:
            return f"image: the {self.backend.name} backend runs no images; leave 'image' out"
        if image not in allowed:
            return f"image {image!r} is not allowed; the allowed images are: {', '.join(allowed)}"
        return None

    async def kernel_packages(self, image: str) -> dict[str, str]:
        """What a kernel of this backend (and image) can import; read off the loop."""
        if self.backend.isolated:
            if image == self.backend.image and self.backend.packages:
                return dict(self.backend.packages)
            return await asyncio.to_thread(image_packages, image)
        return await asyncio.to_thread(environment_packages)

    def _disk_mb(self, asked: int | None, problems: list[str]) -> int | None:
        """The workspace quota: asked or the default; None where quotas cannot be made."""
        s = self.settings
        why_not = quota.unavailable_reason()
        if asked is None:
            return None if why_not is not None or s.default_disk_mb == 0 else s.default_disk_mb
        if asked > s.max_disk_mb:
            problems.append(f"limits.disk_mb {asked} exceeds the server maximum {s.max_disk_mb}")
        elif why_not is not None:
            problems.append(f"limits.disk_mb cannot be enforced on this server: {why_not}")
        return asked

    def pool_template(self) -> LaunchOptions:
        """What a session without limits or env is launched with (the warm pool's kernels);
        its id, owner and paths are placeholders."""
        return self.launch_options("pool", "")

    async def new(
        self, owner: str, req: CreateSessionRequest, *, source: str | None = None
    ) -> LiveSession:
        """A new session, on record and with its directories, ready to start.

        ``source`` describes what it is rebuilt from (``session:<id>``, ``notebook``).
        """
        if self._primed is not None and not self._primed.done():
            await asyncio.shield(self._primed)
        session_id = new_id("s")
        options = self.launch_options(session_id, owner, req.limits, req.env, req.image)
        packages = await self.kernel_packages(options.image)
        now = utcnow()
        record = SessionRecord(
            id=session_id,
            owner=owner,
            status="starting",
            backend=self.backend.name,
            created_at=now,
            last_activity_at=now,
            metadata=dict(req.metadata),
            limits={
                "memory_mb": options.memory_mb,
                "cpus": options.cpus,
                "pids": options.pids,
                "disk_mb": options.disk_mb,
            },
            env=dict(req.env),
            idle_timeout_s=req.idle_timeout_s,
        )
        # A warm kernel brings its workspace quota: making one here only to replace it
        # at the claim cost a mkfs and four mounts per session (issue 10).
        quota_now = not self.backend.brings_workspace(options)
        await asyncio.to_thread(_make_dirs, options, quota_now)
        await self.writer.run(lambda: self.store.insert_session(record))
        notebook = self._new_notebook(options, record.id, source, packages)
        return self._build(record, options, notebook)

    async def restore(self, record: SessionRecord) -> LiveSession:
        """The live object of a stored session whose kernel may still run, ready to attach."""
        options = self.launch_options(record.id, record.owner, env=record.env)
        # The kernel runs under the limits it was started with, even if the server's
        # maximums have changed since.
        options.memory_mb = int(record.limits.get("memory_mb", options.memory_mb))
        options.cpus = float(record.limits.get("cpus", options.cpus))
        options.pids = int(record.limits.get("pids", options.pids))
        disk = record.limits.get("disk_mb")
        options.disk_mb = int(disk) if disk else None
        if options.disk_mb:
            try:
                await asyncio.to_thread(
                    quota.attach, options.session_dir, options.workspace, options.disk_mb
                )
            except Exception as exc:
                log.warning("session %s: workspace quota not mounted again: %s", record.id, exc)
        path = options.session_dir / NOTEBOOK_NAME
        try:
            recorder = await asyncio.to_thread(NotebookRecorder.load, path)
        except Exception as exc:
            recorder = self._new_notebook(options, record.id, None, {}).recorder
            kept = await asyncio.to_thread(set_aside, path)
            why = "missing" if isinstance(exc, FileNotFoundError) else "unreadable"
            note = f"the earlier notebook was {why} ({type(exc).__name__})" + (
                f"; kept as {kept.name}" if kept else ""
            )
            recorder.nb.metadata["interp"]["recovery_note"] = note
            log.warning("session %s: %s; starting a new one", record.id, note)
        # Cells the file had not caught up with when the earlier broker stopped.
        executions = await asyncio.to_thread(self.store.executions_of, record.id)
        digests = await asyncio.to_thread(self.store.cell_digests, record.id)
        layouts = await asyncio.to_thread(self.store.cell_layouts, record.id)
        chained = await asyncio.to_thread(self.store.chained, record.id)
        notes = await asyncio.to_thread(self.store.notes_of, record.id)
        # Off the loop: it reads the artifacts of the cells it writes back.
        restored = await asyncio.to_thread(
            restore_cells.restore,
            recorder,
            executions,
            options.session_dir / "artifacts",
            digests,
            inline_bytes=self.settings.inline_rich_bytes,
            notebook_bytes=self.settings.max_notebook_bytes,
            layouts=layouts,
            chained=chained,
            notes=notes,
        )
        if restored:
            log.warning("session %s: %d cells written back from the store", record.id, restored)
        # A session asked for its own image; it runs that image again.
        image = recorder.nb.metadata.get("interp", {}).get("image")
        if self.backend.isolated and isinstance(image, str) and image:
            options.image = image
        lost = await asyncio.to_thread(self.store.state_lost_pending, record.id)
        return self._build(record, options, LiveNotebook(recorder, record.id), state_lost=lost)

    def _new_notebook(
        self,
        options: LaunchOptions,
        session_id: str,
        source: str | None,
        packages: dict[str, str],
    ) -> LiveNotebook:
        recorder = NotebookRecorder.create(
            options.session_dir / NOTEBOOK_NAME,
            session_id=session_id,
            kernel_name=self.backend.kernel_name,
            backend=self.backend.name,
            source={"from": source} if source else None,
        )
        meta: dict[str, Any] = recorder.nb.metadata["interp"]
        # Both backends record what the kernel can import; docker also the image it ran.
        if packages:
            meta["packages"] = packages
        if self.backend.isolated:
            meta["image"] = options.image
        return LiveNotebook(recorder, session_id)

    def _build(
        self,
        record: SessionRecord,
        options: LaunchOptions,
        notebook: LiveNotebook,
        state_lost: bool = False,
    ) -> LiveSession:
        return LiveSession(
            record,
            settings=self.settings,
            backend=self.backend,
            options=options,
            notebook=notebook,
            store=self.store,
            writer=self.writer,
            metrics=self.metrics,
            state_lost_pending=state_lost,
        )


def _make_dirs(options: LaunchOptions, quota_now: bool = True) -> None:
    options.session_dir.mkdir(parents=True, exist_ok=True)
    options.session_dir.chmod(0o700)
    options.workspace.mkdir(exist_ok=True)
    if options.disk_mb and quota_now:
        quota.attach(options.session_dir, options.workspace, options.disk_mb)
    (options.session_dir / "artifacts").mkdir(exist_ok=True)
    options.runtime_dir.mkdir(parents=True, exist_ok=True)
    options.runtime_dir.chmod(0o700)
