"""A cell whose outputs the broker cannot store (its artifact directory refuses the write)
still gets its notebook cell, and the audit covers it.

An outside tester made a session's directory immutable while a cell ran: the cell ended
``error``/``broker_error``, its record was in ``state.db``, and it was in no notebook, in
memory or on disk, while ``interp audit verify`` said ok. Here the artifact directory is
replaced by a file while the cell waits, which fails the write of its picture the same way.
"""

from __future__ import annotations

import base64
import shutil
import threading
from pathlib import Path
from typing import Any

import httpx

from interpreter.audit_verify import verify
from tests.conftest import start_server
from tests.faults.conftest import wait_for

#: A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

CELL = f"""
import os, time
from IPython.display import Image, display
print("before")
open("started", "w").close()
for _ in range(600):
    if os.path.exists("go"):
        break
    time.sleep(0.05)
display(Image(data={PNG!r}))
"""


def run_while_artifacts_refused(api: httpx.Client, session_dir: Path, code: str) -> dict[str, Any]:
    """Run ``code`` (which waits for a file ``go``) in the session at ``session_dir``; its
    artifact directory is replaced by a file while the cell waits, and put back after the
    answer. The answer."""
    sid = session_dir.name
    workspace, artifacts = session_dir / "workspace", session_dir / "artifacts"
    answer: list[dict[str, Any]] = []
    runner = threading.Thread(
        target=lambda: answer.append(
            api.post(f"/v1/sessions/{sid}/execute", json={"code": code}).json()
        )
    )
    runner.start()
    wait_for(lambda: (workspace / "started").exists(), 60, "the cell to start")
    artifacts.rename(session_dir / "artifacts-away")
    artifacts.write_text("not a directory")
    (workspace / "go").touch()
    runner.join(60)
    artifacts.unlink()
    (session_dir / "artifacts-away").rename(artifacts)
    [ended] = answer
    return ended


def test_a_cell_whose_picture_cannot_be_stored_keeps_its_notebook_cell(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    srv = start_server("local", data_dir, default_disk_mb=0)
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions").json()["id"]
            ended = run_while_artifacts_refused(api, data_dir / "sessions" / sid, CELL)
            eid = ended["id"]
            assert (ended["status"], ended["reason"]) == ("error", "broker_error")

            cells = [
                c for c in api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
                if c["cell_type"] == "code"
            ]  # fmt: skip
            [cell] = cells
            assert cell["metadata"]["interp"]["execution_id"] == eid
            kinds = [o["output_type"] for o in cell["outputs"]]
            assert kinds[0] == "stream" and kinds[-1] == "error", kinds
            assert cell["outputs"][0]["text"] == "before\n"
            assert any("image/png" in o.get("data", {}) for o in cell["outputs"]), kinds
            # What JupyterLab and nbconvert show of an error, its traceback, says what
            # failed (it was empty).
            said = cell["outputs"][-1]
            assert said["ename"] == ended["error"]["ename"] == "BrokerError"
            assert said["traceback"] == [f"BrokerError: {ended['error']['evalue']}"]
            # The session goes on.
            again = api.post(f"/v1/sessions/{sid}/execute", json={"code": "print(2)"}).json()
            assert again["status"] == "ok"
    finally:
        srv.thread.stop()
    report = verify(data_dir)
    assert report.ok, [str(p) for s in report.sessions for p in s.problems]
    [checked] = report.sessions
    assert (checked.records, checked.cells, checked.cells_not_chained) == (2, 2, 0)
    shutil.rmtree(data_dir, ignore_errors=True)


CUT_CELL = """
import os, time
print("x" * 5000)
open("started", "w").close()
for _ in range(600):
    if os.path.exists("go"):
        break
    time.sleep(0.05)
print("last line")
"""


def test_a_cut_output_whose_full_text_cannot_be_stored_keeps_its_output(tmp_path: Path) -> None:
    """The same fault under a stream's full-text artifact (any refusal, not only a full
    disk): the cell ran, so it ends as it ran, with its cut output in its answer, its
    record and its notebook cell, and a notice that no artifact holds the full text."""
    data_dir = tmp_path / "data"
    srv = start_server("local", data_dir, default_disk_mb=0, max_output_bytes=1000)
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions").json()["id"]
            ended = run_while_artifacts_refused(api, data_dir / "sessions" / sid, CUT_CELL)
            assert (ended["status"], ended["reason"]) == ("ok", None), ended
            assert ended["truncated"] and ended["artifacts"] == []
            notice = "no artifact holds the full text: the service's data disk refused the write"
            assert ended["stdout"].startswith("xxx") and notice in ended["stdout"]
            assert ended["stdout"].endswith("last line\n")
            stored = api.get(f"/v1/sessions/{sid}/executions/{ended['id']}").json()
            assert stored["stdout"] == ended["stdout"]
            [cell] = [
                c for c in api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
                if c["cell_type"] == "code"
            ]  # fmt: skip
            assert "".join(o["text"] for o in cell["outputs"]) == ended["stdout"]
    finally:
        srv.thread.stop()
    report = verify(data_dir)
    assert report.ok, [str(p) for s in report.sessions for p in s.problems]
    shutil.rmtree(data_dir, ignore_errors=True)
