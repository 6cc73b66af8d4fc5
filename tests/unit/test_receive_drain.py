"""The broker's reading of kernel messages (``interpreter/channel_reader.py``).

A message already waiting on the socket is taken without pyzmq's asyncio machinery (a
future, an events check and callbacks per message: a third of the broker's CPU per line
of a print flood); only an empty socket is awaited, and a message whose wake-up was
missed is handed to the waiting receive by ``recheck``. Real ZMQ sockets, messages
signed by a jupyter_client ``Session`` as a kernel's are; the transport is inproc, so a
message sent is on the broker's socket when ``send`` returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session

from interpreter.channel_reader import ChannelReader
from interpreter.wire import BrokerSession

KEY = b"0123456789abcdef0123456789abcdef"


@dataclass
class Channel:
    socket: zmq.asyncio.Socket


class Client:
    """What ``ChannelReader`` uses of a kernel client: a session and an iopub channel."""

    def __init__(self, socket: zmq.asyncio.Socket) -> None:
        self.session = BrokerSession(key=KEY)
        self.iopub_channel = Channel(socket)


@dataclass
class Pair:
    kernel: zmq.Socket[bytes]
    client: Client
    ctx: zmq.asyncio.Context
    address: str
    awaited: list[int]

    def send(self, n: int, start: int = 0, kernel: zmq.Socket[bytes] | None = None) -> None:
        session = Session(key=KEY)
        parent = session.msg("execute_request", {})
        for i in range(start, start + n):
            session.send(
                kernel or self.kernel, "stream", {"name": "stdout", "text": f"{i}\n"}, parent=parent
            )

    def watch(self, socket: zmq.asyncio.Socket) -> None:
        """Count the receives that go through the asyncio socket."""
        real = socket.recv_multipart

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.awaited[0] += 1
            return real(*args, **kwargs)

        socket.recv_multipart = counted  # type: ignore[method-assign]


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    address = f"inproc://iopub-{tmp_path.name}"
    ctx = zmq.asyncio.Context()
    sync_ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.shadow(ctx.underlying)
    kernel = sync_ctx.socket(zmq.PUSH)
    kernel.bind(address)
    socket = ctx.socket(zmq.PULL)
    socket.connect(address)
    p = Pair(kernel, Client(socket), ctx, address, [0])
    p.watch(socket)
    try:
        yield p
    finally:
        p.client.iopub_channel.socket.close(linger=0)
        kernel.close(linger=0)
        ctx.term()


def _text(msg: dict[str, Any]) -> str:
    text: str = msg["content"]["text"]
    return text


async def test_waiting_messages_are_taken_without_an_awaited_receive(pair: Pair) -> None:
    receive = ChannelReader(pair.client, "iopub").receive
    pair.send(50)
    texts: list[str] = []
    async with asyncio.timeout(10):
        while len(texts) < 50:
            texts.append(_text(await receive()))
    assert texts == [f"{i}\n" for i in range(50)]
    # The old reader awaited pyzmq's receive once per message: 50 futures here.
    assert pair.awaited[0] == 0


async def test_an_empty_socket_is_awaited_and_wakes_for_the_next_message(pair: Pair) -> None:
    receive = ChannelReader(pair.client, "iopub").receive
    reading = asyncio.ensure_future(receive())
    await asyncio.sleep(0.05)
    assert not reading.done()
    pair.send(1)
    async with asyncio.timeout(10):
        msg = await reading
    assert _text(msg) == "0\n"
    assert pair.awaited[0] == 1
    # A drained socket then a new message: read in order, nothing lost.
    pair.send(3, start=1)
    async with asyncio.timeout(10):
        assert [_text(await receive()) for _ in range(3)] == ["1\n", "2\n", "3\n"]


async def test_a_renewed_channel_is_read_from_then_on(pair: Pair) -> None:
    receive = ChannelReader(pair.client, "iopub").receive
    pair.send(1)
    async with asyncio.timeout(10):
        assert _text(await receive()) == "0\n"
    old = pair.client.iopub_channel.socket
    old.close(linger=0)
    renewed: zmq.Socket[bytes] = zmq.Context.shadow(pair.ctx.underlying).socket(zmq.PUSH)
    renewed.bind(pair.address + "-renewed")
    fresh = pair.ctx.socket(zmq.PULL)
    fresh.connect(pair.address + "-renewed")
    pair.client.iopub_channel = Channel(fresh)
    try:
        pair.send(2, start=1, kernel=renewed)
        async with asyncio.timeout(10):
            assert [_text(await receive()) for _ in range(2)] == ["1\n", "2\n"]
    finally:
        renewed.close(linger=0)


async def test_a_closed_socket_raises_instead_of_reading_freed_memory(pair: Pair) -> None:
    receive = ChannelReader(pair.client, "iopub").receive
    pair.send(1)
    async with asyncio.timeout(10):
        await receive()  # the synchronous twin now exists
    pair.client.iopub_channel.socket.close(linger=0)
    with pytest.raises(zmq.ZMQError):
        await receive()


async def test_a_message_whose_wake_up_was_missed_is_read_on_recheck(pair: Pair) -> None:
    """The failure seen under load: a message is on the socket, pyzmq's receive waits, and
    the descriptor's signal is gone. Here something else read the socket's events (which
    takes the signal) right after the message came, as happened to execute_reply."""
    reader = ChannelReader(pair.client, "iopub")
    assert not reader.recheck()  # no receive waiting: nothing to do
    reading = asyncio.ensure_future(reader.receive())
    await asyncio.sleep(0.05)
    assert not reader.recheck()  # a receive waits, the socket is empty
    socket = pair.client.iopub_channel.socket
    outside: zmq.Socket[bytes] = zmq.Socket.shadow(socket.underlying)
    pair.send(1)
    assert outside.get(zmq.EVENTS) & zmq.POLLIN  # the signal is taken; the message stays
    await asyncio.sleep(0.3)
    assert not reading.done()  # pyzmq was not woken: the message would wait for the next
    assert reader.recheck()
    async with asyncio.timeout(10):
        assert _text(await reading) == "0\n"
    assert reader.rechecked == 1
    # Reading goes on as usual, in order.
    pair.send(2, start=1)
    async with asyncio.timeout(10):
        assert [_text(await reader.receive()) for _ in range(2)] == ["1\n", "2\n"]
