"""What a starting broker does with what the previous one left (security.md R-07).

(a) a session record whose kernel still runs: reattach; (b) a labelled container with no
live record: remove it; (c) a record whose kernel is gone: close it. Local kernels die with
their broker, so for the local backend every open record is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from interpreter.models import CreateSessionRequest
from interpreter.notebook import NOTEBOOK_NAME, NotebookRecorder

if TYPE_CHECKING:
    from interpreter.broker import SessionBroker

log = logging.getLogger(__name__)


async def reconcile(broker: SessionBroker) -> dict[str, list[str]]:
    """Returns ``{"reattached": [...], "closed": [...], "removed_containers": [...]}``."""
    report: dict[str, list[str]] = {"reattached": [], "closed": [], "removed_containers": []}
    rows = await asyncio.to_thread(broker.store.list_sessions)
    open_rows = [r for r in rows if r["status"] != "closed"]
    containers: list[Any] = []
    if broker.backend == "docker":
        from interpreter.backends import docker as docker_backend

        containers = await asyncio.to_thread(
            docker_backend.list_broker_containers, broker.broker_id
        )
    claimed: set[str] = set()
    for row in open_rows:
        if row["backend"] == "docker" and broker.backend == "docker":
            match = _container_for(row, containers)
            if match is not None and await _reattach(broker, row):
                claimed.add(match.id)
                report["reattached"].append(row["id"])
                continue
        await broker.write(
            partial(
                broker.store.update_session,
                row["id"],
                status="closed",
                closed_reason="broker_restarted",
            )
        )
        report["closed"].append(row["id"])
    if broker.backend == "docker":
        from interpreter.backends import docker as docker_backend

        for container in containers:
            # Before this broker's pool starts, every unclaimed container is a leftover.
            if container.id not in claimed:
                await asyncio.to_thread(docker_backend.remove_container, container.id)
                report["removed_containers"].append(container.id)
    for key, items in report.items():
        if items:
            log.warning("startup reconcile: %s %s", key, ", ".join(items))
    return report


def _container_for(row: dict[str, Any], containers: list[Any]) -> Any:
    # Pooled containers keep their pool labels, so match by the id the record holds.
    recorded = json.dumps(row.get("provisioner") or {})
    for container in containers:
        if container.id in recorded or getattr(container, "session_id", None) == row["id"]:
            return container
    return None


async def _reattach(broker: SessionBroker, row: dict[str, Any]) -> bool:
    from interpreter.session import LiveSession

    if not row.get("connection") or not row.get("provisioner"):
        return False
    req = CreateSessionRequest(env=row.get("env") or {})
    limits = row.get("limits") or {}
    options = broker.launch_options(row["id"], row["owner"], req)
    options.memory_mb = int(limits.get("memory_mb", options.memory_mb))
    options.cpus = float(limits.get("cpus", options.cpus))
    options.pids = int(limits.get("pids", options.pids))
    path = options.session_dir / NOTEBOOK_NAME
    try:
        notebook = await asyncio.to_thread(NotebookRecorder.load, path)
    except Exception:
        notebook = NotebookRecorder.create(
            path, session_id=row["id"], kernel_name=broker.kernel_name, backend=broker.backend
        )
    session = LiveSession(
        row=row,
        settings=broker.settings,
        store=broker.store,
        options=options,
        kernel_name=broker.kernel_name,
        notebook=notebook,
        metrics=broker.metrics,
        writer=broker.write,
        writer_nowait=broker.write_nowait,
    )
    broker.watch(session)
    try:
        await session.attach(row["connection"], row["provisioner"])
    except Exception as exc:
        log.warning("could not reattach session %s: %s", row["id"], exc)
        return False
    broker.live[row["id"]] = session
    await broker.write(lambda: broker.store.update_session(row["id"], status="idle"))
    return True
