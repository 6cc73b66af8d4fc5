"""What a starting broker does with what an earlier process left (docs/security.md R-07).

(a) a session record whose kernel still runs: reattach it; (b) a kernel of this broker
that no record claims (a labelled container): remove it; (c) a record whose kernel is
gone, or cannot be reattached: close it. Which kernels can outlive a broker is the
backend's business (:meth:`~interpreter.backends.Backend.can_reattach`): local kernels die
with their broker, so for the local backend every open record is closed.

Executions that were queued or running are marked ``unknown`` by the store, never re-run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from interpreter.backends import Backend
from interpreter.backends.base import Leftover
from interpreter.launch import SessionFactory
from interpreter.session import LiveSession
from interpreter.store import SessionRecord, Store, Writer

log = logging.getLogger(__name__)


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


async def recover(
    records: list[SessionRecord],
    *,
    backend: Backend,
    factory: SessionFactory,
    store: Store,
    writer: Writer,
    broker_id: str,
    adopt: Callable[[LiveSession], None],
) -> RecoveryReport:
    """Reattach, close and remove as above; ``adopt`` takes each reattached session
    (after it is attached and before its record says so)."""
    report = RecoveryReport()
    leftovers = await backend.leftovers(broker_id)
    claimed: set[str] = set()
    for record in records:
        if record.status == "closed":
            continue
        if backend.can_reattach(record.backend):
            match = _leftover_of(backend, record, leftovers)
            if match is not None and await _reattach(factory, record, adopt):
                claimed.add(match.id)
                await writer.run(partial(store.set_status, record.id, "idle"))
                report.reattached.append(record.id)
                continue
        await writer.run(partial(store.close_session, record.id, "broker_restarted"))
        report.closed.append(record.id)
    for leftover in leftovers:
        # Before this broker's pool starts, every unclaimed kernel is a leftover.
        if leftover.id not in claimed:
            await backend.remove(leftover)
            report.removed.append(leftover.id)
    for key, items in report.as_dict().items():
        if items:
            log.warning("startup recovery: %s %s", key, ", ".join(items))
    return report


def _leftover_of(
    backend: Backend, record: SessionRecord, leftovers: list[Leftover]
) -> Leftover | None:
    for leftover in leftovers:
        if backend.matches(leftover, record.id, record.provisioner or {}):
            return leftover
    return None


async def _reattach(
    factory: SessionFactory, record: SessionRecord, adopt: Callable[[LiveSession], None]
) -> bool:
    if not record.connection or not record.provisioner:
        return False
    session = await factory.restore(record)
    try:
        await session.attach(record.connection, record.provisioner)
    except Exception as exc:
        log.warning("could not reattach session %s: %s", record.id, exc)
        return False
    adopt(session)
    return True
