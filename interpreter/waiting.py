"""Waiting on a running cell: for its end, for its start, and for the kernel after a timeout.

Each wait watches the execution's recorder (what the kernel has said about the cell so far)
and wakes when the session routes a message to it (``handle.changed``); the kernel is asked
directly only whether it is still alive. Nothing here changes the session's state: the
session decides what an outcome means.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Literal

from interpreter.execution import ExecutionRecorder
from interpreter.handle import ExecutionHandle
from interpreter.kernel import Kernel

log = logging.getLogger(__name__)

#: Seconds between liveness checks of the kernel while a cell runs.
ALIVE_CHECK_S = 1.0
#: Seconds the KeyboardInterrupt traceback and the idle get after an interrupted reply.
AFTER_REPLY_S = 0.5
#: Seconds a reply gets after the cell's idle before the cell counts as answered without
#: one (longer than the iopub grace: a reply is sent before the idle, so it is rarely late).
NO_REPLY_GRACE_S = 5.0
#: The same for a cell a client interrupted: a SIGINT that lands in ipykernel's handling
#: of the request rather than in the cell's code ends it with an idle and no reply.
INTERRUPTED_NO_REPLY_GRACE_S = 0.5


@dataclass(frozen=True)
class Ending:
    """How waiting for a cell ended: ``done`` (reply and idle, or reply and a quiet
    iopub), ``timeout`` (the deadline passed), ``died`` (with the kernel's exit reason) or
    ``restarted`` (the kernel was replaced on request while the cell ran)."""

    kind: Literal["done", "timeout", "died", "restarted"]
    reason: str | None = None


async def changed(handle: ExecutionHandle, at_most: float, kernel: Kernel | None = None) -> None:
    """Wait until a message for ``handle`` was applied, or ``at_most`` seconds. A wait
    that ends with nothing new has ``kernel`` look for a message its channels hold
    unnoticed (:meth:`Kernel.recheck`); its reader applies it next, and wakes the wait
    after this one.

    ``asyncio.timeout``, not ``asyncio.wait_for``: on Python 3.11, ``wait_for`` can swallow
    a cancellation that arrives as its inner wait ends, and a session being closed then
    waits forever for a worker that never stops (reproduced under load).
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(at_most):
            await handle.changed.wait()
    if kernel is not None and not handle.changed.is_set():
        kernel.recheck()
    handle.changed.clear()


async def until_end(
    handle: ExecutionHandle,
    rec: ExecutionRecorder,
    kernel: Kernel,
    *,
    deadline: float,
    iopub_grace_s: float,
    no_reply_grace_s: float = NO_REPLY_GRACE_S,
) -> Ending:
    """Wait for the cell's completion, the deadline (loop time) or the kernel's death.

    Completion needs the shell reply and the iopub idle. The idle may have been dropped
    (docs/security.md H-33), but output can also still be in flight behind the reply, so
    a reply alone ends the cell only once iopub has been quiet for ``iopub_grace_s``.
    Likewise an idle with no reply: ipykernel sends none when a SIGINT reaches its own
    request handling rather than the cell's code (an interrupt just after
    ``execute_input``; seen under load), and then it is done with the cell all the same.
    """
    loop = asyncio.get_running_loop()
    half_seen_at: float | None = None
    last_check = loop.time()
    incarnation = kernel.restarts
    while True:
        if rec.done:
            return Ending("done")
        if kernel.restarts != incarnation:
            # Replaced under the cell (a requested restart): it will never answer.
            return Ending("restarted")
        now = loop.time()
        if rec.reply is not None or rec.idle:
            half_seen_at = half_seen_at or now
            quiet_since = max(half_seen_at, handle.last_iopub_at)
            if rec.reply is not None:
                grace = iopub_grace_s
            elif handle.interrupt_requested:
                grace = min(no_reply_grace_s, INTERRUPTED_NO_REPLY_GRACE_S)
            else:
                grace = no_reply_grace_s
            if now - quiet_since >= grace:
                missing = "idle" if rec.reply is not None else "reply"
                log.warning("session %s: no %s for the cell; moving on", kernel.name, missing)
                return Ending("done")
        if now >= deadline:
            # Half of its end seen: the kernel is done with the cell's code, which ended
            # within its limit; only the wait for the other half reached past it.
            return Ending("done" if half_seen_at is not None else "timeout")
        await changed(handle, min(deadline - now, 0.25 if half_seen_at else 1.0), kernel)
        if loop.time() - last_check >= ALIVE_CHECK_S and not rec.done:
            last_check = loop.time()
            if not await kernel.is_alive():
                if kernel.restarts != incarnation:
                    # Killed by a requested restart that began while we slept.
                    return Ending("restarted")
                return Ending("died", await kernel.exit_reason())


async def after_timeout(
    handle: ExecutionHandle, rec: ExecutionRecorder, kernel: Kernel, grace_s: float
) -> bool:
    """Interrupt a cell past its deadline and wait: whether the kernel is done with the
    cell within ``grace_s`` (its state is kept); if not, it must be restarted.

    Done is the cell's reply; or its idle without one; or the kernel's answer to a shell
    request sent after the cell. A SIGINT that lands in ipykernel's own handling of the
    request, once the cell's code has run (a cell ending just as its deadline passes),
    ends the request with no reply, and, landing later still, with no idle: the kernel
    then goes on as before, with its state, and answers the next request. A kernel
    replaced meanwhile (a requested restart) ends the wait: it will never answer.
    """
    loop = asyncio.get_running_loop()
    grace_end = loop.time() + grace_s
    incarnation = kernel.restarts
    with contextlib.suppress(Exception):
        await kernel.interrupt(ack_within=grace_s)
    grace_end = max(grace_end, loop.time() + 0.1)
    probe = asyncio.ensure_future(kernel.settle())
    probe.add_done_callback(_retrieved)
    try:
        while (
            rec.reply is None
            and not rec.idle
            and not _answered(probe)
            and loop.time() < grace_end
            and kernel.restarts == incarnation
        ):
            await changed(handle, 0.1, kernel)
        done = rec.reply is not None or rec.idle or _answered(probe)
    finally:
        probe.cancel()  # its reply, if it comes later, is let go (Kernel.settle)
    if not done:
        return False
    # The KeyboardInterrupt's traceback, the reply and the idle get a moment to arrive.
    end = loop.time() + AFTER_REPLY_S
    while (rec.reply is None or not rec.idle) and loop.time() < end:
        await changed(handle, 0.1, kernel)
    return True


def _retrieved(probe: asyncio.Future[None]) -> None:
    """Take a failed probe's exception (a kernel with no channels): it only means "not
    answered", never an unretrieved error in the log."""
    if not probe.cancelled():
        probe.exception()


def _answered(probe: asyncio.Future[None]) -> bool:
    """Whether the kernel answered the shell request of ``probe`` (not failed to send it)."""
    return probe.done() and not probe.cancelled() and probe.exception() is None


async def until_started(handle: ExecutionHandle, limit_s: float) -> None:
    """Wait (at most ``limit_s``) until the kernel has announced the cell
    (``execute_input``) or it finished: a SIGINT that lands before the kernel starts
    the cell is lost."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not handle.finished.is_set():
        rec = handle.recorder
        if rec is not None and rec.execution_count is not None:
            return
        if asyncio.get_running_loop().time() > deadline:
            return
        # Polled: the worker alone waits on (and clears) ``handle.changed``.
        await asyncio.sleep(0.02)


async def until_settled(
    handle: ExecutionHandle,
    settled: asyncio.Future[None],
    kernel: Kernel,
    *,
    deadline: float,
    interrupt_grace_s: float,
) -> Ending:
    """Wait for a cell an earlier broker left running (a reattached session) to end.

    No reply of its own will come (the kernel answers the client that sent it), so its
    end is ``settled``: the kernel's reply to a later shell request. Past ``deadline`` the
    cell is interrupted once; ``timeout`` if it still runs ``interrupt_grace_s`` later.
    """
    loop = asyncio.get_running_loop()
    incarnation = kernel.restarts
    interrupted = False
    last_check = loop.time()
    while not settled.done():
        if kernel.restarts != incarnation:
            return Ending("restarted")
        now = loop.time()
        if now >= deadline:
            if interrupted:
                return Ending("timeout")
            interrupted = True
            with contextlib.suppress(Exception):
                await kernel.interrupt(ack_within=interrupt_grace_s)
            deadline = max(deadline, loop.time()) + interrupt_grace_s
            continue
        await changed(handle, min(deadline - now, ALIVE_CHECK_S), kernel)
        if loop.time() - last_check >= ALIVE_CHECK_S and not settled.done():
            last_check = loop.time()
            if not await kernel.is_alive():
                if kernel.restarts != incarnation:
                    # Killed by a requested restart that began while we slept.
                    return Ending("restarted")
                return Ending("died", await kernel.exit_reason())
    return Ending("done")
