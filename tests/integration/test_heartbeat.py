"""Liveness by heartbeat (issue 14 item 5): a frozen kernel (SIGSTOP, a paused container)
is noticed within seconds, reported as ``kernel_died`` / ``kernel_unresponsive`` with its
state lost, and replaced as after a death; a busy kernel is never taken for a frozen one."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, require_docker, run, start_server

#: Pings 0.5 s apart, four misses: a frozen kernel is lost after about 2 s.
HEARTBEAT = {"heartbeat_interval_s": 0.5, "heartbeat_misses": 4}
#: A generous bound for noticing (the cell's own timeout is far beyond it).
NOTICE_WITHIN_S = 30


def wait_for(predicate: Callable[[], Any], timeout: float = NOTICE_WITHIN_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.1)
    return value


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Server]:
    srv = start_server("local", tmp_path / "data", **HEARTBEAT)
    yield srv
    srv.thread.stop()


def assert_frozen_and_recovered(api: httpx.Client, sid: str, ex: dict[str, Any]) -> None:
    assert ex["status"] == "kernel_died", ex
    assert ex["reason"] == "kernel_unresponsive"
    assert ex["state_lost"] is True
    assert "kernel_unresponsive" in ex["error"]["evalue"]
    assert ex["duration_ms"] < NOTICE_WITHIN_S * 1000  # not the execution timeout (300 s)
    after = run(api, sid, "x = 6 * 7\nx")
    assert after["status"] == "ok", after
    assert after["outputs"][0]["data"]["text/plain"] == "42"
    assert after["generation"] == ex["generation"] + 1
    nb = api.get(f"/v1/sessions/{sid}/notebook").json()
    (cell,) = [
        c for c in nb["cells"] if c["metadata"].get("interp", {}).get("execution_id") == ex["id"]
    ]
    meta = cell["metadata"]["interp"]
    assert (meta["status"], meta["reason"]) == ("kernel_died", "kernel_unresponsive")


def test_sigstopped_kernel_mid_cell_is_noticed_and_replaced(local: Server) -> None:
    with local.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        run(api, sid, "x = 1")
        # The whole kernel process stops, its heartbeat thread with it.
        ex = run(api, sid, "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)", timeout_s=300)
        assert_frozen_and_recovered(api, sid, ex)
        metrics = api.get("/metrics").text
        assert 'interp_kernel_restarts_total{reason="kernel_unresponsive"} 1.0' in metrics


def test_sigstopped_idle_kernel_is_replaced_before_the_next_cell(local: Server) -> None:
    with local.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        pid = int(run(api, sid, "import os\nos.getpid()")["outputs"][0]["data"]["text/plain"])
        os.kill(pid, signal.SIGSTOP)
        try:
            # Noticed while idle: the session replaces its kernel on its own.
            wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["generation"] == 2)
        finally:
            resume(pid)
        after = run(api, sid, "1 + 1")
        assert after["status"] == "ok"
        assert after["state_lost"] is True  # it says the variables are gone
        assert after["generation"] == 2


def test_vanished_idle_kernel_is_replaced_without_a_call(local: Server) -> None:
    with local.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        pid = int(run(api, sid, "import os\nos.getpid()")["outputs"][0]["data"]["text/plain"])
        os.kill(pid, signal.SIGKILL)
        # Nobody runs anything: the heartbeat alone notices, and the kernel is replaced.
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["generation"] == 2)
        after = run(api, sid, "1 + 1")
        assert (after["status"], after["state_lost"]) == ("ok", True)


def resume(pid: int) -> None:
    """Never leave a stopped process behind, whatever the test saw."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)


def test_busy_kernel_is_not_taken_for_frozen(local: Server) -> None:
    with local.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        # 10 s is five times the heartbeat bound: only a kernel that answers while busy
        # survives it.
        ex = run(api, sid, "import time\ntime.sleep(10)\n'slept'", timeout_s=60)
        assert ex["status"] == "ok", ex
        assert ex["outputs"][0]["data"]["text/plain"] == "'slept'"
        assert ex["generation"] == 1
        assert api.get(f"/v1/sessions/{sid}").json()["generation"] == 1


def test_kernel_holding_the_gil_is_not_taken_for_frozen(local: Server) -> None:
    """A regex that backtracks for seconds holds the GIL in C all along; the kernel's
    heartbeat echo needs no GIL, so it still answers."""
    with local.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        # Longer and longer matches until one holds the GIL for over 3 s (the bound is 2 s).
        code = (
            "import re, time\nn = 18\nwhile True:\n"
            "    t = time.time()\n    re.match(r'(a+)+$', 'a' * n + 'b')\n"
            "    held = time.time() - t\n    if held > 3:\n        break\n    n += 1\nheld"
        )
        ex = run(api, sid, code, timeout_s=120)
        assert ex["status"] == "ok", ex
        held = float(ex["outputs"][0]["data"]["text/plain"])
        assert held > 3
        assert api.get(f"/v1/sessions/{sid}").json()["generation"] == 1


@pytest.mark.docker
def test_paused_container_is_noticed_and_replaced(tmp_path: Path) -> None:
    require_docker()
    from interpreter.backends.docker.engine import docker_client

    srv = start_server("docker", tmp_path / "data", pool_size=0, **HEARTBEAT)
    result: dict[str, Any] = {}
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            assert run(api, sid, "x = 1")["status"] == "ok"
            record = srv.thread.broker.store.get_session(sid)
            assert record is not None and record.provisioner is not None
            container_id = record.provisioner["container_id"]

            def long_cell() -> None:
                with srv.client() as other:
                    result.update(run(other, sid, "import time\ntime.sleep(600)", timeout_s=900))

            worker = threading.Thread(target=long_cell)
            worker.start()
            wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "busy")
            docker_client().api.pause(container_id)
            worker.join(NOTICE_WITHIN_S + 60)
            assert not worker.is_alive(), "the paused kernel was not noticed"
            assert_frozen_and_recovered(api, sid, result)
            # The fresh container, paused while idle, is replaced without a call.
            record = srv.thread.broker.store.get_session(sid)
            assert record is not None and record.provisioner is not None
            fresh = record.provisioner["container_id"]
            assert fresh != container_id
            docker_client().api.pause(fresh)
            wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["generation"] == 3)
            after = run(api, sid, "1 + 1")
            assert (after["status"], after["state_lost"]) == ("ok", True)
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    finally:
        srv.thread.stop()
