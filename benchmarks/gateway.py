"""Jupyter Kernel Gateway as a reference for the round-trip benchmark.

A real gateway (``python -m kernel_gateway``, the ``jupyter kernelgateway`` server) runs in
its own process on a free loopback port, with an auth token and our kernelspecs, so it
launches the same local ``python3`` kernel as the other variants. A kernel is created with
``POST /api/kernels``; code runs over ``/api/kernels/{id}/channels`` (Jupyter messages as
JSON over a websocket). A round trip ends when both the ``execute_reply`` and the
``status: idle`` of the request have arrived, as for raw jupyter_client.

The gateway runs with its defaults except two settings: its IOPub rate limit is off (by
default it drops output above 1,000 messages/s, and the 10k-lines case counts the lines
that arrive), and, for the second variant only, ``TCP_NODELAY`` on the websocket (see
:mod:`benchmarks.gateway_nodelay`).

The gateway is an optional extra (``pip install -e '.[bench]'``). Without it,
:func:`measure` prints :data:`NOT_INSTALLED` and returns ``None``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tornado.httpclient import HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from interpreter.kernelspecs import kernels_dir

REPO = Path(__file__).resolve().parent.parent
NOT_INSTALLED = (
    "Jupyter Kernel Gateway: not installed, skipped (install the extra: pip install -e '.[bench]')"
)
FLOOD = "for i in range(10000):\n    print(i, flush=True)"
#: Longest one execution through the gateway may take (the flood takes seconds).
EXECUTE_LIMIT_S = 300.0
#: How long the ``idle`` status may follow the reply before the execution counts as over.
IDLE_AFTER_REPLY_S = 5.0


#: The gateway's own virtualenv (made by :func:`ensure_venv`): its dependencies never mix
#: with the service's. It also holds this package, for the same kernelspecs and provisioner.
VENV = REPO / ".venv-bench"
GATEWAY_VERSION = "3.0.1"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def installed() -> bool:
    return venv_python().exists() or importlib.util.find_spec("kernel_gateway") is not None


def gateway_python() -> str:
    """The interpreter that runs the gateway: its own venv's when there is one."""
    return str(venv_python()) if venv_python().exists() else sys.executable


def ensure_venv() -> bool:
    """Create :data:`VENV` with Kernel Gateway (through pip, once); whether it is there."""
    if venv_python().exists():
        return True
    print(f"creating {VENV} with jupyter_kernel_gateway=={GATEWAY_VERSION} ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        subprocess.run(
            [
                str(venv_python()),
                "-m",
                "pip",
                "install",
                "-q",
                "-e",
                str(REPO),
                f"jupyter_kernel_gateway=={GATEWAY_VERSION}",
            ],
            check=True,
            timeout=900,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"Kernel Gateway venv not made: {exc}", flush=True)
        import shutil

        shutil.rmtree(VENV, ignore_errors=True)
        return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def kernel_gateway(token: str, nodelay: bool = False, timeout: float = 60) -> Iterator[str]:
    """A Kernel Gateway process on loopback, requiring ``token``, yielding its base URL.

    It sees only our kernelspecs (as ``kernel_spec_manager()`` does for the other
    variants). The port is free when picked; should another process take it first, the
    gateway tries others, so the URL is read from its "is available at" log line.
    ``nodelay`` loads :mod:`benchmarks.gateway_nodelay` (``TCP_NODELAY`` on the websocket).
    """
    options = []
    if nodelay:
        options.append(
            "--KernelGatewayApp.kernel_websocket_connection_class="
            "benchmarks.gateway_nodelay.NoDelayChannels"
        )
    proc = subprocess.Popen(
        [
            gateway_python(),
            "-m",
            "kernel_gateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            f"--KernelGatewayApp.port={free_port()}",
            "--KernelGatewayApp.default_kernel_name=python3",
            f"--KernelSpecManager.kernel_dirs={[str(kernels_dir())]!r}",
            "--KernelSpecManager.ensure_native_kernel=False",
            # By default the gateway drops IOPub output above 1,000 msgs/s (and 1 MB/s);
            # the 10k-lines case counts the lines that arrive, as for the others.
            "--ZMQChannelsWebsocketConnection.limit_rate=False",
            *options,
        ],
        cwd=REPO,
        env={**os.environ, "KG_AUTH_TOKEN": token},  # not on the command line, seen by ps
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log: list[str] = []
    try:
        assert proc.stdout is not None
        found: list[str] = []

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not found:
                    log.append(line)
                    match = re.search(r"is available at (http://\S+)", line)
                    if match:
                        found.append(match.group(1))

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Kernel Gateway did not start:\n" + "".join(log[-20:]))
            time.sleep(0.05)
        yield found[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Channels:
    """The kernel's websocket: send a request, collect the messages that answer it."""

    def __init__(self, conn: WebSocketClientConnection) -> None:
        self.conn = conn
        self.session = uuid.uuid4().hex

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": msg_type,
            "session": self.session,
            "username": "bench",
            "date": datetime.now(UTC).isoformat(),
            "version": "5.3",
        }
        msg = {
            "header": header,
            "parent_header": {},
            "metadata": {},
            "content": content,
            "channel": channel,
            "buffers": [],
        }
        # Not awaited: the frame is written at once, and the reply is what we wait for.
        self.conn.write_message(json.dumps(msg))
        return msg_id

    async def execute(self, code: str) -> tuple[dict[str, Any], int]:
        """Run ``code``; return its ``execute_reply`` and the stdout lines it printed.

        Bounded: the whole execution within :data:`EXECUTE_LIMIT_S`, and the ``idle``
        status within :data:`IDLE_AFTER_REPLY_S` of the reply. The gateway drops IOPub
        messages under a flood (its rate limit), ``idle`` included at times, and a run
        that waited for it hung for good.
        """
        msg_id = self.send(
            "shell",
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        )
        reply: dict[str, Any] | None = None
        idle = False
        lines = 0
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(EXECUTE_LIMIT_S) as limit:
                while reply is None or not idle:
                    raw = await self.conn.read_message()
                    if raw is None:
                        raise RuntimeError("the gateway closed the kernel's websocket")
                    msg = json.loads(raw)
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    msg_type = msg["msg_type"]
                    if msg_type == "execute_reply":
                        reply = msg["content"]
                        deadline = limit.when()
                        assert deadline is not None
                        limit.reschedule(min(deadline, loop.time() + IDLE_AFTER_REPLY_S))
                    elif msg_type == "stream":
                        lines += msg["content"]["text"].count("\n")
                    elif msg_type == "status" and msg["content"]["execution_state"] == "idle":
                        idle = True
        except TimeoutError:
            if reply is None:
                raise RuntimeError(f"no reply from the gateway in {EXECUTE_LIMIT_S:g} s") from None
            # The reply came and its idle was dropped: the execution is over all the same.
        assert reply is not None
        return reply, lines

    async def wait_ready(self) -> None:
        """Send ``kernel_info_request`` until one is answered (the kernel is up)."""
        deadline = time.monotonic() + 60
        while True:
            msg_id = self.send("shell", "kernel_info_request", {})
            try:
                async with asyncio.timeout(1):
                    while True:
                        raw = await self.conn.read_message()
                        if raw is None:
                            raise RuntimeError("the gateway closed the kernel's websocket")
                        msg = json.loads(raw)
                        if (
                            msg["msg_type"] == "kernel_info_reply"
                            and msg["parent_header"].get("msg_id") == msg_id
                        ):
                            return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the gateway's kernel did not answer") from None


async def gateway_roundtrip(
    n: int, flood: bool = True, nodelay: bool = False
) -> tuple[list[float], tuple[float, int] | None]:
    """``n`` timed ``1+1`` round trips (ms) and, if ``flood``, 10,000 flushed lines: the
    seconds they took and how many arrived (the gateway may lose some: its kernel's IOPub
    socket drops messages past its high-water mark when the gateway reads too slowly)."""
    token = secrets.token_hex(16)
    headers = {"Authorization": f"token {token}"}
    with kernel_gateway(token, nodelay) as url:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as api:
            resp = await api.post("/api/kernels", json={"name": "python3"})
            assert resp.status_code == 201, resp.text
            kernel_id = resp.json()["id"]
            try:
                ws_url = url.replace("http://", "ws://", 1) + f"/api/kernels/{kernel_id}/channels"
                conn = await websocket_connect(
                    HTTPRequest(ws_url, headers=headers), max_message_size=1 << 26
                )
                # Same as the API client's TCP_NODELAY: no Nagle delay on small requests.
                if conn.protocol is not None:
                    conn.protocol.set_nodelay(True)
                try:
                    channels = Channels(conn)
                    await channels.wait_ready()
                    for _ in range(10):
                        await channels.execute("1+1")
                    samples = []
                    for _ in range(n):
                        t0 = time.perf_counter()
                        reply, _ = await channels.execute("1+1")
                        samples.append((time.perf_counter() - t0) * 1000)
                        assert reply["status"] == "ok", reply
                    flooded: tuple[float, int] | None = None
                    if flood:
                        t0 = time.perf_counter()
                        _, lines = await channels.execute(FLOOD)
                        flooded = (time.perf_counter() - t0, lines)
                finally:
                    conn.close()
            finally:
                await api.delete(f"/api/kernels/{kernel_id}")
    return samples, flooded


def measure(
    n: int, flood: bool = True, nodelay: bool = False
) -> tuple[list[float], tuple[float, int] | None] | None:
    """The gateway's figures, or ``None`` (after saying why) when it is not installed."""
    if not installed():
        print(NOT_INSTALLED, flush=True)
        return None
    return asyncio.run(gateway_roundtrip(n, flood, nodelay))
