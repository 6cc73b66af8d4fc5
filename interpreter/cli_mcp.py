"""``interp mcp``: the command that serves the tools over the Model Context Protocol.

The server itself is :mod:`interpreter.mcp_server`; this module parses the command line,
applies the bind rule of ``interp serve`` and finds the service (``--url``, else an
embedded one).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from interpreter.client import API_KEY_ENV, URL_ENV
from interpreter.client._config import check_url
from interpreter.exposure import check_bind

Command = Callable[[argparse.Namespace], int]

#: The longest idle timeout the service accepts for a session.
MAX_IDLE_TIMEOUT_S = 7 * 86400


def _idle_seconds(text: str) -> float:
    """A positive number of seconds, at most the service's maximum."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1 <= seconds <= MAX_IDLE_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"must be between 1 and {MAX_IDLE_TIMEOUT_S} seconds, not {text}"
        )
    return seconds


def cmd_mcp(args: argparse.Namespace) -> int:
    """``interp mcp [--http PORT]``: serve the tools over MCP."""
    try:
        from interpreter.mcp_auth import TOKEN_ENV
        from interpreter.mcp_server import HttpStartFailed, Target, run
    except ImportError as exc:
        print(
            f"interp mcp needs the mcp package, version 2.3 or later ({exc}): "
            "pip install -U 'interp[mcp]'",
            file=sys.stderr,
        )
        return 2
    tokens = [t for t in args.token if t] or [
        t.strip() for t in os.environ.get(TOKEN_ENV, "").split(",") if t.strip()
    ]
    if args.http is not None:
        # The rule of `interp serve`, before anything starts, said as its mistakes are.
        try:
            check_bind(
                args.host,
                authenticated=bool(tokens),
                hint=f"pass --token TOKEN (or set {TOKEN_ENV})",
            )
        except SystemExit as exc:
            print(f"interp: error: {exc.code}", file=sys.stderr)
            return 2
    url = args.url or os.environ.get(URL_ENV) or None
    key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV)
    options: dict[str, Any] = {
        "http_port": args.http,
        "host": args.host,
        "tokens": tokens or None,
        "keep_sessions": args.keep_sessions,
    }
    if args.stateless_idle_timeout is not None:
        options["stateless_idle_timeout_s"] = args.stateless_idle_timeout
    try:
        if url:
            # Refused here in one line, not in the server's task group as an exception group.
            check_url(url, "--url" if args.url else f"${URL_ENV}")
            return run(Target(url, key), **options)
        with args.embed() as (embedded_url, embedded_key):
            return run(Target(embedded_url, embedded_key), **options)
    except HttpStartFailed as exc:
        print(f"interp: error: {exc}", file=sys.stderr)
        return 2


def add_mcp_command(
    subparsers: Any,
    parent: argparse.ArgumentParser,
    embed: Any,
    wrap: Callable[[Command], Command],
) -> None:
    """Register ``interp mcp`` (``parent`` gives the connection flags, ``embed`` starts a
    service when none is named, ``wrap`` quiets per-request logs)."""
    mcp = subparsers.add_parser(
        "mcp",
        parents=[parent],
        help="Serve the tools over MCP (stdio, or HTTP with --http).",
        description="Model Context Protocol server. Talks to the service at --url / "
        "$INTERP_URL, or starts an embedded one when neither is given.",
    )
    mcp.add_argument(
        "--http",
        type=int,
        metavar="PORT",
        help="Serve streamable HTTP on this port instead of stdio.",
    )
    mcp.add_argument(
        "--host",
        default="127.0.0.1",
        help="Address for --http (default 127.0.0.1; any other needs --token).",
    )
    mcp.add_argument(
        "--token",
        action="append",
        default=[],
        help="Bearer token HTTP clients must send (repeatable; also INTERP_MCP_TOKENS, "
        "comma-separated).",
    )
    mcp.add_argument(
        "--keep-sessions",
        action="store_true",
        help="Keep the interpreter sessions a client created after it disconnects "
        "(default: delete them; their notebooks stay readable).",
    )
    mcp.add_argument(
        "--stateless-idle-timeout",
        type=_idle_seconds,
        metavar="SECONDS",
        help="A session that a stateless HTTP request (protocol 2026-07-28, which has no "
        "current session) started closes after this many seconds in which no code runs "
        "in it (default 600, interpreter.mcp_sessions.STATELESS_IDLE_TIMEOUT_S).",
    )
    mcp.set_defaults(func=wrap(cmd_mcp), embed=embed)
