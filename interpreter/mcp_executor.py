"""How the MCP server runs code: streamed, with progress for the host, stopped on cancel.

MCP hosts time a tool call out (often after 60 s) unless progress notifications keep
arriving, and they cancel calls the user gave up on. So ``run_code`` streams the
execution through the SDK: every output becomes a progress notification, and a
heartbeat sends one every :data:`HEARTBEAT_S` seconds while the code is silent. Code the
service's policy holds for a person's approval is said to be so as soon as the stream
says it (the rule and its message), and the heartbeat then says how long it has waited,
until the service says it is no longer held. When
the host cancels the request, the kernel is interrupted (state kept) and the call waits,
within a bound, for the execution to end, so the session is free for the next call.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import anyio

from interpreter.client import (
    ApprovalRequiredEvent,
    AsyncClient,
    AsyncSession,
    ClientError,
    DoneEvent,
    ErrorEvent,
    OutputEvent,
    StderrEvent,
    StdoutEvent,
)
from interpreter.models import TERMINAL_STATUSES, Approval, Execution
from interpreter.tools import AsyncToolExecutor, RunStep
from interpreter.tools.logic import Step

log = logging.getLogger(__name__)

#: Longest silence between two progress notifications while code runs.
HEARTBEAT_S = 2.0
#: After a cancel: interrupt, then wait this long for the execution to end; repeated.
STOP_WAIT_S = 3.0
STOP_ATTEMPTS = 3

#: Sends one progress notification: (progress, message). Set per tool call.
Reporter = Callable[[float, str], Awaitable[None]]
reporter: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar(
    "interp_mcp_reporter", default=None
)


def _event_message(event: object) -> str | None:
    """A short line describing a stream event, for a progress notification."""
    if isinstance(event, StdoutEvent | StderrEvent):
        text = event.text.strip()
        if not text:
            return None
        last = text.splitlines()[-1]
        return f"{event.name}: {last[:200]}"
    if isinstance(event, OutputEvent):
        return f"output: {', '.join(sorted(event.output.data))[:200]}"
    if isinstance(event, ErrorEvent):
        return f"error: {event.error.ename}"
    if isinstance(event, ApprovalRequiredEvent):
        return held_message(event.approval)
    return None


def held_message(approval: Approval) -> str:
    """What a host shows when the policy holds the code for a person's approval."""
    why = approval.message or "the service's policy asks for it"
    rule = f"rule '{approval.rule}': " if approval.rule else ""
    return (
        f"waiting for a person's approval ({rule}{why[:200]}); "
        f"the code has not started (approval {approval.id})"
    )


#: Asks the service whether the execution is still held: its status (``pending_approval``).
StatusCheck = Callable[[str], Awaitable[str]]


class _Progress:
    """Strictly increasing progress values (seconds since the start), sent one at a time.

    While the code is held for approval (:meth:`held`), the heartbeat says so, and asks
    the service at each beat whether it still is; once it is not, "running for" counts
    from then.
    """

    def __init__(self, send: Reporter, status: StatusCheck) -> None:
        self._send = send
        self._status = status
        self._lock = anyio.Lock()
        self._started = anyio.current_time()
        self._last = 0.0
        #: The execution held for approval, and since when; None when not held.
        self._held: str | None = None
        self._held_since = 0.0
        self._running_since = self._started

    def held(self, execution_id: str) -> None:
        """The stream said the code waits for a person's approval."""
        self._held, self._held_since = execution_id, anyio.current_time()

    def moving(self) -> None:
        """The stream carried something the code did: it is no longer held."""
        if self._held is not None:
            self._held, self._running_since = None, anyio.current_time()

    async def __call__(self, message: str) -> None:
        async with self._lock:
            value = max(round(anyio.current_time() - self._started, 3), self._last + 0.001)
            self._last = value
            try:
                await self._send(value, message)
            except Exception:  # a host that went away must not fail the run
                log.debug("progress notification failed", exc_info=True)

    async def heartbeat(self) -> None:
        while True:
            await anyio.sleep(HEARTBEAT_S)
            await self(await self._beat())

    async def _beat(self) -> str:
        held = self._held
        if held is not None:
            try:
                status = await self._status(held)
            except ClientError:
                status = "pending_approval"  # unknown: as it was
            if self._held is not None and status == "pending_approval":
                return f"waiting for approval for {anyio.current_time() - self._held_since:.0f} s"
            self.moving()
            if status not in ("queued", "running"):
                return f"no longer waiting for approval ({status})"
        return f"running for {anyio.current_time() - self._running_since:.0f} s"


class StreamingToolExecutor(AsyncToolExecutor):
    """The tool executor of one MCP connection: ``run_code`` streams (see the module)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        own_sessions_only: bool = False,
        keeps_current: bool = True,
        idle_timeout_s: float | None = None,
    ) -> None:
        super().__init__(
            client,
            own_sessions_only=own_sessions_only,
            keeps_current=keeps_current,
            idle_timeout_s=idle_timeout_s,
        )
        self._handles: dict[str, AsyncSession] = {}

    async def _handle(self, session_id: str) -> AsyncSession:
        handle = self._handles.get(session_id)
        if handle is None:
            handle = await self.client.get_session(session_id)
            self._handles[session_id] = handle
        return handle

    async def run(self, step: RunStep) -> Execution:
        session = await self._handle(step.session_id)
        send = reporter.get()
        progress = None
        if send is not None:

            async def status(execution_id: str) -> str:
                return (await session.execution(execution_id)).status

            progress = _Progress(send, status)
        started: list[str] = []
        outcome: Execution | ClientError
        try:
            async with anyio.create_task_group() as tasks:
                if progress is not None:
                    tasks.start_soon(progress.heartbeat)
                try:
                    outcome = await self._stream(session, step, started.append, progress)
                except ClientError as exc:
                    # Raised here, anyio would wrap it in an ExceptionGroup, which the
                    # executor's `except ClientError` (a refusal is a tool error) misses.
                    outcome = exc
                tasks.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._stop(session, started[0] if started else None)
            raise
        if isinstance(outcome, ClientError):
            raise outcome
        return outcome

    async def _send(self, request: Step) -> Any:
        """Send one step; a ClientError that comes inside an exception group (from a task
        group on the way) is raised bare, so the executor treats it as the sync one does."""
        try:
            return await super()._send(request)
        except BaseExceptionGroup as group:
            error = client_error(group)
            if error is None:
                raise
            raise error from None

    async def _stream(
        self,
        session: AsyncSession,
        step: RunStep,
        on_start: Callable[[str], object],
        progress: _Progress | None,
    ) -> Execution:
        stream = session.stream(step.code, timeout_s=step.timeout_s, on_start=on_start)
        async for event in stream:
            if isinstance(event, DoneEvent):
                return event.execution
            if progress is not None:
                if isinstance(event, ApprovalRequiredEvent):
                    progress.held(event.approval.execution_id)
                else:
                    progress.moving()
            message = _event_message(event)
            if progress is not None and message is not None:
                await progress(message)
        raise ClientError("the execution stream ended without a result")

    async def _stop(self, session: AsyncSession, execution_id: str | None) -> None:
        """Interrupt exactly the cancelled run (cancelled outright if it still waits in the
        queue) and wait, bounded, until it has ended, so the next call finds the session
        free. Never another run: the interrupt names this one."""
        if execution_id is None:
            # Cancelled before the service acknowledged the run: it has no id to name, and
            # an interrupt without one could reach another run. It ends by its timeout.
            log.warning("a run in session %s was cancelled before it started", session.id)
            return
        for _ in range(STOP_ATTEMPTS):
            with suppress(ClientError):
                await session.interrupt(execution_id=execution_id)
            with anyio.move_on_after(STOP_WAIT_S), suppress(ClientError):
                await _ended(session, execution_id)
                return
        log.warning("a cancelled run in session %s did not stop", session.id)


def client_error(exc: BaseException) -> ClientError | None:
    """The :class:`ClientError` that ``exc`` is, or the first one of an exception group
    that holds nothing else; None for anything else."""
    if isinstance(exc, ClientError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        errors, rest = exc.split(ClientError)
        if errors is not None and rest is None:
            return client_error(errors.exceptions[0])
    return None


async def _ended(session: AsyncSession, execution_id: str) -> None:
    """Return once the execution has a final status (polled: it runs on the service)."""
    while True:
        if (await session.execution(execution_id)).status in TERMINAL_STATUSES:
            return
        await anyio.sleep(0.1)
