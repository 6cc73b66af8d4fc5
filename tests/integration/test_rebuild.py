"""Rebuild, fork and recover sessions from their notebooks."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.conftest import OTHER_KEY, Server, run


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
            f"**Rebuilt from session `{src}`**: 3 cells 0, 1, 2 of its notebook re-run below"
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
