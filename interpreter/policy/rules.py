"""The policy file's schema and the evaluation of its rules: first match wins.

A policy has ordered rules and an explicit ``default`` (``allow`` or ``deny``). A rule
matches when *every* condition it names holds; a list condition holds when *any* of its
patterns matches (``fnmatch`` patterns: ``subprocess.*``). API keys are attached to
policies by their name and a prefix of the SHA-256 of the key, never the key itself.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from interpreter.policy.facts import Facts

Decision = Literal["allow", "deny", "approve"]
#: A key's owner id (interpreter.broker.owner_of) is this many hex digits of its SHA-256.
OWNER_ID_DIGITS = 24


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Match(_Strict):
    """The conditions of a rule; all that are given must hold."""

    imports: list[str] | None = Field(None, description="Imported modules (fnmatch).")
    calls: list[str] | None = Field(None, description="Called names, resolved (fnmatch).")
    magics: list[str] | None = Field(None, description="IPython magics; '!' a shell escape.")
    shell: bool | None = None
    dynamic_exec: bool | None = None
    writes_outside_workspace: bool | None = None
    unknown: list[str] | None = Field(
        None,
        description="Undetermined facts: import, getattr, exec_source, introspection, "
        "write_path, magic, star_import, *",
    )
    syntax_error: bool | None = None
    keys: list[str] | None = Field(None, description="Key names (fnmatch).")
    session_metadata: dict[str, str | int | float | bool] | None = None
    timeout_s_over: float | None = Field(None, ge=0)
    limits_over: dict[Literal["memory_mb", "cpus", "pids"], float] | None = Field(
        None, description="The session's limits: any above these."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> Match:
        if not self.model_fields_set:
            raise ValueError("a rule's match needs at least one condition")
        return self


class Rule(_Strict):
    id: str = Field(..., min_length=1, max_length=100)
    decision: Decision
    message: str = Field("", max_length=2000)
    match: Match


class PolicyLimits(_Strict):
    """The most a key under this policy may ask for."""

    max_memory_mb: int | None = Field(None, ge=64)
    max_cpus: float | None = Field(None, gt=0)
    max_pids: int | None = Field(None, ge=16)
    max_timeout_s: float | None = Field(None, gt=0)
    max_sessions: int | None = Field(None, ge=1)
    max_executions_per_minute: int | None = Field(None, ge=1)


class Policy(_Strict):
    default: Literal["allow", "deny"]
    default_message: str = Field("", max_length=2000)
    approval_expire_after_s: float | None = Field(
        None, gt=0, le=7 * 86400, description="Overrides [approvals] expire_after_s."
    )
    limits: PolicyLimits = Field(default_factory=PolicyLimits)
    rules: list[Rule] = Field(default_factory=list)

    @field_validator("rules")
    @classmethod
    def _unique_ids(cls, rules: list[Rule]) -> list[Rule]:
        seen: set[str] = set()
        for rule in rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice")
            seen.add(rule.id)
        return rules


class KeyBinding(_Strict):
    name: str = Field(..., min_length=1, max_length=100)
    sha256: str = Field(
        ...,
        min_length=12,
        max_length=64,
        pattern=r"^[0-9a-f]+$",
        description="The first 12 to 64 hex digits of the SHA-256 of the key.",
    )
    policy: str = "default"


class Approvals(_Strict):
    expire_after_s: float = Field(600.0, gt=0, le=7 * 86400)


class PolicyFile(_Strict):
    keys: list[KeyBinding] = Field(default_factory=list)
    approvals: Approvals = Field(default_factory=Approvals)
    policies: dict[str, Policy]

    @model_validator(mode="after")
    def _references(self) -> PolicyFile:
        if "default" not in self.policies:
            raise ValueError("[policies.default] is required (the policy of unnamed keys)")
        for key in self.keys:
            if key.policy not in self.policies:
                raise ValueError(f"key {key.name!r} names an undefined policy {key.policy!r}")
        return self

    def binding(self, owner: str) -> tuple[str, str]:
        """(key name, policy name) of the key whose owner id is ``owner``."""
        for key in self.keys:
            if _same_key(key.sha256, owner):
                return key.name, key.policy
        return owner if owner == "anonymous" else f"key:{owner[:12]}", "default"

    def key_name(self, token: str) -> str:
        """The name of a raw key (an operator's, when deciding): its binding or a hash."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        return self.binding(digest[:OWNER_ID_DIGITS])[0]


def _same_key(prefix: str, owner: str) -> bool:
    n = min(len(prefix), len(owner))
    return owner != "anonymous" and prefix[:n] == owner[:n]


@dataclass(frozen=True)
class Request:
    """The request facts a rule can match, beside the code's."""

    key: str
    session_metadata: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 0.0
    limits: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The outcome of evaluating a policy: the decision and what made it."""

    decision: Decision
    policy: str
    rule: str | None
    message: str


def evaluate(policy: Policy, name: str, facts: Facts, request: Request) -> Verdict:
    """The first rule of ``policy`` that matches, else its default."""
    for rule in policy.rules:
        if matches(rule.match, facts, request):
            return Verdict(rule.decision, name, rule.id, rule.message or _said(rule))
    message = policy.default_message
    if not message and policy.default == "deny":
        message = f"policy {name!r} denies what no rule allows"
    return Verdict(policy.default, name, None, message)


def _said(rule: Rule) -> str:
    verb = {"deny": "denies", "approve": "needs approval for", "allow": "allows"}[rule.decision]
    return f"rule {rule.id!r} {verb} this code"


def matches(match: Match, facts: Facts, request: Request) -> bool:
    checks: list[bool] = []
    if match.imports is not None:
        checks.append(_any(match.imports, facts.imports))
    if match.calls is not None:
        checks.append(_any(match.calls, facts.calls))
    if match.magics is not None:
        checks.append(_any(match.magics, facts.magics))
    if match.unknown is not None:
        checks.append(_any(match.unknown, facts.unknown))
    for flag in ("shell", "dynamic_exec", "syntax_error"):
        wanted = getattr(match, flag)
        if wanted is not None:
            checks.append(bool(getattr(facts, flag)) == wanted)
    if match.writes_outside_workspace is not None:
        checks.append(bool(facts.writes_outside_workspace) == match.writes_outside_workspace)
    if match.keys is not None:
        checks.append(_any(match.keys, {request.key}))
    if match.session_metadata is not None:
        meta = request.session_metadata
        checks.append(all(meta.get(k) == v for k, v in match.session_metadata.items()))
    if match.timeout_s_over is not None:
        checks.append(request.timeout_s > match.timeout_s_over)
    if match.limits_over is not None:
        asked = request.limits
        checks.append(
            any(
                isinstance(asked.get(k), int | float) and asked[k] > most
                for k, most in match.limits_over.items()
            )
        )
    return all(checks)


def _any(patterns: list[str], values: frozenset[str] | set[str]) -> bool:
    return any(fnmatch.fnmatchcase(v, p) for p in patterns for v in values)
