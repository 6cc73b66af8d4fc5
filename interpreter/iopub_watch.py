"""Noticing that the kernel's iopub link was cut by a message too large to accept.

The broker's sockets refuse any kernel message larger than ``max_kernel_message_bytes``
(ZMQ_MAXMSGSIZE), so one huge output cannot cost the broker its size in memory. libzmq
enforces that by dropping the message *and the connection*, and, as it is a protocol error,
never reconnects: every later output of the session would vanish without a word. The
kernel (:mod:`interpreter.kernel`) therefore watches its iopub socket's monitor for that
disconnect, replaces the channel with a fresh one, and reports the loss to the running
execution as a :data:`~interpreter.execution.DROPPED_MSG_TYPE` message, which makes the
result say what was dropped (``truncated: true`` and a notice on stderr).

A link whose other end went away is not cut: libzmq reconnects it when the end is back
(only then is the running execution told that output may be missing), and a kernel that
died never comes back (its replacement gets channels of its own, and the result says
``kernel_died``, not that output was dropped).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from interpreter.execution import DROPPED_MSG_TYPE

log = logging.getLogger(__name__)
#: After a disconnect, how long to wait for libzmq to start reconnecting (it retries every
#: 100 ms by default) before taking the link for cut for good.
RECONNECT_WAIT_S = 1.0
#: What libzmq does after a disconnect it repairs: retry, or connect again at once.
_REPAIRING = frozenset({zmq.EVENT_CONNECT_RETRIED, zmq.EVENT_CONNECTED})


async def cut(
    sock: zmq.asyncio.Socket, on_reconnected: Callable[[str], Awaitable[None]] | None = None
) -> str:
    """Return once ``sock``'s link to the kernel is cut for good; what libzmq said of it
    (the socket's last monitor events, for the log).

    libzmq tells the two kinds of disconnect apart by what follows. After a connection
    error (the kernel's end went away) it retries (``CONNECT_RETRIED``, every 100 ms)
    until the peer is back; after a protocol error (a message over the size limit) it
    never does. So a disconnect without a retry within :data:`RECONNECT_WAIT_S` is
    returned: replacing the channel then, not before, loses no message already queued.
    A disconnect libzmq retries is watched past; only if it connects again (what the
    kernel published meanwhile is lost) is it logged and reported to ``on_reconnected``.
    A kernel that died is never back: its retries are not a reconnect and report
    nothing (the kernel's replacement stops this watch).
    """
    monitor = sock.get_monitor_socket(zmq.EVENT_ALL)
    seen: collections.deque[str] = collections.deque(maxlen=8)

    async def next_event() -> dict[str, Any]:
        event: dict[str, Any] = dict(parse_monitor_message(await monitor.recv_multipart()))
        seen.append(f"{_EVENT_NAMES.get(event['event'], event['event'])}:{event.get('value')}")
        return event

    #: The endpoint of a link that dropped and that libzmq is reconnecting.
    retrying: str | None = None
    try:
        while True:
            event = await next_event()
            if event["event"] == zmq.EVENT_DISCONNECTED:
                raw = event.get("endpoint", b"")
                where = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                try:
                    async with asyncio.timeout(RECONNECT_WAIT_S):
                        while (event := await next_event())["event"] not in _REPAIRING:
                            pass
                except TimeoutError:
                    return f"endpoint {where}, events {' '.join(seen)}"
                retrying = where
            if event["event"] == zmq.EVENT_CONNECTED and retrying is not None:
                detail = f"endpoint {retrying}, events {' '.join(seen)}"
                retrying = None
                log.warning("the output link dropped and libzmq reconnected it (%s)", detail)
                if on_reconnected is not None:
                    await on_reconnected(detail)
    finally:
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        monitor.close(linger=0)


_EVENT_NAMES = {
    getattr(zmq, name): name.removeprefix("EVENT_")
    for name in dir(zmq)
    if name.startswith("EVENT_")
    and name not in ("EVENT_ALL", "EVENT_ALL_V1", "EVENT_ALL_V2")
    and isinstance(getattr(zmq, name), int)
}


def renew_channel(kc: Any) -> None:
    """Replace the client's iopub channel by a new socket connected to the same kernel."""
    old = kc.iopub_channel
    with contextlib.suppress(Exception):
        old.stop()
    kc._iopub_channel = None
    kc.iopub_channel.start()


def unreadable_notice(parent_msg_id: str, exc: Exception) -> dict[str, Any]:
    """The message that tells the execution of ``parent_msg_id`` that the kernel sent a
    message the broker could not read (``exc``: nested too deeply, bad JSON, ...)."""
    return {
        "header": {"msg_type": DROPPED_MSG_TYPE, "msg_id": secrets.token_hex(8)},
        "parent_header": {"msg_id": parent_msg_id},
        "metadata": {},
        "content": {"unreadable": type(exc).__name__},
    }


def dropped_notice(parent_msg_id: str, limit: int, *, reconnected: bool = False) -> dict[str, Any]:
    """The message that tells the execution of ``parent_msg_id`` output was dropped: a
    message over ``limit``, or (``reconnected``) whatever was published while the link was
    down."""
    return {
        "header": {"msg_type": DROPPED_MSG_TYPE, "msg_id": secrets.token_hex(8)},
        "parent_header": {"msg_id": parent_msg_id},
        "metadata": {},
        "content": {"limit": limit, "reconnected": reconnected},
    }
