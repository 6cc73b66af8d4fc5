"""The floors: raw ``jupyter_client`` driving a kernel with nothing in between.

``local``: a local ``python3`` kernel (as the local backend starts it). ``docker``: a kernel
in a container of ``interp-kernel:latest`` over ipc, started by this project's provisioner
with the same limits the service gives a session, then driven by a bare
``AsyncKernelClient``: the container is there, the broker is not.

Every scenario is bounded in count; a kernel that does not answer within its time limit
raises (``asyncio.timeout``), so a run never hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from interpreter.kernelspecs import kernel_spec_manager

ONE_MESSAGE_PER_LINE = "for i in range(10000):\n    print(i, flush=True)"
BUFFERED = "print('\\n'.join(str(i) for i in range(10000)))"
EXEC_TIMEOUT_S = 120.0


class RawKernel:
    """One kernel and its client; :meth:`execute` returns the stdout lines received."""

    def __init__(self, km: AsyncKernelManager, kc: AsyncKernelClient) -> None:
        self.km = km
        self.kc = kc

    async def execute(self, code: str) -> int:
        async with asyncio.timeout(EXEC_TIMEOUT_S):
            msg_id = self.kc.execute(code, allow_stdin=False)
            reply = asyncio.create_task(self._wait_reply(msg_id))
            lines = 0
            while True:
                msg = await self.kc.get_iopub_msg()
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "stream":
                    lines += msg["content"]["text"].count("\n")
                if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                    break
            await reply
            return lines

    async def _wait_reply(self, msg_id: str) -> None:
        while (await self.kc.get_shell_msg())["parent_header"].get("msg_id") != msg_id:
            pass


def over_ipc(km: AsyncKernelManager, where: Path) -> None:
    """Unix sockets in ``where`` for a local kernel, as the service's local backend has
    (the Docker one's provisioner does the same). Over TCP, jupyter_client picks each
    port by binding port 0 and closing it, and the kernel binds it a moment later: a
    connection made meanwhile can take it as its source port, and the kernel dies with
    "Address already in use" ("Kernel died before replying to kernel_info", once in a CI
    run beside the tests' own connections)."""
    km.transport = "ipc"
    km.ip = str(where / "kernel")


@contextlib.asynccontextmanager
async def raw_kernel(backend: str) -> AsyncIterator[RawKernel]:
    """Start a kernel (``local`` or ``docker``), wait for ``kernel_info``, yield it."""
    scratch = Path(tempfile.mkdtemp(prefix="interp-floor-"))
    kwargs: dict[str, Any] = {}
    if backend == "docker":
        from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions
        from interpreter.settings import Settings

        defaults = Settings(data_dir=scratch)
        sid = uuid.uuid4().hex[:12]
        kwargs[LAUNCH_KWARG] = LaunchOptions(
            session_id=f"floor-{sid}",
            owner="benchmark",
            session_dir=scratch / "session",
            workspace=scratch / "workspace",
            runtime_dir=scratch / "rt",
            memory_mb=defaults.default_memory_mb,
            cpus=defaults.default_cpus,
            pids=defaults.default_pids,
            tmp_size_mb=defaults.tmp_size_mb,
            image=defaults.docker_image,
            cgroup_parent=defaults.docker_cgroup_parent,
        )
        (scratch / "session").mkdir()
        (scratch / "workspace").mkdir()
    name = "python3-docker" if backend == "docker" else "python3"
    km = AsyncKernelManager(kernel_name=name, kernel_spec_manager=kernel_spec_manager())
    if backend != "docker":
        over_ipc(km, scratch)
    ctx = zmq.asyncio.Context()
    ctx.setsockopt(zmq.RCVHWM, 0)
    try:
        await km.start_kernel(**kwargs)
        kc = km.client(context=ctx)
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            yield RawKernel(km, kc)
        finally:
            kc.stop_channels()
    finally:
        with contextlib.suppress(Exception):
            await km.shutdown_kernel(now=True)
        ctx.term()
        shutil.rmtree(scratch, ignore_errors=True)


async def cold_create(backend: str, n: int) -> list[float]:
    """Start a kernel and run ``1+1``: milliseconds from nothing to the first result."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        async with raw_kernel(backend) as kernel:
            await kernel.execute("1+1")
            samples.append((time.perf_counter() - t0) * 1000)
    return samples


async def round_trips(backend: str, n: int) -> dict[str, Any]:
    """``1+1`` round trips, then the two 10,000-line cases (lines received counted)."""
    async with raw_kernel(backend) as kernel:
        for _ in range(10):
            await kernel.execute("1+1")
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await kernel.execute("1+1")
            samples.append((time.perf_counter() - t0) * 1000)
        out: dict[str, Any] = {"rtt": samples}
        for key, code in (("lines", ONE_MESSAGE_PER_LINE), ("buffered", BUFFERED)):
            t0 = time.perf_counter()
            lines = await kernel.execute(code)
            out[key] = ((time.perf_counter() - t0) * 1000, lines)
        return out


async def concurrent(backend: str, sessions: int, executions: int) -> dict[str, Any]:
    """``sessions`` kernels each running ``executions`` small cells at once."""
    async with contextlib.AsyncExitStack() as stack:
        kernels = [await stack.enter_async_context(raw_kernel(backend)) for _ in range(sessions)]
        for k in kernels:
            await k.execute("1+1")
        latencies: list[float] = []

        async def drive(kernel: RawKernel) -> None:
            for i in range(executions):
                t0 = time.perf_counter()
                await kernel.execute(f"{i}*2")
                latencies.append((time.perf_counter() - t0) * 1000)

        t0 = time.perf_counter()
        await asyncio.gather(*(drive(k) for k in kernels))
        elapsed = time.perf_counter() - t0
    return {"throughput": len(latencies) / elapsed, "latencies": latencies}


def p(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0.5 = median) of ``samples``; others by nearest rank (the
    smallest sample that at least ``q`` of them do not exceed). A p95 of fewer than 20
    samples is their maximum."""
    if q == 0.5:
        return statistics.median(samples)
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered), math.ceil(q * len(ordered))) - 1)]
