"""Late output of an idle kernel whose wake-up pyzmq missed is still read (a real kernel).

Under load, a message can sit on the broker's socket while pyzmq's receive waits, its
descriptor's signal gone (``interpreter/channel_reader.py``). A running cell's wait looks
for such a message; an idle session has no wait, and its kernel may send nothing more, so
the kernel looks itself, every ``RECHECK_S``.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from interpreter.backends.base import LaunchOptions
from interpreter.backends.local import LocalBackend
from interpreter.kernel import RECHECK_S, Kernel, RestartBudget

pytestmark = pytest.mark.slow

#: A cell that ends at once and leaves a thread that prints one line once ``{go}`` exists.
LATE = """
import os, threading, time
def later():
    while not os.path.exists({go!r}):
        time.sleep(0.01)
    print('late', flush=True)
threading.Thread(target=later, daemon=True).start()
"""


class Heard:
    """Every message the kernel handed on, with a wake-up for each."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.arrived = asyncio.Event()

    async def __call__(self, channel: str, msg: dict[str, Any]) -> None:
        self.messages.append((channel, msg))
        self.arrived.set()

    async def until(self, found: Any, within_s: float) -> None:
        async with asyncio.timeout(within_s):
            while not any(found(channel, msg) for channel, msg in self.messages):
                self.arrived.clear()
                await self.arrived.wait()


@pytest.fixture
async def kernel() -> AsyncIterator[tuple[Kernel, Heard]]:
    where = Path(tempfile.mkdtemp(prefix="rk"))  # short: the kernel's sockets are ipc
    (where / "ws").mkdir()
    (where / "run").mkdir()
    heard = Heard()
    kernel = Kernel(
        name="s_recheck",
        backend=LocalBackend(None),
        options=LaunchOptions("s_recheck", "o", where, where / "ws", where / "run"),
        start_timeout_s=60,
        budget=RestartBudget(1, 1),
        on_message=heard,
    )
    await kernel.start()
    try:
        yield kernel, heard
    finally:
        await kernel.stop()
        shutil.rmtree(where, ignore_errors=True)


def _stream(channel: str, msg: dict[str, Any]) -> bool:
    return msg["msg_type"] == "stream" and "late" in msg["content"]["text"]


async def test_late_output_whose_wake_up_was_missed_arrives_without_another_message(
    kernel: tuple[Kernel, Heard],
) -> None:
    k, heard = kernel
    msg_id = uuid.uuid4().hex
    go = k.options.workspace / "go"
    await k.execute(LATE.format(go=str(go)), msg_id)

    def idle(channel: str, msg: dict[str, Any]) -> bool:
        return (
            msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
            and msg["parent_header"].get("msg_id") == msg_id
        )

    await heard.until(idle, 60)
    # The loop is held (on purpose) until the thread's line is on the socket, and the
    # look at the socket's events takes its signal, as something else reading them did
    # under load: the line waits there, and nothing will wake pyzmq's receive for it.
    socket = k.kc.iopub_channel.socket
    outside: zmq.Socket[bytes] = zmq.Socket.shadow(socket.underlying)
    go.touch()
    deadline = time.monotonic() + 30
    while not outside.get(zmq.EVENTS) & zmq.POLLIN:
        assert time.monotonic() < deadline, "the thread never printed"
        time.sleep(0.01)  # noqa: ASYNC251 - the loop must not run meanwhile
    assert not any(_stream(c, m) for c, m in heard.messages)
    # The kernel is idle and sends nothing more: only the kernel's own recheck reads it.
    await heard.until(_stream, 10 * RECHECK_S)
    assert k._channels["iopub"].rechecked == 1
