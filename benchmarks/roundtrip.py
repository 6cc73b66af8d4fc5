"""Round-trip latency and output throughput: interp's HTTP API vs two references.

All are measured in the same run, on the same machine, with the same kernel package:

* ``raw``: an ``AsyncKernelClient`` talking straight to a local kernel (the floor);
* ``Jupyter Kernel Gateway``: a real ``jupyter kernelgateway`` process, a kernel created
  over its REST API and driven over its websocket (:mod:`benchmarks.gateway`), once with the
  gateway's defaults and once with ``TCP_NODELAY`` on its websocket. It is the optional
  extra ``bench``; without it the benchmark says so and measures the others;
* ``api-<backend>``: ``POST /v1/sessions/{id}/execute`` through ``interp serve`` running in
  its own process (JSON mode), from a client with ``TCP_NODELAY`` as the SDK sets it.

Usage: ``python -m benchmarks.roundtrip [--n 200] [--backends local,docker] [--no-gateway]``.
Prints a table of median / p90 / p99 milliseconds for ``1+1`` and the time to deliver
10,000 flushed lines (checking that every line arrived).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from pathlib import Path

import httpx
import zmq
import zmq.asyncio
from jupyter_client.manager import AsyncKernelManager

from benchmarks import gateway
from benchmarks.floors import over_ipc, p
from interpreter.kernelspecs import kernel_spec_manager

FLOOD = "for i in range(10000):\n    print(i, flush=True)"


def summary(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples):7.2f} ms   p90 {p(samples, 0.9):7.2f} ms   "
        f"p99 {p(samples, 0.99):7.2f} ms"
    )


async def raw_jupyter_client(n: int) -> tuple[list[float], float]:
    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_spec_manager())
    scratch = Path(tempfile.mkdtemp(prefix="interp-floor-"))
    over_ipc(km, scratch)
    await km.start_kernel()
    ctx = zmq.asyncio.Context()
    ctx.setsockopt(zmq.RCVHWM, 0)
    kc = km.client(context=ctx)
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)

    async def wait_reply(msg_id: str) -> None:
        while (await kc.get_shell_msg())["parent_header"].get("msg_id") != msg_id:
            pass

    async def execute(code: str) -> int:
        msg_id = kc.execute(code, allow_stdin=False)
        reply = asyncio.create_task(wait_reply(msg_id))
        lines = 0
        while True:
            msg = await kc.get_iopub_msg()
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                lines += msg["content"]["text"].count("\n")
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
        await reply
        return lines

    samples = []
    for _ in range(10):
        await execute("1+1")
    for _ in range(n):
        t0 = time.perf_counter()
        await execute("1+1")
        samples.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    lines = await execute(FLOOD)
    flood = time.perf_counter() - t0
    assert lines == 10000, lines
    kc.stop_channels()
    await km.shutdown_kernel(now=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return samples, flood


@contextlib.contextmanager
def serve(backend: str, data: Path) -> Iterator[str]:
    """``interp serve`` in its own process (as deployed), yielding its URL."""
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
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                threading.Thread(target=proc.stdout.read, daemon=True).start()
                yield match.group(1)
                return
        raise RuntimeError("the server did not start")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


def through_api(backend: str, n: int) -> tuple[list[float], float]:
    data = Path(tempfile.mkdtemp(prefix="interp-bench-"))
    # Headers and body go out in separate writes; without TCP_NODELAY, Nagle's algorithm
    # and the server's delayed ACK add tens of milliseconds to every small request.
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    try:
        with (
            serve(backend, data) as url,
            httpx.Client(base_url=url, timeout=120, transport=transport) as api,
        ):
            sid = api.post("/v1/sessions").json()["id"]
            exec_url = f"/v1/sessions/{sid}/execute"
            for _ in range(10):
                api.post(exec_url, json={"code": "1+1"})
            samples = []
            for _ in range(n):
                t0 = time.perf_counter()
                resp = api.post(exec_url, json={"code": "1+1"})
                samples.append((time.perf_counter() - t0) * 1000)
                assert resp.json()["outputs"][0]["data"]["text/plain"] == "2"
            t0 = time.perf_counter()
            out = api.post(exec_url, json={"code": FLOOD}).json()
            flood = time.perf_counter() - t0
            assert len(out["stdout"].splitlines()) == 10000
            api.delete(f"/v1/sessions/{sid}")
        return samples, flood
    finally:
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200, help="round trips per variant")
    parser.add_argument("--backends", default="local,docker")
    parser.add_argument(
        "--no-gateway", action="store_true", help="skip the Jupyter Kernel Gateway reference"
    )
    args = parser.parse_args()
    rows: list[tuple[str, list[float], tuple[float, int] | None]] = []
    raw, raw_flood = asyncio.run(raw_jupyter_client(args.n))
    rows.append(("raw jupyter_client (local kernel)", raw, (raw_flood, 10000)))
    if not args.no_gateway:
        for name, nodelay in [
            ("Kernel Gateway (defaults)", False),
            ("Kernel Gateway, TCP_NODELAY", True),
        ]:
            measured = gateway.measure(args.n, nodelay=nodelay)
            if measured is None:
                break
            rows.append((name, *measured))
    for backend in args.backends.split(","):
        if backend == "docker":
            from interpreter.backends.docker.engine import docker_available

            if not docker_available():
                print("docker: no engine answers; skipped")
                continue
        samples, flood = through_api(backend, args.n)
        rows.append((f"interp HTTP API, {backend} backend", samples, (flood, 10000)))
    print(f"\n1+1 round trip, n={args.n} each; then 10,000 flushed lines (lines received):")
    for name, samples, flooded in rows:
        lines = "" if flooded is None else f"   10k lines {flooded[0]:6.2f} s ({flooded[1]})"
        print(f"  {name:36s} {summary(samples)}{lines}")
    if not args.no_gateway and not gateway.installed():
        print(f"  {gateway.NOT_INSTALLED}")


if __name__ == "__main__":
    main()
