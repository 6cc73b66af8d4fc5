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
  The tools a stateless client lists say all this (:func:`stateless_tools`): nothing
  carries state from one call to the next but the ``session_id`` the model passes.

  Nothing tells the server that a stateless client has gone, so each session such a
  request starts is created with a short idle timeout (``idle_timeout_s``, 10 minutes by
  default): the service closes it once no code has run in it for that long, and every
  call that runs code in it starts the count again. A model that keeps passing the id
  keeps its state; sessions it dropped (one-off calls, a client that went away) end by
  themselves instead of holding a kernel and a place under the service's session caps
  until the server stops. The model is told the timeout in the tools and in each result
  that starts a session.

A ``read_artifact`` reference names a session too: it must be an artifact of the service
(an id, ``/v1/sessions/<id>/artifacts/<id>``, or the same under the service's URL), the
SDK's rule.
"""

from __future__ import annotations

import contextlib
import copy
import logging

import anyio

from interpreter.client import AsyncClient, ClientError, InvalidArgumentError
from interpreter.client.protocol import parse_artifact_ref
from interpreter.mcp_executor import StreamingToolExecutor
from interpreter.tools import (
    TOOLS,
    TextPart,
    ToolCall,
    ToolCallError,
    ToolResult,
    ToolSpec,
    validate_arguments,
)
from interpreter.tools.executors import TOO_MANY_SESSIONS_HINT
from interpreter.tools.results import error_result
from interpreter.tools.specs import RUN_CODE_STATE, TOOLS_BY_NAME

log = logging.getLogger(__name__)

#: Tools that, called without ``session_id`` in a stateless request, start a session.
STARTS_SESSION = frozenset({"run_code", "upload_file", "create_session"})

#: How long a session that stateless requests started may stay idle (no code run in it)
#: before the service closes it.
STATELESS_IDLE_TIMEOUT_S = 600.0

STATELESS_LIST = (
    "No sessions are listed to a stateless MCP client: each request stands alone, so the "
    "server cannot tell which sessions are yours. Pass the session_id that an earlier "
    "result gave (results that start a session name it), or omit it to start a new one."
)


def duration(seconds: float) -> str:
    """``600`` -> ``10 minutes``, for a model to read."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


def _idle_sentence(idle_timeout_s: float) -> str:
    return (
        f"A session closes by itself after {duration(idle_timeout_s)} in which no code runs in it."
    )


#: Tools whose session must be named in a stateless request (see the module).
_NEEDS_SESSION = frozenset(
    {"close_session", "read_file", "list_files", "restart", "rebuild_from_notebook", "get_notebook"}
)


def stateless_tools(idle_timeout_s: float = STATELESS_IDLE_TIMEOUT_S) -> tuple[ToolSpec, ...]:
    """The tools as a stateless client is told them: there is no current session, so
    ``session_id`` is what carries state from one call to the next. Omitted, ``run_code``,
    ``upload_file`` and ``create_session`` start a new session whose id the result gives;
    the tools that read or reset a session require it. The names, the order and every
    other word are those of :data:`interpreter.tools.TOOLS`."""
    idle = _idle_sentence(idle_timeout_s)
    starts = {
        "type": "string",
        "description": (
            "The session to use: the session_id an earlier result gave. Requests to this "
            "server are stateless (there is no current session), so pass it on every call "
            "that builds on earlier ones. Omitted (or an empty string), the call starts a "
            "new, empty session, and its result gives the session_id to pass next time. " + idle
        ),
    }
    needs = {
        "type": "string",
        "description": (
            "The session to act on: the session_id an earlier result gave (run_code, "
            "upload_file and create_session start a session and name it). Required: "
            "requests to this server are stateless, so there is no current session."
        ),
    }
    artifact_session = {
        "type": "string",
        "description": (
            "The artifact's session, as a result gave it; needed only when artifact is a "
            "bare id (an artifact URL names its session)."
        ),
    }
    descriptions = {
        "run_code": TOOLS_BY_NAME["run_code"].description.replace(
            RUN_CODE_STATE,
            "State persists within a session: pass the session_id that a result gives to "
            "every later call, and variables, imports and loaded data stay defined, so "
            "build on earlier results instead of recomputing them, and split work into "
            "steps. Requests to this server are stateless: a call without session_id "
            "starts a new, empty session (its result gives the session_id), where nothing "
            f"from earlier calls is defined. {idle} ",
        ),
        "create_session": (
            "Start a new, empty Python session (its own kernel and workspace) and return "
            "its session_id: pass it to the other tools to use that session, since "
            "requests to this server are stateless (there is no current session). "
            "run_code and upload_file without session_id start one too; use this to start "
            "over with a clean state, or with from_session to fork: the new session re-runs "
            "the cells the source session ran and copies its files, so you can try "
            f"something risky without touching the original. {idle}"
        ),
        "list_sessions": (
            "Lists no sessions to this client: requests to this server are stateless, so "
            "the server cannot tell which sessions are yours. Keep the session_id each "
            "result gives and pass it instead."
        ),
        "close_session": (
            "Close a session you no longer need: its kernel stops and its place is freed "
            "(the service caps how many sessions are open at once). Its notebook stays "
            f"readable with get_notebook. {idle}"
        ),
        "upload_file": TOOLS_BY_NAME["upload_file"].description
        + " Pass the session_id of the session whose code will read the file: without "
        "one, a new session is started and the result names it.",
    }
    specs = []
    for spec in TOOLS:
        parameters = copy.deepcopy(spec.parameters)
        properties = parameters["properties"]
        if spec.name in STARTS_SESSION and "session_id" in properties:
            properties["session_id"] = dict(starts)
        elif spec.name in _NEEDS_SESSION:
            properties["session_id"] = dict(needs)
            parameters["required"] = [*parameters.get("required", []), "session_id"]
        elif spec.name == "read_artifact":
            properties["session_id"] = dict(artifact_session)
        description = descriptions.get(spec.name, spec.description)
        specs.append(ToolSpec(spec.name, description, parameters))
    return tuple(specs)


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


def with_session(result: ToolResult, session_id: str, idle_timeout_s: float) -> ToolResult:
    """A stateless result that started a session names it, in its text and its data, and
    says how long it stays open unused."""
    result.parts.append(
        TextPart(
            f"Session: {session_id}. This request started it; requests to this server are "
            f'stateless, so pass session_id "{session_id}" to use it again (a call without '
            "session_id starts another, empty session). It closes by itself after "
            f"{duration(idle_timeout_s)} in which no code runs in it."
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
    """Runs stateless requests and keeps the ids of the sessions they started (see the
    module)."""

    def __init__(
        self, client: AsyncClient, idle_timeout_s: float = STATELESS_IDLE_TIMEOUT_S
    ) -> None:
        self.client = client
        #: Sessions that stateless requests start close after this idle time.
        self.idle_timeout_s = idle_timeout_s
        #: Every session a stateless request started and named: the ones such requests
        #: may name. ``close`` deletes those still open (when the server stops).
        self.started: set[str] = set()

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
        for session_id in named:
            if session_id not in self.started:
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
        executor = StreamingToolExecutor(
            self.client, keeps_current=False, idle_timeout_s=self.idle_timeout_s
        )
        kept = False
        try:
            result = await executor.execute(call)
            kept = not result.is_error
        finally:
            if kept:
                self.started.update(executor.created)
            elif executor.created:
                with anyio.CancelScope(shield=True), contextlib.suppress(ClientError):
                    await executor.close()
        if executor.created and executor.session_id is not None:
            return with_session(result, executor.session_id, self.idle_timeout_s)
        return self._in_stateless_words(result)

    def _in_stateless_words(self, result: ToolResult) -> ToolResult:
        """At the service's session cap, a stateless client is not sent to list_sessions
        (it lists none to it)."""
        if not result.is_error:
            return result
        hint = (
            " Close the ones you no longer need with close_session and the session_id a "
            f"result gave; the others close by themselves after {duration(self.idle_timeout_s)} "
            "in which no code runs in them."
        )
        result.parts = [
            TextPart(p.text.replace(TOO_MANY_SESSIONS_HINT, hint)) if isinstance(p, TextPart) else p
            for p in result.parts
        ]
        return result

    async def close(self) -> None:
        """Delete the sessions stateless requests started that are still open (the others
        ended by their idle timeout, or were closed)."""
        if not self.started:
            return
        try:
            still_open = {s.id for s in await self.client.list_sessions("open")}
        except ClientError as exc:
            log.warning("could not list the open sessions to close them: %s", exc)
            still_open = set(self.started)
        for session_id in sorted(self.started & still_open):
            with contextlib.suppress(ClientError):
                await self.client.delete_session(session_id)
        self.started.clear()
