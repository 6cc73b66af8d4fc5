"""A requested restart against what else goes on in the session: cells queued behind it,
cells other clients send during its recovery, a delete, a timeout's escalation. Real
local kernels; each test waits for states (files a cell writes, statuses), not for time."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import Server, run

#: A cell that says it started, then waits for the file ``go`` in the workspace.
WAIT_FOR_GO = (
    "import os, time\nopen('started', 'w').close()\n"
    "while not os.path.exists('go'):\n    time.sleep(0.02)"
)
#: A cell that ignores SIGINT (saying so when one comes) and sleeps.
IGNORES_SIGINT = (
    "import signal, time\n"
    "signal.signal(signal.SIGINT, lambda *a: print('got SIGINT', flush=True))\n"
    "time.sleep(30)"
)


@pytest.fixture
def api(local_server: Server) -> Iterator[httpx.Client]:
    with local_server.client() as client:
        yield client


@pytest.fixture
def session(local_server: Server, api: httpx.Client) -> Iterator[str]:
    sid: str = api.post("/v1/sessions", json={}).json()["id"]
    yield sid
    api.delete(f"/v1/sessions/{sid}")


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8) as executor:
        yield executor


def wait_until(check: Callable[[], Any], what: str, within_s: float = 30) -> Any:
    deadline = time.monotonic() + within_s
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def exists(api: httpx.Client, sid: str, path: str) -> bool:
    return api.get(f"/v1/sessions/{sid}/files/{path}").status_code == 200


def execution(api: httpx.Client, sid: str, eid: str) -> dict[str, Any]:
    result: dict[str, Any] = api.get(f"/v1/sessions/{sid}/executions/{eid}").json()
    return result


def ended(api: httpx.Client, sid: str, eid: str) -> dict[str, Any]:
    result: dict[str, Any] = wait_until(
        lambda: (e := execution(api, sid, eid))["status"] not in ("queued", "running") and e,
        f"execution {eid} to end",
    )
    return result


def submit(stack: contextlib.ExitStack, api: httpx.Client, sid: str, code: str, **body: Any) -> str:
    """Send a cell and return its id at once (its answer is not awaited)."""
    resp = stack.enter_context(
        api.stream("POST", f"/v1/sessions/{sid}/execute", json={"code": code, **body})
    )
    assert resp.status_code == 200, resp.read()
    eid: str = resp.headers["X-Execution-Id"]
    return eid


def code_cells(api: httpx.Client, sid: str) -> list[tuple[str, str]]:
    """(cell type, source) of the session's notebook, in order."""
    nb = api.get(f"/v1/sessions/{sid}/notebook").json()
    return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def test_cells_kept_by_a_recovery_run_after_the_re_run_cells(
    api: httpx.Client, session: str
) -> None:
    """Exploration bug 1: cells queued behind ``restart(recover=True)`` (kept by default)
    ran on the fresh empty kernel before the re-run cells, failing with NameError and
    ``state_lost`` false. They run after the recovery and see the recovered state."""
    sid = session
    first = run(api, sid, "x = 20")
    assert first["status"] == "ok", first
    with contextlib.ExitStack() as stack:
        running = submit(stack, api, sid, "import time\ntime.sleep(30)")
        wait_until(lambda: execution(api, sid, running)["status"] == "running", "running")
        kept = [submit(stack, api, sid, f"x + {n}") for n in (1, 2)]
        resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
        assert resp.status_code == 200, resp.text
        assert resp.json()["rebuild"]["cells_ran"] == 1, (
            resp.json()["rebuild"],
            code_cells(api, sid),
        )
        results = [ended(api, sid, eid) for eid in kept]
    assert [(r["status"], r["state_lost"]) for r in results] == [("ok", False)] * 2, results
    assert [r["outputs"][0]["data"]["text/plain"] for r in results] == ["21", "22"]
    sources = [source for kind, source in code_cells(api, sid) if kind == "code"]
    assert sources[-2:] == ["x + 1", "x + 2"]  # after the re-run cell, not before it


def test_cells_sent_during_a_recovery_wait_for_all_of_it_and_the_queue_bound_spares_it(
    local_server: Server, api: httpx.Client, session: str, pool: ThreadPoolExecutor
) -> None:
    """Exploration bugs 1 and 2: a cell another client sent while a recovery re-ran cells
    ran between them and saw half the state; and the re-run cells were subject to the
    queue bound, so a full queue made the restart answer 429 after it had thrown the
    state away. Here the queue is filled while the first re-run cell runs: every re-run
    cell still runs, first, and the clients' cells see all the recovered state."""
    sid = session
    size = local_server.thread.broker.settings.queue_size
    api.put(f"/v1/sessions/{sid}/files/go", content=b"")
    run(api, sid, "a = 1")
    run(api, sid, WAIT_FOR_GO)
    run(api, sid, "b = a + 1")
    api.delete(f"/v1/sessions/{sid}/files/go")
    api.delete(f"/v1/sessions/{sid}/files/started")

    def restart() -> httpx.Response:
        with local_server.client() as client:
            return client.post(f"/v1/sessions/{sid}/restart", json={"recover": True})

    restarted: Future[httpx.Response] = pool.submit(restart)
    wait_until(lambda: exists(api, sid, "started"), "the re-run cell to start")
    with contextlib.ExitStack() as stack:
        others = [submit(stack, api, sid, "print(a, b)") for _ in range(size)]
        api.put(f"/v1/sessions/{sid}/files/go", content=b"")
        resp = restarted.result(60)
        assert resp.status_code == 200, resp.text
        assert resp.json()["rebuild"]["cells_ran"] == 3
        results = [ended(api, sid, eid) for eid in others]
    assert [(r["status"], r["stdout"]) for r in results] == [("ok", "1 2\n")] * size, [
        (r["error"], r["reason"]) for r in results
    ]


def test_a_delete_during_a_restart_answers_session_closed_and_logs_no_error(
    local_server: Server, api: httpx.Client, pool: ThreadPoolExecutor, caplog: Any
) -> None:
    """Exploration bug 4: a delete while a restart replaced the kernel stopped the kernel
    under it: 500 (a CancelledError) or 503 kernel_start_failed, with tracebacks at
    ERROR. The restart now ends in 409 session_closed; the delete in 204."""
    sid: str = api.post("/v1/sessions", json={}).json()["id"]
    run(api, sid, "x = 1")

    def restart() -> httpx.Response:
        with local_server.client() as client:
            return client.post(f"/v1/sessions/{sid}/restart", json={"recover": True})

    with caplog.at_level(logging.ERROR, logger="interpreter"):
        restarted: Future[httpx.Response] = pool.submit(restart)
        wait_until(
            lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "starting",
            "the restart to begin",
        )
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
        resp = restarted.result(60)
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["type"] == "session_closed"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert api.get(f"/v1/sessions/{sid}").json()["status"] == "closed"


def test_a_restart_during_a_timeouts_grace_replaces_the_kernel_once(
    api: httpx.Client, session: str
) -> None:
    """Exploration bug 7: a restart requested while a timed-out cell that ignores SIGINT
    was in its interrupt grace replaced the kernel twice (the timeout's restart queued
    behind it), the cell ended ``timeout``, one restart note was lost and the recovery's
    note came before the cell. Now: one replacement, the cell ends as restarted, and the
    notebook reads cell, restart note, recovery note, re-run cell."""
    sid = session
    run(api, sid, "x = 1")
    generation = api.get(f"/v1/sessions/{sid}").json()["generation"]
    with contextlib.ExitStack() as stack:
        eid = submit(stack, api, sid, IGNORES_SIGINT, timeout_s=1)
        wait_until(
            lambda: "got SIGINT" in execution(api, sid, eid)["stdout"], "the timeout's interrupt"
        )
        resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
        assert resp.status_code == 200, resp.text
        assert resp.json()["generation"] == generation + 1
        result = ended(api, sid, eid)
    assert (result["status"], result["reason"], result["state_lost"]) == (
        "interrupted",
        "restarted",
        True,
    )
    assert api.get(f"/v1/sessions/{sid}").json()["generation"] == generation + 1
    assert run(api, sid, "x")["outputs"][0]["data"]["text/plain"] == "1"
    cells = code_cells(api, sid)
    at = next(i for i, (_, source) in enumerate(cells) if source == IGNORES_SIGINT)
    kinds = [kind for kind, _ in cells[at:]]
    assert kinds[:4] == ["code", "markdown", "markdown", "code"], cells[at:]
    assert "restart" in cells[at + 1][1].lower() and "ecover" in cells[at + 2][1]


def test_the_cell_after_a_timeout_that_restarted_the_kernel_says_state_was_lost(
    api: httpx.Client, session: str
) -> None:
    """Exploration bug 8: after a timeout that needed a restart, the cell queued behind it
    ran on the fresh kernel with ``state_lost`` false. As after a frozen kernel's
    replacement, the next cell to run says that state was lost."""
    sid = session
    run(api, sid, "x = 1")
    with contextlib.ExitStack() as stack:
        timed_out = submit(stack, api, sid, IGNORES_SIGINT, timeout_s=1)
        queued = submit(stack, api, sid, "x")
        first = ended(api, sid, timed_out)
        after = ended(api, sid, queued)
    assert (first["status"], first["state_lost"]) == ("timeout", True)
    assert (after["status"], after["state_lost"]) == ("error", True)
    assert after["error"]["ename"] == "NameError"
    assert run(api, sid, "1")["state_lost"] is False  # only the first cell after it
