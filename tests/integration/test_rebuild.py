"""Rebuild, fork and recover sessions from their notebooks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from interpreter.models import RebuildReport
from tests.conftest import OTHER_KEY, Server, await_status, run

#: An input file, and a notebook whose first cell reads it and whose later cells use it.
SALES_CSV = b"region,amount\nnorth,10\nsouth,5\nnorth,7\n"


def _notebook(*sources: str) -> dict[str, Any]:
    """An nbformat v4.5 notebook of code cells, as a person or another tool writes it."""
    cells = [
        {
            "cell_type": "code",
            "id": f"c{i}",
            "metadata": {},
            "execution_count": None,
            "outputs": [],
            "source": source,
        }
        for i, source in enumerate(sources)
    ]
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}


SALES_NOTEBOOK = _notebook(
    "import pandas as pd\nsales = pd.read_csv('sales.csv')",
    "total = int(sales['amount'].sum())",
    "by_region = sales.groupby('region')['amount'].sum().to_dict()",
)


def _value(api: httpx.Client, sid: str, expr: str) -> str:
    result = run(api, sid, expr)
    assert result["status"] == "ok", result["error"]
    text: str = result["outputs"][0]["data"]["text/plain"]
    return text


def test_fork_from_session_replays_good_cells_and_copies_files(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    src = new_session()
    api.put(f"/v1/sessions/{src}/files/input.csv", content=b"a\n1\n2\n")
    run(api, src, "import pandas as pd\ndf = pd.read_csv('input.csv')")
    run(api, src, "undefined_name")  # an error: re-run, and expected to fail again
    run(api, src, "total = int(df['a'].sum())\nopen('made.txt', 'w').write('k')")
    resp = api.post("/v1/sessions", json={"from_session": src})
    assert resp.status_code == 201, resp.text
    fork = resp.json()
    rebuild = fork["rebuild"]
    assert rebuild["source"] == f"session:{src}"
    assert (rebuild["cells_total"], rebuild["cells_ran"], rebuild["cells_skipped"]) == (3, 3, 0)
    assert (rebuild["failed"], rebuild["errors_again"], rebuild["not_rerun"]) == ([], [1], [])
    fid = fork["id"]
    try:
        assert _value(api, fid, "total") == "3"
        names = {e["name"] for e in api.get(f"/v1/sessions/{fid}/files").json()["entries"]}
        assert {"input.csv", "made.txt"} <= names
        nb = api.get(f"/v1/sessions/{fid}/notebook").json()
        assert nb["metadata"]["interp"]["source"] == {"from": f"session:{src}"}
        note, *code = nb["cells"]
        assert note["cell_type"] == "markdown" and note["source"].startswith(
            f"**Rebuilt from session `{src}`**: 3 cells (In [1], In [2], In [3]) of its notebook"
            " re-run below"
        )
        assert [c["metadata"]["interp"].get("replay_of") for c in code] == [0, 1, 2, None]
        # The source is untouched.
        assert _value(api, src, "total") == "3"
    finally:
        api.delete(f"/v1/sessions/{fid}")


def test_rebuild_from_notebook_json_reports_failures(api: httpx.Client) -> None:
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": "# setup"},
            {
                "cell_type": "code",
                "id": "c1",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": "base = 10",
            },
            {
                "cell_type": "code",
                "id": "c2",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": "missing_function()",
            },
            {
                "cell_type": "code",
                "id": "c3",
                "metadata": {},
                "execution_count": None,
                "outputs": [],
                "source": "result = base * 2",
            },
        ],
    }
    resp = api.post("/v1/sessions", json={"from_notebook": notebook})
    assert resp.status_code == 201, resp.text
    session = resp.json()
    try:
        assert session["rebuild"]["cells_ran"] == 3
        # Cells are named by their index in the notebook (the markdown cell counts), with
        # the re-run's execution, so a client can find the cell and the error.
        assert session["rebuild"]["failed"] == [2]
        (failed,) = session["rebuild"]["cells"]
        assert (failed["index"], failed["status"], failed["recorded_status"]) == (2, "error", "ok")
        error = api.get(
            f"/v1/sessions/{session['id']}/executions/{failed['rerun_execution_id']}"
        ).json()
        assert error["code"] == "missing_function()"
        # The report says why it failed, and the summary a model reads says so first.
        assert failed["error"] == "NameError: name 'missing_function' is not defined"
        summary = RebuildReport.model_validate(session["rebuild"]).summary()
        assert "the state is NOT fully restored" in summary
        assert "`missing_function()` failed (execution ex_" in summary
        assert summary.endswith("NameError: name 'missing_function' is not defined.")
        assert _value(api, session["id"], "result") == "20"
    finally:
        api.delete(f"/v1/sessions/{session['id']}")


def test_bad_rebuild_sources(
    server: Server, api: httpx.Client, new_session: Callable[..., str]
) -> None:
    assert api.post("/v1/sessions", json={"from_notebook": {"cells": "no"}}).status_code == 422
    assert api.post("/v1/sessions", json={"from_session": "s_missing"}).status_code == 404
    theirs = new_session(key=OTHER_KEY)
    assert api.post("/v1/sessions", json={"from_session": theirs}).status_code == 404
    both = {"from_session": theirs, "from_notebook": {"cells": []}}
    assert api.post("/v1/sessions", json=both).status_code == 422


def test_recover_after_kernel_death(api: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session()
    run(api, sid, "data = [1, 2, 3]")
    run(api, sid, "data.append(4)")
    died = run(api, sid, "import os\nos._exit(1)")
    assert died["status"] == "kernel_died"
    assert run(api, sid, "data")["error"]["ename"] == "NameError"
    resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
    assert resp.status_code == 200, resp.text
    report = resp.json()["rebuild"]
    assert report["source"] == f"session:{sid}" and report["failed"] == []
    assert _value(api, sid, "data") == "[1, 2, 3, 4]"


def test_a_cell_that_defined_names_then_failed_is_re_run_by_fork_and_recover(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    # The common agent pattern: define, then fail on a test call; the next cell works.
    src = new_session()
    define = "rates = {'EUR': 1.5}\ndef convert(x, cur):\n    return x * rates[cur]\n"
    assert run(api, src, define + "convert(10, 'USD')")["error"]["ename"] == "KeyError"
    assert _value(api, src, "convert(10, 'EUR')") == "15.0"
    resp = api.post("/v1/sessions", json={"from_session": src})
    assert resp.status_code == 201, resp.text
    fork = resp.json()
    try:
        rebuild = fork["rebuild"]
        # The error raised again is expected, not a failure of the rebuild.
        assert (rebuild["cells_ran"], rebuild["failed"], rebuild["errors_again"]) == (2, [], [0])
        assert _value(api, fork["id"], "convert(10, 'EUR')") == "15.0"
    finally:
        api.delete(f"/v1/sessions/{fork['id']}")
    resp = api.post(f"/v1/sessions/{src}/restart", json={"recover": True})
    assert resp.status_code == 200, resp.text
    rebuild = resp.json()["rebuild"]
    assert (rebuild["failed"], rebuild["errors_again"]) == ([], [0])
    assert _value(api, src, "convert(10, 'EUR')") == "15.0"


def _rebuild(api: httpx.Client, sid: str, notebook: Any, **params: Any) -> httpx.Response:
    return api.post(f"/v1/sessions/{sid}/rebuild", json={"notebook": notebook}, params=params)


def _all_matched(report: dict[str, Any], cells: int) -> None:
    assert report["source"] == "notebook"
    assert report["cells_total"] == report["cells_ran"] == cells
    assert report["cells_skipped"] == 0
    assert (report["failed"], report["errors_again"], report["not_rerun"]) == ([], [], [])
    assert report["cells"] == []


def test_rebuild_a_session_from_a_notebook_that_reads_an_uploaded_file(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    assert api.put(f"/v1/sessions/{sid}/files/sales.csv", content=SALES_CSV).status_code == 201
    resp = _rebuild(api, sid, SALES_NOTEBOOK)
    assert resp.status_code == 200, resp.text
    session = resp.json()
    assert (session["id"], session["status"]) == (sid, "idle")
    _all_matched(session["rebuild"], 3)
    assert api.get(f"/v1/sessions/{sid}").json()["rebuild"] == session["rebuild"]
    # The state is the notebook's: what a later execute sees.
    assert _value(api, sid, "total, by_region") == "(22, {'north': 17, 'south': 5})"
    nb = api.get(f"/v1/sessions/{sid}/notebook").json()
    note, *code = nb["cells"]
    assert note["source"].startswith(
        "**Rebuilt from a notebook**: 3 cells (cell #0, cell #1, cell #2)"
    )
    assert [c["metadata"]["interp"].get("replay_of") for c in code] == [0, 1, 2, None]


def test_from_notebook_at_creation_fails_on_input_files_so_rebuild_after_uploading(
    api: httpx.Client,
) -> None:
    """Why the endpoint exists: creation replays the notebook before anything can be
    uploaded, so its first cell cannot read its input and every later cell fails."""
    resp = api.post("/v1/sessions", json={"from_notebook": SALES_NOTEBOOK})
    assert resp.status_code == 201, resp.text
    created = resp.json()
    sid = created["id"]
    try:
        report = created["rebuild"]
        assert (report["cells_ran"], report["failed"]) == (3, [0, 1, 2])
        first = report["cells"][0]
        assert (first["index"], first["status"], first["recorded_status"]) == (0, "error", "ok")
        failure = api.get(f"/v1/sessions/{sid}/executions/{first['rerun_execution_id']}").json()
        assert failure["error"]["ename"] == "FileNotFoundError"
        # The same session, once its input is uploaded: every cell matches.
        assert api.put(f"/v1/sessions/{sid}/files/sales.csv", content=SALES_CSV).status_code == 201
        resp = _rebuild(api, sid, SALES_NOTEBOOK)
        assert resp.status_code == 200, resp.text
        _all_matched(resp.json()["rebuild"], 3)
        assert _value(api, sid, "total") == "22"
    finally:
        api.delete(f"/v1/sessions/{sid}")


def test_rebuild_refusals_run_nothing_and_an_invalid_notebook_gets_creations_message(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    stale = _rebuild(api, sid, SALES_NOTEBOOK, generation=7)
    assert stale.status_code == 409, stale.text
    assert stale.json()["error"]["type"] == "generation_mismatch"
    for bad in ({"cells": "no"}, {"nbformat": 3, "cells": []}, {"nbformat": 4, "cells": [1]}):
        refused = _rebuild(api, sid, bad)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "validation_error"
        # Creation's message, naming the field this request sent.
        at_creation = api.post("/v1/sessions", json={"from_notebook": bad})
        assert at_creation.status_code == 422
        expected = at_creation.json()["error"]["message"]
        assert expected.startswith("from_notebook is not a valid nbformat v4 notebook: ")
        assert error["message"] == expected.replace("from_notebook", "notebook", 1)
    assert (
        "convert it to version 4" in _rebuild(api, sid, {"nbformat": 3}).json()["error"]["message"]
    )
    for body in ({}, {"notebook": "x"}, {"notebook": SALES_NOTEBOOK, "recover": True}):
        assert api.post(f"/v1/sessions/{sid}/rebuild", json=body).status_code == 422
    # Nothing ran, nothing was written down, and the session works.
    assert _value(api, sid, "1 + 1") == "2"
    assert api.get(f"/v1/sessions/{sid}").json()["rebuild"] is None
    cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
    assert [c["source"] for c in cells] == ["1 + 1"]


def test_rebuild_of_another_keys_or_a_deleted_session(
    server: Server, api: httpx.Client, new_session: Callable[..., str]
) -> None:
    theirs = new_session(key=OTHER_KEY)
    for sid in (theirs, "s_missing"):
        resp = _rebuild(api, sid, SALES_NOTEBOOK)
        assert resp.status_code == 404, resp.text
        assert resp.json()["error"]["type"] == "session_not_found"
    with server.client(OTHER_KEY) as other:  # untouched: nothing ran in it
        assert other.get(f"/v1/sessions/{theirs}").json()["execution_count"] == 0
    gone = new_session()
    assert api.delete(f"/v1/sessions/{gone}").status_code == 204
    resp = _rebuild(api, gone, SALES_NOTEBOOK)
    execute = api.post(f"/v1/sessions/{gone}/execute", json={"code": "1"})
    assert (resp.status_code, execute.status_code) == (409, 409)
    assert resp.json() == execute.json()
    assert resp.json()["error"]["type"] == "session_closed"


def test_rebuild_refuses_a_busy_session_and_cells_sent_meanwhile_wait_for_all_of_it(
    server: Server, api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    with api.stream(
        "POST", f"/v1/sessions/{sid}/execute", json={"code": "import time\ntime.sleep(30)"}
    ) as resp:
        running_id = resp.headers["X-Execution-Id"]
        await_status(api, sid, running_id, {"running"})
        refused = _rebuild(api, sid, SALES_NOTEBOOK)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["type"] == "session_running" and error["execution_id"] == running_id
        assert "quiet session" in error["message"]
        api.post(f"/v1/sessions/{sid}/interrupt", params={"execution_id": running_id})
    await_status(api, sid, running_id, {"interrupted"})

    slow = _notebook("import time\ntime.sleep(2)\nstep = 1", "step += 1")
    answers: list[httpx.Response] = []

    def rebuild() -> None:
        with server.client() as client:
            answers.append(_rebuild(client, sid, slow))

    thread = threading.Thread(target=rebuild)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while api.get(f"/v1/sessions/{sid}").json()["status"] != "busy":  # its first cell
            assert time.monotonic() < deadline, "the rebuild never started"
            time.sleep(0.05)
        second = _rebuild(api, sid, slow)
        assert second.status_code == 409, second.text
        assert "being restarted or rebuilt" in second.json()["error"]["message"]
        # Sent while the rebuild runs: it runs after all of it, not between its cells.
        assert _value(api, sid, "step") == "2"
    finally:
        thread.join(60)
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    _all_matched(answer.json()["rebuild"], 2)

    # A second rebuild, once the first is over, is allowed; its report replaces the first.
    resp = _rebuild(api, sid, _notebook("step += 10", "undefined_name"))
    assert resp.status_code == 200, resp.text
    report = resp.json()["rebuild"]
    assert (report["cells_ran"], report["failed"]) == (2, [1])
    assert api.get(f"/v1/sessions/{sid}").json()["rebuild"] == report
    assert _value(api, sid, "step") == "12"


def _defined(api: httpx.Client, sid: str, *names: str) -> list[bool]:
    shown = _value(api, sid, f"[n in globals() for n in {list(names)!r}]")
    return [part.strip() == "True" for part in shown.strip("[]").split(",")]


def test_recover_and_fork_bring_back_the_state_since_the_last_restart_on_request(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    # Before, both replayed every cell since the session began: a name the user had
    # cleared with a plain restart came back.
    sid = new_session()
    run(api, sid, "secret = 'cleared'")
    assert api.post(f"/v1/sessions/{sid}/restart", json={}).status_code == 200
    run(api, sid, "kept = 2")
    resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
    assert resp.status_code == 200, resp.text
    report = resp.json()["rebuild"]
    assert (report["cells_ran"], report["failed"]) == (1, []), report
    # The report says why the other cell was skipped, as the notebook's note does (it
    # gave only a count; found by an outside tester).
    assert report["skipped_because"] == {"state_lost": 1}, report
    summary = RebuildReport.model_validate(report).summary()
    assert "skipped: 1 cell from before a restart that cleared the state" in summary
    assert _defined(api, sid, "secret", "kept") == [False, True]
    fork = new_session(from_session=sid)
    assert _defined(api, fork, "secret", "kept") == [False, True]
    notebook = api.get(f"/v1/sessions/{sid}/notebook").json()
    note = next(c for c in notebook["cells"] if c["source"].startswith("**Recovery**"))
    assert (
        "not re-run: In [1] `secret = 'cleared'`, whose state a later restart on request"
        in (note["source"])
    )
    # Its event, and its number in the session's notes chain (the audit covers it).
    assert note["metadata"]["interp"] == {"event": "recovery", "audit_note": 3}
    # A kernel that died is not a state cleared on purpose: recovering it is the point.
    run(api, sid, "import os; os._exit(1)")
    assert api.post(f"/v1/sessions/{sid}/restart", json={"recover": True}).status_code == 200
    assert _defined(api, sid, "secret", "kept") == [False, True]


def test_a_cell_that_called_exit_is_never_re_run(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    # Before, each recovery re-ran exit(): the kernel restarted once more (two generations
    # per recovery, counted against the restart limit until the session was closed), the
    # report said nothing failed, and the cells before exit() were lost again anyway.
    sid = new_session()
    run(api, sid, "before = 1")
    assert run(api, sid, "exit()")["reason"] == "exit"
    run(api, sid, "after = 2")
    generation = api.get(f"/v1/sessions/{sid}").json()["generation"]
    for _ in range(6):  # past the restart limit of 5 had the restarts counted
        resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
        assert resp.status_code == 200, resp.text
        assert resp.json()["rebuild"]["failed"] == []
        generation += 1
        assert resp.json()["generation"] == generation
    assert _defined(api, sid, "before", "after") == [False, True]
    assert _defined(api, new_session(from_session=sid), "before", "after") == [False, True]
    # A notebook from elsewhere does not say that its cell called exit(): the re-run does,
    # and the report names it as failed.
    foreign = _notebook("before = 1", "exit()", "after = 2")
    resp = api.post("/v1/sessions", json={"from_notebook": foreign})
    assert resp.status_code == 201, resp.text
    assert resp.json()["rebuild"]["failed"] == [1]
    api.delete(f"/v1/sessions/{resp.json()['id']}")


def test_a_recovery_whose_kernel_dies_stops_and_says_the_state_is_gone(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    """The kernel died while a recovery re-ran its second cell: it went on re-running the
    rest on the fresh kernel, without what the cells before had rebuilt, and reported
    "all re-ran; one failed" (found by an outside operations tester)."""
    sid = new_session()
    run(api, sid, "a = 1")
    run(api, sid, "import os\nif os.path.exists('die'):\n    os._exit(1)\nb = 2")
    run(api, sid, "c = a + b")
    assert api.put(f"/v1/sessions/{sid}/files/die", content=b"").status_code == 201
    resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
    assert resp.status_code == 200, resp.text
    report = resp.json()["rebuild"]
    assert (report["cells_total"], report["cells_ran"], report["stopped"]) == (3, 2, "exit:1")
    summary = RebuildReport.model_validate(report).summary()
    assert "the re-runs STOPPED at In [2] `import os`" in summary, summary
    assert "1 cell after it did not run" in summary, summary
    # Nothing rebuilt is left, and the next cell is told.
    after = run(api, sid, "a")
    assert (after["status"], after["state_lost"]) == ("error", True), after
    notes = [
        c["source"]
        for c in api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
        if c["cell_type"] == "markdown"
    ]
    assert any(n.startswith("**Recovery stopped**: the kernel was replaced") for n in notes)
