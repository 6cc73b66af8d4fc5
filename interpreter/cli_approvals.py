"""``interp approvals``: list, show, approve and deny executions held by the policy.

An operator key is needed: ``--api-key``, else ``$INTERP_OPERATOR_KEY``; without either the
command stops before asking the service. ``$INTERP_API_KEY``, an agent's key, is never
used (the service refuses every agent's key with 403). ``--watch`` is a live view: it
waits for held executions and prints each new one as it arrives, until interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from interpreter.client import API_KEY_ENV, Client, ClientError
from interpreter.models import Approval
from interpreter.terminal import visible

OPERATOR_KEY_ENV = "INTERP_OPERATOR_KEY"
#: Seconds each long poll of the live view waits on the service.
WATCH_POLL_S = 30.0
#: The most characters of held code's first line that the list shows.
CODE_CHARS = 100
#: What ends a line of Python source.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
#: The help of this command's ``--api-key`` (its connection options are built with it).
KEY_HELP = f"Operator key (default ${OPERATOR_KEY_ENV}; ${API_KEY_ENV} is not used)."
Command = Callable[[argparse.Namespace], int]


def add_approvals_command(
    subparsers: Any, parent: argparse.ArgumentParser, wrap: Callable[[Command], Command]
) -> None:
    """Register ``interp approvals``; ``parent`` holds the connection options, its
    ``--api-key`` described by :data:`KEY_HELP`."""
    cmd = subparsers.add_parser(
        "approvals",
        parents=[parent],
        help="List and decide executions the policy holds for approval (operator key).",
        description="Without an action: list pending approvals. The key is --api-key, else "
        f"${OPERATOR_KEY_ENV}; it must be an operator key (${API_KEY_ENV} is not used).",
    )
    cmd.add_argument(
        "action", nargs="?", choices=["list", "show", "approve", "deny"], default="list"
    )
    cmd.add_argument("approval_id", nargs="?", help="The approval (show, approve, deny).")
    cmd.add_argument("-m", "--comment", help="Why, recorded with the decision.")
    cmd.add_argument(
        "--status",
        default="pending",
        choices=["pending", "approved", "denied", "expired", "withdrawn", "all"],
        help="Which approvals to list (default pending).",
    )
    cmd.add_argument("--watch", action="store_true", help="Live view: print new ones as they come.")
    cmd.add_argument("--json", action="store_true", help="Print JSON.")
    cmd.set_defaults(func=wrap(cmd_approvals))


def cmd_approvals(args: argparse.Namespace) -> int:
    key = args.api_key or os.environ.get(OPERATOR_KEY_ENV) or None
    if key is None:
        print(
            f"interp: approvals needs an operator key: give --api-key KEY or set "
            f"${OPERATOR_KEY_ENV} (${API_KEY_ENV}, an agent's key, is not used)",
            file=sys.stderr,
        )
        return 2
    if args.action in ("show", "approve", "deny") and not args.approval_id:
        print(f"interp: approvals {args.action} needs an approval id", file=sys.stderr)
        return 2
    try:
        with Client(args.url, api_key=key, timeout=WATCH_POLL_S + 30) as client:
            if args.watch:
                return _watch(client, args.json)
            if args.action == "list":
                _print(client.list_approvals(args.status), args.json)
            elif args.action == "show":
                _print([client.get_approval(args.approval_id)], True)
            else:
                decide = client.approve if args.action == "approve" else client.deny
                done = decide(args.approval_id, args.comment)
                _print([done], args.json)
    except ClientError as exc:
        print(f"interp: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


def _watch(client: Client, as_json: bool) -> int:
    seen: set[str] = set()
    print("waiting for executions held for approval (Ctrl-C to stop)", file=sys.stderr)
    # Each question waits on the service until the list changes: an idle watch asks once
    # every WATCH_POLL_S (it asked about once a second while any approval was pending).
    for current in client.watch_approvals(wait_s=WATCH_POLL_S):
        fresh = [a for a in current if a.id not in seen]
        seen.update(a.id for a in fresh)
        if fresh:
            _print(fresh, as_json)
    return 0


def _print(approvals: list[Approval], as_json: bool) -> None:
    if as_json:
        for item in approvals:
            print(json.dumps(json.loads(item.model_dump_json())), flush=True)
        return
    if not approvals:
        print("no approvals", flush=True)
    for a in approvals:
        decided = ""
        if a.outcome is not None:
            decided = f" by {a.outcome.decided_by}" + (
                f" ({a.outcome.comment})" if a.outcome.comment else ""
            )
        head = (
            f"{a.id}  {a.status}{decided}  key={a.key} session={a.session_id} "
            f"rule={a.rule or '(default)'} expires={a.expires_at:%H:%M:%S}"
        )
        print(f"{visible(head)}\n    {code_line(a.code, a.id)}", flush=True)


def code_line(code: str, approval_id: str) -> str:
    """The first line of held code as the list shows it: its control characters
    escaped (an agent wrote it: an escape sequence in a comment could erase and rewrite
    what the operator reads), cut at :data:`CODE_CHARS`, and how many lines follow (as
    Python reads the lines: a carriage return ends one)."""
    lines = _LINE_BREAK.split(code.strip())
    first = lines[0] if len(lines[0]) <= CODE_CHARS else lines[0][: CODE_CHARS - 3] + "..."
    more = len(lines) - 1
    if more:
        plural = "s" if more > 1 else ""
        return f"{visible(first)}  [+{more} line{plural}: interp approvals show {approval_id}]"
    return visible(first)
