"""Executions held for a person's approval: pending, decided, expired, or withdrawn.

The session's worker waits on :attr:`PendingApproval.decided` when a held execution's turn
comes (nothing behind it overtakes it). Operators decide through ``/v1/approvals``; an
approval nobody answers expires after the policy's ``approvals.expire_after_s`` and counts
as denied. One whose execution is cancelled before a decision (an interrupt, a restart,
the session's close, the broker's stop) is withdrawn: nobody can decide it any more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from interpreter.errors import Conflict, NotFound
from interpreter.ids import new_id
from interpreter.models import Approval, ApprovalOutcome
from interpreter.store import utcnow

log = logging.getLogger(__name__)
Outcome = Literal["approved", "denied", "expired", "withdrawn"]
#: Decided approvals kept in memory for GET (each execution keeps its own record too).
KEPT_DECIDED = 256


class ApprovalNotFound(NotFound):
    code = "approval_not_found"


class ApprovalDecided(Conflict):
    code = "approval_decided"


@dataclass
class PendingApproval:
    """One held execution and, once decided, who decided what, when and why."""

    id: str
    session_id: str
    execution_id: str
    owner: str
    key: str
    code: str
    policy: str
    rule: str | None
    message: str
    facts: dict[str, Any]
    created_at: datetime
    expires_at: datetime
    outcome: ApprovalOutcome | None = None
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    on_change: Callable[[], None] | None = None
    _timer: asyncio.TimerHandle | None = None

    @property
    def approved(self) -> bool:
        return self.outcome is not None and self.outcome.decision == "approved"

    def settle(self, decision: Outcome, by: str, why: str | None) -> None:
        """Record the decision (once) and wake whoever waits for it."""
        if self.outcome is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self.outcome = ApprovalOutcome(
            decision=decision, decided_by=by, decided_at=utcnow(), comment=why
        )
        self.decided.set()
        log.info(
            "approval %s of execution %s (session %s, key %s, rule %s): %s by %s",
            self.id,
            self.execution_id,
            self.session_id,
            self.key,
            self.rule,
            decision,
            by,
        )
        if self.on_change is not None:
            self.on_change()

    def withdraw(self, why: str) -> None:
        """The held execution ended before a decision (cancelled, for reason ``why``)."""
        self.settle("withdrawn", "service", why)

    def model(self) -> Approval:
        status = "pending" if self.outcome is None else self.outcome.decision
        return Approval(
            id=self.id,
            status=status,
            session_id=self.session_id,
            execution_id=self.execution_id,
            key=self.key,
            code=self.code,
            policy=self.policy,
            rule=self.rule,
            message=self.message,
            facts=self.facts,
            created_at=self.created_at,
            expires_at=self.expires_at,
            outcome=self.outcome,
        )


class ApprovalBook:
    """Every approval of this broker process, by id."""

    def __init__(self) -> None:
        self._all: dict[str, PendingApproval] = {}
        #: Set (and replaced) whenever an approval is opened or decided.
        self.changed = asyncio.Event()

    def open(
        self,
        *,
        session_id: str,
        execution_id: str,
        owner: str,
        key: str,
        code: str,
        policy: str,
        rule: str | None,
        message: str,
        facts: dict[str, Any],
        expire_after_s: float,
    ) -> PendingApproval:
        now = utcnow()
        approval = PendingApproval(
            id=new_id("ap"),
            session_id=session_id,
            execution_id=execution_id,
            owner=owner,
            key=key,
            code=code,
            policy=policy,
            rule=rule,
            message=message,
            facts=facts,
            created_at=now,
            expires_at=now + timedelta(seconds=expire_after_s),
            on_change=self._notify,
        )
        loop = asyncio.get_running_loop()
        approval._timer = loop.call_later(expire_after_s, self._expire, approval)
        self._all[approval.id] = approval
        self._forget_old()
        self._notify()
        return approval

    def get(self, approval_id: str) -> PendingApproval:
        found = self._all.get(approval_id)
        if found is None:
            raise ApprovalNotFound(
                f"No approval '{approval_id}'; list the pending ones with GET /v1/approvals."
            )
        return found

    def list(self, status: str | None = "pending") -> list[PendingApproval]:
        items = list(self._all.values())
        if status is None or status == "all":
            return items
        return [a for a in items if (a.outcome.decision if a.outcome else "pending") == status]

    def decide(
        self, approval_id: str, *, approve: bool, by: str, comment: str | None
    ) -> PendingApproval:
        approval = self.get(approval_id)
        if approval.outcome is not None:
            raise ApprovalDecided(
                f"Approval '{approval_id}' was already decided: {approval.outcome.decision} "
                f"by {approval.outcome.decided_by}."
            )
        approval.settle("approved" if approve else "denied", by, comment)
        return approval

    def _expire(self, approval: PendingApproval) -> None:
        approval.settle("expired", "service", "no decision before expires_at")

    async def wait_change(self, timeout_s: float) -> None:
        """Return when an approval is opened or decided, or after ``timeout_s``."""
        event = self.changed
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def _forget_old(self) -> None:
        decided = [k for k, a in self._all.items() if a.outcome is not None]
        for key in decided[: max(0, len(decided) - KEPT_DECIDED)]:
            del self._all[key]
