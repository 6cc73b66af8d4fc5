"""``/healthz`` says when the backend cannot start kernels: during a Docker engine outage
every creation was a 503 while health answered ``ok``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, require_docker, spawn_serve
from tests.conftest import test_settings as settings_for
from tests.faults.conftest import wait_for


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


class EngineRelay:
    """The Docker engine's socket seen through a relay of our own, which can go away:
    an engine outage for one broker only (the engine itself is shared)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.Server | None = None
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def up(self) -> None:
        engine = self.engine.removeprefix("unix://")

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await reader.read(1 << 16):
                    writer.write(data)
                    await writer.drain()
            writer.close()

        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_unix_connection(engine)
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        async def serve() -> asyncio.Server:
            return await asyncio.start_unix_server(relay, str(self.path))

        self.server = asyncio.run_coroutine_threadsafe(serve(), self.loop).result(10)

    def down(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            self.loop.call_soon_threadsafe(server.close)
        wait_for(lambda: not self.path.exists() or self.path.unlink() or True)


def test_during_an_engine_outage_health_and_creation_say_so(tmp_path: Path) -> None:
    """An engine that stops answering (restarted, say): creations were 503 "check the
    service logs" and health said ok. Now health says ``backend_reachable: false`` and a
    creation that fails says the engine does not answer; both recover with it."""
    require_docker()
    relay = EngineRelay(tmp_path / "engine.sock")
    relay.up()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
    env["DOCKER_HOST"] = f"unix://{relay.path}"
    proc, url = spawn_serve(
        "--backend", "docker", "--data-dir", str(tmp_path / "data"), "--pool-size", "0",
        "--no-keep-containers-on-shutdown", env=env,
    )  # fmt: skip
    try:
        with httpx.Client(base_url=url, timeout=120) as api:
            assert api.get("/healthz").json()["backend_reachable"] is True
            relay.down()
            refused = api.post("/v1/sessions", json={})
            assert refused.status_code == 503, refused.text
            assert "the Docker engine does not answer" in refused.json()["error"]["message"]
            health = api.get("/healthz").json()
            assert (health["status"], health["backend_reachable"]) == ("degraded", False)
            relay.up()
            wait_for(lambda: api.get("/healthz").json()["backend_reachable"], what="engine back")
            sid = api.post("/v1/sessions", json={}).json()["id"]
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    finally:
        proc.terminate()
        proc.wait(60)
        relay.down()


def test_a_session_deleted_during_an_engine_outage_loses_its_container_once_it_is_back(
    tmp_path: Path,
) -> None:
    """Deleted while the engine did not answer, a session was told 204 and its container
    kept running under no session (an outside tester's leak); it now goes when the engine
    answers again."""
    require_docker()
    import docker

    relay = EngineRelay(tmp_path / "engine.sock")
    relay.up()
    log: list[str] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
    env["DOCKER_HOST"] = f"unix://{relay.path}"
    proc, url = spawn_serve(
        "--backend", "docker", "--data-dir", str(tmp_path / "data"), "--pool-size", "0",
        "--cull-interval-s", "0.5", "--no-keep-containers-on-shutdown", env=env, log=log,
    )  # fmt: skip
    engine = docker.from_env()
    try:
        with httpx.Client(base_url=url, timeout=120) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            [container] = engine.containers.list(filters={"name": sid})
            relay.down()
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            assert engine.containers.get(container.id).status == "running"
            relay.up()

            def removed() -> bool:
                try:
                    engine.containers.get(container.id)
                except docker.errors.NotFound:
                    return True
                return False

            wait_for(
                removed, what="the container of the deleted session to go: " + "\n".join(log[-30:])
            )
    finally:
        proc.terminate()
        proc.wait(60)
        relay.down()
        engine.close()
