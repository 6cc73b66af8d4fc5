"""The broker SIGKILLed with long cells running, and started again (issue 14 items 1 and 7).

Extends ``tests/integration/test_docker_restart.py::
test_broker_killed_with_busy_sessions_serves_at_once_and_keeps_them`` with what it does not
check: ``/healthz`` answers within seconds while the cells still run and a session is
still reattaching; that session's requests get 503 ``session_reattaching`` with
``Retry-After``; a session whose container was removed while the broker was down gets a
fresh kernel (its state lost, said so) and its in-flight cell is ``unknown`` in SQLite and
in its notebook; the other sessions are unaffected.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.conftest import run
from tests.faults.conftest import (
    Broker,
    Canary,
    assert_one_final_record_each,
    note_after,
    notebook_cell,
    wait_for,
)

pytestmark = pytest.mark.docker

#: Runs until the test drops a file named ``stop`` into the session's workspace (bound
#: into the container), so "still running after the restart" holds however slow the host.
LOOP = (
    "import os, time\ni = 0\nwhile not os.path.exists('stop'):\n"
    "    print(i, flush=True)\n    i += 1\n    time.sleep(0.2)\nprint('stopped', flush=True)"
)
#: How soon a restarted broker must answer /healthz, whatever its kernels do.
HEALTHZ_WITHIN_S = 10


#: Prints 1 MB blocks until the file ``stop`` exists: past a 1 MiB in-memory limit, spills.
FLOOD = (
    "import os, sys\nwhile not os.path.exists('stop'):\n"
    "    sys.stdout.write(('y' * 99 + '\\n') * 10_000)\n    sys.stdout.flush()\n"
)


def _start_long_cell(api: httpx.Client, sid: str, code: str = LOOP) -> str:
    """Start ``code`` in ``sid`` and leave once it printed (the cell goes on: continue)."""
    with api.stream(
        "POST",
        f"/v1/sessions/{sid}/execute",
        json={"code": code, "on_disconnect": "continue"},
        headers={"Accept": "text/event-stream"},
    ) as resp:
        ex_id = resp.headers["X-Execution-Id"]
        next(line for line in resp.iter_lines() if line.startswith("data:"))
    return ex_id


def _session(api: httpx.Client) -> tuple[str, str]:
    sid: str = api.post("/v1/sessions", json={}).json()["id"]
    first = run(api, sid, "kept = 'yes'")
    assert first["status"] == "ok"
    return sid, first["id"]


def test_broker_sigkilled_with_two_long_cells_and_a_lost_container(
    brokers: Callable[..., Broker],
) -> None:
    from interpreter.backends.docker.engine import docker_client, list_broker_containers

    broker = brokers("docker")
    with broker.client() as api:
        canary = Canary(api)
        (busy, busy_first), (lost, lost_first), (frozen, frozen_first) = (
            _session(api) for _ in range(3)
        )
        busy_ex, lost_ex = _start_long_cell(api, busy), _start_long_cell(api, lost)
    broker.kill()
    engine = docker_client()
    engine.containers.get(broker.container_id(lost)).remove(force=True)
    # A kernel that cannot answer while the broker starts keeps its session reattaching.
    frozen_container = engine.containers.get(broker.container_id(frozen))
    frozen_container.pause()
    try:
        started = time.monotonic()
        broker = brokers("docker")
        with broker.client() as api:
            health = api.get("/healthz")
            assert time.monotonic() - started < HEALTHZ_WITHIN_S
            assert health.status_code == 200
            refused = api.post(f"/v1/sessions/{frozen}/execute", json={"code": "1"})
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["type"] == "session_reattaching"
            assert int(refused.headers["Retry-After"]) > 0
            assert api.get("/healthz").json()["reattaching_sessions"] >= 1
            frozen_container.unpause()
            infos: dict[str, dict[str, Any]] = {}
            for sid in (busy, lost, frozen, canary.sid):
                infos[sid] = wait_for(
                    lambda s=sid: (
                        (i := api.get(f"/v1/sessions/{s}").json())["status"] != "starting" and i
                    ),
                    what=f"session {sid} dealt with",
                )
            # Reattached while its cell runs; never closed for being busy.
            assert infos[busy]["status"] == "busy", infos[busy]
            # Its kernel gone, it goes on with a fresh one.
            assert infos[lost]["status"] == "idle", infos[lost]
            assert infos[lost]["generation"] == 2, infos[lost]
            wait_for(lambda: api.get("/healthz").json()["recovery"] == "done", what="recovery")
            assert api.get("/healthz").json()["reattaching_sessions"] == 0
            canary.api = api
            canary.check()

            # The session whose kernel was lost: its in-flight cell unknown everywhere, and
            # a fresh kernel (state lost, said so) in place of the removed one.
            assert_one_final_record_each(broker, lost, {lost_first: "ok", lost_ex: "unknown"})
            meta = notebook_cell(api, lost, lost_ex)["metadata"]["interp"]
            assert meta["status"] == "unknown" and "broker restarted" in meta["note"]
            note = note_after(api, lost, lost_ex)
            assert "did not survive" in note and "outcome is unknown" in note
            gone = run(api, lost, "kept")
            assert gone["error"]["ename"] == "NameError" and gone["state_lost"], gone

            # The busy session: its cell ends, unknown, with what it printed since attached.
            (broker.session_dir(busy) / "workspace" / "stop").write_text("")
            wait_for(lambda: api.get(f"/v1/sessions/{busy}").json()["status"] == "idle")
            ex = api.get(f"/v1/sessions/{busy}/executions/{busy_ex}").json()
            assert ex["status"] == "unknown" and ex["stdout"].split()[-1] == "stopped"
            # In the notebook: what it printed after the restart, then a note a reader
            # sees. Its first line (0) was printed before the kill, to the old broker only.
            cell = notebook_cell(api, busy, busy_ex)
            printed = "".join(o["text"] for o in cell["outputs"] if o.get("name") == "stdout")
            assert printed == ex["stdout"] and not printed.startswith("0\n"), printed[:80]
            note = note_after(api, busy, busy_ex)
            assert "outcome is unknown" in note and "before the restart is lost" in note
            after = run(api, busy, "kept")
            assert after["outputs"][0]["data"]["text/plain"] == "'yes'"
            assert_one_final_record_each(
                broker, busy, {busy_first: "ok", busy_ex: "unknown", after["id"]: "ok"}
            )
            # The session that was frozen during the restart kept its kernel and state.
            kept = run(api, frozen, "kept")
            assert kept["outputs"][0]["data"]["text/plain"] == "'yes'" and not kept["state_lost"]
            assert_one_final_record_each(broker, frozen, {frozen_first: "ok", kept["id"]: "ok"})
            for sid in (busy, frozen, lost, canary.sid):
                assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            assert list_broker_containers(broker.broker_id()) == []
            assert not any(broker.runtime_dir(s).exists() for s in (busy, frozen, lost, canary.sid))
    finally:
        with contextlib.suppress(Exception):  # already unpaused, or gone
            frozen_container.unpause()


def test_broker_sigkilled_mid_spill_leaves_no_spill_file_once_restarted(
    brokers: Callable[..., Broker],
) -> None:
    """Issue 12 item 3: the spill files of a cell that was printing past the in-memory
    limit when the broker was killed are removed by the next broker, which reattaches."""
    limit = ("--max-output-hard-bytes", str(1 << 20))
    broker = brokers("docker", *limit)
    with broker.client() as api:
        sid, _ = _session(api)
        artifacts = broker.session_dir(sid) / "artifacts"
        ex_id = _start_long_cell(api, sid, FLOOD)
        wait_for(
            lambda: any(p.stat().st_size for p in artifacts.glob(".spill-*.tmp")),
            what="the cell's text to spill",
        )
    broker.kill()
    (broker.session_dir(sid) / "workspace" / "stop").write_text("")
    assert list(artifacts.glob(".spill-*.tmp"))  # left by the killed broker
    broker = brokers("docker", *limit)
    with broker.client() as api:
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "idle")
        assert sorted(p.name for p in artifacts.glob(".*")) == []
        ex = api.get(f"/v1/sessions/{sid}/executions/{ex_id}").json()
        assert ex["status"] == "unknown" and ex["reason"] == "broker_restarted"
        assert run(api, sid, "kept")["outputs"][0]["data"]["text/plain"] == "'yes'"
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
