"""The Docker engine calls the backend builds on, against a real engine."""

from __future__ import annotations

import secrets
import threading

import docker.errors
import pytest

from interpreter.backends.docker.config import LABEL_BROKER
from interpreter.backends.docker.engine import docker_client, remove_container
from tests.integration.docker_lab import IMAGE, require_docker

pytestmark = [pytest.mark.docker]

REMOVERS = 6


def test_concurrent_removals_each_return_only_once_the_container_is_gone() -> None:
    """remove_container is synchronous even when another call is already removing the
    container: the engine answers that one 409, and it waits instead of returning at once."""
    require_docker()
    client = docker_client()
    rounds = 3
    early: list[str] = []
    for _ in range(rounds):
        container = client.containers.run(
            IMAGE,
            entrypoint=["sleep", "600"],
            detach=True,
            network_mode="none",
            labels={LABEL_BROKER: f"test-engine-{secrets.token_hex(4)}"},
        )
        start = threading.Barrier(REMOVERS)

        def removal(cid: str = container.id, start: threading.Barrier = start) -> None:
            start.wait()
            remove_container(cid)
            try:
                state = client.api.inspect_container(cid)["State"]
            except docker.errors.NotFound:
                return
            early.append(f"returned with the container still there: {state}")

        threads = [threading.Thread(target=removal) for _ in range(REMOVERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
    assert early == []
