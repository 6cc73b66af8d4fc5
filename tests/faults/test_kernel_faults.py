"""Kernels killed under a running broker (issue 14 item 7): ``kill -9`` of the kernel process
(local backend: the kernel's pid; Docker: the container's main process, from the host),
``docker kill`` and ``docker rm -f`` of the container, each mid-cell and while idle.

Every case asserts the truth of each execution's one final record (API, SQLite, notebook),
that the session recovers on a fresh kernel with its state honestly reported lost, and that
a canary session of the same broker is undisturbed. A frozen kernel (SIGSTOP, a paused
container) is covered by ``tests/integration/test_heartbeat.py``.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import run
from tests.faults.conftest import (
    FAST_HEARTBEAT,
    Broker,
    Canary,
    assert_one_final_record_each,
    notebook_cell,
    run_in_thread,
    wait_for,
)

#: A fault must end the cell this fast (the cell's own timeout is 600 s).
REPORTED_WITHIN_S = 30
LONG_CELL = "print('started', flush=True)\nimport time\ntime.sleep(300)"

#: A fault: (broker, session id, the kernel's pid as the kernel sees it).
Fault = Callable[[Broker, str, int], None]


def kill9_local_kernel(broker: Broker, sid: str, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def _container(broker: Broker, sid: str) -> object:
    from interpreter.backends.docker.engine import docker_client

    return docker_client().containers.get(broker.container_id(sid))


def kill9_container_process(broker: Broker, sid: str, pid: int) -> None:
    """``kill -9`` from the host of the container's main process (the kernel)."""
    container = _container(broker, sid)
    pid = int(container.attrs["State"]["Pid"])  # type: ignore[attr-defined]
    assert pid > 0
    os.kill(pid, signal.SIGKILL)


def docker_kill(broker: Broker, sid: str, pid: int) -> None:
    _container(broker, sid).kill()  # type: ignore[attr-defined]


def docker_rm_f(broker: Broker, sid: str, pid: int) -> None:
    _container(broker, sid).remove(force=True)  # type: ignore[attr-defined]


#: name: (backend, fault, the reason the dead cell must give).
FAULTS: dict[str, tuple[str, Fault, str]] = {
    "local-kill9": ("local", kill9_local_kernel, "signal:9"),
    "docker-kill9": ("docker", kill9_container_process, "signal:9"),
    "docker-kill": ("docker", docker_kill, "signal:9"),
    "docker-rm-f": ("docker", docker_rm_f, "container_gone"),
}


#: The cases, Docker ones marked as such.
CASES = [
    pytest.param(name, marks=[pytest.mark.docker] if backend == "docker" else [])
    for name, (backend, _, _) in FAULTS.items()
]


def _session(api: httpx.Client) -> tuple[str, int, dict[str, str]]:
    """A session with state; its kernel's pid (in its own pid namespace for Docker)."""
    sid: str = api.post("/v1/sessions", json={}).json()["id"]
    first = run(api, sid, "kept = 1\nimport os\nos.getpid()")
    assert first["status"] == "ok"
    return sid, int(first["outputs"][0]["data"]["text/plain"]), {first["id"]: "ok"}


def _recovered(
    broker: Broker, api: httpx.Client, sid: str, generation: int, returned: dict[str, str]
) -> dict[str, Any]:
    """The session runs code on a fresh kernel; the lost state is reported, not hidden."""
    after = run(api, sid, "kept")
    assert after["status"] == "error" and after["error"]["ename"] == "NameError", after
    assert after["generation"] == generation + 1
    returned[after["id"]] = "error"
    again = run(api, sid, "6 * 7")
    assert again["status"] == "ok" and again["outputs"][0]["data"]["text/plain"] == "42"
    returned[again["id"]] = "ok"
    assert_one_final_record_each(broker, sid, returned)
    assert api.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
    return after


def _deleted_leaves_nothing(broker: Broker, api: httpx.Client, sid: str) -> None:
    assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    assert not broker.runtime_dir(sid).exists()
    if broker.backend == "docker":
        from interpreter.backends.docker.engine import list_broker_containers

        left = [c for c in list_broker_containers(broker.broker_id()) if sid in c.name]
        assert not left, left


@pytest.mark.parametrize("name", CASES)
def test_kernel_killed_mid_cell(brokers: Callable[..., Broker], name: str) -> None:
    backend, fault, reason = FAULTS[name]
    broker = brokers(backend, *FAST_HEARTBEAT)
    with broker.client() as api:
        canary = Canary(api)
        sid, pid, returned = _session(api)
        generation = api.get(f"/v1/sessions/{sid}").json()["generation"]
        worker, result = run_in_thread(broker.client, sid, LONG_CELL)
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "busy")
        fault(broker, sid, pid)
        worker.join(REPORTED_WITHIN_S + 30)
        assert not worker.is_alive(), "the dead kernel's cell never ended"
        assert result["status"] == "kernel_died", result
        assert result["state_lost"] is True and result["reason"] == reason, result
        assert result["duration_ms"] < REPORTED_WITHIN_S * 1000
        returned[result["id"]] = "kernel_died"
        meta = notebook_cell(api, sid, result["id"])["metadata"]["interp"]
        assert meta["status"] == "kernel_died" and meta["state_lost"] is True
        canary.check()
        _recovered(broker, api, sid, generation, returned)
        canary.check()
        _deleted_leaves_nothing(broker, api, sid)


@pytest.mark.parametrize("name", CASES)
def test_kernel_killed_while_idle(brokers: Callable[..., Broker], name: str) -> None:
    backend, fault, _ = FAULTS[name]
    broker = brokers(backend, *FAST_HEARTBEAT)
    with broker.client() as api:
        canary = Canary(api)
        sid, pid, returned = _session(api)
        generation = api.get(f"/v1/sessions/{sid}").json()["generation"]
        fault(broker, sid, pid)
        # Noticed without a call (heartbeat / container state) and replaced.
        wait_for(
            lambda: api.get(f"/v1/sessions/{sid}").json()["generation"] == generation + 1,
            REPORTED_WITHIN_S,
            "the idle kernel's death to be noticed",
        )
        canary.check()
        after = _recovered(broker, api, sid, generation, returned)
        # Nothing ran when the kernel died, so the next cell is the one told of the loss.
        assert after["state_lost"] is True, after
        _deleted_leaves_nothing(broker, api, sid)
