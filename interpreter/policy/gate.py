"""The policy stage of the broker: limits per key, the decision on each cell, approvals.

Without a policy file every check passes and nothing is recorded. With one, the broker
asks :meth:`PolicyGate.check_session` before it creates a session and
:meth:`PolicyGate.check_execute` before it queues code; the answer says whether the code
runs, is denied (it never reaches the kernel), or waits for a person's approval.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from dataclasses import dataclass

from interpreter.errors import InterpreterError, ValidationFailed
from interpreter.models import Execution, Limits, PolicyResult
from interpreter.policy.approvals import ApprovalBook, PendingApproval
from interpreter.policy.facts import WORKSPACE_ROOTS, analyse
from interpreter.policy.loader import PolicyWatcher
from interpreter.policy.rules import Policy, Request, evaluate

#: The window of ``max_executions_per_minute``.
RATE_WINDOW_S = 60.0


class PolicyLimitExceeded(ValidationFailed):
    code = "policy_limit"


class RateLimited(InterpreterError):
    code, status = "rate_limited", 429


@dataclass(frozen=True)
class KeyPolicy:
    """The policy that applies to one key, and the names it goes by."""

    key: str
    name: str
    policy: Policy


class PolicyGate:
    """The service's policy, or none (``watcher`` None: everything is allowed)."""

    def __init__(self, watcher: PolicyWatcher | None) -> None:
        self.watcher = watcher
        self.approvals = ApprovalBook()
        self._recent: dict[str, deque[float]] = {}

    @property
    def active(self) -> bool:
        return self.watcher is not None

    @property
    def expire_after_s(self) -> float:
        assert self.watcher is not None
        return self.watcher.policy.approvals.expire_after_s

    def for_key(self, owner: str) -> KeyPolicy | None:
        if self.watcher is None:
            return None
        policy_file = self.watcher.policy
        key, name = policy_file.binding(owner)
        return KeyPolicy(key, name, policy_file.policies[name])

    def key_name(self, token: str) -> str:
        """The name an operator's raw key goes by in records (never the key itself)."""
        if self.watcher is None:
            return "key:" + hashlib.sha256(token.encode()).hexdigest()[:12]
        return self.watcher.policy.key_name(token)

    # ------------------------------------------------------------------ limits

    def session_limits(
        self, owner: str, limits: Limits | None, defaults: Limits, live_sessions: int
    ) -> Limits | None:
        """The limits a new session gets: ``limits`` if within the key's policy (else 422),
        or the defaults capped by the policy. None: no policy, nothing to change."""
        kp = self.for_key(owner)
        if kp is None:
            return limits
        lim = kp.policy.limits
        if lim.max_sessions is not None and live_sessions >= lim.max_sessions:
            raise self._over(kp, f"at most {lim.max_sessions} live sessions")
        asked = limits or Limits()
        checks = (
            ("memory_mb", asked.memory_mb, lim.max_memory_mb),
            ("cpus", asked.cpus, lim.max_cpus),
            ("pids", asked.pids, lim.max_pids),
        )
        for field, value, most in checks:
            if value is not None and most is not None and value > most:
                raise self._over(kp, f"limits.{field} at most {most:g} (asked {value:g})")
        capped = {}
        for field, value, most in checks:
            default = getattr(defaults, field)
            if value is None and most is not None and default is not None and default > most:
                capped[field] = most
        if not capped:
            return limits
        return asked.model_copy(update=capped)

    def timeout(self, owner: str, timeout_s: float | None, default_s: float) -> float:
        """The timeout an execution runs under; over the key's policy: 422."""
        kp = self.for_key(owner)
        most = kp.policy.limits.max_timeout_s if kp is not None else None
        if timeout_s is None:
            return default_s if most is None else min(default_s, most)
        if kp is not None and most is not None and timeout_s > most:
            raise self._over(kp, f"timeout_s at most {most:g} (asked {timeout_s:g})")
        return timeout_s

    def count_execution(self, owner: str) -> None:
        """Count one execution request of ``owner``; over the rate: 429 with Retry-After."""
        kp = self.for_key(owner)
        most = kp.policy.limits.max_executions_per_minute if kp is not None else None
        if kp is None or most is None:
            return
        now = time.monotonic()
        recent = self._recent.setdefault(owner, deque())
        while recent and now - recent[0] >= RATE_WINDOW_S:
            recent.popleft()
        if len(recent) >= most:
            wait = RATE_WINDOW_S - (now - recent[0])
            raise RateLimited(
                f"Policy {kp.name!r} of key {kp.key!r} allows {most} executions per minute; "
                f"retry in {max(1, int(wait + 0.999))} s.",
                retry_after=max(1.0, wait),
            )
        recent.append(now)

    @staticmethod
    def _over(kp: KeyPolicy, what: str) -> PolicyLimitExceeded:
        return PolicyLimitExceeded(
            f"Beyond the limits of policy {kp.name!r} (key {kp.key!r}): {what}. Ask the "
            "operator for a larger policy, or ask for less."
        )

    # ------------------------------------------------------------------ decision

    def decide(
        self,
        owner: str,
        code: str,
        *,
        timeout_s: float,
        metadata: dict[str, object],
        workspace: str | None,
        limits: dict[str, object] | None = None,
    ) -> PolicyResult | None:
        """The policy's decision on ``code``; None without a policy file."""
        kp = self.for_key(owner)
        if kp is None:
            return None
        roots = WORKSPACE_ROOTS if workspace is None else (*WORKSPACE_ROOTS, workspace)
        facts = analyse(code, roots)
        request = Request(
            key=kp.key,
            session_metadata=dict(metadata),
            timeout_s=timeout_s,
            limits=dict(limits or {}),
        )
        verdict = evaluate(kp.policy, kp.name, facts, request)
        return PolicyResult(
            decision=verdict.decision,
            policy=verdict.policy,
            rule=verdict.rule,
            message=verdict.message,
            facts=facts.summary(),
        )

    def hold(self, execution: Execution, *, owner: str, verdict: PolicyResult) -> PendingApproval:
        """Open the approval that ``execution`` waits for (the session calls this)."""
        kp = self.for_key(owner)
        approval = self.approvals.open(
            session_id=execution.session_id,
            execution_id=execution.id,
            owner=owner,
            key=kp.key if kp is not None else owner,
            code=execution.code,
            policy=verdict.policy,
            rule=verdict.rule,
            message=verdict.message,
            facts=verdict.facts,
            expire_after_s=(
                kp.policy.approval_expire_after_s
                if kp is not None and kp.policy.approval_expire_after_s is not None
                else self.expire_after_s
            ),
        )
        verdict.approval_id = approval.id
        return approval
