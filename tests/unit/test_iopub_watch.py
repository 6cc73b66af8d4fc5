"""The iopub watch on real ZMQ sockets: which disconnects it waits out, which it reports.

A PUB socket stands in for the kernel's iopub and a SUB socket for the broker's, over ipc
as with the Docker backend. Closing and rebinding the PUB side is a connection error, which
libzmq repairs itself; a message over the SUB side's ``MAXMSGSIZE`` is a protocol error,
which ends the link for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

from interpreter import iopub_watch
from interpreter.execution import ExecutionRecorder


@pytest.fixture
async def ctx() -> AsyncIterator[zmq.asyncio.Context]:
    context = zmq.asyncio.Context()
    yield context
    context.destroy(linger=0)


async def _flowing(pub: zmq.asyncio.Socket, sub: zmq.asyncio.Socket) -> None:
    """Publish until the subscriber receives (a new subscription takes a moment)."""
    async with asyncio.timeout(10):
        while True:
            await pub.send(b"ping")
            if await sub.poll(50):
                while await sub.poll(0):
                    await sub.recv()
                return


async def test_a_repaired_link_is_reported_and_a_cut_one_returned(
    ctx: zmq.asyncio.Context, tmp_path: Path
) -> None:
    endpoint = f"ipc://{tmp_path}/iopub"
    pub = ctx.socket(zmq.PUB)
    pub.bind(endpoint)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.MAXMSGSIZE, 1000)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(endpoint)
    await _flowing(pub, sub)
    reconnects: list[str] = []
    repaired = asyncio.Event()

    async def on_reconnected(detail: str) -> None:
        reconnects.append(detail)
        repaired.set()

    watch = asyncio.ensure_future(iopub_watch.cut(sub, on_reconnected))
    await asyncio.sleep(0.1)  # the monitor is attached
    # The kernel's side goes away and comes back: libzmq reconnects by itself.
    pub.close(linger=0)
    pub = ctx.socket(zmq.PUB)
    pub.bind(endpoint)
    await asyncio.wait_for(repaired.wait(), 10)
    assert "DISCONNECTED" in reconnects[0]
    assert not watch.done()
    await _flowing(pub, sub)  # the same socket receives again
    # A message over the limit: a protocol error, no reconnect, the link is cut for good.
    await pub.send(b"x" * 5000)
    detail = await asyncio.wait_for(watch, 10)
    assert "DISCONNECTED" in detail and len(reconnects) == 1
    pub.close(linger=0)
    sub.close(linger=0)


def test_the_notices_say_what_was_lost() -> None:
    rec = ExecutionRecorder("m1")
    rec.feed_iopub(iopub_watch.dropped_notice("m1", 1000, reconnected=True))
    rec.feed_iopub(iopub_watch.dropped_notice("m1", 1000))
    text = rec.stream_text("stderr")
    assert "connection to the kernel dropped and came back" in text
    assert "larger than the broker's limit of 1000 bytes" in text
    assert rec.messages_dropped == 2
