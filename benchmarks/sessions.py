"""Session-create latency (local, docker cold, docker from the warm pool) and idle memory.

Usage: ``python -m benchmarks.sessions [--n 8]``. Each variant runs against its own broker
on a free loopback port; the time is ``POST /v1/sessions`` until it answers 201 (the kernel
has replied to ``kernel_info``). Idle memory is the container's cgroup usage (``docker
stats``) after a ``1+1``, averaged over the sessions.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from interpreter.server import ServerThread
from interpreter.settings import Settings


def wait_pool_full(srv: ServerThread, size: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pool = srv.broker.backend.pool  # type: ignore[attr-defined]
        if pool is not None and pool.ready_count >= size:
            return
        time.sleep(0.2)
    raise RuntimeError("the warm pool did not fill")


def measure(backend: str, pool: int, n: int) -> tuple[list[float], list[float]]:
    data = Path(tempfile.mkdtemp(prefix="interp-bench-"))
    settings = Settings(
        data_dir=data,
        port=0,
        backend=backend,
        pool_size=pool,  # type: ignore[arg-type]
        keep_containers_on_shutdown=False,
    )
    creates: list[float] = []
    memory: list[float] = []
    try:
        with (
            ServerThread(settings, backend=backend) as srv,
            httpx.Client(base_url=srv.url, timeout=120) as api,
        ):
            ids = []
            for _ in range(n):
                if pool:
                    wait_pool_full(srv, pool)
                t0 = time.perf_counter()
                resp = api.post("/v1/sessions")
                creates.append((time.perf_counter() - t0) * 1000)
                assert resp.status_code == 201, resp.text
                sid = resp.json()["id"]
                ids.append(sid)
                api.post(f"/v1/sessions/{sid}/execute", json={"code": "1+1"})
            if backend == "docker":
                memory = container_memory(srv.broker.broker_id)
            for sid in ids:
                api.delete(f"/v1/sessions/{sid}")
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return creates, memory


def container_memory(broker_id: str) -> list[float]:
    import docker

    client = docker.from_env()
    out = []
    for container in client.containers.list(filters={"label": f"org.interp.broker={broker_id}"}):
        stats = container.stats(stream=False)
        usage = stats["memory_stats"].get("usage", 0)
        cache = stats["memory_stats"].get("stats", {}).get("cache", 0)
        out.append((usage - cache) / (1 << 20))
    client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=8)
    args = parser.parse_args()
    rows = [
        ("local backend", "local", 0),
        ("docker, cold (no pool)", "docker", 0),
        ("docker, warm pool (size 2)", "docker", 2),
    ]
    print(f"session create, n={args.n} each:")
    for name, backend, pool in rows:
        creates, memory = measure(backend, pool, args.n)
        line = (
            f"  {name:28s} median {statistics.median(creates):7.0f} ms   max {max(creates):7.0f} ms"
        )
        if memory:
            line += f"   idle memory/container {statistics.mean(memory):5.1f} MiB"
        print(line)


if __name__ == "__main__":
    main()
