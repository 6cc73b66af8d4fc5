"""A rebuild (``POST .../rebuild``) that its broker's end cuts short says so.

The operations tester's F8: a 10-cell rebuild, the broker stopped 3 s in and started
again, left the note "10 cells ... re-run below" over the 4 that ran, nothing about the
rest, no report (``rebuild: null``); on SIGTERM the caller got 409 ``session_closed``
for a session that was not closed. Now a SIGTERM stops the rebuild at the cell it cut
off: its report and a notebook note say where, and the caller gets 503
``shutting_down`` saying so; after a SIGKILL the next broker completes the report the
rebuild kept on record as it ran and writes the note (once).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import nbformat
import pytest

from interpreter.audit_verify import verify
from tests.conftest import require_docker, run
from tests.faults.conftest import Broker, wait_for

#: The third cell holds the rebuild until the test drops ``go`` in the workspace.
HOLD = (
    "import os, time\nopen('started', 'w').close()\n"
    "while not os.path.exists('go'):\n    time.sleep(0.05)"
)
CELLS = ["a = 1", "b = 2", HOLD, "c = 3", "d = 4"]


def _notebook() -> dict[str, Any]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    data: dict[str, Any] = json.loads(nbformat.writes(nb))
    return data


def _rebuild_in_thread(broker: Broker, sid: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Send the rebuild from a thread; its answer (or the error) lands in the dict."""
    got: dict[str, Any] = {}

    def go() -> None:
        try:
            with broker.client() as api:
                resp = api.post(f"/v1/sessions/{sid}/rebuild", json={"notebook": _notebook()})
                got["status"], got["body"] = resp.status_code, resp.json()
        except httpx.HTTPError as exc:
            got["error"] = type(exc).__name__  # the broker was killed under it

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, got


def _held(broker: Broker, sid: str) -> None:
    """Wait until the third cell runs and the rebuild's record says so."""
    wait_for(lambda: (broker.session_dir(sid) / "workspace" / "started").exists(), what="cell 2")

    def kept() -> bool:
        with broker.db() as db:
            (raw,) = db.execute("SELECT rebuild_json FROM sessions WHERE id = ?", (sid,)).fetchone()
        report = json.loads(raw) if raw else {}
        at = [c for c in report.get("cells", []) if c["index"] == 2]
        return report.get("stopped_at") == 2 and bool(at) and bool(at[0]["rerun_execution_id"])

    wait_for(kept, what="the rebuild's report kept on record")


def _stop_notes(broker: Broker, sid: str) -> list[dict[str, Any]]:
    nb = json.loads((broker.session_dir(sid) / "notebook.ipynb").read_text())
    return [
        c
        for c in nb["cells"]
        if c["cell_type"] == "markdown" and c["source"].startswith("**Rebuild stopped**")
    ]


def _check(report: dict[str, Any], stopped: str) -> None:
    assert report["stopped"] == stopped, report
    assert (report["stopped_at"], report["cells_ran"], report["not_run"]) == (2, 3, [3, 4])
    assert report["failed"] == [2], report


def _verified(broker: Any, sid: str) -> None:
    """``interp audit verify`` passes, every note of the session covered by its chain."""
    report = verify(broker.data_dir, sid)
    assert report.ok, report
    (audit,) = report.sessions
    assert audit.notes >= 2 and audit.notes_not_covered == 0, audit


def test_a_rebuild_cut_by_a_sigkill_is_reported_by_the_next_broker(
    brokers: Callable[..., Broker],
) -> None:
    broker = brokers("local")
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        thread, got = _rebuild_in_thread(broker, sid)
        _held(broker, sid)
    broker.kill()
    thread.join(30)
    assert "error" in got, got
    for _ in range(2):  # a second start writes nothing again
        broker = brokers("local")
        with broker.client() as api:
            wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "closed")
            report = api.get(f"/v1/sessions/{sid}").json()["rebuild"]
        _check(report, "broker_restarted")
        notes = _stop_notes(broker, sid)
        assert len(notes) == 1, notes
        text = notes[0]["source"]
        assert text.startswith(
            "**Rebuild stopped** while cell #2 `import os, time` re-ran (its outcome is "
            "unknown): the broker was killed or crashed (broker_restarted), and 2 cells "
            "after it were not re-run: cell #3 `c = 3`, cell #4 `d = 4`."
        ), text
        meta = dict(notes[0]["metadata"]["interp"])
        # Chained as the service's other notes are: audit verify covers it.
        assert isinstance(meta.pop("audit_note"), int), meta
        assert meta == {"event": "rebuild", "stopped": "broker_restarted"}
        _verified(broker, sid)
        broker.kill()


def test_a_rebuild_cut_by_a_sigterm_answers_shutting_down_and_says_where_it_stopped(
    brokers: Callable[..., Broker],
) -> None:
    broker = brokers("local")
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        thread, got = _rebuild_in_thread(broker, sid)
        _held(broker, sid)
    broker.stop()
    thread.join(30)
    assert got.get("status") == 503, got
    error = got["body"]["error"]
    assert error["type"] == "shutting_down", error
    assert "3 of 5 cells re-ran; the re-runs STOPPED while cell #2" in error["message"], error
    broker = brokers("local")
    with broker.client() as api:
        record = api.get(f"/v1/sessions/{sid}").json()
    # The local backend's kernels end with their broker: closed by the shutdown.
    assert (record["status"], record["closed_reason"]) == ("closed", "broker_shutdown")
    _check(record["rebuild"], "broker_shutdown")
    notes = _stop_notes(broker, sid)
    assert len(notes) == 1, notes
    assert (
        "cell #2 `import os, time` re-ran (interrupted): the broker shut down" in notes[0]["source"]
    )
    _verified(broker, sid)


@pytest.mark.docker
@pytest.mark.parametrize("signal", ["SIGTERM", "SIGKILL"])
def test_a_docker_session_whose_rebuild_its_broker_cut_stays_open_and_says_so(
    brokers: Callable[..., Broker], signal: str
) -> None:
    """Its kernel outlives the broker: the next broker reattaches it, the cell the stop
    cut off goes on, the cells before it are in its state, and the session runs code."""
    require_docker()
    broker = brokers("docker")
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        thread, got = _rebuild_in_thread(broker, sid)
        _held(broker, sid)
    if signal == "SIGTERM":
        broker.stop()
    else:
        broker.kill()
    thread.join(30)
    if signal == "SIGTERM":
        assert got.get("status") == 503, got
        assert got["body"]["error"]["type"] == "shutting_down", got
    else:
        assert "error" in got, got
    broker = brokers("docker")
    (broker.session_dir(sid) / "workspace" / "go").write_text("")
    with broker.client() as api:
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "idle")
        stopped = "broker_shutdown" if signal == "SIGTERM" else "broker_restarted"
        _check(api.get(f"/v1/sessions/{sid}").json()["rebuild"], stopped)
        ex = run(api, sid, "print(a, b, 'c' in globals())")
        assert (ex["status"], ex["stdout"]) == ("ok", "1 2 False\n"), ex
        notes = _stop_notes(broker, sid)
        assert len(notes) == 1, notes
        assert "cell #2 `import os, time` re-ran (its outcome is unknown)" in notes[0]["source"]
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    _verified(broker, sid)
