"""Docker sessions survive a broker restart; leftovers are reconciled."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from interpreter.backends.docker.engine import list_broker_containers, remove_container
from tests.conftest import KEY, REPO, require_docker, run, spawn_serve

pytestmark = pytest.mark.docker

Start = Callable[[], tuple[subprocess.Popen[str], str]]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    require_docker()
    path = tmp_path / "data"
    yield path
    # Whatever a test left must not outlive it.
    import hashlib

    broker_id = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    for container in list_broker_containers(broker_id):
        remove_container(container.id)


@pytest.fixture
def broker(data_dir: Path) -> Iterator[Start]:
    procs: list[subprocess.Popen[str]] = []

    def start() -> tuple[subprocess.Popen[str], str]:
        proc, url = spawn_serve(
            "--backend",
            "docker",
            "--data-dir",
            str(data_dir),
            "--api-key",
            KEY,
            "--pool-size",
            "0",
        )
        procs.append(proc)
        return proc, url

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120)


def test_sigterm_then_restart_keeps_variables(broker: Start) -> None:
    proc, url = broker()
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        run(api, sid, "x = 'still here'")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    _, url = broker()
    with client(url) as api:
        assert api.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
        assert run(api, sid, "x")["outputs"][0]["data"]["text/plain"] == "'still here'"
        # A reattached kernel can be restarted like any other.
        assert api.post(f"/v1/sessions/{sid}/restart").status_code == 200
        assert run(api, sid, "x")["error"]["ename"] == "NameError"
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204


def test_sigkill_mid_execution_reattaches_and_reports_unknown(broker: Start) -> None:
    proc, url = broker()
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        run(api, sid, "x = 5\nruns = 0")
        with api.stream(
            "POST",
            f"/v1/sessions/{sid}/execute",
            headers={"Accept": "text/event-stream"},
            json={"code": "runs += 1\nprint('go', flush=True)\nimport time\ntime.sleep(3)"},
        ) as resp:
            execution_id = resp.headers["X-Execution-Id"]
            next(line for line in resp.iter_lines() if "go" in line)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    _, url = broker()
    with client(url) as api:
        resp = api.get(f"/v1/sessions/{sid}/executions/{execution_id}")
        assert resp.status_code == 200, resp.text
        ex = resp.json()
        assert ex["status"] == "unknown"
        assert run(api, sid, "x")["outputs"][0]["data"]["text/plain"] == "5"
        # The interrupted code ran once and was never run again.
        assert run(api, sid, "runs")["outputs"][0]["data"]["text/plain"] == "1"
        api.delete(f"/v1/sessions/{sid}")


def test_orphans_and_lost_containers_are_cleaned_up(broker: Start, data_dir: Path) -> None:
    proc, url = broker()
    with client(url) as api:
        orphan = api.post("/v1/sessions").json()["id"]
        lost = api.post("/v1/sessions").json()["id"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    db = sqlite3.connect(data_dir / "state.db")
    prov = dict(db.execute("SELECT id, provisioner_json FROM sessions").fetchall())
    # A container whose record vanished, and a record whose container vanished.
    db.execute("DELETE FROM sessions WHERE id = ?", (orphan,))
    db.commit()
    db.close()
    import hashlib
    import json

    broker_id = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    by_id = {c.id: c for c in list_broker_containers(broker_id)}
    lost_container = next(cid for cid in by_id if cid in json.dumps(json.loads(prov[lost])))
    orphan_container = next(cid for cid in by_id if cid in json.dumps(json.loads(prov[orphan])))
    remove_container(lost_container)
    _, url = broker()
    with client(url) as api:
        assert api.get(f"/v1/sessions/{lost}").json()["status"] == "closed"
    remaining = {c.id for c in list_broker_containers(broker_id)}
    assert orphan_container not in remaining


def test_missing_image_says_how_to_build_it(tmp_path: Path) -> None:
    require_docker()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "interpreter",
            "serve",
            "--backend",
            "docker",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "INTERP_DOCKER_IMAGE": "interp-kernel:does-not-exist"},
    )
    assert out.returncode == 2
    assert "interp images build" in out.stderr and "does-not-exist" in out.stderr
    assert "Traceback" not in out.stderr
