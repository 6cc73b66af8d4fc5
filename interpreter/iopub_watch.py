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

import contextlib
import secrets
from typing import Any

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from interpreter.execution import DROPPED_MSG_TYPE


async def disconnected(sock: zmq.asyncio.Socket) -> str:
    """Return once ``sock`` loses its connection to the peer; what libzmq said of it."""
    monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
    try:
        while True:
            frames = await monitor.recv_multipart()
            event = parse_monitor_message(frames)
            if event["event"] == zmq.EVENT_DISCONNECTED:
                raw = event.get("endpoint", b"")
                where = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                return f"endpoint {where}, descriptor {event.get('value')}"
    finally:
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        monitor.close(linger=0)


def renew_channel(kc: Any) -> None:
    """Replace the client's iopub channel by a new socket connected to the same kernel."""
    old = kc.iopub_channel
    with contextlib.suppress(Exception):
        old.stop()
    kc._iopub_channel = None
    kc.iopub_channel.start()


def dropped_notice(parent_msg_id: str, limit: int) -> dict[str, Any]:
    """The message that tells the execution of ``parent_msg_id`` output was dropped."""
    return {
        "header": {"msg_type": DROPPED_MSG_TYPE, "msg_id": secrets.token_hex(8)},
        "parent_header": {"msg_id": parent_msg_id},
        "metadata": {},
        "content": {"limit": limit},
    }
