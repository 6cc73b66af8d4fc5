"""This service's side of the harness: every scenario through its HTTP API.

The broker is ``interp serve`` in its own process (as deployed), so its resident memory and
its CPU time (``/proc/<pid>``) are the broker's alone. Clients set ``TCP_NODELAY`` as the
SDK does. Every loop is bounded in count; every request has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.floors import BUFFERED, ONE_MESSAGE_PER_LINE

TRANSPORT_OPTIONS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
#: A cell that makes a small matplotlib plot (an image output stored as an artifact).
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [{i}, 1, 2])\nplt.show()"


@dataclass
class Broker:
    url: str
    pid: int
    data: Path
    #: Whether per-thread scheduler accounts are readable (decided at the first read).
    _precise: bool | None = None

    def client(self, timeout: float = 300) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=timeout,
            transport=httpx.HTTPTransport(socket_options=TRANSPORT_OPTIONS),
        )

    def rss_mb(self) -> float:
        """The broker process's resident memory."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def cpu_s(self) -> float:
        """CPU seconds the broker process has used, all its threads.

        Read from each thread's scheduler account (``se.sum_exec_runtime``, in ms to the
        microsecond), where the kernel offers it: ``/proc/<pid>/stat`` counts in ticks of
        10 ms, too coarse for a window of a few hundred ms. Threads that ended are not in
        that sum, so the two are never mixed within one run.
        """
        if self._precise is None:
            self._precise = self._sched_cpu_s() is not None
        if self._precise:
            total = self._sched_cpu_s()
            assert total is not None
            return total
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _sched_cpu_s(self) -> float | None:
        total, read = 0.0, False
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                text = (task / "sched").read_text()
            except OSError:
                continue  # no scheduler debug info, or the thread just ended
            match = re.search(r"^se\.sum_exec_runtime\s*:\s*([0-9.]+)", text, re.M)
            if match is None:
                return None
            total, read = total + float(match.group(1)) / 1000, True
        return total if read else None

    def warm(self, client: httpx.Client | None = None) -> int:
        """Ready kernels in the warm pool (``client``: ask over its kept-alive connection)."""
        if client is not None:
            text = client.get("/metrics").text
        else:
            text = httpx.get(self.url + "/metrics", timeout=30).text
        match = re.search(r"^interp_warm_kernels (\S+)", text, re.M)
        return int(float(match.group(1))) if match else 0

    def wait_warm(self, size: int, limit_s: float = 180) -> None:
        deadline = time.monotonic() + limit_s
        while self.warm() < size:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the warm pool did not reach {size} in {limit_s} s")
            time.sleep(0.1)


@contextlib.contextmanager
def serve(backend: str, pool: int = 0, *extra: str, cwd: Path | None = None) -> Iterator[Broker]:
    """``interp serve`` in a process of its own, its data in a fresh directory. ``cwd``: a
    checkout to serve the package from (``python -m`` imports from there first)."""
    data = Path(tempfile.mkdtemp(prefix="interp-bench-"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "interpreter",
            "serve",
            "--backend",
            backend,
            "--port",
            "0",
            "--data-dir",
            str(data),
            "--pool-size",
            str(pool),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "INTERP_KEEP_CONTAINERS_ON_SHUTDOWN": "false"},
        cwd=cwd,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                threading.Thread(target=proc.stdout.read, daemon=True).start()
                yield Broker(match.group(1), proc.pid, data)
                return
        raise RuntimeError("the server did not start")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)


def execute(api: httpx.Client, sid: str, code: str) -> dict[str, Any]:
    resp = api.post(f"/v1/sessions/{sid}/execute", json={"code": code})
    resp.raise_for_status()
    data: dict[str, Any] = resp.json()
    return data


def execute_sse(api: httpx.Client, sid: str, code: str) -> dict[str, Any]:
    """Run ``code`` as an SSE stream; return the Execution of the ``done`` event."""
    event = ""
    with api.stream(
        "POST",
        f"/v1/sessions/{sid}/execute",
        json={"code": code},
        headers={"Accept": "text/event-stream"},
    ) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "done":
                data: dict[str, Any] = json.loads(line[5:])
                return data
    raise RuntimeError("the stream ended without done")


def create(api: httpx.Client) -> str:
    resp = api.post("/v1/sessions", json={})
    if resp.status_code != 201:
        raise RuntimeError(f"create: {resp.status_code} {resp.text[:200]}")
    sid: str = resp.json()["id"]
    return sid


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return (time.perf_counter() - t0) * 1000, out


def create_to_first_result(backend: str, n: int, pool: int) -> list[float]:
    """``POST /v1/sessions`` then ``1+1``; with ``pool``, from a full warm pool each time."""
    samples = []
    with serve(backend, pool) as broker, broker.client() as api:
        for _ in range(n):
            if pool:
                broker.wait_warm(pool)
            t0 = time.perf_counter()
            sid = create(api)
            out = execute(api, sid, "1+1")
            samples.append((time.perf_counter() - t0) * 1000)
            assert out["outputs"][0]["data"]["text/plain"] == "2", out
            api.delete(f"/v1/sessions/{sid}")
    return samples


def round_trips(backend: str, n: int) -> dict[str, Any]:
    """``1+1`` by JSON and by SSE, the two 10,000-line cases (lines counted)."""
    with serve(backend) as broker, broker.client() as api:
        sid = create(api)
        for _ in range(10):
            execute(api, sid, "1+1")
            execute_sse(api, sid, "1+1")
        rtt, sse = [], []
        for _ in range(n):
            rtt.append(timed(execute, api, sid, "1+1")[0])
            sse.append(timed(execute_sse, api, sid, "1+1")[0])
        out: dict[str, Any] = {"rtt": rtt, "sse": sse}
        for key, code in (("lines", ONE_MESSAGE_PER_LINE), ("buffered", BUFFERED)):
            ms, result = timed(execute, api, sid, code)
            out[key] = (ms, len(result["stdout"].splitlines()))
        api.delete(f"/v1/sessions/{sid}")
    return out


def concurrent(backend: str, sessions: int, executions: int) -> dict[str, Any]:
    """``sessions`` sessions each running ``executions`` small cells at once (one thread
    and one connection per session, as independent agents would)."""
    with serve(backend, 0, "--max-sessions-per-key", str(max(32, sessions))) as broker:
        with broker.client() as api:
            ids = [create(api) for _ in range(sessions)]
            for sid in ids:
                execute(api, sid, "1+1")
        latencies: list[float] = []
        errors: list[str] = []

        def drive(sid: str) -> None:
            with broker.client() as api:
                for i in range(executions):
                    try:
                        latencies.append(timed(execute, api, sid, f"{i}*2")[0])
                    except Exception as exc:
                        errors.append(repr(exc))

        threads = [threading.Thread(target=drive, args=(sid,)) for sid in ids]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        elapsed = time.perf_counter() - t0
        idle_rss = broker.rss_mb()
        with broker.client() as api:
            for sid in ids:
                api.delete(f"/v1/sessions/{sid}")
    return {
        "throughput": len(latencies) / elapsed,
        "latencies": latencies,
        "errors": errors,
        "broker_rss_mb": idle_rss,
    }


def idle_sessions(backend: str, count: int) -> dict[str, Any]:
    """``count`` idle sessions (each has run ``1+1``): broker memory and errors."""
    errors: list[str] = []
    limit = str(count + 8)
    with (
        serve(backend, 0, "--max-sessions", limit, "--max-sessions-per-key", limit) as broker,
        broker.client() as api,
    ):
        base = broker.rss_mb()
        ids = []
        deadline = time.monotonic() + min(900, 60 + 5 * count)
        for _ in range(count):
            if time.monotonic() > deadline:
                errors.append("time limit reached")
                break
            try:
                sid = create(api)
                execute(api, sid, "1+1")
                ids.append(sid)
            except Exception as exc:
                errors.append(repr(exc))
        out = {
            "sessions": len(ids),
            "errors": errors,
            "broker_rss_mb": broker.rss_mb(),
            "broker_rss_empty_mb": base,
        }
        if backend == "docker":
            from benchmarks.sessions import container_memory

            broker_id = _broker_id(broker.data)
            mem = container_memory(broker_id)
            out["per_session_mb"] = sum(mem) / len(mem) if mem else None
        for sid in ids:
            api.delete(f"/v1/sessions/{sid}")
    return out


def _broker_id(data: Path) -> str:
    import hashlib

    return hashlib.sha256(str(data.resolve()).encode()).hexdigest()[:16]


#: The pause after each measured cell of ``long_session``: an agent thinking between cells.
LONG_PAUSE_S = 0.3


def _long_cell(i: int) -> str:
    return PLOT.format(i=i) if i % 10 == 0 else f"x = {i} * 2\nx"


def long_session(
    backend: str, cells: int, window: int = 100, pause: float = LONG_PAUSE_S
) -> dict[str, Any]:
    """The broker's CPU per execution over cells 1-``window`` of a fresh session and over
    the last ``window`` of a ``cells``-cell one (a plot every 10th cell in both).

    Two brokers run side by side, one session each: the first session is taken to
    ``cells - window`` cells back to back; then its last window and the fresh session's
    first alternate, cell by cell, so both see the machine at the same moments, and each
    broker's CPU (all its threads, from their scheduler accounts) is its session's alone,
    the notebook saves its cells cause included, whenever they happen. Each cell is
    followed by ``pause`` seconds, as an agent's would be, and the windows end with the
    notebook's longest save lag (``SAVE_MAX_LAG_S``) plus a second.
    """
    from interpreter.notebook import SAVE_MAX_LAG_S

    settle = SAVE_MAX_LAG_S + 1.0
    with (
        serve(backend) as old_broker,
        serve(backend) as new_broker,
        old_broker.client() as old_api,
        new_broker.client() as new_api,
    ):
        old = create(old_api)
        execute(old_api, old, "1+1")
        for i in range(1, cells - window + 1):
            execute(old_api, old, _long_cell(i))
        new = create(new_api)
        execute(new_api, new, "1+1")
        time.sleep(settle)
        wall_first: list[float] = []
        wall_last: list[float] = []
        old_cpu, new_cpu = old_broker.cpu_s(), new_broker.cpu_s()
        for k in range(window):
            turns = [
                (old_api, old, cells - window + 1 + k, wall_last),
                (new_api, new, 1 + k, wall_first),
            ]
            for api, sid, i, wall in turns if k % 2 else turns[::-1]:
                wall.append(timed(execute, api, sid, _long_cell(i))[0])
                time.sleep(pause)
        time.sleep(settle)
        cpu_last = (old_broker.cpu_s() - old_cpu) * 1000 / window
        cpu_first = (new_broker.cpu_s() - new_cpu) * 1000 / window
        old_api.delete(f"/v1/sessions/{old}")
        new_api.delete(f"/v1/sessions/{new}")
    return {
        "cpu_first_ms": cpu_first,
        "cpu_last_ms": cpu_last,
        "wall_first": wall_first,
        "wall_last": wall_last,
    }


#: Original-and-replay pairs the replay scenario times (medians are reported).
REPLAY_ROUNDS = 5
REPLAY_CELL = "import math\nv{i} = sum(math.sqrt(k) for k in range(20000))\nprint(round(v{i}, 3))"


def replay(backend: str, cells: int, rounds: int = REPLAY_ROUNDS) -> dict[str, Any]:
    """Run ``cells`` cells in a new session, then replay its notebook (``interp replay``'s
    function) in another: wall seconds of each, timed alike, from the session's creation
    to its close (the replay's comparison of outputs included).

    One broker serves ``rounds`` such pairs, each original followed by its replay, so that
    the machine's drift hits both sides alike; the figures are the medians over the rounds,
    with the ratio of each round beside them. A single pair moved by half its value from
    one run to the next (the session's create and close dominate a 50-cell run).
    """
    from interpreter.client import Client
    from interpreter.replay import replay_notebook

    # As served by default: the Docker backend keeps a warm pool of 2 (the local one none).
    pool = 2 if backend == "docker" else 0
    originals: list[float] = []
    replays: list[float] = []
    cells_only: list[float] = []
    matched = cells
    with serve(backend, pool) as broker, Client(broker.url) as client:
        for _ in range(rounds):
            if pool:
                broker.wait_warm(pool)
            t0 = time.perf_counter()
            session = client.create_session()
            for i in range(cells):
                session.run(REPLAY_CELL.format(i=i))
            ran = time.perf_counter() - t0
            nb = session.notebook()  # not part of the run: the replay is handed it
            t0 = time.perf_counter()
            session.close()
            originals.append(ran + time.perf_counter() - t0)
            if pool:
                broker.wait_warm(pool)
            t0 = time.perf_counter()
            report = replay_notebook(client, nb)
            replays.append(time.perf_counter() - t0)
            cells_only.append(report.replay_cells_s)
            matched = min(matched, report.matched)
    return {
        "original_s": statistics.median(originals),
        "replay_s": statistics.median(replays),
        "replay_cells_s": statistics.median(cells_only),
        "ratios": [r / o for r, o in zip(replays, originals, strict=True)],
        "matched": matched,
    }
