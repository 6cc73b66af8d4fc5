"""``/healthz`` says when the backend cannot start kernels: during a Docker engine outage
every creation was a 503 while health answered ``ok``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, require_docker
from tests.conftest import test_settings as settings_for


def test_health_names_the_backend_reachable(server: Server) -> None:
    body = httpx.get(f"{server.url}/healthz").json()
    assert body["backend_reachable"] is True and body["status"] == "ok", body


def test_an_engine_that_does_not_answer_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_docker()
    from interpreter.backends.docker.backend import DockerBackend

    backend = DockerBackend(settings_for(tmp_path))
    assert asyncio.run(backend.reachable()) is True
    # The engine goes away (here: for this process only); the answer is cached a while.
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert asyncio.run(backend.reachable()) is True
    backend._reach = (backend._reach[0] - 60, True)  # the cached answer is old
    assert asyncio.run(backend.reachable()) is False
