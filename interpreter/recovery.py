"""What a starting broker does with what an earlier process left (docs/security.md R-07).

(a) a session record whose kernel still runs: reattach it; (b) a kernel of this broker
that no record claims (a labelled container): remove it; (c) a record whose kernel is
gone, or cannot be reattached: close it, leaving nothing behind. Which kernels can outlive
a broker is the backend's business (:meth:`~interpreter.backends.Backend.can_reattach`):
local kernels die with their broker, so for the local backend every open record is closed.

It runs while the broker already serves: sessions reattach concurrently, each over the
kernel's control channel (answered while a cell runs), and a session is closed only when
its kernel does not answer there. Until a session is done, the broker answers its
requests with 503 and ``Retry-After``. A cell the earlier broker had sent to the kernel
stays ``unknown`` (never re-run); it is written into the notebook with a note, and a
reattached session attaches what the cell still prints.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from interpreter import restore_cells
from interpreter.artifacts import remove_temporaries
from interpreter.backends import Backend
from interpreter.backends.base import Leftover
from interpreter.launch import SessionFactory
from interpreter.models import Execution
from interpreter.notebook import NOTEBOOK_NAME, NotebookRecorder
from interpreter.notes import broker_restart_note
from interpreter.release import release_disk
from interpreter.session import LiveSession
from interpreter.store import SessionRecord, Store, Unfinished, Writer

log = logging.getLogger(__name__)

#: Sessions reattached at the same time.
CONCURRENCY = 8
#: Notebook note on a cell that was running when the broker stopped, its kernel gone.
CLOSED_NOTE = (
    "The broker restarted while this cell ran, and its kernel did not survive: its "
    "outcome is unknown."
)


@dataclass
class RecoveryReport:
    """Session ids reattached and closed, and the ids of leftover kernels removed."""

    reattached: list[str] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "reattached": self.reattached,
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
        adopt: takes each reattached session (after it is attached, before its record
            says so).
        on_closed: called with the ids of the sessions closed (metrics).
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

    def __post_init__(self) -> None:
        self.pending = {r.id for r in self.records}

    async def run(self) -> RecoveryReport:
        """Reattach or close every record (concurrently), then remove unclaimed kernels."""
        claimed: set[str] = set()
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(record: SessionRecord) -> None:
            async with limit:
                try:
                    match = await self._recover(record)
                    if match is not None:
                        claimed.add(match)
                except Exception:
                    log.exception("startup recovery of session %s failed", record.id)
                finally:
                    self.pending.discard(record.id)

        await asyncio.gather(*(one(r) for r in self.records))
        for leftover in self.leftovers:
            # Before this broker's pool started, every unclaimed kernel was a leftover.
            if leftover.id not in claimed:
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
        if self.report.closed:
            self.on_closed(self.report.closed)
        return self.report

    async def _recover(self, record: SessionRecord) -> str | None:
        """Reattach or close one session; returns the id of the kernel it claimed."""
        in_flight = [
            (u.seq, u.execution)
            for u in self.unfinished
            if u.session_id == record.id and u.execution.status == "unknown"
        ]
        if self.backend.can_reattach(record.backend):
            match = _leftover_of(self.backend, record, self.leftovers)
            if match is not None and await self._reattach(record, in_flight):
                await self.writer.run(
                    partial(self.store.set_status, record.id, "busy" if in_flight else "idle")
                )
                self.report.reattached.append(record.id)
                return match.id
        await asyncio.to_thread(
            _close_files,
            self.factory.settings.session_dir(record.id),
            record.id,
            in_flight,
            self.store,
        )
        # Nothing left behind: its runtime directory, and its disk quota (files kept).
        options = self.factory.launch_options(record.id, record.owner)
        await asyncio.to_thread(release_disk, options)
        await self.writer.run(partial(self.store.close_session, record.id, "broker_restarted"))
        self.report.closed.append(record.id)
        return None

    async def _reattach(
        self, record: SessionRecord, in_flight: list[tuple[int, Execution]]
    ) -> bool:
        if not record.connection or not record.provisioner:
            return False
        session = await self.factory.restore(record)
        try:
            await session.attach(record.connection, record.provisioner, in_flight)
        except Exception as exc:
            log.warning("could not reattach session %s: %s", record.id, exc)
            session.kernel.close()
            return False
        self.adopt(session)
        return True


def _leftover_of(
    backend: Backend, record: SessionRecord, leftovers: list[Leftover]
) -> Leftover | None:
    for leftover in leftovers:
        if backend.matches(leftover, record.id, record.provisioner or {}):
            return leftover
    return None


def _close_files(
    session_dir: Path,
    session_id: str,
    in_flight: list[tuple[int, Execution]],
    store: Store,
) -> None:
    """Complete the notebook of a session being closed: the cells its file had not caught
    up with (from the store), and the cells that were running, with a note; remove what
    the previous broker was writing in its artifact directory (spill files)."""
    remove_temporaries(session_dir / "artifacts")
    path = session_dir / NOTEBOOK_NAME
    try:
        recorder = NotebookRecorder.load(path)
    except Exception as exc:
        log.warning(
            "session %s: notebook unreadable (%s); in-flight cells not added", session_id, exc
        )
        return
    executions = store.executions_of(session_id)
    restored = restore_cells.restore(recorder, executions, session_dir / "artifacts")
    for _, ex in in_flight:
        recorder.add_cell(
            ex.code,
            [],
            execution_id=ex.id,
            execution_count=ex.execution_count,
            status=ex.status,
            started_at=ex.started_at,
            duration_ms=ex.duration_ms,
            state_lost=True,
            reason=ex.reason,
            extra={"note": CLOSED_NOTE},
        )
        recorder.add_markdown(broker_restart_note(kernel_survived=False))
    if restored or in_flight:
        recorder.save()
