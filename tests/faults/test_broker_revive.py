"""A session whose kernel did not outlive the broker gets a fresh kernel, not a closure.

A restarted broker closed for good (``broker_restarted``, execute 409) every session it
could not reattach: the broker had stopped while the kernel was being replaced (a
requested restart, or the automatic one after a death), or the kernel died while the
broker was down. The kernel's state was gone (or going) either way, so the session now
gets a fresh kernel as after a death: same id, record, notebook and workspace; the
generation goes up, the notebook says the kernel was restarted, and the next cell reports
``state_lost``. It is still closed where a fresh kernel is not wanted (it expired).

The races are made deterministic: the kernel is killed or removed while the broker is
down, or the broker is SIGKILLed once the kernel being replaced is gone (and the test
checks that the record still named it, i.e. that the replacement was not finished).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import run
from tests.faults.conftest import (
    Broker,
    assert_one_final_record_each,
    note_after,
    notebook_cell,
    wait_for,
)

pytestmark = pytest.mark.docker

#: Runs until the test drops a file named ``stop`` into the workspace.
LOOP = (
    "import os, time\nwhile not os.path.exists('stop'):\n"
    "    print('tick', flush=True)\n    time.sleep(0.2)"
)


def _engine() -> Any:
    from interpreter.backends.docker.engine import docker_client

    return docker_client()


def _gone(container_id: str) -> bool:
    import docker.errors

    try:
        _engine().containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


def _containers_of(broker: Broker, sid: str) -> list[str]:
    from interpreter.backends.docker.engine import list_broker_containers

    return [c.id for c in list_broker_containers(broker.broker_id()) if c.session_id == sid]


def _settled(api: httpx.Client, sid: str) -> dict[str, Any]:
    info: dict[str, Any] = wait_for(
        lambda: (i := api.get(f"/v1/sessions/{sid}").json())["status"] != "starting" and i,
        what=f"session {sid} dealt with",
    )
    return info


def _assert_revived(api: httpx.Client, broker: Broker, sid: str, generation: int) -> None:
    """``sid`` runs on a fresh kernel: one generation on, its state gone and said to be,
    its workspace kept, and the notebook says the kernel was restarted."""
    info = _settled(api, sid)
    assert info["status"] == "idle" and info["closed_reason"] is None, info
    assert info["generation"] == generation + 1, info
    lost = run(api, sid, "kept")
    assert lost["status"] == "error" and lost["error"]["ename"] == "NameError", lost
    assert lost["state_lost"] is True and lost["generation"] == generation + 1
    again = run(api, sid, "open('file.txt').read()")
    assert again["outputs"][0]["data"]["text/plain"] == "'kept on disk'" and not again["state_lost"]
    cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
    notes = [c["source"] for c in cells if c["cell_type"] == "markdown"]
    assert any(
        n.startswith("**Kernel restarted** because its kernel was gone when the broker restarted")
        and f"(generation {generation + 1})" in n
        for n in notes
    ), notes
    assert len(_containers_of(broker, sid)) == 1  # the fresh kernel, nothing of the old one


def _session(api: httpx.Client) -> str:
    sid: str = api.post("/v1/sessions", json={}).json()["id"]
    ok = run(api, sid, "kept = 'yes'\nopen('file.txt', 'w').write('kept on disk')")
    assert ok["status"] == "ok", ok
    return sid


def test_kernels_removed_while_the_broker_was_down_are_replaced_unless_expired(
    brokers: Callable[..., Broker],
) -> None:
    broker = brokers("docker")
    with broker.client() as api:
        fresh, stale = _session(api), _session(api)
    broker.kill()
    for sid in (fresh, stale):
        _engine().containers.get(broker.container_id(sid)).remove(force=True)
    # The other one had been idle for two hours (past the 30 min idle timeout) when the
    # broker came back: it expired meanwhile, and gets no kernel.
    long_ago = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    with sqlite3.connect(broker.data_dir / "state.db") as db:
        db.execute("UPDATE sessions SET last_activity_at = ? WHERE id = ?", (long_ago, stale))
    broker = brokers("docker")
    with broker.client() as api:
        _assert_revived(api, broker, fresh, generation=1)
        expired = _settled(api, stale)
        assert (expired["status"], expired["closed_reason"]) == ("closed", "idle_timeout")
        refused = api.post(f"/v1/sessions/{stale}/execute", json={"code": "1"})
        assert refused.status_code == 410, refused.text
        assert _containers_of(broker, stale) == []
        assert not broker.runtime_dir(stale).exists()
        metrics = api.get("/metrics").text
        assert 'interp_kernel_restarts_total{reason="broker_restarted"} 1.0' in metrics
        assert 'interp_sessions_closed_total{reason="idle_timeout"} 1.0' in metrics
        assert api.delete(f"/v1/sessions/{fresh}").status_code == 204
        assert _containers_of(broker, fresh) == []


def test_a_kernel_that_died_during_a_sigterm_is_replaced_and_its_cell_stays_unknown(
    brokers: Callable[..., Broker],
) -> None:
    """SIGTERM keeps the kernels for the next broker; this one dies (its container stays,
    exited) before that broker starts."""
    broker = brokers("docker")
    with broker.client() as api:
        sid = _session(api)
        with api.stream(
            "POST",
            f"/v1/sessions/{sid}/execute",
            json={"code": LOOP, "on_disconnect": "continue"},
            headers={"Accept": "text/event-stream"},
        ) as resp:
            running = resp.headers["X-Execution-Id"]
            next(line for line in resp.iter_lines() if line.startswith("data:"))
    broker.stop()
    container = _engine().containers.get(broker.container_id(sid))
    container.kill()
    assert container.wait()["StatusCode"] != 0  # stopped, and still there
    broker = brokers("docker")
    with broker.client() as api:
        _assert_revived(api, broker, sid, generation=1)
        assert _gone(container.id)
        ex = api.get(f"/v1/sessions/{sid}/executions/{running}").json()
        assert (ex["status"], ex["reason"]) == ("unknown", "broker_restarted"), ex
        meta = notebook_cell(api, sid, running)["metadata"]["interp"]
        assert meta["status"] == "unknown" and meta["state_lost"] is True
        note = note_after(api, sid, running)
        assert "did not survive" in note and "goes on with a fresh kernel" in note, note
        assert "was closed" not in note
        assert_one_final_record_each(broker, sid, {running: "unknown"})
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204


@pytest.mark.parametrize("replacement", ["requested", "after_death"])
def test_a_broker_killed_while_it_replaced_a_kernel_gives_the_session_a_fresh_one(
    brokers: Callable[..., Broker], replacement: str
) -> None:
    broker = brokers("docker")
    with broker.client() as api:
        sid = _session(api)
    old = broker.container_id(sid)

    def replace() -> None:
        with broker.client() as api:
            try:
                if replacement == "requested":
                    api.post(f"/v1/sessions/{sid}/restart")
                else:
                    api.post(f"/v1/sessions/{sid}/execute", json={"code": "import os; os._exit(3)"})
            except httpx.TransportError:
                pass  # the broker is killed under it

    client = threading.Thread(target=replace, daemon=True)
    client.start()
    # The replacement removes the old kernel's container first, then starts a new one.
    wait_for(lambda: _gone(old), what="the old kernel to be removed")
    broker.kill()
    client.join(30)
    with broker.db() as db:
        (recorded,) = db.execute("SELECT provisioner_json FROM sessions WHERE id = ?", (sid,))
    assert json.loads(recorded[0])["container_id"] == old, "the replacement finished first"
    broker = brokers("docker")
    with broker.client() as api:
        _assert_revived(api, broker, sid, generation=1)
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
