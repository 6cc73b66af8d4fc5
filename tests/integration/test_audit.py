"""The tamper-evident record (issue 14 item 6): every final execution is a link of its
session's hash chain in state.db, and ``interp audit verify`` checks the chain, the
records, the notebook and the artifacts against it, naming the first broken link.

One real broker (local backend) writes a data directory once; each test verifies or
tampers with its own copy.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interpreter.audit_verify import verify
from interpreter.cli import main
from tests.conftest import REPO, run, start_server
from tests.integration.test_api_rich import PLOT

#: Denies one import, so that a session has a cell the policy refused.
POLICY = """
[policies.default]
default = "allow"

[[policies.default.rules]]
id = "no-subprocess"
decision = "deny"
match.imports = ["subprocess"]
"""


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A data directory written by a real broker (with a policy) that has since stopped:
    one session of five cells (ok, error, cut output with its full-text artifact, late
    output of a background thread, a plot with its PNG), and one whose kernel was
    restarted with ``recover`` after a cell the policy denied."""
    root = tmp_path_factory.mktemp("audit")
    data = root / "data"
    (root / "policy.toml").write_text(POLICY)
    srv = start_server(
        "local", data, max_output_bytes=1000, policy_file=root / "policy.toml", pool_size=0
    )
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            ok = run(api, sid, "x = 6 * 7\nprint(x)")
            err = run(api, sid, "1 / 0")
            cut = run(api, sid, "print('y' * 5000)")
            plot = run(api, sid, PLOT)
            assert plot["status"] == "ok", plot
            late = run(
                api,
                sid,
                "import threading, time\n"
                "threading.Thread(target=lambda: (time.sleep(0.5), print('late', flush=True)))"
                ".start()",
            )
            # The late line reaches the finished cell's record (and a chain amendment).
            deadline = time.monotonic() + 30
            while (
                "late"
                not in api.get(f"/v1/sessions/{sid}/executions/{late['id']}").json()["stdout"]
            ):
                assert time.monotonic() < deadline, "the late output never arrived"
                time.sleep(0.1)
            assert (ok["status"], err["status"], cut["truncated"]) == ("ok", "error", True)
            assert cut["artifacts"], cut
            rec = api.post("/v1/sessions", json={}).json()["id"]
            assert run(api, rec, "a = 1")["status"] == "ok"
            assert run(api, rec, "print(a)")["status"] == "ok"
            denied = run(api, rec, "import subprocess")
            assert denied["status"] == "denied", denied
            resp = api.post(f"/v1/sessions/{rec}/restart", json={"recover": True})
            assert resp.status_code == 200, resp.text
            after = run(api, rec, "print(a + 1)")
            assert after["stdout"] == "2\n", after
            queued = _recover_with_cells_queued(srv)
            # A kernel that died (its note, and a next cell with state_lost), then a
            # restart on request (another note), as the outside tester had it.
            died = api.post("/v1/sessions", json={}).json()["id"]
            assert run(api, died, "x = 1")["status"] == "ok"
            exited = run(api, died, "import os; os._exit(1)")
            assert exited["reason"] == "exit:1", exited
            lost = run(api, died, "print(2)")
            assert lost["state_lost"] is True, lost
            resp = api.post(f"/v1/sessions/{died}/restart", json={})
            assert resp.status_code == 200, resp.text
            assert run(api, died, "print(3)")["status"] == "ok"
    finally:
        srv.thread.stop()
    yield {
        "data": data,
        "sid": sid,
        "recovered_sid": rec,
        "queued_sid": queued,
        "died_sid": died,
        "lost": lost["id"],
        "denied": denied["id"],
        "ids": [ok["id"], err["id"], cut["id"], late["id"], plot["id"]],
        "artifact": cut["artifacts"][0]["id"],
    }


def _recover_with_cells_queued(srv: Any) -> str:
    """A session restarted with ``recover`` while one cell ran and two waited: the
    recovery's re-run is submitted after the waiting cells and runs before them."""
    with srv.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        assert run(api, sid, "v = 5")["status"] == "ok"
        ran: list[dict[str, Any]] = []

        def submit(i: int, queued: threading.Event) -> None:
            code = f"import time; time.sleep({30 if i == 0 else 0}); print({i}, v)"
            with (
                srv.client() as own,
                own.stream("POST", f"/v1/sessions/{sid}/execute", json={"code": code}) as resp,
            ):
                # X-Execution-Id comes first, once the cell is in the queue.
                assert resp.headers["X-Execution-Id"]
                queued.set()
                ran.append(json.loads(resp.read()))

        threads = []
        for i in range(3):
            queued = threading.Event()
            threads.append(threading.Thread(target=submit, args=(i, queued)))
            threads[-1].start()
            assert queued.wait(30)
        resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
        assert resp.status_code == 200, resp.text
        for thread in threads:
            thread.join(60)
        # The waiting cells ran after the re-run of ``v = 5``, on its state.
        assert sorted(r["stdout"] for r in ran if r["status"] == "ok") == ["1 5\n", "2 5\n"], ran
    return sid


@pytest.fixture
def copy(written: dict[str, Any], tmp_path: Path) -> Path:
    target = tmp_path / "data"
    shutil.copytree(written["data"], target)
    return target


def cli(data: Path, *args: str) -> tuple[int, str]:
    """``interp audit verify`` as a real command: exit code and output."""
    interp = Path(sys.executable).parent / "interp"
    proc = subprocess.run(
        [str(interp), "audit", "verify", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_an_untouched_record_verifies(written: dict[str, Any], copy: Path) -> None:
    code, out = cli(copy)
    assert code == 0, out
    assert f"{written['sid']}: ok" in out
    report = verify(copy).to_dict()
    by_id = {s["session_id"]: s for s in report["sessions"]}
    assert set(by_id) == {
        written["sid"],
        written["recovered_sid"],
        written["queued_sid"],
        written["died_sid"],
    }
    session = by_id[written["sid"]]
    assert session["records"] == 5 and session["not_chained"] == 0
    # Five final records, plus one amendment: the late output changed a finished cell.
    assert session["links"] == 6
    assert session["cells"] == 5 and session["cells_not_chained"] == 0
    assert session["artifacts"] == 2  # the cut output's full text, the plot's PNG


def _recovered_cells(nb: dict[str, Any], sid: str) -> list[dict[str, Any]]:
    return [
        c
        for c in nb["cells"]
        if c["metadata"].get("interp", {}).get("replay_source") == f"session:{sid}"
    ]


def _denied_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in nb["cells"] if c["metadata"].get("interp", {}).get("status") == "denied"]


def test_a_recovered_session_and_its_denied_cell_verify(
    written: dict[str, Any], copy: Path
) -> None:
    """A recovery's re-runs are written commented out, and their digest is of that source;
    a cell the policy denied carries its digest like any other (both were reported: the
    re-runs as differing from their digest, the denied cell as not chained)."""
    sid = written["recovered_sid"]
    code, out = cli(copy, "--session", sid)
    assert code == 0, out
    assert f"{sid}: ok" in out
    (session,) = verify(copy, sid).to_dict()["sessions"]
    # a = 1, print(a), the denied cell, the two re-runs, print(a + 1): all chained.
    assert session["records"] == 6 and session["not_chained"] == 0, session
    assert session["cells"] == 6 and session["cells_not_chained"] == 0, session
    nb = json.loads((copy / "sessions" / sid / "notebook.ipynb").read_text())
    recovered = _recovered_cells(nb, sid)
    assert [c["source"].splitlines()[-1] for c in recovered] == ["# a = 1", "# print(a)"]
    (denied,) = _denied_cells(nb)
    assert denied["metadata"]["interp"]["audit_sha256"]


def test_a_recovery_ahead_of_waiting_cells_verifies(written: dict[str, Any], copy: Path) -> None:
    """The recovery's re-run was submitted after the waiting cells (a later ``seq``) and
    ran before them: the order checked is the order the cells ran, as the notebook has it
    (verify called this session BROKEN, "it ran before cell N")."""
    sid = written["queued_sid"]
    db = sqlite3.connect(copy / "state.db")
    by_seq = [
        r[0]
        for r in db.execute("SELECT id FROM executions WHERE session_id = ? ORDER BY seq", (sid,))
    ]
    db.close()
    nb = json.loads((copy / "sessions" / sid / "notebook.ipynb").read_text())
    by_run = [
        c["metadata"]["interp"]["execution_id"] for c in nb["cells"] if c["cell_type"] == "code"
    ]
    assert sorted(by_seq) == sorted(by_run) and by_seq != by_run, (by_seq, by_run)
    code, out = cli(copy, "--session", sid)
    assert code == 0, out
    assert f"{sid}: ok" in out


@pytest.mark.parametrize("edit", ["commented code", "uncommented", "denied cell"])
def test_an_edited_recovered_or_denied_cell_is_named(
    written: dict[str, Any], copy: Path, edit: str
) -> None:
    sid = written["recovered_sid"]
    path = copy / "sessions" / sid / "notebook.ipynb"
    nb = json.loads(path.read_text())
    if edit == "denied cell":
        (cell,) = _denied_cells(nb)
        cell["source"] = "import json"
    else:
        cell = _recovered_cells(nb, sid)[1]
        if edit == "commented code":
            cell["source"] = cell["source"].replace("# print(a)", "# print(b)")
        else:  # made runnable again: the original code, which the chain also covers
            cell["source"] = "print(a)"
    path.write_text(json.dumps(nb))
    code, out = cli(copy, "--session", sid)
    assert code == 1, out
    (problem,) = verify(copy, sid).sessions[0].problems
    assert problem.where == "notebook"
    assert problem.execution_id == cell["metadata"]["interp"]["execution_id"]
    assert "its source or outputs differ from its recorded digest" in problem.message


def test_a_tampered_row_is_named(written: dict[str, Any], copy: Path) -> None:
    target = written["ids"][0]
    db = sqlite3.connect(copy / "state.db")
    db.execute(
        "UPDATE executions SET data_json = json_set(data_json, '$.stdout', 'forged\n')"
        " WHERE id = ?",
        (target,),
    )
    db.commit()
    db.close()
    code, out = cli(copy)
    assert code == 1, out
    first = out.splitlines()[1]
    assert "first broken link" in first
    assert written["sid"] in first and target in first
    assert "record" in first and "stdout_sha256" in first


def test_a_tampered_status_column_is_named(written: dict[str, Any], copy: Path) -> None:
    target = written["ids"][1]
    db = sqlite3.connect(copy / "state.db")
    db.execute("UPDATE executions SET status = 'ok' WHERE id = ?", (target,))
    db.commit()
    db.close()
    (problem,) = verify(copy).sessions[0].problems
    assert problem.execution_id == target
    assert "status (column)" in problem.message


def test_a_rewritten_chain_link_is_named(written: dict[str, Any], copy: Path) -> None:
    db = sqlite3.connect(copy / "state.db")
    db.execute(
        "UPDATE audit_links SET content_json = replace(content_json, '\"error\"', '\"ok\"')"
        " WHERE idx = 2"
    )
    db.execute("DELETE FROM audit_links WHERE idx = 4")
    db.commit()
    db.close()
    problems = verify(copy).sessions[0].problems
    assert problems[0].where == "chain"
    assert problems[0].execution_id == written["ids"][1]
    assert problems[0].link == 2
    assert problems[0].message == "its hash does not match its content (the link was edited)"
    assert any(p.link == 5 and "expected link 4 here" in p.message for p in problems)


def test_stripped_hashes_are_broken_not_pre_chain(written: dict[str, Any], copy: Path) -> None:
    """The hashes NULLed and the links deleted (and a record edited): the notebook's cells
    still carry their digests, so the session is broken, each cell named. A session from
    before the chain has neither: that one is "not chained", not broken."""
    sid = written["sid"]
    db = sqlite3.connect(copy / "state.db")
    db.execute(
        "UPDATE executions SET prev_hash = NULL, hash = NULL, notebook_sha256 = NULL,"
        " data_json = replace(data_json, '42', '99') WHERE session_id = ?",
        (sid,),
    )
    db.execute("DELETE FROM audit_links WHERE session_id = ?", (sid,))
    db.commit()
    db.close()
    code, out = cli(copy, "--session", sid)
    assert code == 1 and f"{sid}: BROKEN" in out, out
    problems = verify(copy, sid).sessions[0].problems
    # The session's row still names the chain's last link.
    (head,) = [p for p in problems if p.where == "chain"]
    assert head.message.startswith("the chain ends at no link, but the session's record says")
    db = sqlite3.connect(copy / "state.db")
    db.execute("UPDATE sessions SET audit_head = NULL WHERE id = ?", (sid,))
    db.commit()
    db.close()
    problems = verify(copy, sid).sessions[0].problems
    assert sorted(str(p.execution_id) for p in problems) == sorted(written["ids"])
    assert all(
        "carries an audit digest but its execution has no chain link" in p.message for p in problems
    )
    # As written before the chain existed: no digest in the notebook either.
    path = copy / "sessions" / sid / "notebook.ipynb"
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        cell["metadata"].get("interp", {}).pop("audit_sha256", None)
    path.write_text(json.dumps(nb))
    (session,) = verify(copy, sid).sessions
    assert session.ok and (session.not_chained, session.cells_not_chained) == (5, 5)


def test_a_tampered_notebook_cell_is_named(written: dict[str, Any], copy: Path) -> None:
    path = copy / "sessions" / written["sid"] / "notebook.ipynb"
    nb = json.loads(path.read_text())
    cell = nb["cells"][0]
    assert cell["metadata"]["interp"]["execution_id"] == written["ids"][0]
    cell["outputs"][0]["text"] = "43\n"
    path.write_text(json.dumps(nb))
    code, out = cli(copy)
    assert code == 1, out
    (problem,) = verify(copy).sessions[0].problems
    assert problem.where == "notebook" and problem.execution_id == written["ids"][0]
    assert "cell 0: its source or outputs differ" in problem.message


def test_a_notebook_saved_by_jupyter_still_verifies(written: dict[str, Any], copy: Path) -> None:
    """Jupyter writes sources and texts as lists of lines: the digest is the same."""
    path = copy / "sessions" / written["sid"] / "notebook.ipynb"
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        cell["source"] = cell["source"].splitlines(keepends=True)
        for output in cell["outputs"]:
            if isinstance(output.get("text"), str):
                output["text"] = output["text"].splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1))
    assert verify(copy).ok


def test_a_tampered_artifact_is_named(written: dict[str, Any], copy: Path) -> None:
    path = copy / "sessions" / written["sid"] / "artifacts" / written["artifact"]
    path.write_bytes(path.read_bytes().replace(b"y", b"z", 1))
    code, out = cli(copy, "--session", written["sid"])
    assert code == 1, out
    (problem,) = verify(copy).sessions[0].problems
    assert problem.where == "artifact" and problem.execution_id == written["ids"][2]
    assert written["artifact"] in problem.message and "hash to" in problem.message


def test_bad_arguments_get_one_line(copy: Path, tmp_path: Path) -> None:
    # Nothing to check is the command's mistake (exit 2, as the CLI's others), not a
    # broken chain (exit 1): a monitor could not tell them apart.
    code, out = cli(copy, "--session", "s_nope")
    assert code == 2, out
    assert out.strip() == f"interp: error: no session 's_nope' in {copy / 'state.db'}"
    code, out = cli(tmp_path / "missing")
    assert code == 2 and "no state.db" in out and "Traceback" not in out
    assert main(["audit", "verify", "--data-dir", str(copy), "--json"]) == 0


def test_a_cell_that_ends_before_its_running_write_runs_is_one_link(tmp_path: Path) -> None:
    """The write of a cell's running state waits behind another write (a busy writer) and
    runs only once the cell has ended, before its notebook cell's digest is made: it saves
    the cell as running, and the final write alone puts the end on record, as one link
    with the digest. Saved as ended, it made a second link, the first without the digest
    (the cost guard counted one INSERT and four SELECTs too many on a loaded machine)."""
    data = tmp_path / "data"
    srv = start_server("local", data, pool_size=0)
    broker = srv.thread.broker
    release = threading.Event()
    try:
        with srv.client() as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            assert run(api, sid, "1")["status"] == "ok"
            live = broker.live[sid]
            finish = live.capture.finish

            async def finish_after_the_writer_caught_up(*args: Any, **kwargs: Any) -> Any:
                # The cell has ended; its digest is made in here. The writer runs the
                # running write now, then this goes on.
                release.set()
                await broker.writer.run(lambda: None)
                return await finish(*args, **kwargs)

            live.capture.finish = finish_after_the_writer_caught_up  # type: ignore[method-assign]
            blocked = broker.writer.later(lambda: release.wait(60))
            done = run(api, sid, "print(6 * 7)")
            assert blocked.result(10) is True
            assert (done["status"], done["stdout"]) == ("ok", "42\n"), done
            with contextlib.closing(sqlite3.connect(data / "state.db")) as db:
                rows = db.execute(
                    "SELECT content_json FROM audit_links WHERE execution_id = ?", (done["id"],)
                ).fetchall()
            links = [json.loads(content) for (content,) in rows]
            assert len(links) == 1, links
            assert links[0]["status"] == "ok" and links[0]["notebook_sha256"], links
    finally:
        release.set()
        srv.thread.stop()
    report = verify(data).to_dict()
    (session,) = report["sessions"]
    assert (session["records"], session["links"], session["cells"]) == (2, 2, 2), session
    assert report["ok"], report


@pytest.mark.parametrize("edit", ["added cell", "swapped cells", "status", "policy"])
def test_notebook_edits_outside_a_cells_digest_are_named(
    written: dict[str, Any], copy: Path, edit: str
) -> None:
    """A cell's digest covers its source and outputs only: a code cell added with no
    execution id, two cells swapped, a denied cell shown as ``ok`` or its decision
    rewritten all verified (found by an outside security review)."""
    sid = written["recovered_sid"]
    path = copy / "sessions" / sid / "notebook.ipynb"
    nb = json.loads(path.read_text())
    code_cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    (denied,) = _denied_cells(nb)
    expected = {
        "added cell": "a code cell with no execution id",
        "swapped cells": "it ran before cell",
        "status": "its status differs from its chain link's",
        "policy": "its policy decision differs from its chain link's",
    }[edit]
    if edit == "added cell":
        forged = {"cell_type": "code", "metadata": {}, "source": "print('forged')"}
        nb["cells"].insert(1, {**forged, "outputs": [], "execution_count": 9})
    elif edit == "swapped cells":
        first, last = nb["cells"].index(code_cells[0]), nb["cells"].index(code_cells[-1])
        nb["cells"][first], nb["cells"][last] = nb["cells"][last], nb["cells"][first]
    elif edit == "status":
        denied["metadata"]["interp"]["status"] = "ok"
    else:
        denied["metadata"]["interp"]["policy"]["decision"] = "allow"
    path.write_text(json.dumps(nb))
    code, out = cli(copy, "--session", sid)
    assert code == 1, out
    problems = verify(copy, sid).sessions[0].problems
    assert any(expected in p.message for p in problems), [p.message for p in problems]


def _notes(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in nb["cells"] if c["cell_type"] == "markdown"]


def test_the_services_notes_are_chained_and_verify(written: dict[str, Any], copy: Path) -> None:
    """Each note the service wrote (a kernel's death, a restart on request, a recovery)
    is a link of the session's notes chain; the untouched notebook verifies, every note
    covered."""
    died, rec = written["died_sid"], written["recovered_sid"]
    code, out = cli(copy, "--session", died)
    assert code == 0, out
    assert f"{died}: ok" in out and "2 notes of which 0 not covered" in out, out
    (session,) = verify(copy, rec).to_dict()["sessions"]
    assert session["ok"] and session["notes"] == 2 and session["notes_not_covered"] == 0
    nb = json.loads((copy / "sessions" / died / "notebook.ipynb").read_text())
    died_note, requested = _notes(nb)
    assert died_note["source"].startswith("**Kernel restarted** after it died (exit:1)")
    assert requested["source"].startswith("**Kernel restarted** on request")
    assert [n["metadata"]["interp"]["audit_note"] for n in (died_note, requested)] == [1, 2]


@pytest.mark.parametrize("edit", ["removed", "edited", "forged", "moved", "event"])
def test_a_tampered_note_is_named(written: dict[str, Any], copy: Path, edit: str) -> None:
    """The outside tester removed the notes of a kernel's death and of a restart, put an
    approval in place of a rebuild's note and forged a restart note: verify said ok."""
    sid = written["died_sid"]
    path = copy / "sessions" / sid / "notebook.ipynb"
    nb = json.loads(path.read_text())
    died_note, _requested = _notes(nb)
    if edit == "removed":
        nb["cells"] = [c for c in nb["cells"] if c["cell_type"] != "markdown"]
        expected = [
            "note 1 is missing from the notebook: '**Kernel restarted** after it died (exit:1)",
            "note 2 is missing from the notebook: '**Kernel restarted** on request",
        ]
    elif edit == "edited":
        died_note["source"] = "**Approved by ops-alice**: the cell below may run os.popen."
        expected = ["note 1 was edited: it reads '**Approved by ops-alice**"]
    elif edit == "forged":
        forged = {
            "cell_type": "markdown",
            "metadata": {"interp": {"event": "restart"}},
            "source": "**Kernel restarted** (requested by operator)",
        }
        nb["cells"].insert(0, forged)
        expected = ["cell 0: a note the service has no record of (added, or copied): "]
    elif edit == "moved":  # the death's note put before the cell it followed
        nb["cells"].remove(died_note)
        nb["cells"].insert(0, died_note)
        expected = ["note 1 was moved: it was written after the cell of execution"]
    else:
        died_note["metadata"]["interp"]["event"] = "recovery"
        expected = ["note 1's metadata (its event) differs from its record"]
    path.write_text(json.dumps(nb))
    code, out = cli(copy, "--session", sid)
    assert code == 1, out
    assert f"{sid}: BROKEN" in out, out
    problems = [p.message for p in verify(copy, sid).sessions[0].problems]
    for message in expected:
        assert any(message in p for p in problems), (message, problems)


def test_notes_removed_with_their_records_are_named(written: dict[str, Any], copy: Path) -> None:
    """The last note removed from the notebook and from the notes chain: the session's
    row still names it as the last note."""
    sid = written["died_sid"]
    path = copy / "sessions" / sid / "notebook.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"].remove(_notes(nb)[-1])
    path.write_text(json.dumps(nb))
    db = sqlite3.connect(copy / "state.db")
    db.execute("DELETE FROM audit_notes WHERE session_id = ? AND n = 2", (sid,))
    db.commit()
    db.close()
    problems = [p.message for p in verify(copy, sid).sessions[0].problems]
    assert problems == [
        "the notes chain ends at note 1, but the session's record says it reached note 2:"
        " its last notes were removed"
    ], problems


def test_notes_of_a_broker_before_the_notes_chain_are_not_covered(
    written: dict[str, Any], copy: Path
) -> None:
    """A session an older broker wrote has no notes chain: its notes are counted as not
    covered, and it verifies as it did."""
    sid = written["died_sid"]
    db = sqlite3.connect(copy / "state.db")
    db.execute("UPDATE sessions SET notes_head = NULL WHERE id = ?", (sid,))
    db.execute("DELETE FROM audit_notes WHERE session_id = ?", (sid,))
    db.commit()
    db.close()
    code, out = cli(copy, "--session", sid)
    assert code == 0, out
    assert "2 notes of which 2 not covered" in out, out


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("started_at", "2020-01-01T00:00:00+00:00"),
        ("duration_ms", 1.0),
        ("state_lost", False),
        ("execution_count", 99),
        ("reason", None),
    ],
)
def test_a_cells_metadata_that_differs_from_its_record_is_named(
    written: dict[str, Any], copy: Path, field: str, value: Any
) -> None:
    """The cell after the kernel's death said state_lost true, as its record does; set to
    false (or its times, its count changed) verify said ok, and the notebook no longer
    showed that state was lost."""
    sid = written["died_sid"]
    path = copy / "sessions" / sid / "notebook.ipynb"
    nb = json.loads(path.read_text())
    (cell,) = [
        c
        for c in nb["cells"]
        if c["metadata"].get("interp", {}).get("execution_id") == written["lost"]
    ]
    if field == "reason":  # the death's cell: its reason exit:1 removed
        index = nb["cells"].index(cell) - 2
        cell = nb["cells"][index]
        assert cell["metadata"]["interp"]["reason"] == "exit:1", cell
        del cell["metadata"]["interp"]["reason"]
    elif field == "execution_count":
        cell["execution_count"] = value
    else:
        assert cell["metadata"]["interp"]["state_lost"] is True
        cell["metadata"]["interp"][field] = value
    path.write_text(json.dumps(nb))
    code, out = cli(copy, "--session", sid)
    assert code == 1, out
    (problem,) = verify(copy, sid).sessions[0].problems
    assert problem.message.endswith(f"its {field} differs from its chain link's"), problem
    assert problem.execution_id == cell["metadata"]["interp"]["execution_id"]
