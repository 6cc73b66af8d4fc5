"""A Docker engine that stops answering while a session's kernel is dead.

The broker talks to the engine through a proxy the test can cut (the engine itself keeps
running, for the rest of the machine). Found by an outside operations tester: each cell
sent during the outage counted as a kernel crash, came back ``kernel_died`` with no word
of why, and wrote a note that the kernel "died while no cell ran"; the fifth closed the
session ``restart_limit``, blamed on the user's code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interpreter import quota
from interpreter.backends.docker.engine import list_broker_containers, remove_container
from interpreter.ids import broker_id_for
from tests.conftest import KEY, require_docker, run, spawn_serve, stop_serve

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class EngineProxy:
    """A unix socket that forwards each connection to the real engine, until cut."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        self._server: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        self.path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        """Refuse new connections and close the open ones: the engine does not answer."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self.path.unlink(missing_ok=True)
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            engine.connect(self.engine.removeprefix("unix://"))
            with self._lock:
                self._conns += [client, engine]
            for src, dst in ((client, engine), (engine, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[EngineProxy]:
    require_docker()
    if not os.environ.get("DOCKER_HOST", "unix://").startswith("unix://"):
        pytest.fail("the engine proxy forwards to a unix socket; DOCKER_HOST is not one")
    p = EngineProxy(tmp_path / "engine.sock")
    p.up()
    yield p
    p.cut()


def _status(api: httpx.Client, sid: str) -> str:
    status: str = api.get(f"/v1/sessions/{sid}").json()["status"]
    return status


def test_an_engine_outage_leaves_the_session_open_and_says_why_cells_did_not_run(
    proxy: EngineProxy, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    env = {**os.environ, "DOCKER_HOST": f"unix://{proxy.path}"}
    proc, url = spawn_serve(
        "--backend", "docker", "--data-dir", str(data), "--api-key", KEY,
        "--pool-size", "0", "--restart-limit", "2", "--heartbeat-interval-s", "1",
        env=env,
    )  # fmt: skip
    try:
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120
        ) as api:
            sid = api.post("/v1/sessions").json()["id"]
            run(api, sid, "k = 1")
            proxy.cut()
            for container in list_broker_containers(broker_id_for(data)):
                remove_container(container.id)
            deadline = time.monotonic() + 90
            while _status(api, sid) != "dead":
                assert time.monotonic() < deadline, "the kernel's death was not seen"
                time.sleep(0.5)
            # More cells than the restart limit: none closes the session.
            for n in range(4):
                ex: dict[str, Any] = run(api, sid, f"print({n})")
                assert (ex["status"], ex["reason"]) == ("cancelled", "backend_unavailable"), ex
                assert ex["error"]["ename"] == "BackendUnavailable"
                assert "the Docker engine does not answer" in ex["error"]["evalue"]
                assert "Send the code again once the engine answers" in ex["error"]["evalue"]
            assert _status(api, sid) == "dead"
            proxy.up()
            back = run(api, sid, "k")
            assert (back["status"], back["state_lost"]) == ("error", True), back
            assert run(api, sid, "print('again')")["stdout"] == "again\n"
            cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
            notes = [c["source"] for c in cells if c["cell_type"] == "markdown"]
            assert sum("the Docker engine did not answer" in n for n in notes) == 1, notes
            assert not any("no new kernel could be started" in n for n in notes), notes
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    finally:
        stop_serve(proc)
        for container in list_broker_containers(broker_id_for(data)):
            remove_container(container.id)
            if container.runtime_dir:  # outside the data directory (H-30)
                shutil.rmtree(container.runtime_dir, ignore_errors=True)
        # A session left open keeps its workspace quota mounted: released, so that
        # pytest can remove the directory.
        quota.sweep(data / "sessions", set())
