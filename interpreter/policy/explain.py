"""The policy's decision on an execution in words, for the agent that sent the code.

A leaf (models only): the SDK's renderer, the tool results and the E2B surface all say it
the same way.
"""

from __future__ import annotations

from interpreter.models import Execution


def policy_text(execution: Execution) -> str:
    """What the service's policy decided about this code, for the agent to act on."""
    policy = execution.policy
    if policy is None or policy.decision == "allow":
        return ""
    rule = (
        f"rule {policy.rule!r} of policy {policy.policy!r}"
        if policy.rule
        else (f"the default of policy {policy.policy!r}")
    )
    said = f": {policy.message}" if policy.message else "."
    outcome = policy.approval
    if policy.decision == "deny":
        return (
            f"The service's policy refused this code before it ran (nothing was executed; "
            f"{rule}){said}\nRewrite the code so that it does not need what the rule forbids."
        )
    if outcome is None:
        return f"This code waits for a person's approval ({rule}){said}"
    why = f" ({outcome.comment})" if outcome.comment else ""
    if outcome.decision == "approved":
        return f"A person's approval was required ({rule}); {outcome.decided_by} approved it{why}."
    if outcome.decision == "withdrawn":
        return (
            f"This code needed a person's approval ({rule}){said}\nIt was cancelled and its "
            f"approval withdrawn before anyone decided ({outcome.comment}); it was not run."
        )
    if outcome.decision == "expired":
        return (
            f"This code needed a person's approval ({rule}){said}\nNobody decided in time, so "
            "it was not run; try a way that needs no approval, or ask the user."
        )
    return (
        f"This code needed a person's approval ({rule}){said}\n{outcome.decided_by} denied "
        f"it{why}; it was not run. Rewrite it without what the rule guards."
    )
