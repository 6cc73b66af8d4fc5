"""The handshake that makes a freshly connected kernel client ready to run code.

``AsyncKernelClient.wait_for_ready`` (jupyter_client) ends with a loop that drains IOPub
until it has been quiet for 0.2 s, so every session start paid at least 200 ms after the
kernel had already answered. :func:`wait_ready` keeps what matters and drops the wait:

* ``kernel_info`` is answered on shell (the kernel runs requests), and
* a status message of one of its requests arrives on IOPub, so the SUB socket is
  subscribed and the first cell's output cannot be missed.

A PUB socket drops what it publishes before a subscription reaches it, so the status of
the first request is often lost: the reply comes back on shell while the IOPub
subscription is still on its way. Waiting for that status to arrive anyway cost a start
its whole wait (0.5 s) about one time in three. Instead a new ``kernel_info`` goes out every
:data:`IOPUB_RESEND_S` until the status of any request sent arrives.

Stray messages of the handshake (the replies and statuses of the requests sent after the
first) are left in the queues; the session's reader ignores messages whose parent is not
one of its executions.

A kernel a pool has readied needs less (:func:`wait_subscribed`): the pool's own handshake
proved that it answers on shell, and gave its ``kernel_info`` reply, so a new client of it
only has to know that its IOPub subscription has reached the kernel. ipykernel (7 and
later) publishes an ``iopub_welcome`` as soon as a new subscription reaches its XPUB
socket (JEP 65); that one message, which the kernel's IOPub thread sends without the
kernel's main thread, is the proof. No request goes out on shell at all.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Awaitable, Callable, Container
from typing import Any

#: How long one attempt waits for a shell reply before it asks again.
SHELL_WAIT_S = 1.0
#: How long to wait for an IOPub status of the requests sent before sending another.
IOPUB_RESEND_S = 0.05
#: How long a new client of a readied kernel waits for its ``iopub_welcome`` before it
#: falls back to :func:`wait_ready`. The welcome comes within a few milliseconds (2.5-2.8
#: ms p50 on a warm create, measured); it does not come at all if another client with the
#: same subscription is still connected (an XPUB socket passes on only a subscription it
#: does not have yet).
WELCOME_WAIT_S = 0.25


async def wait_ready(
    kc: Any, timeout_s: float, alive: Callable[[], Awaitable[bool]] | None = None
) -> dict[str, Any]:
    """Send ``kernel_info`` until it is answered on shell and seen on IOPub; its reply.

    ``alive`` says whether the kernel still runs, asked only after an attempt went
    unanswered; by default the client's own ``is_alive`` (its manager's answer).

    Raises:
        RuntimeError: the kernel died, or ``timeout_s`` passed without an answer (the same
            errors as jupyter_client's ``wait_for_ready``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    sent: set[str] = set()
    reply: dict[str, Any] | None = None
    while True:
        sent.add(kc.kernel_info())
        if reply is None:
            reply = await _answer(kc.get_shell_msg, sent, SHELL_WAIT_S)
        if reply is not None and await _answer(kc.get_iopub_msg, sent, IOPUB_RESEND_S):
            return reply
        if not await (alive or kc.is_alive)():
            raise RuntimeError("Kernel died before replying to kernel_info")
        if loop.time() > deadline:
            raise RuntimeError(f"Kernel didn't respond in {timeout_s:.0f} seconds")


async def wait_subscribed(kc: Any, wait_s: float | None = None) -> bool:
    """Whether the kernel's ``iopub_welcome`` for ``kc``'s subscription arrived on IOPub
    within ``wait_s`` (default :data:`WELCOME_WAIT_S`); other messages before it are
    dropped, as the handshake drops them."""
    loop = asyncio.get_running_loop()
    end = loop.time() + (WELCOME_WAIT_S if wait_s is None else wait_s)
    while (left := end - loop.time()) > 0:
        try:
            msg: dict[str, Any] = await kc.get_iopub_msg(timeout=left)
        except queue.Empty:
            return False
        except Exception:  # a bad signature or bad JSON: not the welcome (H-34)
            continue
        if (msg.get("header") or {}).get("msg_type") == "iopub_welcome":
            return True
    return False


async def _answer(get: Any, parents: Container[str], wait_s: float) -> dict[str, Any] | None:
    """The first message on a channel whose parent is one of ``parents``, within ``wait_s``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + wait_s
    while (left := end - loop.time()) > 0:
        try:
            msg: dict[str, Any] = await get(timeout=left)
        except queue.Empty:
            return None
        except Exception:  # a bad signature or bad JSON: not an answer (H-34)
            continue
        parent = (msg.get("parent_header") or {}).get("msg_id")
        if isinstance(parent, str) and parent in parents:
            return msg
    return None
