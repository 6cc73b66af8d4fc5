"""The calls of the operator routes ``/v1/approvals`` (held executions) for both clients.

They need an operator key (``INTERP_OPERATOR_KEY`` on the service); an agent's API key
gets 403 (``AuthenticationError``).
"""

from __future__ import annotations

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


def get_approval(approval_id: str) -> Call[Approval]:
    return Call("GET", "/v1/approvals/" + quote(approval_id, safe=""), _parse_approval)


def decide(approval_id: str, *, approve: bool, comment: str | None) -> Call[Approval]:
    verb = "approve" if approve else "deny"
    url = f"/v1/approvals/{quote(approval_id, safe='')}/{verb}"
    body = {} if comment is None else {"comment": comment}
    return Call("POST", url, _parse_approval, json=body)
