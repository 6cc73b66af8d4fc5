"""The tamper-evident record: what an execution's hash covers, and how links chain.

Every execution that reaches a final status becomes a *link* of its session's chain (in
``state.db``, table ``audit_links``). A link holds the execution's *content*, a small
canonical JSON object of digests and facts (:func:`content_of`), the hash of the link
before it (``prev_hash``; the first link of a session follows :func:`genesis`) and its own
hash, ``sha256(prev_hash + canonical(content))`` (:func:`link_hash`). The execution's row
carries the hash and prev_hash of its latest link.

Which writes extend the chain: a write of an execution in a final status whose content
differs from its latest link (or that has none yet). So the first final write appends a
link; a later rewrite that changes what is covered (output that arrived after the cell
ended, an ``unknown`` outcome resolved) appends an *amendment* link for the same
execution; rewrites that change nothing covered append nothing. Queued and running
states are never chained. Links are only ever appended.

The notebook cell of an execution carries ``metadata.interp.audit_sha256``, the digest of
its source and outputs (:func:`cell_digest`); the content covers that digest and the ids
(SHA-256) of the execution's artifacts, so ``interp audit verify`` can check the notebook
and the artifact files against the chain.

The content also covers the policy's decision on the execution (``policy``: decision,
policy, rule, and the approval's outcome: who decided, what, when and with which comment;
null without a policy). Links written before the content had that field lack the key; a
field in :data:`SINCE_V2` is compared only when the link has it, so those links still
verify (and do not cover the decision).

The notes the service writes between cells (a restart, a recovery, a rebuild, a broker
restart: markdown cells) have a chain of their own per session (table ``audit_notes``):
note ``n`` holds its text, its ``metadata.interp`` event and the execution whose cell it
follows (:func:`note_content`), chained as the links are (from :func:`notes_genesis`).
Its cell carries ``metadata.interp.audit_note``: ``n``. The session's row names the last
note (``notes_head``, ``<n>:<hash>``), set to ``0:<genesis>`` when the session is created:
a session created by a broker from before the notes were chained has none, and its notes
are *not covered*. Notes are rare; recording one is a write of its own, never part of an
execution's.

This is tamper *evidence* against edits of part of the record (a row, a cell, a file):
nothing is keyed, so whoever can rewrite every piece consistently can rewrite the chain.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from interpreter.models import Execution, PolicyResult

#: Statuses that are not final: never chained.
UNFINISHED = frozenset({"queued", "running", "pending_approval"})
#: What the content covers, in the order a difference is reported.
FIELDS = (
    "id",
    "session_id",
    "code_sha256",
    "status",
    "reason",
    "started_at",
    "duration_ms",
    "generation",
    "execution_count",
    "state_lost",
    "truncated",
    "stdout_sha256",
    "stderr_sha256",
    "outputs_sha256",
    "error_sha256",
    "artifacts",
    "notebook_sha256",
    "policy",
)
#: Fields added to the content later: a link without the key predates them (not compared).
SINCE_V2 = frozenset({"policy"})


def canonical(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text: str) -> str:
    """SHA-256 of the UTF-8 text; a lone surrogate (no valid text has one) is hashed as
    its code point rather than raising, so that a digest is never what fails."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def genesis(session_id: str) -> str:
    """The ``prev_hash`` of a session's first link (binds the chain to its session)."""
    return sha256_text(f"interp-audit-v1:{session_id}")


def notes_genesis(session_id: str) -> str:
    """The ``prev_hash`` of a session's first note (:func:`notes_empty_head` names it)."""
    return sha256_text(f"interp-audit-notes-v1:{session_id}")


def notes_empty_head(session_id: str) -> str:
    """The ``notes_head`` of a session whose notes are chained and that has none yet."""
    return f"0:{notes_genesis(session_id)}"


def note_content(
    session_id: str, n: int, text: str, event: dict[str, Any] | None, after: str | None
) -> dict[str, Any]:
    """What note ``n`` of a session covers: its text, its event (the ``metadata.interp``
    of its cell, without ``audit_note``) and the execution whose cell it follows (None:
    it comes before every code cell)."""
    return {"session_id": session_id, "n": n, "text": text, "event": event, "after": after}


def link_hash(prev_hash: str, content_json: str) -> str:
    """The hash of a link: over the previous link's hash and this link's content."""
    return sha256_text(prev_hash + content_json)


def artifact_ids(execution: Execution) -> list[str]:
    """The ids (SHA-256 of the bytes) of every artifact the execution refers to."""
    ids = {ref.id for ref in execution.artifacts}
    for output in execution.outputs:
        ids.update(ref.id for ref in output.artifacts)
    return sorted(ids)


def content_of(execution: Execution, notebook_sha256: str | None) -> dict[str, Any]:
    """What an execution's hash covers: its code, status and times, digests of its
    outputs, its artifact ids and the digest of its notebook cell (None: no cell)."""
    ex = execution
    return {
        "id": ex.id,
        "session_id": ex.session_id,
        "code_sha256": sha256_text(ex.code),
        "status": ex.status,
        "reason": ex.reason,
        "started_at": ex.started_at.isoformat() if ex.started_at else None,
        "duration_ms": ex.duration_ms,
        "generation": ex.generation,
        "execution_count": ex.execution_count,
        "state_lost": ex.state_lost,
        "truncated": ex.truncated,
        "stdout_sha256": sha256_text(ex.stdout),
        "stderr_sha256": sha256_text(ex.stderr),
        "outputs_sha256": _list_sha256(o.model_dump(mode="json") for o in ex.outputs),
        "error_sha256": sha256_text(canonical(ex.error.model_dump(mode="json")))
        if ex.error
        else None,
        "artifacts": artifact_ids(ex),
        "notebook_sha256": notebook_sha256,
        "policy": _policy_of(ex),
    }


#: Output fields added after the chain began: a broker from before one (049d1c5 added
#: ``after``) digested outputs without its key, where the value is the default, None.
LATER_OUTPUT_FIELDS = frozenset({"after"})


def older_outputs_sha256(execution: Execution) -> str | None:
    """The outputs' digest as a broker from before :data:`LATER_OUTPUT_FIELDS` made it,
    or None when an output holds a value for one of them (no such broker wrote it)."""
    outputs = execution.outputs
    if any(getattr(o, name) is not None for o in outputs for name in LATER_OUTPUT_FIELDS):
        return None
    return _list_sha256(
        o.model_dump(mode="json", exclude=set(LATER_OUTPUT_FIELDS)) for o in outputs
    )


def _list_sha256(items: Iterable[Any]) -> str:
    """``sha256_text(canonical(list(items)))``, one item at a time: a cell's outputs can
    be tens of megabytes of JSON, never made into one text here."""
    digest = hashlib.sha256(b"[")
    for i, item in enumerate(items):
        if i:
            digest.update(b",")
        digest.update(canonical(item).encode("utf-8", "surrogatepass"))
    digest.update(b"]")
    return digest.hexdigest()


def _policy_of(ex: Execution) -> dict[str, Any] | None:
    """The policy decision the chain covers: who allowed what (None: no policy in use)."""
    return policy_covered(ex.policy)


def policy_covered(result: PolicyResult | None) -> dict[str, Any] | None:
    """What the chain covers of a policy decision (also as a notebook cell shows it)."""
    if result is None:
        return None
    outcome = result.approval
    return {
        "decision": result.decision,
        "policy": result.policy,
        "rule": result.rule,
        "approval": None
        if outcome is None
        else {
            "decision": outcome.decision,
            "decided_by": outcome.decided_by,
            "decided_at": outcome.decided_at.isoformat(),
            "comment": outcome.comment,
        },
    }


def differences(chained: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """The covered fields whose values differ, in :data:`FIELDS` order (a field of
    :data:`SINCE_V2` only when the chained content has it)."""
    return [
        f for f in FIELDS if (f in chained or f not in SINCE_V2) and chained.get(f) != actual.get(f)
    ]


def _joined(value: Any) -> Any:
    """nbformat allows multi-line strings as lists of lines: one string either way."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return value


def _normal_output(output: dict[str, Any]) -> dict[str, Any]:
    out = dict(output)
    if "text" in out:
        out["text"] = _joined(out["text"])
    if isinstance(out.get("data"), dict):
        out["data"] = {k: _joined(v) for k, v in out["data"].items()}
    return out


def cell_digest(source: Any, outputs: list[dict[str, Any]]) -> str:
    """The digest of a notebook cell's source and outputs (as written to the notebook;
    sources and texts split into lines, as Jupyter saves them, give the same digest)."""
    return sha256_text(
        canonical({"source": _joined(source), "outputs": [_normal_output(o) for o in outputs]})
    )
