"""A cell the broker ended says so in the downloaded notebook, as its last output.

Found by an outside tester reading ``GET /v1/sessions/{id}/notebook`` in JupyterLab and
through nbconvert, which show an error output by its traceback alone: a cell past its
``timeout_s`` read as a bare ``KeyboardInterrupt``; a dead kernel (``os._exit``, the OOM
killer) or a timeout whose kernel had to be replaced showed an empty error; a cell cut by a
restart on request had no error output at all. Each ending here runs on a real kernel
behind the real HTTP API; the notebook is downloaded, validated, rendered with nbconvert,
checked by ``interp audit verify`` and replayed.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from nbconvert import HTMLExporter

from interpreter.audit_verify import verify
from interpreter.client import Client
from interpreter.replay import replay_notebook
from tests.conftest import KEY, Server, await_status, own_server, run, spawn_serve

SLEEP = "import time\nprint('started', flush=True)\ntime.sleep(60)"
#: A cell whose kernel ignores the interrupt: the timeout has to replace the kernel.
DEAF = (
    "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "print('started', flush=True)\ntime.sleep(60)"
)


def _session(api: httpx.Client) -> str:
    resp = api.post("/v1/sessions", json={})
    assert resp.status_code == 201, resp.text
    sid: str = resp.json()["id"]
    assert run(api, sid, "x = 1")["status"] == "ok"
    return sid


def _while_running(api: httpx.Client, sid: str, act: Callable[[], None]) -> dict[str, Any]:
    """Run :data:`SLEEP`, do ``act`` once it runs and has printed; its final record."""
    with api.stream("POST", f"/v1/sessions/{sid}/execute", json={"code": SLEEP}) as resp:
        assert resp.status_code == 200
        eid = resp.headers["X-Execution-Id"]
        ran = await_status(api, sid, eid, {"running"})
        while "started" not in ran["stdout"]:
            ran = await_status(api, sid, eid, {"running"})
        act()
    return await_status(api, sid, eid, {"ok", "error", "timeout", "interrupted", "kernel_died"})


def _timeout(api: httpx.Client, sid: str) -> dict[str, Any]:
    return run(api, sid, SLEEP, timeout_s=1)


def _deaf_timeout(api: httpx.Client, sid: str) -> dict[str, Any]:
    return run(api, sid, DEAF, timeout_s=1)


def _died(api: httpx.Client, sid: str) -> dict[str, Any]:
    return run(api, sid, "import os\nos._exit(1)")


def _restarted(api: httpx.Client, sid: str) -> dict[str, Any]:
    def restart() -> None:
        assert api.post(f"/v1/sessions/{sid}/restart").status_code == 200

    return _while_running(api, sid, restart)


def _closed(api: httpx.Client, sid: str) -> dict[str, Any]:
    def delete() -> None:
        # The DELETE answers once the session is closed; the stream ends meanwhile.
        done = threading.Thread(target=lambda: api.delete(f"/v1/sessions/{sid}"))
        done.start()
        done.join(60)

    return _while_running(api, sid, delete)


#: ending -> (how to end a cell, its status and reason, the broker's ename).
ENDINGS: dict[str, tuple[Callable[[httpx.Client, str], dict[str, Any]], str, str, str]] = {
    "timeout": (_timeout, "timeout", "timeout", "ExecutionTimeout"),
    "timeout_restart": (_deaf_timeout, "timeout", "timeout", "ExecutionTimeout"),
    "kernel_died": (_died, "kernel_died", "exit:1", "KernelDied"),
    "restart_on_request": (_restarted, "interrupted", "restarted", "KernelRestarted"),
    "session_closed": (_closed, "interrupted", "session_closed", "SessionClosed"),
}


def _rendered_text(nb: nbformat.NotebookNode) -> str:
    """What nbconvert's HTML shows of ``nb``, as text."""
    body, _ = HTMLExporter().from_notebook_node(nb)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_cell_the_broker_ended_ends_with_its_error_in_the_downloaded_notebook(
    server: Server, api: httpx.Client, ending: str
) -> None:
    end, status, reason, ename = ENDINGS[ending]
    sid = _session(api)
    try:
        ended = end(api, sid)
        assert (ended["status"], ended["reason"]) == (status, reason), ended
        error = ended["error"]
        assert error["ename"] == ename, ended
        # Downloaded through the API, as a reviewer does (a closed session's too).
        resp = api.get(f"/v1/sessions/{sid}/notebook")
        assert resp.status_code == 200, resp.text
        nb = nbformat.reads(resp.text, as_version=4)
        nbformat.validate(nb)
        (cell,) = [
            c for c in nb.cells if c.metadata.get("interp", {}).get("execution_id") == ended["id"]
        ]
        assert cell.metadata["interp"]["status"] == status
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert len(errors) == 1 and cell.outputs[-1] is errors[0], cell.outputs
        last = cell.outputs[-1]
        assert (last.ename, last.evalue) == (ename, error["evalue"])
        # The traceback is all JupyterLab and nbconvert show: it ends with what happened.
        assert last.traceback and last.traceback[-1] == f"{ename}: {error['evalue']}"
        assert last.traceback[:-1] == error["traceback"]
        if ending == "timeout":
            # The kernel's own KeyboardInterrupt stays, followed by the broker's line.
            assert any("KeyboardInterrupt" in line for line in last.traceback[:-1])
        elif ending in ("timeout_restart", "kernel_died"):
            # The kernel sent nothing (it was replaced): the broker's line alone.
            assert ended["state_lost"] is True and error["traceback"] == []
            assert len(last.traceback) == 1
        if ending != "kernel_died":
            # What it printed before it was ended is kept, before the error.
            assert "started" in "".join(o.get("text", "") for o in cell.outputs)
        shown = _rendered_text(nb)
        assert f"{ename}: {error['evalue']}" in shown
        if ending != "session_closed":
            assert run(api, sid, "print('after')")["stdout"] == "after\n"
    finally:
        api.delete(f"/v1/sessions/{sid}")
    # Closed (its file written): the chain, the records and the notebook agree.
    report = verify(server.data_dir, sid)
    assert report.ok, report.to_dict()
    # The notebook replays: the ended cell is skipped as a recorded failure, the rest match.
    saved = api.get(f"/v1/sessions/{sid}/notebook").json()
    with Client(server.url, api_key=server.api_key) as client:
        replayed = replay_notebook(client, saved, name=ending)
    assert replayed.ok, replayed
    (index,) = [
        n
        for n, c in enumerate(saved["cells"])
        if c["metadata"].get("interp", {}).get("execution_id") == ended["id"]
    ]
    verdicts = {c.index: (c.status, c.recorded_status) for c in replayed.cells}
    assert verdicts.pop(index) == ("recorded_failure", status)
    assert set(verdicts.values()) == {("match", "ok")}, replayed


def test_ended_cells_the_file_lacked_after_a_sigkill_come_back_as_written_and_verify(
    tmp_path: Path,
) -> None:
    """A broker killed before its notebook file caught up: the next one writes the cells
    back from the store, and a cell the broker ended comes back with the same last output
    (the broker's error and its line), which its chain link's digest covers. Before, a
    cell cut by a restart on request came back with an error output it had not been
    written with, and `interp audit verify` called it tampered with."""
    data_dir = tmp_path / "data"
    argv = ("--backend", "local", "--data-dir", str(data_dir), "--api-key", KEY)
    headers = {"Authorization": f"Bearer {KEY}"}
    proc, url = spawn_serve(*argv)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
            sid = _session(api)
            ended = [_timeout(api, sid), _died(api, sid), _restarted(api, sid)]
            assert [e["status"] for e in ended] == ["timeout", "kernel_died", "interrupted"]
            written = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # As if the kill came before the file's paced save: the file has no cell yet.
    path = data_dir / "sessions" / sid / "notebook.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"] = []
    path.write_text(json.dumps(nb))
    proc, url = spawn_serve(*argv)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
            deadline = time.monotonic() + 30
            while api.get(f"/v1/sessions/{sid}").json()["status"] != "closed":
                assert time.monotonic() < deadline, "the session was never closed"
                time.sleep(0.1)
            restored = api.get(f"/v1/sessions/{sid}/notebook").json()
    finally:
        proc.kill()
        proc.wait()
    nbformat.validate(nbformat.from_dict(restored))
    cells = {
        c["metadata"]["interp"]["execution_id"]: c
        for c in restored["cells"]
        if c["metadata"].get("interp", {}).get("execution_id")
    }
    before = {
        c["metadata"]["interp"]["execution_id"]: c
        for c in written
        if c["metadata"].get("interp", {}).get("execution_id")
    }
    for execution in ended:
        cell = cells[execution["id"]]
        assert cell["metadata"]["interp"]["restored_from"] == "store"
        assert cell["outputs"] == before[execution["id"]]["outputs"]
        last, error = cell["outputs"][-1], execution["error"]
        assert (last["output_type"], last["ename"]) == ("error", error["ename"])
        assert last["traceback"][-1] == f"{error['ename']}: {error['evalue']}"
    audit = subprocess.run(
        [sys.executable, "-m", "interpreter", "audit", "verify", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr


#: A cell that times out, leaving a thread that sends, once ``go`` exists, more output for
#: it than the broker keeps in memory per execution (50 KB here). Sent with the cell's own
#: request as its parent: once the broker's probe after the timeout has reached the
#: kernel, ipykernel would give a thread's prints that probe's id instead.
FLOOD_LATER = """
import os, threading, time
k = get_ipython().kernel
parent = k.get_parent()
def later():
    while not os.path.exists('go'):
        time.sleep(0.05)
    for i in range(100):
        k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x' * 1000 + '\\n'},
                       parent=parent)
threading.Thread(target=later, daemon=True).start()
time.sleep(60)
"""


def test_late_output_past_the_limit_keeps_the_broker_error_last(tmp_path: Path) -> None:
    """A timed-out cell whose thread prints after it ended, past the in-memory limit: the
    notice of the dropped text went after the broker's error, which was then not the
    cell's last output."""
    with (
        own_server(
            "interp-late-ending-", max_output_bytes=10_000, max_output_hard_bytes=50_000
        ) as srv,
        srv.client() as api,
    ):
        sid = api.post("/v1/sessions", json={}).json()["id"]
        ended = run(api, sid, FLOOD_LATER, timeout_s=1)
        assert (ended["status"], ended["state_lost"]) == ("timeout", False), ended
        # Uploaded, not made by a cell: that cell would get the thread's output.
        assert api.put(f"/v1/sessions/{sid}/files/go", content=b"").status_code in (200, 201)
        deadline = time.monotonic() + 60
        while True:
            cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
            (cell,) = [
                c
                for c in cells
                if c["metadata"].get("interp", {}).get("execution_id") == ended["id"]
            ]
            text = "".join(o.get("text", "") for o in cell["outputs"])
            if "printed after the cell ended" in text:
                break
            assert time.monotonic() < deadline, cell["outputs"]
            time.sleep(0.1)
        *before, last = cell["outputs"]
        assert [o["output_type"] for o in before] == ["stream"] * len(before)
        assert (last["output_type"], last["ename"]) == ("error", "ExecutionTimeout")
        assert last["traceback"][-1] == f"ExecutionTimeout: {ended['error']['evalue']}"
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
        report = verify(srv.data_dir, sid)
        assert report.ok, report.to_dict()
