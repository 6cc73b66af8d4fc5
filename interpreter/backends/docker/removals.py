"""Kernel containers to remove once the Docker engine answers again.

A session deleted while the engine did not answer (restarted, say) was told 204 and its
container kept running, under no session, until the orphan watchdog ended it (30 min by
default) or the broker restarted. Its id now waits here, and the broker's periodic
housekeeping (:meth:`DockerBackend.tidy`, every ``cull_interval_s``) removes it once the
engine is back; so does the backend's close. Per process: container ids are unique, so
brokers in one process may share the list.
"""

from __future__ import annotations

import logging

from interpreter.backends.docker.engine import call_docker, remove
from interpreter.errors import InterpreterError

log = logging.getLogger(__name__)

_PENDING: set[str] = set()


def later(container_id: str) -> None:
    """Remove ``container_id`` once the engine answers (:func:`retry`)."""
    _PENDING.add(container_id)


def pending() -> frozenset[str]:
    return frozenset(_PENDING)


async def retry() -> list[str]:
    """Remove what waits; stops at the first failure (the engine is still away). Returns
    the ids removed."""
    done: list[str] = []
    for container_id in sorted(_PENDING):
        try:
            await call_docker("remove a kernel container", remove, container_id)
        except InterpreterError:
            break
        _PENDING.discard(container_id)
        done.append(container_id)
    if done:
        log.info(
            "removed %d kernel container%s of sessions closed while the Docker engine did "
            "not answer",
            len(done),
            "" if len(done) == 1 else "s",
        )
    return done
