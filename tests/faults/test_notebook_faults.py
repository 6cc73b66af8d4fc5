"""A session's notebook file damaged or removed on disk (issue 14 item 7).

What the service does: while a session runs, its notebook in memory is the record; a file
found changed or removed by someone else is noticed at the next write, logged, and
rewritten whole from memory, so no cell is lost. While the broker is down, a damaged file
does not stop recovery: it is kept aside as ``notebook.ipynb.corrupt-<time>``, the session
reattaches with its state, and its new notebook says so in ``metadata.interp.recovery_note``.
A closed session's notebook that is gone or damaged answers 404 ``notebook_not_found``
with a message, never a traceback. Other sessions are unaffected throughout.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import run
from tests.faults.conftest import Broker, Canary, assert_one_final_record_each, wait_for

GARBAGE = '{"cells": [ this is not json'


def _notebook_file(broker: Broker, sid: str) -> Path:
    return broker.session_dir(sid) / "notebook.ipynb"


def _file_cells(broker: Broker, sid: str) -> list[str] | None:
    """Execution ids of the cells in the notebook file on disk; None if it is no notebook."""
    try:
        nb = json.loads(_notebook_file(broker, sid).read_text())
    except (OSError, ValueError):
        return None
    return [
        c["metadata"]["interp"]["execution_id"] for c in nb["cells"] if c["cell_type"] == "code"
    ]


def test_notebook_damaged_or_removed_while_the_session_runs(
    brokers: Callable[..., Broker],
) -> None:
    broker = brokers("local")
    with broker.client() as api:
        canary = Canary(api)
        damaged, removed = (api.post("/v1/sessions", json={}).json()["id"] for _ in range(2))
        ids: dict[str, list[str]] = {}
        for sid in (damaged, removed):
            ids[sid] = [run(api, sid, f"v = '{sid}'")["id"]]
            wait_for(lambda s=sid: _file_cells(broker, s) == ids[s], what="first save")
        _notebook_file(broker, damaged).write_text(GARBAGE)
        _notebook_file(broker, removed).unlink()
        for sid in (damaged, removed):
            ex = run(api, sid, "v")
            assert ex["status"] == "ok" and ex["outputs"][0]["data"]["text/plain"] == f"'{sid}'"
            ids[sid].append(ex["id"])
            # Rewritten whole from memory: the earlier cell is back, the new one is there.
            wait_for(lambda s=sid: _file_cells(broker, s) == ids[s], what="notebook rewritten")
            served = api.get(f"/v1/sessions/{sid}/notebook").json()
            assert [
                c["metadata"]["interp"]["execution_id"]
                for c in served["cells"]
                if c["cell_type"] == "code"
            ] == ids[sid]
            assert_one_final_record_each(broker, sid, dict.fromkeys(ids[sid], "ok"))
        assert broker.logged("was changed outside the broker")
        assert broker.logged("was removed outside the broker")
        canary.check()


def test_notebook_of_a_closed_session_gone_or_damaged_is_a_clear_404(
    brokers: Callable[..., Broker],
) -> None:
    broker = brokers("local")
    with broker.client() as api:
        canary = Canary(api)
        sids = [api.post("/v1/sessions", json={}).json()["id"] for _ in range(2)]
        for sid in sids:
            run(api, sid, "1")
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            assert api.get(f"/v1/sessions/{sid}/notebook").status_code == 200
        _notebook_file(broker, sids[0]).unlink()
        _notebook_file(broker, sids[1]).write_bytes(b"\xff\xfe garbage")
        for sid, words in zip(sids, ("removed on disk", "damaged"), strict=True):
            resp = api.get(f"/v1/sessions/{sid}/notebook")
            assert resp.status_code == 404, resp.text
            body = resp.json()
            assert body["error"]["type"] == "notebook_not_found"
            assert words in body["error"]["message"]
        canary.check()


@pytest.mark.docker
def test_notebook_damaged_or_removed_while_the_broker_is_down(
    brokers: Callable[..., Broker],
) -> None:
    broker = brokers("docker")
    with broker.client() as api:
        canary = Canary(api)
        damaged, removed = (api.post("/v1/sessions", json={}).json()["id"] for _ in range(2))
        before = {sid: run(api, sid, f"v = '{sid}'")["id"] for sid in (damaged, removed)}
    broker.kill()
    _notebook_file(broker, damaged).write_text(GARBAGE)
    _notebook_file(broker, removed).unlink()
    broker = brokers("docker")
    with broker.client() as api:
        for sid in (damaged, removed, canary.sid):
            wait_for(
                lambda s=sid: api.get(f"/v1/sessions/{s}").json()["status"] == "idle",
                what=f"session {sid} reattached",
            )
        canary.api = api
        canary.check()
        kept = list(broker.session_dir(damaged).glob("notebook.ipynb.corrupt-*"))
        assert len(kept) == 1 and kept[0].read_text() == GARBAGE
        for sid, why in ((damaged, "unreadable"), (removed, "missing")):
            # The kernel and its state survived; the earlier cells' records too.
            ex = run(api, sid, "v")
            assert ex["status"] == "ok" and ex["outputs"][0]["data"]["text/plain"] == f"'{sid}'"
            assert api.get(f"/v1/sessions/{sid}/executions/{before[sid]}").json()["status"] == "ok"
            nb = api.get(f"/v1/sessions/{sid}/notebook").json()
            assert why in nb["metadata"]["interp"]["recovery_note"]
            code = [c for c in nb["cells"] if c["cell_type"] == "code"]
            # The earlier cell is written back from the store into the new notebook.
            assert [c["metadata"]["interp"]["execution_id"] for c in code] == [
                before[sid],
                ex["id"],
            ]
            assert code[0]["metadata"]["interp"]["restored_from"] == "store"
            assert_one_final_record_each(broker, sid, {before[sid]: "ok", ex["id"]: "ok"})
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
        assert broker.logged("notebook was unreadable")


def test_a_notebook_that_cannot_be_written_is_surfaced_then_healed(
    brokers: Callable[..., Broker],
) -> None:
    """R-12: a failed notebook write is never silent. The cell's result stands; the session
    then refuses new code with 507 audit_degraded (Retry-After) and /healthz says degraded,
    until the notebook can be written again; other sessions are unaffected."""
    broker = brokers("local")
    with broker.client() as api:
        canary = Canary(api)
        sid = api.post("/v1/sessions", json={}).json()["id"]
        first = run(api, sid, "v = 1")["id"]
        wait_for(lambda: _file_cells(broker, sid) == [first], what="first save")
        # A directory where the file goes: the atomic replace fails (even for root).
        path = _notebook_file(broker, sid)
        path.unlink()
        path.mkdir()
        (path / "blocker").write_text("x")
        second = run(api, sid, "v + 1")
        assert second["status"] == "ok"
        wait_for(lambda: api.get("/healthz").json()["status"] == "degraded", what="degraded")
        refused = api.post(f"/v1/sessions/{sid}/execute", json={"code": "v"})
        assert refused.status_code == 507, refused.text
        assert refused.json()["error"]["type"] == "audit_degraded"
        assert int(refused.headers["Retry-After"]) > 0
        canary.check()
        (path / "blocker").unlink()
        path.rmdir()
        third = run(api, sid, "v + 2")
        assert third["status"] == "ok" and third["outputs"][0]["data"]["text/plain"] == "3"
        ids = [first, second["id"], third["id"]]
        wait_for(lambda: _file_cells(broker, sid) == ids, what="notebook healed")
        assert api.get("/healthz").json()["status"] == "ok"
        assert broker.logged("notebook write failed")
        # One traceback for the failure, a line for each retry, one when it heals.
        assert sum("Traceback" in line for line in broker.log) == 1, broker.log
        assert broker.logged("notebook write failed again (")
        assert broker.logged("the notebook is written again")
        assert_one_final_record_each(broker, sid, dict.fromkeys(ids, "ok"))
