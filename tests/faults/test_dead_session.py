"""A kernel that died and could not be replaced: the session says so in its notebook, takes
the next cell (which starts a kernel first), and is culled when idle like any other.

The replacement is made to fail for real: the local kernel's working directory (its
workspace) is a file while the broker starts the new kernel, so its launch fails twice.
An outside tester got here with the Docker backend by removing the new container as it
started; the session then stayed ``dead`` for good, refused code with "create a new
session", and was never culled."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, start_server
from tests.faults.conftest import wait_for


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Server]:
    srv = start_server("local", tmp_path / "data", cull_interval_s=0.2, default_disk_mb=0)
    try:
        yield srv
    finally:
        srv.thread.stop()


def _kill_with_no_replacement(srv: Server, api: httpx.Client, sid: str) -> Path:
    """End the kernel while its workspace is in the way of a new one; returns the path
    the workspace was moved to (move it back to let a kernel start again)."""
    workspace = srv.data_dir / "sessions" / sid / "workspace"
    away = workspace.with_name("workspace-away")
    os.rename(workspace, away)
    workspace.write_text("not a directory: no kernel can start here")
    died = api.post(f"/v1/sessions/{sid}/execute", json={"code": "import os; os._exit(3)"})
    assert died.json()["status"] == "kernel_died"
    return away


def test_a_dead_session_records_it_and_its_next_cell_starts_a_kernel(broker: Server) -> None:
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={"idle_timeout_s": 0}).json()["id"]
        assert api.post(f"/v1/sessions/{sid}/execute", json={"code": "x = 1"}).status_code == 200
        away = _kill_with_no_replacement(broker, api, sid)
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "dead", 60, "dead")
        notes = [
            "".join(cell["source"])
            for cell in api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
            if cell["cell_type"] == "markdown"
        ]
        assert any(note.startswith("**Kernel lost**") for note in notes), notes
        # Listed as open: it holds its place until it is culled or deleted.
        open_ids = [s["id"] for s in api.get("/v1/sessions?state=open").json()["sessions"]]
        assert sid in open_ids

        (broker.data_dir / "sessions" / sid / "workspace").unlink()
        os.rename(away, broker.data_dir / "sessions" / sid / "workspace")
        again = api.post(f"/v1/sessions/{sid}/execute", json={"code": "print('back')"})
        assert again.status_code == 200, again.text
        body = again.json()
        assert (body["status"], body["stdout"], body["state_lost"]) == ("ok", "back\n", True)
        assert api.get(f"/v1/sessions/{sid}").json()["status"] == "idle"


def test_a_dead_session_is_culled_by_its_idle_timeout(broker: Server) -> None:
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={"idle_timeout_s": 3}).json()["id"]
        _kill_with_no_replacement(broker, api, sid)
        closed = wait_for(
            lambda: (s := api.get(f"/v1/sessions/{sid}").json())["status"] == "closed" and s,
            60,
            "the idle cull",
        )
        assert closed["closed_reason"] == "idle_timeout"


def test_the_note_of_an_idle_death_comes_before_the_next_cell(broker: Server) -> None:
    """A kernel killed while idle is replaced at once (the heartbeat notices); its note
    was written after the next cell, which then read as if it had run on the old kernel."""
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={"idle_timeout_s": 0}).json()["id"]
        pid = int(
            api.post(
                f"/v1/sessions/{sid}/execute", json={"code": "x = 41\nimport os\nos.getpid()"}
            ).json()["outputs"][0]["data"]["text/plain"]
        )
        os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: api.get(f"/v1/sessions/{sid}").json()["generation"] == 2, 60, "a new kernel"
        )
        assert (
            api.post(f"/v1/sessions/{sid}/execute", json={"code": "x"}).json()["status"] == "error"
        )
        cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
        kinds = [c["cell_type"] for c in cells]
        assert kinds == ["code", "markdown", "code"], kinds
        assert "".join(cells[1]["source"]).startswith("**Kernel restarted**")
