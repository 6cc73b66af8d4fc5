"""Operations: access and execution log lines, X-Request-Id, /metrics and its operator key.

A real broker (local backend) on a free loopback port, with an operator key for /metrics;
one test runs ``interp serve`` itself with ``INTERP_LOG_FORMAT=json`` and reads its stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interpreter.broker import owner_of
from tests.conftest import KEY, OTHER_KEY, REPO, Server, run, serve_argv, start_server

OPERATOR = "operator-key-0123456789"


def wait_for(predicate: Callable[[], Any], timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
    return value


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text, or None when it is not there."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        metric_name, _, label_text = sample.partition("{")
        found = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
        if metric_name == name and all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return None


@pytest.fixture(scope="module")
def ops() -> Iterator[Server]:
    data_dir = Path(tempfile.mkdtemp(prefix="interp-ops-"))
    srv = start_server("local", data_dir, metrics_key=OPERATOR)
    yield srv
    srv.thread.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def client(ops: Server) -> Iterator[httpx.Client]:
    with ops.client() as c:
        yield c


def scrape(ops: Server) -> str:
    with ops.client(OPERATOR) as operator:
        resp = operator.get("/metrics")
        assert resp.status_code == 200, resp.text
        return resp.text


def records(caplog: pytest.LogCaptureFixture, logger: str, **fields: Any) -> list[Any]:
    return [
        r
        for r in caplog.records
        if r.name == logger and all(getattr(r, k, None) == v for k, v in fields.items())
    ]


# ------------------------------------------------------------------------ X-Request-Id


def test_request_id_is_echoed_given_or_generated_also_on_errors(client: httpx.Client) -> None:
    given = client.get("/v1/sessions", headers={"X-Request-Id": "trace-42.a:b"})
    assert given.status_code == 200
    assert given.headers["X-Request-Id"] == "trace-42.a:b"

    generated = client.get("/v1/sessions")
    assert re.fullmatch(r"[0-9a-f]{32}", generated.headers["X-Request-Id"])
    assert client.get("/v1/sessions").headers["X-Request-Id"] != generated.headers["X-Request-Id"]

    # Errors carry it too: an unknown route, an unknown session, a missing key.
    unknown_route = client.get("/nope", headers={"X-Request-Id": "rid-404"})
    assert unknown_route.status_code == 404
    assert unknown_route.headers["X-Request-Id"] == "rid-404"
    unknown_session = client.get("/v1/sessions/s_missing", headers={"X-Request-Id": "rid-s"})
    assert unknown_session.status_code == 404
    assert unknown_session.headers["X-Request-Id"] == "rid-s"
    no_key = httpx.get(f"{client.base_url}/v1/sessions", headers={"X-Request-Id": "rid-401"})
    assert no_key.status_code == 401
    assert no_key.headers["X-Request-Id"] == "rid-401"


@pytest.mark.parametrize(
    "bad", ["x" * 129, "has space", 'quote"d', "back\\slash", "<b>", "é".encode()]
)
def test_unreasonable_request_ids_are_replaced(client: httpx.Client, bad: str | bytes) -> None:
    resp = client.get("/v1/sessions", headers={"X-Request-Id": bad})
    assert resp.status_code == 200
    assert re.fullmatch(r"[0-9a-f]{32}", resp.headers["X-Request-Id"])


# ------------------------------------------------------------------------ log lines


def test_one_access_line_per_request_and_one_line_per_execution(
    ops: Server, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sid = client.post("/v1/sessions", json={}).json()["id"]
    try:
        resp = client.post(
            f"/v1/sessions/{sid}/execute", json={"code": "6 * 7"}, headers={"X-Request-Id": "ex-1"}
        )
        assert resp.status_code == 200
        execution_id = resp.json()["id"]
        missing = client.get(f"/v1/sessions/{sid}/executions/ex_nope")
        assert missing.status_code == 404

        line = wait_for(lambda: records(caplog, "interpreter.access", request_id="ex-1"))
        assert len(line) == 1
        access = line[0]
        assert access.method == "POST"
        assert access.route == "/v1/sessions/{session_id}/execute"
        assert access.session_id == sid
        assert access.status == 200
        assert access.duration_ms > 0
        assert access.key_id == owner_of(KEY)

        error_rid = missing.headers["X-Request-Id"]
        (error_line,) = wait_for(
            lambda: records(caplog, "interpreter.access", request_id=error_rid)
        )
        assert error_line.status == 404
        assert error_line.error == "execution_not_found"
        assert error_line.route == "/v1/sessions/{session_id}/executions/{execution_id}"

        (done,) = records(caplog, "interpreter.executions", execution_id=execution_id)
        assert done.request_id == "ex-1"
        assert done.session_id == sid
        assert done.key_id == owner_of(KEY)
        assert done.status == "ok"
        assert done.duration_ms > 0
        assert all(KEY not in r.getMessage() for r in caplog.records)
    finally:
        client.delete(f"/v1/sessions/{sid}")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path (pytest's own can be too long for a unix socket)."""
    path = Path(tempfile.mkdtemp(prefix="ij-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_serve_with_json_logs_writes_one_object_per_line_without_the_key(
    tmp_path: Path, short_dir: Path, transport: str
) -> None:
    """Every line on stderr is a JSON object, the kernel's own lines too: with a data
    directory too long for a unix socket's path the local kernel runs over TCP and warns
    that its traffic is not encrypted; that warning is a record of the broker's log."""
    data_dir = short_dir / "data" if transport == "ipc" else tmp_path / ("d" * 120)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("INTERP_")},
        "INTERP_LOG_FORMAT": "json",
        "INTERP_API_KEY": KEY,
    }
    stderr_path = tmp_path / "stderr.log"
    with open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            serve_argv("--backend", "local", "--data-dir", str(data_dir)),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=REPO,
            env=env,
        )
    stdout = []
    try:
        assert proc.stdout is not None
        url = ""
        for out in proc.stdout:
            stdout.append(out)
            if "listening on" in out:
                url = json.loads(out)["url"]
                break
        assert url, "server did not start: " + stderr_path.read_text()[-2000:]
        headers = {"Authorization": f"Bearer {KEY}", "X-Request-Id": "json-rid"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            assert run(c, sid, "print('hi')")["stdout"] == "hi\n"
            assert c.get("/v1/sessions/s_unknown").status_code == 404
            assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout.append(proc.communicate(timeout=60)[0])
    # The service's own lines on stdout are JSON records too (they were plain text).
    announced = [json.loads(line) for line in "".join(stdout).splitlines() if line.strip()]
    assert [(e["logger"], e["event"]) for e in announced] == [
        ("interpreter.server", "listening"),
        ("interpreter.server", "stopping"),
        ("interpreter.server", "stopped"),
    ]
    assert announced[0]["backend"] == "local"
    assert announced[0]["message"] == f"interp (local backend) listening on {url}"
    assert announced[-1]["message"] == "Stopped."
    text = stderr_path.read_text()
    assert KEY not in text
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # all JSON
    assert all({"ts", "level", "logger", "message"} <= set(entry) for entry in lines)
    access = [e for e in lines if e.get("event") == "http_request"]
    assert [(e["method"], e["route"], e["status"]) for e in access] == [
        ("POST", "/v1/sessions", 201),
        ("POST", "/v1/sessions/{session_id}/execute", 200),
        ("GET", "/v1/sessions/{session_id}", 404),
        ("DELETE", "/v1/sessions/{session_id}", 204),
    ]
    for entry in access:
        assert entry["request_id"] == "json-rid"
        assert entry["key_id"] == owner_of(KEY)
        assert isinstance(entry["duration_ms"], float)
    assert access[1]["session_id"] == sid
    assert access[2]["session_id"] == "s_unknown"
    assert access[2]["error"] == "session_not_found"
    (execution,) = [e for e in lines if e.get("event") == "execution"]
    assert execution["request_id"] == "json-rid"
    assert execution["session_id"] == sid
    assert execution["status"] == "ok"
    assert execution["key_id"] == owner_of(KEY)
    assert execution["execution_id"].startswith("ex")
    kernel = [e for e in lines if e.get("event") == "kernel_output"]
    if transport == "ipc":
        assert kernel == []  # a kernel over unix sockets has nothing to say
    else:
        assert [e["session_id"] for e in kernel] == [sid]
        assert "running over TCP without encryption" in kernel[0]["message"]
        assert kernel[0]["logger"] == "interpreter.kernel_output"


# ------------------------------------------------------------------------ metrics


def test_metrics_label_requests_by_route_template(ops: Server, client: httpx.Client) -> None:
    sid = client.post("/v1/sessions", json={}).json()["id"]
    try:
        before = metric(
            scrape(ops),
            "interp_http_requests_total",
            route="/v1/sessions/{session_id}",
            method="GET",
            status="200",
        )
        for _ in range(3):
            assert client.get(f"/v1/sessions/{sid}").status_code == 200
        assert client.get("/no/such/route").status_code == 404
        text = scrape(ops)
    finally:
        client.delete(f"/v1/sessions/{sid}")
    after = metric(
        text,
        "interp_http_requests_total",
        route="/v1/sessions/{session_id}",
        method="GET",
        status="200",
    )
    assert after == (before or 0) + 3
    assert metric(text, "interp_http_requests_total", route="unmatched", status="404")
    assert metric(
        text,
        "interp_http_request_duration_seconds_count",
        route="/v1/sessions/{session_id}",
        method="GET",
    )
    assert sid not in text  # no session id in any label
    assert "/no/such/route" not in text
    # Kernel start latency of that session's kernel, by backend.
    assert (metric(text, "interp_kernel_start_seconds_count", backend="local") or 0) >= 1
    # Execution durations are bucketed up to the maximum timeout (3600 s by default).
    assert 'interp_execution_duration_seconds_bucket{le="3600.0"}' in text
    assert metric(text, "interp_warm_kernels") == 0  # the local backend keeps no pool
    assert metric(text, "process_cpu_seconds_total") is not None
    assert metric(text, "process_resident_memory_bytes")


def test_closed_sessions_are_counted_by_reason(tmp_path: Path) -> None:
    srv = start_server("local", tmp_path)
    try:
        with srv.client() as c:
            assert metric(c.get("/metrics").text, "interp_sessions_closed_total") is None
            sid = c.post("/v1/sessions", json={}).json()["id"]
            assert c.delete(f"/v1/sessions/{sid}").status_code == 204
            text = c.get("/metrics").text
    finally:
        srv.thread.stop()
    assert metric(text, "interp_sessions_closed_total", reason="deleted") == 1
    assert metric(text, "interp_sessions", status="idle") == 0


def test_queued_executions_gauge(ops: Server, client: httpx.Client) -> None:
    sid = client.post("/v1/sessions", json={}).json()["id"]

    async def scenario() -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {ops.api_key}"}
        async with httpx.AsyncClient(base_url=ops.url, headers=headers, timeout=60) as ac:
            path = f"/v1/sessions/{sid}/execute"
            first = asyncio.create_task(ac.post(path, json={"code": "import time\ntime.sleep(30)"}))
            deadline = time.monotonic() + 30
            while (await ac.get(f"/v1/sessions/{sid}")).json()["status"] != "busy":
                assert time.monotonic() < deadline, "the execution never started"
                await asyncio.sleep(0.02)
            second = asyncio.create_task(ac.post(path, json={"code": "1"}))
            while metric(await asyncio.to_thread(scrape, ops), "interp_queued_executions") != 1:
                assert time.monotonic() < deadline, "the second execution was never queued"
                await asyncio.sleep(0.02)
            assert (await ac.post(f"/v1/sessions/{sid}/interrupt")).status_code == 200
            return [(await first).json(), (await second).json()]

    try:
        first, second = asyncio.run(scenario())
    finally:
        client.delete(f"/v1/sessions/{sid}")
    assert (first["status"], second["status"]) == ("interrupted", "ok")
    assert metric(scrape(ops), "interp_queued_executions") == 0


# ------------------------------------------------------------------------ operator key


def test_a_scrape_is_rendered_off_the_event_loop_with_the_loops_own_counts(
    ops: Server, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rendering the registry and reading ``/proc`` for the process metrics took about
    2 ms, on the loop, at every scrape. It now runs in a worker thread; the broker's own
    gauges are read on the loop first (a worker must not walk its live dicts)."""
    from interpreter import metrics as metrics_module

    rendered_in: list[str] = []
    real = metrics_module.generate_latest

    def generate_latest(registry: Any) -> bytes:
        rendered_in.append(threading.current_thread().name)
        return real(registry)

    monkeypatch.setattr(metrics_module, "generate_latest", generate_latest)
    sid = client.post("/v1/sessions", json={}).json()["id"]
    try:
        text = scrape(ops)
    finally:
        client.delete(f"/v1/sessions/{sid}")
    assert rendered_in and all(name.startswith("asyncio_") for name in rendered_in), rendered_in
    assert (metric(text, "interp_sessions", status="idle") or 0) >= 1
    assert metric(text, "process_open_fds") is not None


def test_metrics_need_the_operator_key(ops: Server) -> None:
    for tenant in (KEY, OTHER_KEY):
        with ops.client(tenant) as c:
            resp = c.get("/metrics")
            assert resp.status_code == 403
            error = resp.json()["error"]
            assert error["type"] == "forbidden"
            assert "operator key" in error["message"]
            assert "INTERP_METRICS_KEY" in error["message"]
    with ops.client(None) as anonymous:
        assert anonymous.get("/metrics").status_code == 401
    with ops.client("not-a-key-at-all") as wrong:
        assert wrong.get("/metrics").status_code == 401
    with ops.client(OPERATOR) as operator:
        resp = operator.get("/metrics")
        assert resp.status_code == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert "interp_sessions" in resp.text
        # The operator key is for operations only: it owns no sessions.
        assert operator.get("/v1/sessions").status_code == 401


def test_warm_kernels_gauge_shows_the_pool(server: Server, api: httpx.Client) -> None:
    """The docker backend keeps ``pool_size`` (1 in tests) kernels warm; local keeps none."""
    expected = 1 if server.backend == "docker" else 0
    wait_for(lambda: metric(api.get("/metrics").text, "interp_warm_kernels") == expected, 120)
