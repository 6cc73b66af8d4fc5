"""Rule evaluation: first match wins, all conditions of a rule must hold, explicit default."""

from __future__ import annotations

import hashlib

import pytest
from pydantic import ValidationError

from interpreter.broker import owner_of
from interpreter.policy.facts import analyse
from interpreter.policy.rules import Policy, PolicyFile, Request, evaluate


def _policy(default: str = "allow", *rules: dict[str, object]) -> Policy:
    return Policy.model_validate({"default": default, "rules": list(rules)})


REQ = Request(key="agent")


def test_first_matching_rule_wins_and_the_default_applies_otherwise() -> None:
    policy = _policy(
        "allow",
        {"id": "approve-rm", "decision": "approve", "match": {"calls": ["os.remove"]}},
        {"id": "no-os", "decision": "deny", "message": "no os", "match": {"imports": ["os"]}},
    )
    rm = evaluate(policy, "p", analyse("import os\nos.remove('x')"), REQ)
    assert (rm.decision, rm.rule) == ("approve", "approve-rm")
    other = evaluate(policy, "p", analyse("import os\nos.getcwd()"), REQ)
    assert (other.decision, other.rule, other.message) == ("deny", "no-os", "no os")
    plain = evaluate(policy, "p", analyse("1 + 1"), REQ)
    assert (plain.decision, plain.rule) == ("allow", None)


def test_a_deny_default_denies_what_no_rule_allows() -> None:
    policy = _policy(
        "deny", {"id": "pandas", "decision": "allow", "match": {"imports": ["pandas"]}}
    )
    assert evaluate(policy, "p", analyse("import pandas"), REQ).decision == "allow"
    verdict = evaluate(policy, "p", analyse("import os"), REQ)
    assert verdict.decision == "deny" and "denies what no rule allows" in verdict.message


def test_all_conditions_of_a_rule_must_hold() -> None:
    policy = _policy(
        "allow",
        {
            "id": "shell-for-ci",
            "decision": "deny",
            "match": {"shell": True, "keys": ["ci-*"]},
        },
    )
    facts = analyse("!ls")
    assert evaluate(policy, "p", facts, Request(key="ci-bot")).decision == "deny"
    assert evaluate(policy, "p", facts, Request(key="alice")).decision == "allow"
    assert evaluate(policy, "p", analyse("1"), Request(key="ci-bot")).decision == "allow"


@pytest.mark.parametrize(
    ("match", "code", "request_", "hit"),
    [
        ({"calls": ["subprocess.*"]}, "import subprocess\nsubprocess.run('x')", REQ, True),
        ({"calls": ["subprocess.*"]}, "import subprocess", REQ, False),
        ({"magics": ["pip"]}, "%pip install x", REQ, True),
        ({"unknown": ["import"]}, "import importlib\nimportlib.import_module(n)", REQ, True),
        ({"unknown": ["*"]}, "1", REQ, False),
        ({"dynamic_exec": True}, "exec(code)", REQ, True),
        ({"writes_outside_workspace": True}, "open('/etc/x', 'w')", REQ, True),
        ({"syntax_error": True}, "def (", REQ, True),
        ({"syntax_error": True}, "1", REQ, False),
        ({"session_metadata": {"project": "x"}}, "1", Request("k", {"project": "x"}), True),
        ({"session_metadata": {"project": "x"}}, "1", Request("k", {"project": "y"}), False),
        ({"timeout_s_over": 60}, "1", Request("k", timeout_s=61), True),
        ({"timeout_s_over": 60}, "1", Request("k", timeout_s=60), False),
        ({"limits_over": {"memory_mb": 1024}}, "1", Request("k", limits={"memory_mb": 2048}), True),
        ({"limits_over": {"memory_mb": 1024}}, "1", Request("k", limits={"memory_mb": 512}), False),
        ({"limits_over": {"cpus": 1}}, "1", Request("k"), False),
    ],
)
def test_each_condition_kind(
    match: dict[str, object], code: str, request_: Request, hit: bool
) -> None:
    policy = _policy("allow", {"id": "r", "decision": "deny", "match": match})
    assert (evaluate(policy, "p", analyse(code), request_).decision == "deny") is hit


def test_a_rule_without_conditions_or_a_duplicate_id_is_refused() -> None:
    with pytest.raises(ValidationError, match="at least one condition"):
        _policy("allow", {"id": "r", "decision": "deny", "match": {}})
    with pytest.raises(ValidationError, match="used twice"):
        _policy(
            "allow",
            {"id": "r", "decision": "deny", "match": {"shell": True}},
            {"id": "r", "decision": "deny", "match": {"shell": False}},
        )


def test_keys_attach_by_a_hash_prefix_and_unnamed_keys_get_the_default() -> None:
    digest = hashlib.sha256(b"secret-key-1").hexdigest()
    pf = PolicyFile.model_validate(
        {
            "keys": [{"name": "ci", "sha256": digest[:16], "policy": "strict"}],
            "policies": {"default": {"default": "allow"}, "strict": {"default": "deny"}},
        }
    )
    assert pf.binding(owner_of("secret-key-1")) == ("ci", "strict")
    name, policy = pf.binding(owner_of("another-key"))
    assert policy == "default" and name.startswith("key:") and "another" not in name
    assert pf.key_name("secret-key-1") == "ci"


def test_a_key_naming_an_undefined_policy_is_refused() -> None:
    with pytest.raises(ValidationError, match="undefined policy 'nope'"):
        PolicyFile.model_validate(
            {
                "keys": [{"name": "a", "sha256": "0" * 16, "policy": "nope"}],
                "policies": {"default": {"default": "allow"}},
            }
        )
