"""What an agent reads of a policy decision: the text blocks and the structured result."""

from __future__ import annotations

from datetime import UTC, datetime

from interpreter.client.render import render_execution
from interpreter.models import ApprovalOutcome, Execution, PolicyResult
from interpreter.tools.structured import execution_data

DENY = PolicyResult(
    decision="deny",
    policy="default",
    rule="no-subprocess",
    message="subprocess is not allowed for this key; use pandas to read the file",
    facts={"imports": ["subprocess"]},
)


def _held(decision: str, by: str, comment: str | None) -> Execution:
    outcome = ApprovalOutcome(
        decision=decision,  # type: ignore[arg-type]
        decided_by=by,
        decided_at=datetime(2026, 1, 1, tzinfo=UTC),
        comment=comment,
    )
    policy = PolicyResult(
        decision="approve",
        policy="default",
        rule="delete-needs-approval",
        message="deleting files needs a person's approval",
        approval_id="ap_1",
        approval=outcome,
    )
    status = "ok" if decision == "approved" else "denied"
    return Execution(id="ex_1", session_id="s_1", status=status, policy=policy)  # type: ignore[arg-type]


def test_a_denial_says_the_rule_its_message_and_that_nothing_ran() -> None:
    ex = Execution(id="ex_1", session_id="s_1", status="denied", policy=DENY, reason="policy")
    text = "\n\n".join(render_execution(ex))
    assert text.splitlines()[0] == "status: denied"
    assert "refused this code before it ran (nothing was executed" in text
    assert "rule 'no-subprocess' of policy 'default'" in text
    assert "use pandas to read the file" in text
    assert "Reason: policy" not in text
    data = execution_data(ex)
    assert data["status"] == "denied" and data["policy"]["rule"] == "no-subprocess"


def test_approval_outcomes_in_words() -> None:
    approved = "\n".join(render_execution(_held("approved", "ops-alice", "looked fine")))
    assert "ops-alice approved it (looked fine)" in approved
    denied = "\n".join(render_execution(_held("denied", "ops-alice", None)))
    assert "ops-alice denied it; it was not run" in denied
    expired = "\n".join(render_execution(_held("expired", "service", "no decision")))
    assert "Nobody decided in time, so it was not run" in expired
    withdrawn = "\n".join(render_execution(_held("withdrawn", "service", "restarted")))
    assert "approval withdrawn before anyone decided (restarted); it was not run" in withdrawn


def test_without_a_policy_nothing_is_said() -> None:
    ex = Execution(id="ex_1", session_id="s_1", status="ok")
    assert render_execution(ex) == ["status: ok", "(no output)"]
    assert execution_data(ex)["policy"] is None
