"""What the policy stage does inside a session: record denied code, hold code for approval.

:class:`PolicyStage` is a part of :class:`~interpreter.session.LiveSession` (a base class,
so the session module stays about running code). Denied code is never sent to the kernel:
it is recorded at once, in SQLite and as a notebook cell with the decision and no outputs.
Held code waits in the session's FIFO; when its turn comes the worker waits for the
decision, so nothing behind it overtakes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from interpreter.backends.base import LaunchOptions
from interpreter.errors import SessionClosed
from interpreter.handle import ExecutionHandle
from interpreter.ids import new_id
from interpreter.models import TERMINAL_STATUSES, Execution, PolicyResult, SessionStatus
from interpreter.notebook import LiveNotebook
from interpreter.policy.gate import PolicyGate
from interpreter.store import SessionRecord, Writer

#: Cells longer than this are analysed by the policy in a worker thread.
INLINE_ANALYSIS_CHARS = 8192


class PolicyStage:
    """Mixed into LiveSession, whose attributes and methods these are."""

    id: str
    owner: str
    record: SessionRecord
    options: LaunchOptions
    #: LiveSession.submit: queue one execution.
    submit: Callable[..., Awaitable[ExecutionHandle]]
    status: SessionStatus
    failed_reason: str | None
    notebook: LiveNotebook
    writer: Writer

    def touch(self) -> None:
        raise NotImplementedError

    def _report(self, handle: ExecutionHandle) -> None:
        raise NotImplementedError

    def _save_now(self, handle: ExecutionHandle) -> Callable[[], None]:
        raise NotImplementedError

    async def submit_checked(
        self, gate: PolicyGate, code: str, timeout_s: float, **options: Any
    ) -> ExecutionHandle:
        """Queue ``code`` after the policy stage: denied code is recorded and never queued;
        code that needs approval waits for it in the queue. ``options`` go to submit."""
        decide = partial(
            gate.decide,
            self.owner,
            code,
            timeout_s=timeout_s,
            metadata=self.record.metadata,
            workspace=str(self.options.workspace),
            limits=self.record.limits,
        )
        # Analysing a long cell takes a while (seconds at 1 MB): never on the loop.
        big = gate.active and len(code) > INLINE_ANALYSIS_CHARS
        verdict = await asyncio.to_thread(decide) if big else decide()
        if verdict is not None and verdict.decision == "deny":
            return await self.record_denied(
                code,
                verdict,
                extra_meta=options.get("extra_meta"),
                request_id=options.get("request_id"),
                stream=bool(options.get("stream")),
            )
        hold = None
        if verdict is not None and verdict.decision == "approve":
            hold = partial(gate.hold, owner=self.owner, verdict=verdict)
        return await self.submit(code, timeout_s, policy=verdict, hold=hold, **options)

    async def record_denied(
        self,
        code: str,
        policy: PolicyResult,
        *,
        extra_meta: dict[str, Any] | None = None,
        request_id: str | None = None,
        stream: bool = False,
    ) -> ExecutionHandle:
        """Record code the policy denied: never sent to the kernel, kept in SQLite and as
        a notebook cell with the decision and no outputs. With ``stream``, the handle's
        subscription holds just the final event."""
        if self.status == "closed" or self.failed_reason is not None:
            raise SessionClosed.cannot_run(self.id, self.status)
        self.touch()
        execution = Execution(
            id=new_id("ex"),
            session_id=self.id,
            status="denied",
            code=code,
            policy=policy,
            reason="policy",
        )
        handle = ExecutionHandle(
            execution, 0, 0, extra_meta=dict(extra_meta or {}), request_id=request_id
        )
        await self._record_unrun(handle)
        if stream:
            handle.stream = handle.subscribe()
        return handle

    async def _record_unrun(self, handle: ExecutionHandle) -> None:
        """Finish an execution that never ran (denied): notebook cell, store, watchers."""
        ex = handle.execution
        if ex.policy is not None:
            handle.extra_meta["policy"] = ex.policy.model_dump(mode="json")
        # Chained like any final execution: its cell carries the digest its link covers.
        handle.notebook_sha256 = self.notebook.cell_digest(ex.code, [], handle.extra_meta)
        await self.notebook.add_cell(
            ex.code,
            [],
            execution_id=ex.id,
            execution_count=None,
            status=ex.status,
            started_at=None,
            duration_ms=None,
            state_lost=False,
            reason=ex.reason,
            extra={**handle.extra_meta, "audit_sha256": handle.notebook_sha256},
        )
        self._report(handle)
        await self.writer.run(self._save_now(handle))
        handle.finish()

    @staticmethod
    def _record_outcome(handle: ExecutionHandle) -> None:
        """Put the approval's outcome in the execution's policy (record and notebook)."""
        ex, approval = handle.execution, handle.approval
        if ex.policy is not None and approval is not None:
            ex.policy.approval = approval.outcome
            handle.extra_meta["policy"] = ex.policy.model_dump(mode="json")

    async def _await_approval(self, handle: ExecutionHandle) -> bool:
        """Hold the queue until ``handle``'s approval is decided; whether it may run."""
        approval = handle.approval
        if approval is None:
            return True
        if not approval.decided.is_set():
            waits = [asyncio.ensure_future(approval.decided.wait())]
            waits.append(asyncio.ensure_future(handle.finished.wait()))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waits:
                    task.cancel()
        ex = handle.execution
        if handle.finished.is_set() or ex.status in TERMINAL_STATUSES:
            return False  # cancelled while it waited (its approval withdrawn)
        self._record_outcome(handle)
        if approval.approved:
            ex.status = "queued"
            return True
        ex.status = "denied"
        ex.reason = "approval_" + (approval.outcome.decision if approval.outcome else "denied")
        await self._record_unrun(handle)
        return False
