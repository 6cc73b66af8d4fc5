"""jupyter_client's kernel manager, without its fixed pauses.

* jupyter_client 8 ends ``start_kernel`` with ``await asyncio.sleep(0.01)`` (its
  ``in_pending_state`` decorator: "so tests can capture the pending state"), so every
  session start paid 10 ms for nothing: a third of the warm-pool start's budget (issue 10).
  :class:`KernelManager` starts a kernel with the same three steps, in the same order, and
  settles the manager's ``ready`` future itself.
* Waiting for a stopped kernel to be gone polled every 100 ms, so closing a session took
  at least that long after the kill; here the first checks come after 5, 10, 20 ms, ...
  up to the same 100 ms.
* The context it makes for its control socket is a :class:`~interpreter.zmqctx.Context`: a
  manager dropped with its control socket open no longer hangs the thread that collects it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import zmq.asyncio
from jupyter_client.manager import AsyncKernelManager
from traitlets import default

from interpreter.zmqctx import Context

#: The first wait before checking again whether a stopped kernel is gone (then doubling).
FIRST_POLL_S = 0.005


class KernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose ``start_kernel`` does not pause after the start."""

    @default("context")
    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        return Context()

    # The sync base class types start_kernel as sync; AsyncKernelManager's is async too.
    async def start_kernel(self, **kw: Any) -> None:  # type: ignore[override]
        self._attempted_start = True
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready = ready
        try:
            kernel_cmd, kw = await self.pre_start_kernel(**kw)
            await self._launch_kernel(kernel_cmd, **kw)
            await self.post_start_kernel(**kw)
        except Exception as exc:
            ready.set_exception(exc)
            ready.exception()  # retrieved: the caller gets the exception itself
            raise
        if self.owns_kernel:
            ready.set_result(None)

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        delay = FIRST_POLL_S
        while await self._async_is_alive():
            await asyncio.sleep(delay)
            delay = min(delay * 2, pollinterval)
