"""The handshake that makes a freshly connected kernel client ready to run code.

``AsyncKernelClient.wait_for_ready`` (jupyter_client) ends with a loop that drains IOPub
until it has been quiet for 0.2 s, so every session start paid at least 200 ms after the
kernel had already answered. :func:`wait_ready` keeps what matters and drops the wait:

* ``kernel_info`` is answered on shell (the kernel runs requests), and
* a status message of that very request arrives on IOPub, so the SUB socket is subscribed
  and the first cell's output cannot be missed.

Stray IOPub messages of the handshake (the ``idle`` that follows) are left in the queue;
the session's reader ignores messages whose parent is not one of its executions.
"""

from __future__ import annotations

import asyncio
import queue
from typing import Any

#: How long one attempt waits for the shell reply, then for its IOPub status.
SHELL_WAIT_S = 1.0
IOPUB_WAIT_S = 0.5


async def wait_ready(kc: Any, timeout_s: float) -> dict[str, Any]:
    """Send ``kernel_info`` until it is answered on shell and seen on IOPub; its reply.

    Raises:
        RuntimeError: the kernel died, or ``timeout_s`` passed without an answer (the same
            errors as jupyter_client's ``wait_for_ready``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        msg_id = kc.kernel_info()
        reply = await _answer(kc.get_shell_msg, msg_id, SHELL_WAIT_S)
        if reply is not None and await _answer(kc.get_iopub_msg, msg_id, IOPUB_WAIT_S):
            return reply
        if not await kc.is_alive():
            raise RuntimeError("Kernel died before replying to kernel_info")
        if loop.time() > deadline:
            raise RuntimeError(f"Kernel didn't respond in {timeout_s:.0f} seconds")


async def _answer(get: Any, msg_id: str, wait_s: float) -> dict[str, Any] | None:
    """The first message on a channel whose parent is ``msg_id``, within ``wait_s``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + wait_s
    while (left := end - loop.time()) > 0:
        try:
            msg: dict[str, Any] = await get(timeout=left)
        except queue.Empty:
            return None
        except Exception:  # a bad signature or bad JSON: not an answer (H-34)
            continue
        if (msg.get("parent_header") or {}).get("msg_id") == msg_id:
            return msg
    return None
