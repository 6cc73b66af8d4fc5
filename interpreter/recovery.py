r"""What a starting broker does with what an earlier process left (docs/security.md R-07).

(a) a session record whose kernel still runs: reattach it; (b) a kernel of this broker
that no record claims (a labelled container): remove it; (c) a record whose kernel is
gone or cannot be reattached (it died while the broker was down, or the broker stopped
while replacing it): give the session a fresh kernel, as an automatic restart after a
death does. Its state is lost, and it says so as such a restart does: the generation goes
up, the notebook has a "Kernel restarted" note, the next cell reports ``state_lost``. Its
id, record, notebook and workspace stay. A session is closed instead, leaving nothing
behind but its files, only where no fresh kernel can be had or none is wanted: it never
had a kernel (its creation did not finish), it expired while the broker was down
(``idle_timeout``, ``max_lifetime``), its workspace is gone, or the fresh kernel did not
start (``start_failed``). Which kernels can outlive a broker is the backend's business
(:meth:`~interpreter.backends.Backend.can_reattach`): local kernels always die with their
broker, so for the local backend every open record is closed (``broker_restarted``).

It runs while the broker already serves: sessions are dealt with concurrently, each
reattached over the kernel's control channel (answered while a cell runs), and a kernel
is replaced only when it does not answer there. Until a session is done, the broker
answers its requests with 503 and ``Retry-After``. A cell the earlier broker had sent to
the kernel stays ``unknown`` (never re-run); it is written into the notebook with a note,
and a reattached session attaches what the cell still prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from interpreter import rebuild, restore_cells
from interpreter.artifacts import remove_temporaries
from interpreter.audit import cell_digest
from interpreter.backends import Backend
from interpreter.backends.base import Leftover
from interpreter.cells import REBUILD_EVENT, RECOVERY_EVENT, RESTART_EVENT, note_event
from interpreter.execution import lost_cut
from interpreter.launch import SessionFactory
from interpreter.models import Execution, RebuildReport
from interpreter.notebook import NOTE_KEY, NOTEBOOK_NAME, NotebookRecorder
from interpreter.notes import broker_restart_note, restart_note
from interpreter.release import release_disk
from interpreter.session import LiveSession
from interpreter.store import SessionRecord, Store, Unfinished, Writer, utcnow
from interpreter.upload import remove_leftovers

log = logging.getLogger(__name__)

#: Sessions reattached at the same time.
CONCURRENCY = 8
#: Why a session is revived, in the restart metric and the notebook's restart note.
REVIVED = "broker_restarted"
#: Notebook note on a cell that was running when the broker stopped, its kernel gone.
CLOSED_NOTE = (
    "The broker restarted while this cell ran, and its kernel did not survive: its "
    "outcome is unknown."
)


@dataclass
class RecoveryReport:
    """Session ids reattached, revived (a fresh kernel) and closed, and the ids of
    leftover kernels removed."""

    reattached: list[str] = field(default_factory=list)
    revived: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "reattached": self.reattached,
            "revived": self.revived,
            "closed": self.closed,
            "removed_containers": self.removed,
        }


@dataclass
class Recovery:
    """One startup's recovery. ``pending`` holds the ids of sessions not yet dealt with.

    Args:
        records: the open session records.
        leftovers: this broker's kernels found before its warm pool started.
        unfinished: executions the earlier broker left queued or running.
        adopt: takes each reattached or revived session (once it has its kernel).
        on_closed: called with the ids of the sessions closed ``broker_restarted``
            (metrics); those closed for another reason are counted here.
    """

    records: list[SessionRecord]
    leftovers: list[Leftover]
    unfinished: list[Unfinished]
    backend: Backend
    factory: SessionFactory
    store: Store
    writer: Writer
    adopt: Callable[[LiveSession], None]
    on_closed: Callable[[list[str]], None]
    report: RecoveryReport = field(default_factory=RecoveryReport)
    pending: set[str] = field(default_factory=set)
    #: Leftover kernels a session took (reattached) or removed to make way for a fresh one.
    claimed: set[str] = field(default_factory=set)
    #: Sessions dealt with: adopted (reattached or revived) or closed.
    settled: set[str] = field(default_factory=set)
    _closed_as: dict[str, str] = field(default_factory=dict)
    #: Rebuilds cut short by the earlier broker's end, their reports completed, until
    #: noted in the notebook and stored.
    _cuts: dict[str, RebuildReport] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pending = {r.id for r in self.records}

    async def run(self) -> RecoveryReport:
        """Reattach, revive or close every record (concurrently), then remove unclaimed
        kernels."""
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(record: SessionRecord) -> None:
            async with limit:
                try:
                    await self._recover(record)
                except Exception:
                    log.exception("startup recovery of session %s failed", record.id)
                finally:
                    self.pending.discard(record.id)

        await asyncio.gather(*(one(r) for r in self.records))
        for leftover in self.leftovers:
            # Before this broker's pool started, every unclaimed kernel was a leftover.
            if leftover.id not in self.claimed:
                await self.backend.remove(leftover)
                self.report.removed.append(leftover.id)
        # Kernels of any broker on this engine whose data directory is gone for good.
        try:
            self.report.removed.extend(await self.backend.sweep_abandoned())
        except Exception:
            log.exception("sweeping abandoned kernels failed")
        for key, items in self.report.as_dict().items():
            if items:
                log.warning("startup recovery: %s %s", key, ", ".join(items))
        closed = [sid for sid in self.report.closed if self._closed_as[sid] == "broker_restarted"]
        if closed:
            self.on_closed(closed)
        return self.report

    async def abandon(self) -> None:
        """After :meth:`run` was cancelled by a shutdown that keeps no kernels: close the
        sessions it had not dealt with (``broker_shutdown``, as the live ones are closed),
        and remove the leftover kernels no session took. Without it their containers ran
        on after the broker, which had promised to keep none."""
        for record in self.records:
            if record.id in self.settled:
                continue
            in_flight = self._in_flight(record)
            try:
                await self._cut_rebuild(record)
                await self._close(record, in_flight, "broker_shutdown")
            except Exception:
                log.exception("closing session %s at the shutdown failed", record.id)
        for leftover in self.leftovers:
            if leftover.id not in self.claimed:
                with contextlib.suppress(Exception):
                    await self.backend.remove(leftover)
                    self.report.removed.append(leftover.id)

    def _in_flight(self, record: SessionRecord) -> list[tuple[int, Execution]]:
        return [
            (u.seq, u.execution)
            for u in self.unfinished
            if u.session_id == record.id and u.execution.status == "unknown"
        ]

    async def _recover(self, record: SessionRecord) -> None:
        """Reattach, revive or close one session; the leftover kernels it dealt with
        (reattached, or removed to make way for a fresh one) are :attr:`claimed`."""
        in_flight = self._in_flight(record)
        await self._cut_rebuild(record)
        if not self.backend.can_reattach(record.backend):
            await self._close(record, in_flight, "broker_restarted")
            return
        provisioner = record.provisioner or {}
        matches = [m for m in self.leftovers if self.backend.matches(m, record.id, provisioner)]
        if matches and await self._reattach(record, in_flight, matches[0].id):
            await self.writer.run(
                partial(self.store.set_status, record.id, "busy" if in_flight else "idle")
            )
            self.report.reattached.append(record.id)
            return
        why_not = self._not_revived(record, bool(in_flight))
        if why_not is not None:
            await self._close(record, in_flight, why_not)
            return
        # Whatever is left of its kernel (stopped, frozen, or a replacement the earlier
        # broker was starting) goes before the fresh one starts in its directories.
        for leftover in matches:
            self.claimed.add(leftover.id)
            await self.backend.remove(leftover)
            self.report.removed.append(leftover.id)
        await self._revive(record, in_flight)

    def _not_revived(self, record: SessionRecord, busy: bool) -> str | None:
        """Why a session whose kernel is gone gets no fresh one (the reason it is closed
        with), or None. A session that was running a cell was not idle."""
        settings = self.factory.settings
        if not record.connection:
            log.warning("session %s never had a kernel (its creation did not finish)", record.id)
            return "broker_restarted"
        age = (utcnow() - record.created_at).total_seconds()
        if settings.max_lifetime_s and age >= settings.max_lifetime_s:
            return "max_lifetime"
        idle_timeout = record.idle_timeout_s
        if idle_timeout is None:
            idle_timeout = settings.idle_timeout_s
        idle = (utcnow() - record.last_activity_at).total_seconds()
        if idle_timeout and not busy and idle >= idle_timeout:
            return "idle_timeout"
        if not (settings.session_dir(record.id) / "workspace").is_dir():
            log.warning("session %s: its workspace is gone; not given a fresh kernel", record.id)
            return "broker_restarted"
        return None

    async def _revive(self, record: SessionRecord, in_flight: list[tuple[int, Execution]]) -> None:
        """Give a session whose kernel is gone a fresh one, as an automatic restart after a
        death does (counted in its restart budget and the restart metric, noted in its
        notebook; its next cell reports ``state_lost``). Closed ``start_failed`` when the
        kernel does not start."""
        await asyncio.to_thread(
            _close_files,
            self.factory.settings.session_dir(record.id),
            record.id,
            in_flight,
            self.store,
            closed=False,
            inline_bytes=self.factory.settings.inline_rich_bytes,
            notebook_bytes=self.factory.settings.max_notebook_bytes,
            then=self._cut_note(record),
        )
        await self._cut_noted(record)
        session = await self.factory.restore(record)
        session.kernel.budget.allow(asyncio.get_running_loop().time())
        try:
            await session.revive()
        except Exception as exc:
            log.warning("session %s: no fresh kernel after the broker restart: %s", record.id, exc)
            await session.close(reason="start_failed")
            self.settled.add(record.id)
            self._closed(record.id, "start_failed")
            return
        self.factory.metrics.restarts.labels(REVIVED).inc()
        await session.add_note(
            restart_note(REVIVED, session.generation), note_event(RESTART_EVENT, [REVIVED])
        )
        log.warning(
            "session %s: its kernel did not survive the broker restart; started a fresh one "
            "(generation %d, state lost)",
            record.id,
            session.generation,
        )
        self.settled.add(record.id)
        self.adopt(session)
        self.report.revived.append(record.id)

    async def _close(
        self, record: SessionRecord, in_flight: list[tuple[int, Execution]], reason: str
    ) -> None:
        """Close a session whose kernel is gone, leaving nothing behind but its files."""
        await asyncio.to_thread(
            _close_files,
            self.factory.settings.session_dir(record.id),
            record.id,
            in_flight,
            self.store,
            closed=True,
            inline_bytes=self.factory.settings.inline_rich_bytes,
            notebook_bytes=self.factory.settings.max_notebook_bytes,
            then=self._cut_note(record),
        )
        await self._cut_noted(record)
        # Nothing left behind: its runtime directory, and its disk quota (files kept).
        options = self.factory.launch_options(record.id, record.owner)
        await asyncio.to_thread(release_disk, options)
        await self.writer.run(partial(self.store.close_session, record.id, reason))
        self.settled.add(record.id)
        self._closed(record.id, reason)

    def _closed(self, session_id: str, reason: str) -> None:
        self.report.closed.append(session_id)
        self._closed_as[session_id] = reason
        if reason != "broker_restarted":  # those are counted by ``on_closed``
            self.factory.metrics.sessions_closed.labels(reason).inc()

    async def _reattach(
        self, record: SessionRecord, in_flight: list[tuple[int, Execution]], kernel: str
    ) -> bool:
        """Reattach ``record`` to its leftover kernel ``kernel`` (its id)."""
        if not record.connection or not record.provisioner:
            return False
        session = await self.factory.restore(record)
        try:
            await session.attach(record.connection, record.provisioner, in_flight)
        except Exception as exc:
            log.warning("could not reattach session %s: %s", record.id, exc)
            session.kernel.close()
            return False
        note = self._cut_note(record)
        if note is not None:
            # Its cell at the cut, if it still runs, is written below it when it ends.
            await session.add_note(*note)
            await session.notebook.flush()
            await self._cut_noted(record)
        self.claimed.add(kernel)
        self.settled.add(record.id)
        self.adopt(session)
        return True

    async def _cut_rebuild(self, record: SessionRecord) -> None:
        """A rebuild the earlier broker was running when it was killed: its report (kept
        on record as it ran) completed with how the cell it had sent last ended
        (:func:`rebuild.cut_by_restart`), and the note the notebook gets, in
        :attr:`_cuts` until written (:meth:`_cut_note`, :meth:`_cut_noted`)."""
        report = record.rebuild
        if not record.rebuild_running or report is None or record.id in self._cuts:
            return
        at = next(
            (c.rerun_execution_id for c in report.cells if c.index == report.stopped_at),
            None,
        )
        execution = await asyncio.to_thread(self.store.get_execution, record.id, at) if at else None
        done = rebuild.cut_by_restart(report, execution)
        self._cuts[record.id] = done
        log.warning(
            "session %s: a rebuild was under way when the broker stopped: %s",
            record.id,
            done.summary(),
        )

    def _cut_note(self, record: SessionRecord) -> tuple[str, dict[str, Any]] | None:
        """The notebook note of a rebuild cut short by the earlier broker's end, if any."""
        done = self._cuts.get(record.id)
        if done is None or done.stopped is None:
            return None
        own = done.source == f"session:{record.id}"
        event = note_event(RECOVERY_EVENT if own else REBUILD_EVENT)
        return rebuild.stopped_note(done, own), {**event, "stopped": done.stopped}

    async def _cut_noted(self, record: SessionRecord) -> None:
        """Store the completed report of a rebuild cut short (once its note is written)."""
        done = self._cuts.pop(record.id, None)
        if done is not None:
            await self.writer.run(partial(self.store.save_rebuild, record.id, done))
            record.rebuild, record.rebuild_running = done, False


def _close_files(
    session_dir: Path,
    session_id: str,
    in_flight: list[tuple[int, Execution]],
    store: Store,
    *,
    closed: bool,
    inline_bytes: int = 0,
    notebook_bytes: int = 0,
    then: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Complete the notebook of a session whose kernel is gone (``closed``, or about to
    get a fresh one): the cells its file had not caught up with (from the store, within
    the notebook's output budget ``notebook_bytes``), and the cells that were running,
    with a note; remove what the previous broker was writing in its artifact directory
    (spill files). ``then`` is a last note (text, event): a rebuild cut short."""
    remove_temporaries(session_dir / "artifacts")
    remove_leftovers(session_dir / "workspace")
    path = session_dir / NOTEBOOK_NAME
    try:
        recorder = NotebookRecorder.load(path)
    except Exception as exc:
        log.warning(
            "session %s: notebook unreadable (%s); in-flight cells not added", session_id, exc
        )
        return
    executions = store.executions_of(session_id)
    restored = restore_cells.restore(
        recorder,
        executions,
        session_dir / "artifacts",
        store.cell_digests(session_id),
        inline_bytes=inline_bytes,
        notebook_bytes=notebook_bytes,
        layouts=store.cell_layouts(session_id),
        chained=store.chained(session_id),
        notes=store.notes_of(session_id),
    )
    settled: list[tuple[int, Execution, str]] = []
    for seq, ex in in_flight:
        kept = _cell_of(recorder, ex.id)
        if kept is not None:
            # Recorded, with what it had printed, by an earlier broker that shut down and
            # kept its kernel: completed in place, never written twice.
            # Its record says the same (``interp audit verify`` compares the two): state
            # lost, and the duration its cell was written with.
            meta = kept.metadata["interp"]
            ex.state_lost = True
            if ex.duration_ms is None and isinstance(meta.get("duration_ms"), (int, float)):
                ex.duration_ms = meta["duration_ms"]
            meta.update(
                status=ex.status,
                state_lost=True,
                reason=ex.reason,
                duration_ms=ex.duration_ms,
                note=CLOSED_NOTE,
            )
            recorder.cell_changed(kept)
            digest = meta.get("audit_sha256")
            if isinstance(digest, str):
                settled.append((seq, ex, digest))
        else:
            # What it printed up to its last progress write (see LiveSession._run). Cut,
            # its notice promised the full text in an artifact made when the cell ended:
            # no broker ended it, and its text past the cut is lost.
            if ex.truncated:
                ex.stdout, ex.stderr = lost_cut(ex.stdout), lost_cut(ex.stderr)
            outputs = restore_cells.outputs_of(ex, session_dir / "artifacts")
            digest = cell_digest(ex.code, outputs)
            recorder.add_cell(
                ex.code,
                outputs,
                execution_id=ex.id,
                execution_count=ex.execution_count,
                status=ex.status,
                started_at=ex.started_at,
                duration_ms=ex.duration_ms,
                state_lost=True,
                reason=ex.reason,
                # A rebuild's or recovery's re-run stays marked (and commented) as one.
                extra={**store.cell_meta_of(ex.id), "note": CLOSED_NOTE, "audit_sha256": digest},
            )
            settled.append((seq, ex, digest))
        note = broker_restart_note(kernel_survived=False, closed=closed)
        n = store.record_note(session_id, note, None, recorder.last_execution_id())
        recorder.add_markdown(note, {NOTE_KEY: n} if n is not None else None)
    if then is not None:
        text, event = then
        n = store.record_note(session_id, text, event, recorder.last_execution_id())
        recorder.add_markdown(text, {**event, NOTE_KEY: n} if n is not None else event)
    if restored or in_flight or then is not None:
        recorder.save()
    # Settled, with its cell's digest: no longer in flight. Left as it was, a session given a
    # fresh kernel kept it in flight, and each later start attached it to that kernel,
    # rewrote its record (a duration, state_lost false) and its note as if it had run on.
    for seq, ex, digest in settled:
        ex.state_lost = True
        store.save_execution(seq, ex, notebook_sha256=digest)


def _cell_of(recorder: NotebookRecorder, execution_id: str) -> Any | None:
    """The notebook cell recorded for ``execution_id``, if there is one."""
    for cell in reversed(recorder.nb.cells):
        meta = cell.get("metadata", {}).get("interp")
        if isinstance(meta, dict) and meta.get("execution_id") == execution_id:
            return cell
    return None
