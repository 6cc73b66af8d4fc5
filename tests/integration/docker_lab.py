"""Shared pieces of the Docker backend tests: a Lab that builds sessions and cleans up.

Imported by ``test_docker_provisioner.py`` and ``test_docker_pool.py``; the fixtures are
re-exported there. Teardown asserts with the docker SDK that no container labelled with
the test's broker id is left.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.session import Session

from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions
from interpreter.backends.docker import ipc
from interpreter.backends.docker.engine import (
    docker_available,
    docker_client,
    list_broker_containers,
)
from interpreter.backends.docker.provisioner import DockerProvisioner

REPO = Path(__file__).resolve().parents[2]
#: The kernel image the tests run; INTERP_TEST_DOCKER_IMAGE picks another tag (an image built
#: with `interp images build --image ...` while others use the default one).
IMAGE = os.environ.get("INTERP_TEST_DOCKER_IMAGE") or "interp-kernel:latest"


def require_docker() -> None:
    """Skip (or fail, with INTERP_REQUIRE_DOCKER=1) without an engine and the image."""
    why = ""
    if not docker_available():
        why = "no Docker engine answers"
    else:
        try:
            docker_client().images.get(IMAGE)
        except docker.errors.ImageNotFound:
            why = f"{IMAGE} is missing: run `interp images build`"
    if not why:
        return
    if os.environ.get("INTERP_REQUIRE_DOCKER") == "1":
        pytest.fail(f"Docker tests must run here but cannot: {why}")
    pytest.skip(why)


async def wait_for(predicate: Callable[[], Awaitable[bool]], deadline_s: float, what: str) -> None:
    """Poll an async condition until it holds or the deadline passes."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while not await predicate():
        if loop.time() > end:
            raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")
        await asyncio.sleep(0.1)


async def wait_for_iopub(kc: AsyncKernelClient, msg_id: str, msg_type: str) -> None:
    """Read iopub until ``msg_type`` arrives for the request ``msg_id``."""
    while True:
        msg = await kc.get_iopub_msg(timeout=10)
        if msg["msg_type"] == msg_type and msg["parent_header"].get("msg_id") == msg_id:
            return


class Lab:
    """Builds sessions for one test: short host dirs, a unique broker id, cleanup."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.broker_id = "test-" + secrets.token_hex(4)
        self.managers: list[AsyncKernelManager] = []
        self.clients: list[AsyncKernelClient] = []

    def options(self, **changes: Any) -> LaunchOptions:
        sid = "s" + secrets.token_hex(5)
        values: dict[str, Any] = {
            "session_id": sid,
            "owner": "owner-" + sid,
            "session_dir": self.base / sid,
            "workspace": self.base / sid / "workspace",
            "runtime_dir": self.base / "run" / sid,
            "memory_mb": 512,
            "cpus": 1.0,
            "pids": 128,
            "tmp_size_mb": 32,
            "image": IMAGE,
            "extra": {"broker_id": self.broker_id},
        }
        values.update(changes)
        options = LaunchOptions(**values)
        options.session_dir.mkdir(parents=True, exist_ok=True)
        return options

    def manager(self, options: LaunchOptions) -> AsyncKernelManager:
        km = AsyncKernelManager(
            kernel_name="python3-docker",
            kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(REPO / "kernels")]),
        )
        km.connection_file = str(options.session_dir / "connection.json")
        self.managers.append(km)
        return km

    async def start(self, options: LaunchOptions) -> AsyncKernelManager:
        km = self.manager(options)
        await km.start_kernel(**{LAUNCH_KWARG: options})
        return km

    async def client(self, km: AsyncKernelManager) -> AsyncKernelClient:
        provisioner = km.provisioner
        assert isinstance(provisioner, DockerProvisioner)
        await provisioner.verify_sockets()
        # A fresh session (new ZMQ identity) per client, as the broker does.
        kc = km.client(session=Session(key=km.session.key))
        kc.start_channels()
        self.clients.append(kc)
        await kc.wait_for_ready(timeout=60)
        return kc

    def labelled(self) -> list[str]:
        return [c.id for c in list_broker_containers(self.broker_id)]

    async def close(self) -> None:
        for kc in self.clients:
            kc.stop_channels()
        for km in self.managers:
            if km.has_kernel:
                try:
                    await km.shutdown_kernel(now=True)
                except Exception as exc:  # teardown goes on; the assertion below decides
                    print(f"shutdown failed: {exc!r}")


@pytest.fixture
def short_base() -> Iterator[Path]:
    # The runtime dir holds unix sockets: keep it far below the 108-byte sun_path limit.
    base = Path(tempfile.mkdtemp(prefix="dk-"))
    yield base
    ipc.remove_tree(base)


@pytest.fixture
async def lab(short_base: Path) -> AsyncIterator[Lab]:
    require_docker()
    lab = Lab(short_base)
    try:
        yield lab
    finally:
        await lab.close()
        left = await asyncio.to_thread(lab.labelled)
        for container_id in left:
            await asyncio.to_thread(docker_client().api.remove_container, container_id, force=True)
        assert left == [], "containers left behind"


async def run(kc: AsyncKernelClient, code: str, limit_s: float = 60) -> dict[str, Any]:
    """Execute ``code``; return the reply content plus collected stdout and result text."""
    out: list[str] = []
    result: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "execute_result":
            result.append(content["data"].get("text/plain", ""))

    reply = await kc.execute_interactive(
        code, timeout=limit_s, output_hook=hook, stop_on_error=False
    )
    content: dict[str, Any] = dict(reply["content"])
    content["stdout"] = "".join(out)
    content["result"] = "".join(result)
    return content
