"""Docker sessions survive a broker restart; leftovers are reconciled."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interpreter import quota
from interpreter.backends.docker.engine import list_broker_containers, remove_container
from interpreter.ids import broker_id_for
from tests.conftest import (
    KEY,
    REPO,
    require_docker,
    run,
    runtime_dir_of,
    serve_argv,
    spawn_serve,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

Start = Callable[..., tuple[subprocess.Popen[str], str]]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    require_docker()
    path = tmp_path / "data"
    yield path
    # Whatever a test left must not outlive it.
    for container in list_broker_containers(broker_id_for(path)):
        remove_container(container.id)
        if container.runtime_dir:  # outside the data directory (H-30)
            shutil.rmtree(container.runtime_dir, ignore_errors=True)
    # Kept sessions keep their workspace quota mounted (for the next broker): release them.
    quota.sweep(path / "sessions", set())


@pytest.fixture
def broker(data_dir: Path) -> Iterator[Start]:
    procs: list[subprocess.Popen[str]] = []

    def start(*extra: str) -> tuple[subprocess.Popen[str], str]:
        proc, url = spawn_serve(
            "--backend",
            "docker",
            "--data-dir",
            str(data_dir),
            "--api-key",
            KEY,
            "--pool-size",
            "0",
            *extra,
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


def reattached(api: httpx.Client, sid: str, within_s: float = 60) -> dict[str, Any]:
    """Wait (bounded) until a restarted broker has dealt with ``sid``; its session JSON."""
    deadline = time.monotonic() + within_s
    while True:
        info: dict[str, Any] = api.get(f"/v1/sessions/{sid}").json()
        if info["status"] != "starting":
            return info
        assert time.monotonic() < deadline, f"session {sid} still reattaching"
        time.sleep(0.1)


def _stop_and_verify(proc: subprocess.Popen[str], data_dir: Path) -> None:
    """Stop the broker (SIGTERM, a clean exit), then ``interp audit verify`` its data."""
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    verify = subprocess.run(
        [sys.executable, "-m", "interpreter", "audit", "verify", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


def _kill_mid_cell(
    proc: subprocess.Popen[str],
    api: httpx.Client,
    sid: str,
    code: str,
    seen: str,
    data_dir: Path | None = None,
) -> str:
    """Run ``code`` in ``sid``, streamed; once it printed ``seen`` (and, with ``data_dir``,
    once that is in its record in the store), SIGKILL the broker. Returns the execution's id."""
    with api.stream(
        "POST",
        f"/v1/sessions/{sid}/execute",
        headers={"Accept": "text/event-stream"},
        json={"code": code, "on_disconnect": "continue"},
    ) as resp:
        execution_id = resp.headers["X-Execution-Id"]
        next(line for line in resp.iter_lines() if seen in line)
        if data_dir is not None:
            _until_stored(data_dir, execution_id, seen)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    return execution_id


def test_sigterm_then_restart_keeps_variables(broker: Start) -> None:
    proc, url = broker()
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        run(api, sid, "x = 'still here'")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    _, url = broker()
    with client(url) as api:
        assert reattached(api, sid)["status"] == "idle"
        assert run(api, sid, "x")["outputs"][0]["data"]["text/plain"] == "'still here'"
        # A reattached kernel can be restarted like any other.
        assert api.post(f"/v1/sessions/{sid}/restart").status_code == 200
        assert run(api, sid, "x")["error"]["ename"] == "NameError"
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204


def test_a_session_from_the_warm_pool_keeps_its_variables_across_restarts(
    data_dir: Path,
) -> None:
    """The default set-up: sessions claim warm-pool containers, and a claim renames the
    container's runtime directory. The startup sweep of abandoned containers judged by
    that directory's old path, so a restarted broker reattached the session and then
    removed its container: ``x`` was gone (and any broker starting on the same engine
    removed every other broker's pooled sessions)."""
    procs: list[subprocess.Popen[str]] = []

    def start() -> str:
        proc, url = spawn_serve(
            "--backend", "docker", "--data-dir", str(data_dir), "--api-key", KEY,
            "--pool-size", "1", "--runtime-dir", str(data_dir.parent / "rt"),
        )  # fmt: skip
        procs.append(proc)
        return url

    def warm(api: httpx.Client) -> float:
        for line in api.get("/metrics").text.splitlines():
            if line.startswith("interp_warm_kernels "):
                return float(line.split()[1])
        raise AssertionError("no interp_warm_kernels in /metrics")

    try:
        with client(start()) as api:
            deadline = time.monotonic() + 120
            while warm(api) < 1:
                assert time.monotonic() < deadline, "the warm pool never filled"
                time.sleep(0.1)
            sid = api.post("/v1/sessions").json()["id"]
            run(api, sid, "x = 'still here'")
            # A claimed kernel's runtime directory was renamed to <data-dir>/run/<end of
            # the session id>, a path it read in its mountinfo (docs/security.md H-30).
            seen = run(api, sid, "open('/proc/self/mountinfo').read()")
            mountinfo = seen["outputs"][0]["data"]["text/plain"]
            assert "/run/interp " in mountinfo and str(data_dir) not in mountinfo
            assert sid[-8:] not in mountinfo
            # In the runtime directory it was given, where each restart finds it again.
            assert runtime_dir_of(data_dir, sid).parent.parent == data_dir.parent / "rt"
        db = sqlite3.connect(data_dir / "state.db")
        ((info, status, generation, kernel),) = db.execute(
            "SELECT provisioner_json, status, generation, kernel_json FROM sessions WHERE id = ?",
            (sid,),
        )
        db.close()
        # A claimed kernel's record is written during the session's handshake, from the
        # pool's kernel_info reply: as it stands once the start is done.
        assert (status, generation) == ("idle", 1)
        described = json.loads(kernel)
        assert described["language"] == "python" and described["version"].startswith("3.")
        claimed = [c for c in list_broker_containers(broker_id_for(data_dir)) if c.id in info]
        assert [c.pool_slot is not None for c in claimed] == [True], "not a pooled kernel"
        for _ in range(2):  # SIGKILL, then SIGTERM: each restart reattaches and sweeps
            proc = procs[-1]
            proc.send_signal(signal.SIGKILL if len(procs) == 1 else signal.SIGTERM)
            proc.wait(60)
            with client(start()) as api:
                assert reattached(api, sid)["status"] == "idle"
                assert run(api, sid, "x")["outputs"][0]["data"]["text/plain"] == "'still here'"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)


def test_sigkill_mid_execution_reattaches_and_reports_unknown(broker: Start) -> None:
    proc, url = broker()
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        run(api, sid, "x = 5\nruns = 0")
        execution_id = _kill_mid_cell(
            proc, api, sid, "runs += 1\nprint('go', flush=True)\nimport time\ntime.sleep(3)", "go"
        )
    _, url = broker()
    with client(url) as api:
        reattached(api, sid)
        resp = api.get(f"/v1/sessions/{sid}/executions/{execution_id}")
        assert resp.status_code == 200, resp.text
        ex = resp.json()
        assert ex["status"] == "unknown"
        assert run(api, sid, "x")["outputs"][0]["data"]["text/plain"] == "5"
        # The interrupted code ran once and was never run again.
        assert run(api, sid, "runs")["outputs"][0]["data"]["text/plain"] == "1"
        api.delete(f"/v1/sessions/{sid}")


def test_a_cell_an_older_broker_left_running_keeps_its_policy_in_the_notebook(
    broker: Start, data_dir: Path, tmp_path: Path
) -> None:
    """Brokers up to c737bbf kept no cell metadata in the store. A cell one of them left
    running under a policy was written into the notebook by the next broker without its
    policy decision, so `interp audit verify` called the session BROKEN ("its policy
    decision differs from its chain link's")."""
    policy = tmp_path / "policy.toml"
    policy.write_text(
        '[policies.default]\ndefault = "allow"\n\n[[policies.default.rules]]\n'
        'id = "no-subprocess"\ndecision = "deny"\nmessage = "no"\n'
        'match.imports = ["subprocess"]\n'
    )
    proc, url = broker("--policy-file", str(policy))
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        execution_id = _kill_mid_cell(
            proc, api, sid, "print('go', flush=True)\nimport time\ntime.sleep(2)", "go"
        )
    db = sqlite3.connect(data_dir / "state.db")
    with db:  # as an older broker left it
        (meta,) = db.execute(
            "SELECT cell_meta FROM executions WHERE id = ?", (execution_id,)
        ).fetchone()
        assert "policy" in json.loads(meta)
        db.execute("UPDATE executions SET cell_meta = NULL WHERE id = ?", (execution_id,))
    db.close()
    proc, url = broker("--policy-file", str(policy))
    with client(url) as api:
        reattached(api, sid)
        deadline = time.monotonic() + 60
        while api.get(f"/v1/sessions/{sid}").json()["status"] != "idle":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        cell = next(
            c
            for c in api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
            if c["metadata"].get("interp", {}).get("execution_id") == execution_id
        )
        assert cell["metadata"]["interp"]["policy"]["decision"] == "allow"
    _stop_and_verify(proc, data_dir)


def test_a_cell_whose_kernel_was_gone_is_settled_once_and_not_attached_later(
    broker: Start, data_dir: Path
) -> None:
    """SIGKILL mid-cell, then the container dies while no broker runs. The next broker
    gives the session a fresh kernel and writes the cell down (unknown, state lost); but
    it left the cell in flight in the store, so every later start attached it to the
    fresh kernel and rewrote its record (a duration, state_lost false) and notebook note
    as if it had run on (found by an outside operations tester)."""
    proc, url = broker()
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        run(api, sid, "z = 5")
        execution_id = _kill_mid_cell(
            proc,
            api,
            sid,
            "import time\nfor i in range(20):\n    print(i, flush=True); time.sleep(1)",
            "0",
        )
    for container in list_broker_containers(broker_id_for(data_dir)):
        remove_container(container.id)

    def record_and_notes(api: httpx.Client) -> tuple[dict[str, Any], list[str]]:
        ex = api.get(f"/v1/sessions/{sid}/executions/{execution_id}").json()
        cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
        return ex, [c["source"] for c in cells if c["cell_type"] == "markdown"]

    proc, url = broker()
    with client(url) as api:
        assert reattached(api, sid)["generation"] == 2
        first, notes = record_and_notes(api)
    assert (first["status"], first["duration_ms"], first["state_lost"]) == ("unknown", None, True)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    proc, url = broker()
    with client(url) as api:
        assert reattached(api, sid)["status"] == "idle"
        again, notes_again = record_and_notes(api)
        assert again == first
        assert notes_again == notes
        # No cell ran on the fresh kernel yet: the next one is told (it was not, once a
        # broker had restarted in between).
        lost = run(api, sid, "z")
        assert (lost["status"], lost["state_lost"]) == ("error", True), lost
    _stop_and_verify(proc, data_dir)


def test_state_lost_is_told_to_the_next_cell_after_a_broker_restart(
    broker: Start, data_dir: Path
) -> None:
    """The kernel dies while the session is idle and is replaced; the broker restarts
    before the next cell. That cell reported state_lost false, its NameError unexplained
    (found by an outside operations tester)."""
    proc, url = broker()
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        run(api, sid, "p = 1")
        for container in list_broker_containers(broker_id_for(data_dir)):
            remove_container(container.id)
        deadline = time.monotonic() + 90
        while api.get(f"/v1/sessions/{sid}").json()["generation"] < 2:
            assert time.monotonic() < deadline, "the dead kernel was not replaced"
            time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    proc, url = broker()
    with client(url) as api:
        assert reattached(api, sid)["generation"] == 2
        first = run(api, sid, "p")
        assert (first["status"], first["state_lost"]) == ("error", True), first
        assert run(api, sid, "p = 2")["state_lost"] is False
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    _, url = broker()
    with client(url) as api:  # told once: a later restart does not say it again
        reattached(api, sid)
        assert run(api, sid, "p")["state_lost"] is False
        api.delete(f"/v1/sessions/{sid}")


def test_what_a_reattached_cell_prints_survives_the_next_broker_kill(
    broker: Start, data_dir: Path
) -> None:
    """A broker that reattached a running cell wrote none of its output as it came: killed
    in turn, it lost all it had received, which clients had been shown (found by an
    outside operations tester)."""
    code = (
        "import os, time\nprint('start', flush=True)\nmarked = False\n"
        "while not os.path.exists('go'):\n"
        "    if os.path.exists('mark') and not marked:\n"
        "        print('MARK', flush=True); marked = True\n"
        "    time.sleep(0.2)\n"
        "print('done', flush=True)"
    )
    proc, url = broker()
    with client(url) as api:
        sid = api.post("/v1/sessions").json()["id"]
        execution_id = _kill_mid_cell(proc, api, sid, code, "start", data_dir)
    workspace = data_dir / "sessions" / sid / "workspace"
    proc, url = broker()
    with client(url) as api:
        reattached(api, sid)
        (workspace / "mark").write_text("")
        # Until this broker has written what it received: its record in the store.
        _until_stored(data_dir, execution_id, "MARK")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    proc, url = broker()
    with client(url) as api:
        reattached(api, sid)
        (workspace / "go").write_text("")
        deadline = time.monotonic() + 60
        while api.get(f"/v1/sessions/{sid}").json()["status"] != "idle":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        ex = api.get(f"/v1/sessions/{sid}/executions/{execution_id}").json()
        assert ex["status"] == "unknown", ex
        assert ex["stdout"] == "start\nMARK\ndone\n", ex
        # Each outage said where it was.
        assert ex["stderr"].count("what the cell printed meanwhile is missing") == 2, ex
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    _stop_and_verify(proc, data_dir)


def _until_stored(data_dir: Path, execution_id: str, text: str) -> None:
    """Wait (bounded) until the execution's record in the store has ``text`` in its stdout:
    a broker's write of the cell's output so far."""
    deadline = time.monotonic() + 60
    while True:
        db = sqlite3.connect(f"{(data_dir / 'state.db').as_uri()}?mode=ro", uri=True)
        try:
            row = db.execute(
                "SELECT json_extract(data_json, '$.stdout') FROM executions WHERE id = ?",
                (execution_id,),
            ).fetchone()
        finally:
            db.close()
        if row and text in str(row[0] or ""):
            return
        assert time.monotonic() < deadline, f"{text!r} was never written to the record"
        time.sleep(0.2)


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
    import json

    by_id = {c.id: c for c in list_broker_containers(broker_id_for(data_dir))}
    lost_container = next(cid for cid in by_id if cid in json.dumps(json.loads(prov[lost])))
    orphan_container = next(cid for cid in by_id if cid in json.dumps(json.loads(prov[orphan])))
    remove_container(lost_container)
    _, url = broker()
    with client(url) as api:
        # The session whose kernel vanished goes on with a fresh one (state lost).
        assert reattached(api, lost)["status"] == "idle"
        deadline = time.monotonic() + 60
        while api.get("/healthz").json()["recovery"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        remaining = {c.id for c in list_broker_containers(broker_id_for(data_dir))}
        assert orphan_container not in remaining and lost_container not in remaining
        assert run(api, lost, "1 + 1")["state_lost"] is True
        assert api.delete(f"/v1/sessions/{lost}").status_code == 204
        assert not runtime_dir_of(data_dir, lost).exists()
    assert list_broker_containers(broker_id_for(data_dir)) == []


def test_missing_image_says_how_to_build_it(tmp_path: Path) -> None:
    require_docker()
    out = subprocess.run(
        serve_argv("--backend", "docker", "--data-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "INTERP_DOCKER_IMAGE": "interp-kernel:does-not-exist"},
    )
    assert out.returncode == 2
    assert "interp images build" in out.stderr and "does-not-exist" in out.stderr
    assert "Traceback" not in out.stderr


def test_broker_killed_with_busy_sessions_serves_at_once_and_keeps_them(
    broker: Start, data_dir: Path
) -> None:
    """Two sessions run long cells; the broker is SIGKILLed and started again. It answers
    at once, reattaches both while their cells still run (never closing a busy session),
    records each in-flight cell as unknown in SQLite and the notebook, attaches what the
    cell prints afterwards, and keeps each session's state."""
    proc, url = broker()
    loop = "import time\nfor i in range(40):\n    print(i, flush=True)\n    time.sleep(0.5)"
    sessions: dict[str, str] = {}
    with client(url) as api:
        for _ in range(2):
            sid = api.post("/v1/sessions").json()["id"]
            run(api, sid, "kept = 'yes'")
            with api.stream(
                "POST",
                f"/v1/sessions/{sid}/execute",
                json={"code": loop, "on_disconnect": "continue"},
                headers={"Accept": "text/event-stream"},
            ) as resp:
                sessions[sid] = resp.headers["X-Execution-Id"]
                # Running once it printed; the client then goes away, the cell goes on.
                next(line for line in resp.iter_lines() if line.startswith("data:"))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _, url = broker()
    with client(url) as api:
        health = api.get("/healthz")
        assert health.status_code == 200
        for sid, ex_id in sessions.items():
            info = reattached(api, sid)
            # Reattached while the cell runs: busy, not closed.
            assert info["status"] == "busy", info
            ex = api.get(f"/v1/sessions/{sid}/executions/{ex_id}").json()
            assert ex["status"] == "unknown" and ex["reason"] == "broker_restarted"
        for sid, ex_id in sessions.items():
            # The cell ends on its own (the new broker bounds it like any cell).
            deadline = time.monotonic() + 60
            while api.get(f"/v1/sessions/{sid}").json()["status"] != "idle":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            ex = api.get(f"/v1/sessions/{sid}/executions/{ex_id}").json()
            assert ex["status"] == "unknown"
            # What it printed after the restart is attached, up to its last line.
            assert ex["stdout"].split()[-1] == "39", ex["stdout"][-200:]
            assert run(api, sid, "kept")["outputs"][0]["data"]["text/plain"] == "'yes'"
            cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
            at = next(
                i for i, c in enumerate(cells) if c["metadata"]["interp"]["execution_id"] == ex_id
            )
            cell, note = cells[at], cells[at + 1]
            meta = cell["metadata"]["interp"]
            assert meta["status"] == "unknown" and "broker restarted" in meta["note"]
            assert cell["source"] == loop
            # Shown to a reader, right after the cell: it was not re-run, and what it
            # printed before the restart is not in the cell.
            assert note["cell_type"] == "markdown", note
            assert note["source"].startswith("**Broker restarted** while the cell above ran")
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    audit = subprocess.run(
        [sys.executable, "-m", "interpreter", "audit", "verify", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_sigterm_keeps_running_cells_and_records_them_truthfully(
    broker: Start, data_dir: Path
) -> None:
    """SIGTERM with cells running: the Docker backend keeps their containers, so the cells
    run to their end. They are recorded `unknown` (reason broker_shutdown), never
    `interrupted`; the next broker reattaches them and attaches what they print."""
    proc, url = broker()
    # Each cell runs until the test lets it end (a file in its workspace), not for a fixed
    # time: on a loaded machine, starting three sessions took longer than a 6 s cell, so
    # the first cell could end before the SIGTERM it is meant to outlive.
    code = (
        "import os, time\nprint('start', flush=True)\n"
        "while not os.path.exists('go'):\n    time.sleep(0.1)\n"
        "open('done.txt', 'w').write('1')\nprint('end', flush=True)"
    )
    sessions: dict[str, str] = {}
    with client(url) as api:
        for _ in range(3):
            sid = api.post("/v1/sessions").json()["id"]
            with api.stream(
                "POST",
                f"/v1/sessions/{sid}/execute",
                json={"code": code, "on_disconnect": "continue"},
                headers={"Accept": "text/event-stream"},
            ) as resp:
                sessions[sid] = resp.headers["X-Execution-Id"]
                next(line for line in resp.iter_lines() if "start" in line)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    db = sqlite3.connect(data_dir / "state.db")
    for ex_id in sessions.values():
        (data,) = db.execute("SELECT data_json FROM executions WHERE id = ?", (ex_id,)).fetchone()
        assert (json.loads(data)["status"], json.loads(data)["reason"]) == (
            "unknown",
            "broker_shutdown",
        )
    db.close()
    for sid in sessions:  # the kept containers' cells may end now, with no broker there
        (data_dir / "sessions" / sid / "workspace" / "go").write_text("")
    _, url = broker()
    with client(url) as api:
        for sid, ex_id in sessions.items():
            reattached(api, sid)
            deadline = time.monotonic() + 60
            while api.get(f"/v1/sessions/{sid}").json()["status"] != "idle":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            # The cell really ran to its end, and the record does not claim otherwise.
            assert api.get(f"/v1/sessions/{sid}/files/done.txt").content == b"1"
            ex = api.get(f"/v1/sessions/{sid}/executions/{ex_id}").json()
            assert ex["status"] == "unknown", ex
            # What it printed with no broker there ('end') is lost, and the output says
            # where (its two parts ran together).
            assert ex["stdout"] == "start\n"
            assert ex["stderr"].endswith("what the cell printed meanwhile is missing]\n")
            cell = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"][-2]
            assert [o.get("name") for o in cell["outputs"]] == ["stdout", "stderr"]
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204


def test_kept_containers_end_without_a_broker_and_are_swept_when_their_data_is_gone(
    data_dir: Path, tmp_path: Path
) -> None:
    """A broker stops for good: its kept container ends itself once no broker has stamped
    it for the orphan timeout. A container whose data directory is deleted is removed by
    the next broker started on the same engine, whatever its data directory."""
    import shutil

    require_docker()
    broker_id = broker_id_for(data_dir)

    def serve(path: Path, orphan_s: str) -> tuple[subprocess.Popen[str], str]:
        return spawn_serve(
            "--backend",
            "docker",
            "--data-dir",
            str(path),
            "--api-key",
            KEY,
            "--pool-size",
            "0",
            "--orphan-kernel-timeout-s",
            orphan_s,
        )

    proc, url = serve(data_dir, "3")
    with client(url) as api:
        api.post("/v1/sessions").raise_for_status()
        sid = api.post("/v1/sessions").json()["id"]
        # While the broker runs, its kernels outlive the orphan timeout.
        assert run(api, sid, "import time; time.sleep(5); 'alive'")["status"] == "ok"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    deadline = time.monotonic() + 60
    while any(c.status == "running" for c in list_broker_containers(broker_id)):
        assert time.monotonic() < deadline, "kept containers still run with no broker"
        time.sleep(0.5)
    # Their data directory disappears for good; another broker on this engine sweeps them.
    assert list_broker_containers(broker_id)
    # Deleted for good (its workspace quotas unmounted first, as deleting them needs).
    for mount in [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]:
        if mount.startswith(str(data_dir.resolve())):
            subprocess.run(["umount", "-l", mount], check=True)
    shutil.rmtree(data_dir)
    other, _ = serve(tmp_path / "other-data", "0")
    try:
        deadline = time.monotonic() + 60
        while list_broker_containers(broker_id):
            assert time.monotonic() < deadline, "abandoned containers were not swept"
            time.sleep(0.5)
    finally:
        other.send_signal(signal.SIGTERM)
        other.wait(60)


def test_a_shutdown_during_recovery_that_keeps_no_kernels_leaves_no_container(
    broker: Start, data_dir: Path
) -> None:
    """A broker that keeps no kernels at its shutdown (--no-keep-containers-on-shutdown)
    stopped while its startup recovery ran: the sessions recovery had not reached kept
    their containers running after it (found by an outside operations tester). They are
    closed as the live ones are, and their containers removed."""
    import asyncio

    from interpreter.server import start
    from interpreter.store import Store
    from tests.conftest import test_settings

    proc, url = broker()
    with client(url) as api:
        sids = [api.post("/v1/sessions").json()["id"] for _ in range(3)]
        for sid in sids:
            run(api, sid, "x = 1")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    broker_id = broker_id_for(data_dir)
    assert len(list_broker_containers(broker_id)) == 3  # kept for the next broker

    async def start_and_stop_at_once() -> None:
        settings = test_settings(data_dir, backend="docker", pool_size=0)
        assert settings.keep_containers_on_shutdown is False
        running = await start(settings, backend="docker")
        assert not running.broker.recovery_done  # still reattaching
        await running.stop()

    asyncio.run(start_and_stop_at_once())
    assert list_broker_containers(broker_id) == []
    store = Store(data_dir / "state.db")
    try:
        for sid in sids:
            record = store.get_session(sid)
            assert record is not None and record.status == "closed", record
            assert record.closed_reason == "broker_shutdown", record
    finally:
        store.close()
