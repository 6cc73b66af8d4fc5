"""Operator routes of the policy stage: ``/v1/approvals`` and ``/v1/policy``.

Only an operator key (``INTERP_OPERATOR_KEY``) passes; an agent's API key gets 403, so an
agent cannot approve its own code. A key listed both as an agent's and an operator's key
may list approvals but gets 403 ``self_approval`` on deciding one it submitted. Decisions
are recorded under the operator key's name (from the policy file's ``[[keys]]``, else a
hash prefix), never the key itself.
"""

from __future__ import annotations

import asyncio
import hashlib

from interpreter.api.base import BaseHandler, _matching
from interpreter.broker import owner_of
from interpreter.errors import Forbidden, Unauthorized, ValidationFailed
from interpreter.models import ApprovalList, DecideRequest
from interpreter.policy.approvals import PendingApproval

#: Longest ``?wait_s=`` of the list: the live view's long poll.
MAX_WAIT_S = 60.0
STATUSES = ("pending", "approved", "denied", "expired", "withdrawn", "all")


class SelfApproval(Forbidden):
    code = "self_approval"


class OperatorHandler(BaseHandler):
    operator_name = "operator"
    #: The owner id of the operator's key (what an execution it submitted records).
    operator_owner = ""

    def check_auth(self) -> None:
        operators = self.conf.operator_keys
        token = self.bearer_token()
        key = _matching(token, operators) if operators else None
        if key is not None:
            # Logs name every key alike (its owner id); records name an operator as the
            # policy does.
            self.operator_name = self.broker.policy.key_name(key)
            self.key_id = self.operator_owner = owner_of(key)
            return
        if _matching(token, self.conf.api_keys) is not None or not self.conf.api_keys:
            raise Forbidden(
                "This route needs an operator key (INTERP_OPERATOR_KEY); an agent's API key "
                "cannot list or decide approvals."
                + ("" if operators else " No operator key is configured.")
            )
        raise Unauthorized("Invalid API key.")


class ApprovalsHandler(OperatorHandler):
    async def get(self) -> None:
        status = self.get_query_argument("status", "pending")
        if status not in STATUSES:
            raise ValidationFailed(f"status must be one of {', '.join(STATUSES)}.")
        wait = self._wait_s()
        book = self.broker.policy.approvals
        # With ``If-None-Match`` (the ETag of a list the client has), ``wait_s`` waits
        # until the list differs from it (else 304 at the end); without, until one exists.
        seen = self.request.headers.get("If-None-Match")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            found = book.list(status)
            body = _listed(found)
            unchanged = _etag(body) == seen if seen is not None else not found
            if not unchanged or (remaining := deadline - loop.time()) <= 0:
                break
            await book.wait_change(remaining)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(body)  # tornado answers 304 to a matching If-None-Match

    def _wait_s(self) -> float:
        raw = self.get_query_argument("wait_s", None)
        if raw is None:
            return 0.0
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not 0 <= value <= MAX_WAIT_S:
            raise ValidationFailed(f"wait_s must be a number of seconds from 0 to {MAX_WAIT_S:g}.")
        return value


def _listed(found: list[PendingApproval]) -> bytes:
    return ApprovalList(approvals=[a.model() for a in found]).model_dump_json().encode()


def _etag(body: bytes) -> str:
    """The ETag tornado gives ``body`` (:meth:`tornado.web.RequestHandler.compute_etag`)."""
    return f'"{hashlib.sha1(body).hexdigest()}"'


class ApprovalHandler(OperatorHandler):
    async def get(self, approval_id: str) -> None:
        self.send_json(self.broker.policy.approvals.get(approval_id).model())


class DecideHandler(OperatorHandler):
    approve = True

    async def post(self, approval_id: str) -> None:
        req = self.parse(DecideRequest, optional=True)
        book = self.broker.policy.approvals
        held = book.get(approval_id)
        if held.owner == self.operator_owner:
            raise SelfApproval(
                f"Approval '{approval_id}' is of code submitted with this same key "
                f"({held.key}); another operator's key must decide it."
            )
        approval = book.decide(
            approval_id, approve=self.approve, by=self.operator_name, comment=req.comment
        )
        self.send_json(approval.model())


class DenyHandler(DecideHandler):
    approve = False


class PolicyHandler(OperatorHandler):
    async def get(self) -> None:
        watcher = self.broker.policy.watcher
        self.send_json(
            {"active": False} if watcher is None else {"active": True, **watcher.status()}
        )
