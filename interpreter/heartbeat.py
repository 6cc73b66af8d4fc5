"""A kernel's heartbeat: is it still answering at all, busy or not?

Every Jupyter kernel runs an echo on its heartbeat socket (``hb_port``) in a thread of its
own: ipykernel's is a ZMQ device that never takes the GIL, so a kernel that is busy with a
long cell still echoes at once. A kernel that does not echo is frozen (SIGSTOP, a paused
container, a hung host) or gone. Waiting for an execution's timeout to notice that could
take an hour; the heartbeat notices within ``interval_s * misses`` seconds.

One :class:`Heartbeat` pings one kernel: a REQ socket sends ``ping`` every ``interval_s``
and waits ``interval_s`` for the echo. A ping without an echo is a miss; the socket is then
replaced (a REQ socket cannot send again before it has a reply). After ``misses``
consecutive misses the kernel is declared lost, ``on_lost`` is called once and pinging
stops. Any echo resets the count, so a slow echo under load is never a loss by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import zmq
import zmq.asyncio

log = logging.getLogger(__name__)


def hb_url(connection: Mapping[str, Any]) -> str:
    """The heartbeat address of a kernel's connection info (tcp or ipc)."""
    transport = str(connection.get("transport", "tcp"))
    ip, port = connection["ip"], connection["hb_port"]
    if transport == "ipc":
        return f"ipc://{ip}-{port}"
    return f"{transport}://{ip}:{port}"


async def echoes(ctx: zmq.asyncio.Context, url: str, within_s: float) -> bool:
    """Whether the kernel at heartbeat ``url`` echoes one ping within ``within_s``: a
    cheap proof that its process runs and is not frozen (no engine call)."""
    sock = ctx.socket(zmq.REQ)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(url)
        await sock.send(b"ping")
        if await sock.poll(timeout=max(1, int(within_s * 1000))):
            return bool(await sock.recv())
        return False
    finally:
        sock.close(linger=0)


class Heartbeat:
    """Pings one kernel's heartbeat socket until it stops answering or is stopped.

    Args:
        name: the session id (log context, task name).
        ctx: the ZMQ context the kernel's other sockets use.
        url: the heartbeat socket's address (:func:`hb_url`).
        interval_s: seconds between pings, and how long each ping waits for its echo.
        misses: consecutive pings without an echo after which the kernel is lost.
        on_lost: called once, on the event loop, when the kernel is declared lost.
    """

    def __init__(
        self,
        *,
        name: str,
        ctx: zmq.asyncio.Context,
        url: str,
        interval_s: float,
        misses: int,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self.interval_s = interval_s
        self.misses = misses
        self.on_lost = on_lost
        #: Set once ``misses`` pings in a row went unanswered.
        self.lost = False
        #: Pings answered so far (for tests and logs).
        self.answered = 0
        self._ctx = ctx
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"heartbeat-{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        missed = 0
        sock: zmq.asyncio.Socket | None = None
        try:
            while True:
                if sock is None:
                    sock = self._ctx.socket(zmq.REQ)
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.connect(self.url)
                sent_at = loop.time()
                await sock.send(b"ping")
                if await sock.poll(timeout=int(self.interval_s * 1000)):
                    await sock.recv()
                    self.answered += 1
                    missed = 0
                    await asyncio.sleep(max(0.0, self.interval_s - (loop.time() - sent_at)))
                    continue
                sock.close(linger=0)
                sock = None
                missed += 1
                if missed >= self.misses:
                    self._declare_lost()
                    return
        finally:
            if sock is not None:
                sock.close(linger=0)

    def _declare_lost(self) -> None:
        self.lost = True
        log.warning(
            "session %s: the kernel did not answer %d heartbeats in a row (%g s apart);"
            " it is frozen or gone",
            self.name,
            self.misses,
            self.interval_s,
        )
        if self.on_lost is not None:
            try:
                self.on_lost()
            except Exception:
                log.exception("session %s: could not handle a lost heartbeat", self.name)
