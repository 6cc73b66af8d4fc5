"""The regression guard: the broker's own work per execution does not grow with the
session's length (issue 10, item 4).

One session on the local backend runs 1,000 cells through the HTTP API, a matplotlib plot
every 10th. Over cells 1-50 and cells 951-1000 the test counts, at the message level, what
the broker does per execution: SQLite statements and transactions (the store's trace
callback) and bytes of notebook JSON serialised. Counts, not clocks: nothing here depends
on the machine's speed or load. The broker is this test's own: the store's trace sees
every statement of the broker, and one shared with other tests could be finishing their
work.

Counts that changed with load were a bug, not noise: a loaded CI run once counted one
INSERT and four SELECTs too many in the first window. The write of a cell's running state
read the cell on the writer's thread when it ran, and when the writer was behind it found
the cell ended: it saved the end without the notebook cell's digest, a chain link of its
own (test_audit.py, ``test_a_cell_that_ends_before_its_running_write_runs_is_one_link``).
Writes now save a copy taken as they are issued.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Server, start_server

CELLS = 1000
WINDOW = 50
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [{i}, 1, 2])\nplt.show()"


def code_for(i: int) -> str:
    return PLOT.format(i=i) if i % 10 == 0 else f"x = {i} * 2\nx"


@pytest.fixture
def local_server() -> Iterator[Server]:
    """A local-backend broker that serves this test alone (a short data directory, as the
    shared ones have: its kernels use unix sockets)."""
    data_dir = Path(tempfile.mkdtemp(prefix="interp-cost-"))
    srv = start_server("local", data_dir)
    yield srv
    srv.thread.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.slow
def test_broker_work_per_execution_does_not_grow_with_the_session(local_server: Server) -> None:
    broker = local_server.thread.broker
    statements: Counter[str] = Counter()
    #: The write transaction under way (the store's writes run on its one writer thread).
    tx: list[str] = []

    def kind(sql: str) -> str:
        return sql.split(None, 1)[0].upper()

    def trace(sql: str) -> None:
        if kind(sql) == "BEGIN" or tx:
            tx.append(sql)
            if kind(sql) in ("COMMIT", "ROLLBACK"):
                done = tx[1:-1]
                # The cull loop's expiry of idempotency keys (every `cull_interval_s`, where
                # it falls) is the broker's housekeeping, not a cell's work.
                if not all("idempotency" in statement for statement in done):
                    statements.update(kind(statement) for statement in tx)
                tx.clear()
            return
        statements[kind(sql)] += 1

    def settle() -> dict[str, int]:
        """Wait until every write issued so far is done; return the counts so far."""
        local_server.thread.call(live.notebook.flush())
        local_server.thread.call(broker.writer.run(lambda: None))
        return {
            **statements,
            "notebook_bytes": live.notebook.recorder.serialised_cell_bytes,
            "progress_writes": live.progress_writes,
        }

    with local_server.client() as api:
        resp = api.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        live = broker.live[sid]
        local_server.thread.call(
            broker.writer.run(lambda: broker.store._db.set_trace_callback(trace))
        )
        marks: dict[int, dict[str, int]] = {}
        try:
            for i in range(1, CELLS + 1):
                if i in (1, WINDOW + 1, CELLS - WINDOW + 1):
                    marks[i] = settle()
                if i == WINDOW // 2:
                    # What the cull loop does every 30 s, here where it counts every time.
                    local_server.thread.call(broker.idempotency.expire())
                out = api.post(f"/v1/sessions/{sid}/execute", json={"code": code_for(i)})
                assert out.status_code == 200, out.text
                assert out.json()["status"] == "ok", out.text
            marks[CELLS + 1] = settle()
        finally:
            local_server.thread.call(
                broker.writer.run(lambda: broker.store._db.set_trace_callback(None))
            )
            api.delete(f"/v1/sessions/{sid}")

    def per_exec(start: int, end: int) -> dict[str, float]:
        a, b = marks[start], marks[end]
        return {k: (b.get(k, 0) - a.get(k, 0)) / WINDOW for k in b}

    early = per_exec(1, WINDOW + 1)
    late = per_exec(CELLS - WINDOW + 1, CELLS + 1)
    for window in (early, late):
        # A cell that runs past 2 s and prints has its output so far written (one more
        # transaction: BEGIN, the upsert, COMMIT), as often as its time allows: a slow
        # first import of matplotlib does, on a busy machine. Not a cost of the cell count.
        progress = window.pop("progress_writes", 0)
        for key in ("BEGIN", "INSERT", "COMMIT"):
            window[key] = round(window.get(key, 0) - progress, 6)
    report: dict[str, Any] = {"cells 1-50": early, f"cells {CELLS - WINDOW + 1}-{CELLS}": late}
    print(json.dumps(report, indent=1))
    # Each window has five plots, so the same mix of work.
    for key in ("INSERT", "UPDATE", "COMMIT", "notebook_bytes"):
        assert early.get(key, 0) > 0, (key, report)
        assert late.get(key, 0) <= 1.2 * early[key], (key, report)
    # Every statement kind, reads included, stays flat too.
    for key, value in late.items():
        assert value <= 1.2 * early.get(key, 0) + 0.1, (key, report)
    # Two write transactions per execution: running, which puts it on record before its id
    # is handed out (a cell of an idle session is never written as queued first); finished,
    # with its chain link and the session's activity.
    assert early["COMMIT"] <= 2, report
    assert late["COMMIT"] <= 2, report
    # One UPDATE, the session's activity: the chain's hashes go into the row's upsert. Ten
    # statements in all: two transactions (BEGIN, COMMIT) holding the two upserts, the
    # chain's link with its two reads, and the activity.
    for window in (early, late):
        assert window["UPDATE"] <= 1, report
        total = sum(v for k, v in window.items() if k != "notebook_bytes")
        assert total <= 10.1, report
