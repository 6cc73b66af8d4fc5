"""Noticing that the kernel's iopub link was cut by a message too large to accept.

The broker's sockets refuse any kernel message larger than ``max_kernel_message_bytes``
(ZMQ_MAXMSGSIZE), so one huge output cannot cost the broker its size in memory. libzmq
enforces that by dropping the message *and the connection*, and, as it is a protocol error,
never reconnects: every later output of the session would vanish without a word. The
kernel (:mod:`interpreter.kernel`) therefore watches its iopub socket's monitor for that
disconnect, replaces the channel with a fresh one, and reports the loss to the running
execution as a :data:`~interpreter.execution.DROPPED_MSG_TYPE` message, which makes the
result say what was dropped (``truncated: true`` and a notice on stderr).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from interpreter.execution import DROPPED_MSG_TYPE

log = logging.getLogger(__name__)
#: After a disconnect, how long to wait for libzmq's own reconnect (it retries every
#: 100 ms by default) before taking the link for cut for good.
RECONNECT_WAIT_S = 1.0


async def cut(
    sock: zmq.asyncio.Socket, on_reconnected: Callable[[str], Awaitable[None]] | None = None
) -> str:
    """Return once ``sock``'s link to the kernel is cut for good; what libzmq said of it
    (the socket's last monitor events, for the log).

    A disconnect that libzmq repairs itself (a connection error: it reconnects, and a SUB
    socket subscribes again) is logged, reported to ``on_reconnected`` (what the kernel
    published meanwhile is lost) and watched past; only one it does not repair (a protocol
    error, such as a message over the size limit, ends the link for good) is returned:
    replacing the channel then, not before, loses no message already queued.
    """
    monitor = sock.get_monitor_socket(zmq.EVENT_ALL)
    seen: collections.deque[str] = collections.deque(maxlen=8)

    def note(event: Mapping[str, Any]) -> None:
        seen.append(f"{_EVENT_NAMES.get(event['event'], event['event'])}:{event.get('value')}")

    try:
        while True:
            event = parse_monitor_message(await monitor.recv_multipart())
            note(event)
            if event["event"] != zmq.EVENT_DISCONNECTED:
                continue
            raw = event.get("endpoint", b"")
            where = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            try:
                async with asyncio.timeout(RECONNECT_WAIT_S):
                    while True:
                        event = parse_monitor_message(await monitor.recv_multipart())
                        note(event)
                        if event["event"] in (zmq.EVENT_CONNECTED, zmq.EVENT_CONNECT_RETRIED):
                            break
            except TimeoutError:
                return f"endpoint {where}, events {' '.join(seen)}"
            detail = f"endpoint {where}, events {' '.join(seen)}"
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
