"""Reading one channel (iopub or shell) of a kernel client, message by message.

A message already waiting on the socket is taken at once through a synchronous twin of
the asyncio socket (the twin shares its libzmq socket), without the future, the events
check and the callbacks pyzmq's asyncio socket spends on each receive: in a flood of one
message per line that was a third of the broker's CPU per message. Only an empty socket
is awaited through pyzmq.

libzmq signals a socket's descriptor once for a batch of arrivals (edge-triggered), and
pyzmq's asyncio socket relies on seeing every such signal. Under load a message can sit on
the socket, the descriptor quiet, while pyzmq's receive still waits: measured with 10
sessions of short cells on 2 cores (pyzmq 27.3), about one cell's ``execute_reply`` in
500 stayed unread until the kernel's next message, with a receive pending and the
socket's events saying a message was there. :meth:`ChannelReader.recheck` looks at the
socket itself and hands such a message to the receive that waits for it; a running cell's
wait calls it whenever it wakes without news (``interpreter/waiting.py``), and each kernel
calls it once a second whatever runs (``interpreter.kernel.RECHECK_S``: late output of an
idle kernel).
"""

from __future__ import annotations

import asyncio
from typing import Any

import zmq


class ChannelReader:
    """Reads ``kc``'s ``channel``; the channel is looked up on each call (a renewed iopub
    channel is read from then on). The twin is used only while its asyncio socket is
    open: closing that socket frees both."""

    def __init__(self, kc: Any, channel: str) -> None:
        self.kc = kc
        self.channel = channel
        #: Messages handed to a waiting receive by :meth:`recheck`.
        self.rechecked = 0
        self._twin: tuple[Any, zmq.Socket[bytes]] | None = None
        #: The receive awaited through pyzmq, with its socket, while one is.
        self._waiting: tuple[Any, asyncio.Future[list[bytes]]] | None = None

    def _socket(self) -> Any:
        return getattr(self.kc, f"{self.channel}_channel").socket

    def _take(self, socket: Any) -> list[bytes] | None:
        """The next message on ``socket`` if one is there (None when it is empty or closed)."""
        if socket.closed:
            return None
        if self._twin is None or self._twin[0] is not socket:
            self._twin = (socket, zmq.Socket.shadow(socket.underlying))
        try:
            return self._twin[1].recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return None

    async def receive(self) -> dict[str, Any]:
        """The next message, deserialised (raises on a bad signature or bad JSON, and
        ``zmq.ZMQError`` once the channel is closed)."""
        socket = self._socket()
        frames = self._take(socket)
        if frames is None:
            waiting: asyncio.Future[list[bytes]] = socket.recv_multipart()
            self._waiting = (socket, waiting)
            try:
                frames = await waiting
            finally:
                self._waiting = None
        _, message = self.kc.session.feed_identities(frames)
        msg: dict[str, Any] = self.kc.session.deserialize(message)
        return msg

    def recheck(self) -> bool:
        """Hand a message that waits on the socket to the receive still waiting for one
        (a wake-up pyzmq missed); whether there was one. Cheap when there is not: one
        look at the socket's queue."""
        if self._waiting is None:
            return False
        socket, waiting = self._waiting
        if waiting.done() or socket is not self._socket():
            return False
        try:
            frames = self._take(socket)
        except zmq.ZMQError:  # the context is ending: the waiting receive will say so
            return False
        if frames is None:
            return False
        waiting.set_result(frames)
        self.rechecked += 1
        return True
