"""The fault suite's parts: brokers as subprocesses (``interp serve``), read through the
HTTP API and, for the checks only, their SQLite file; the truth every case asserts.

Each case breaks one thing (a kernel, a container, the broker, a notebook file) while a
canary session of the same broker works, then checks three things: every execution of the
broken session has exactly one final record that says what happened, the session recovers
(or is closed with nothing left behind), and the canary was not disturbed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from interpreter.ids import broker_id_for
from interpreter.models import TERMINAL_STATUSES
from tests.conftest import KEY, require_docker, run, runtime_dir_of, spawn_serve

#: Heartbeat pings 0.5 s apart, four misses: a frozen or vanished kernel is lost in ~2 s.
FAST_HEARTBEAT = ("--heartbeat-interval-s", "0.5", "--heartbeat-misses", "4")


def wait_for(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll ``predicate`` until it is truthy (its value), failing after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)
    return value


@dataclass
class Broker:
    """One ``interp serve`` process over ``data_dir`` (restartable over the same dir)."""

    backend: str
    data_dir: Path
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen[str] | None = None
    url: str = ""
    log: list[str] = field(default_factory=list)

    def start(self) -> Broker:
        args = ("--backend", self.backend, "--data-dir", str(self.data_dir), "--api-key", KEY)
        self.proc, self.url = spawn_serve(*args, "--pool-size", "0", *self.extra, log=self.log)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the broker (its kernels, where they can, live on)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def client(self, timeout: float = 120, key: str = KEY) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )

    def logged(self, text: str) -> bool:
        return any(text in line for line in list(self.log))

    # ------------------------------------------------------------ the record (read only)

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.data_dir / 'state.db'}?mode=ro", uri=True)

    def executions(self, sid: str) -> list[tuple[str, str]]:
        """(id, status) of every execution row of ``sid``, in order."""
        with self.db() as db:
            rows = db.execute(
                "SELECT id, status FROM executions WHERE session_id = ? ORDER BY seq", (sid,)
            ).fetchall()
        return [(str(i), str(s)) for i, s in rows]

    def container_id(self, sid: str) -> str:
        with self.db() as db:
            (prov,) = db.execute(
                "SELECT provisioner_json FROM sessions WHERE id = ?", (sid,)
            ).fetchone()
        return str(json.loads(prov)["container_id"])

    def broker_id(self) -> str:
        return broker_id_for(self.data_dir)

    def session_dir(self, sid: str) -> Path:
        return self.data_dir / "sessions" / sid

    def runtime_dir(self, sid: str) -> Path:
        return runtime_dir_of(self.data_dir, sid)


def assert_one_final_record_each(broker: Broker, sid: str, returned: dict[str, str]) -> None:
    """Every execution of ``sid`` has exactly one row, final, and the status the API gave.

    The broker answers before its final row is written (the write is queued behind the
    answer, for latency), so the rows get a few seconds to settle."""
    wait_for(
        lambda: all(status in TERMINAL_STATUSES for _, status in broker.executions(sid)),
        10,
        "final rows written",
    )
    rows = broker.executions(sid)
    ids = [i for i, _ in rows]
    assert len(ids) == len(set(ids)), f"duplicate execution rows: {rows}"
    assert all(status in TERMINAL_STATUSES for _, status in rows), rows
    stored = dict(rows)
    for ex_id, status in returned.items():
        assert stored[ex_id] == status, (ex_id, stored[ex_id], status)


def notebook_cell(api: httpx.Client, sid: str, ex_id: str) -> dict[str, Any]:
    cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
    found = [c for c in cells if c["metadata"].get("interp", {}).get("execution_id") == ex_id]
    assert len(found) == 1, f"{len(found)} notebook cells for {ex_id}"
    cell: dict[str, Any] = found[0]
    return cell


def note_after(api: httpx.Client, sid: str, ex_id: str) -> str:
    """The markdown note right after the notebook cell of ``ex_id`` (what a reader sees)."""
    cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
    at = [
        i
        for i, c in enumerate(cells)
        if c["metadata"].get("interp", {}).get("execution_id") == ex_id
    ]
    assert len(at) == 1 and at[0] + 1 < len(cells), f"no cell after {ex_id}"
    after = cells[at[0] + 1]
    assert after["cell_type"] == "markdown", after
    text = after["source"]
    assert text.startswith("**Broker restarted**"), text
    return str(text)


class Canary:
    """A session of the same broker that must not notice the fault next door."""

    def __init__(self, api: httpx.Client) -> None:
        self.api = api
        self.sid = api.post("/v1/sessions", json={}).json()["id"]
        ex = run(api, self.sid, "canary = 'alive'")
        assert ex["status"] == "ok"
        self.generation = ex["generation"]

    def check(self) -> None:
        started = time.monotonic()
        ex = run(self.api, self.sid, "canary")
        assert ex["status"] == "ok", ex
        assert ex["outputs"][0]["data"]["text/plain"] == "'alive'"
        assert ex["generation"] == self.generation and not ex["state_lost"]
        assert time.monotonic() - started < 10
        assert self.api.get(f"/v1/sessions/{self.sid}").json()["status"] == "idle"


def run_in_thread(api_factory: Callable[[], httpx.Client], sid: str, code: str) -> Any:
    """Start ``code`` in ``sid`` from a thread; returns (thread, result dict)."""
    result: dict[str, Any] = {}

    def go() -> None:
        with api_factory() as api:
            result.update(run(api, sid, code, timeout_s=600))

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    return worker, result


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data directory; Docker containers labelled with its broker id are removed after."""
    path = tmp_path / "data"
    yield path
    from interpreter.backends.docker.engine import (
        docker_available,
        list_broker_containers,
        remove_container,
    )

    if docker_available():
        for container in list_broker_containers(broker_id_for(path)):
            remove_container(container.id)
            if container.runtime_dir:  # outside the data directory (H-30)
                shutil.rmtree(container.runtime_dir, ignore_errors=True)
    # Kept sessions keep their workspace quota mounted (for the next broker): release them.
    from interpreter import quota

    quota.sweep(path / "sessions", set())


@pytest.fixture
def brokers(data_dir: Path) -> Iterator[Callable[..., Broker]]:
    """Factory: start a broker over the test's data directory; all are stopped after."""
    started: list[Broker] = []

    def start(backend: str, *extra: str) -> Broker:
        if backend == "docker":
            require_docker()
        broker = Broker(backend, data_dir, extra).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()
