"""The calls of the operator routes ``/v1/approvals`` (held executions) for both clients.

They need an operator key (``INTERP_OPERATOR_KEY`` on the service); an agent's API key
gets 403 (``AuthenticationError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from interpreter.client._errors import ConnectionFailed
from interpreter.client.protocol import Call
from interpreter.models import Approval, ApprovalList


def _parse_approval(resp: httpx.Response) -> Approval:
    try:
        return Approval.model_validate_json(resp.content)
    except ValidationError as exc:
        raise ConnectionFailed(f"unexpected answer from {resp.request.url}: {exc}") from exc


def _parse_approvals(resp: httpx.Response) -> list[Approval]:
    try:
        return ApprovalList.model_validate_json(resp.content).approvals
    except ValidationError as exc:
        raise ConnectionFailed(f"unexpected answer from {resp.request.url}: {exc}") from exc


def list_approvals(status: str = "pending", wait_s: float | None = None) -> Call[list[Approval]]:
    params = {"status": status}
    if wait_s is not None:
        params["wait_s"] = f"{wait_s:g}"
    return Call("GET", "/v1/approvals", _parse_approvals, params=params, unbounded=True)


@dataclass(frozen=True)
class ApprovalsSnapshot:
    """One answer of a conditional list: ``approvals`` is None when the list is still the
    one ``etag`` names (304)."""

    approvals: list[Approval] | None
    etag: str | None


def approvals_changed(etag: str | None, status: str, wait_s: float) -> Call[ApprovalsSnapshot]:
    """The list, once it differs from the one ``etag`` names (or at once without one);
    after ``wait_s`` seconds unchanged, a snapshot with ``approvals`` None."""

    def parse(resp: httpx.Response) -> ApprovalsSnapshot:
        if resp.status_code == 304:
            return ApprovalsSnapshot(None, etag)
        return ApprovalsSnapshot(_parse_approvals(resp), resp.headers.get("ETag"))

    return Call(
        "GET",
        "/v1/approvals",
        parse,
        params={"status": status, "wait_s": f"{wait_s:g}"},
        unbounded=True,
        headers=None if etag is None else {"If-None-Match": etag},
        also_ok=(304,),
    )


def get_approval(approval_id: str) -> Call[Approval]:
    return Call("GET", "/v1/approvals/" + quote(approval_id, safe=""), _parse_approval)


def decide(approval_id: str, *, approve: bool, comment: str | None) -> Call[Approval]:
    verb = "approve" if approve else "deny"
    url = f"/v1/approvals/{quote(approval_id, safe='')}/{verb}"
    body = {} if comment is None else {"comment": comment}
    return Call("POST", url, _parse_approval, json=body)
