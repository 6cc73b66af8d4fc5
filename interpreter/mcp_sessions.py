"""Which interpreter sessions an MCP client may name, and the sessions of stateless requests.

The MCP server calls the service with one API key for all its clients, so the service sees
them as one owner; the lines between the clients are drawn here (README.md, MCP, gives the
rule to users):

- stdio: the process has one client, which may name any session of the key (whoever
  launched the server holds the key anyway).
- A stateful HTTP connection (an MCP session, ``Mcp-Session-Id``) may name only the
  sessions it created, and no other MCP client of the server may list or name them.
- Stateless requests (protocol 2026-07-28) stand alone: the server cannot tell their
  clients apart, so a session one of them started is reachable by its id only, which the
  result gives in its text and its ``structuredContent``. A stateless request may name
  only sessions that stateless requests to this server started; ``list_sessions`` lists
  none (it would hand out other clients' ids). Without ``session_id``, ``run_code``,
  ``upload_file`` and ``create_session`` start a session and name it; the tools that read
  or reset a session need a ``session_id``, since a new session holds nothing to read. A
  session started by a call that failed is deleted at once, as nobody learnt its id.

A ``read_artifact`` reference names a session too: it must be an artifact of the service
(an id, ``/v1/sessions/<id>/artifacts/<id>``, or the same under the service's URL), the
SDK's rule.
"""

from __future__ import annotations

import contextlib

import anyio

from interpreter.client import AsyncClient, ClientError, InvalidArgumentError
from interpreter.client.protocol import parse_artifact_ref
from interpreter.mcp_executor import StreamingToolExecutor
from interpreter.tools import TextPart, ToolCall, ToolCallError, ToolResult, validate_arguments
from interpreter.tools.results import error_result
from interpreter.tools.specs import TOOLS_BY_NAME

#: Tools that, called without ``session_id`` in a stateless request, start a session.
STARTS_SESSION = frozenset({"run_code", "upload_file", "create_session"})

STATELESS_LIST = (
    "No sessions are listed to a stateless MCP client: each request stands alone, so the "
    "server cannot tell which sessions are yours. Pass the session_id that an earlier "
    "result gave (results that start a session name it), or omit it to start a new one."
)


def named_sessions(call: ToolCall, service_url: str) -> list[str]:
    """The session ids a call names: ``session_id``, ``from_session`` and the session of
    a ``read_artifact`` URL. Raises :class:`ToolCallError` for a URL that is not an
    artifact URL of the service."""
    args = call.arguments
    names = [args.get("session_id"), args.get("from_session")]
    artifact = args.get("artifact")
    if call.name == "read_artifact" and isinstance(artifact, str):
        names.append(artifact_session(artifact, service_url))
    return [name for name in names if isinstance(name, str) and name]


def artifact_session(ref: str, service_url: str) -> str | None:
    """The session an artifact reference names (None for a bare id: the call's own
    session); ToolCallError for anything but an artifact of the service (the SDK's rule,
    :func:`interpreter.client.protocol.parse_artifact_ref`)."""
    try:
        session_id, _ = parse_artifact_ref(ref, service_url)
    except InvalidArgumentError as exc:
        raise ToolCallError(f"read_artifact: {exc}") from exc
    return session_id


def unknown_session(session_id: str, hint: str) -> ToolResult:
    """The error for a session the caller may not name (whether it exists is not said)."""
    return error_result(f"unknown session {session_id!r}: {hint}")


def with_session(result: ToolResult, session_id: str) -> ToolResult:
    """A stateless result that started a session names it, in its text and its data."""
    result.parts.append(
        TextPart(
            f"Session: {session_id}. This request started it; requests to this server are "
            f'stateless, so pass session_id "{session_id}" to use it again.'
        )
    )
    if result.structured is None:
        result.structured = {"session_id": session_id}
    else:
        result.structured.setdefault("session_id", session_id)
    return result


def connection_refusal(
    executor: StreamingToolExecutor, call: ToolCall, service_url: str, *, own_only: bool
) -> ToolResult | None:
    """For a stateful client: the answer to a call that must not run, or None. With
    ``own_only`` (HTTP), only sessions the connection created may be named."""
    try:
        named = named_sessions(call, service_url)
    except ToolCallError as exc:
        return error_result(str(exc))
    created = executor.created
    for session_id in named:
        if own_only and session_id not in created:
            mine = f" ({', '.join(created)})" if created else ""
            hint = f"use a session created in this connection{mine}, or omit session_id"
            return unknown_session(session_id, hint)
    return None


class StatelessRequests:
    """Runs stateless requests and keeps the sessions they started (see the module)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        #: Holds every session a stateless request started and named; ``close`` deletes
        #: them (when the server stops).
        self.sessions = StreamingToolExecutor(client)

    def refusal(self, call: ToolCall) -> ToolResult | None:
        """The answer to a call that must not run, or None."""
        spec = TOOLS_BY_NAME.get(call.name)
        if spec is None:
            return None  # the executor names the tools there are
        try:
            validate_arguments(spec, call.arguments)
            named = named_sessions(call, self.client.base_url)
        except ToolCallError as exc:
            return error_result(str(exc))
        known = set(self.sessions.created)
        for session_id in named:
            if session_id not in known:
                return unknown_session(
                    session_id,
                    "a stateless request may name only a session that an earlier result "
                    "of this server gave, or omit session_id to start a new one",
                )
        if call.name == "list_sessions":
            return ToolResult([TextPart(STATELESS_LIST)])
        if not named and call.name not in STARTS_SESSION:
            return error_result(
                f"{call.name} needs a session_id here: requests to this server are "
                "stateless, so there is no current session. Pass the session_id an earlier "
                "result gave (run_code, upload_file and create_session start a session "
                "and name it)."
            )
        return None

    async def execute(self, call: ToolCall) -> ToolResult:
        """Run one stateless call; a session it started is named in the result, or
        deleted when the call failed (or was cancelled)."""
        refused = self.refusal(call)
        if refused is not None:
            return refused
        executor = StreamingToolExecutor(self.client, keeps_current=False)
        kept = False
        try:
            result = await executor.execute(call)
            kept = not result.is_error
        finally:
            if kept:
                self.sessions.adopt(executor.created)
            elif executor.created:
                with anyio.CancelScope(shield=True), contextlib.suppress(ClientError):
                    await executor.close()
        if executor.created and executor.session_id is not None:
            return with_session(result, executor.session_id)
        return result
