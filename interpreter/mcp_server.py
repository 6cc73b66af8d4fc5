"""``interp mcp``: the interpreter's tools over the Model Context Protocol.

Built on the official ``mcp`` SDK (low-level ``Server``, so the tool descriptions and JSON
schemas are exactly those of :mod:`interpreter.tools`). It talks to a running service
through the async SDK client (``interp mcp`` starts an embedded service when no URL is
given).

Transports: stdio (the default; what desktop MCP hosts launch) and streamable HTTP
(``--http PORT``, loopback by default, at ``/mcp``; a bearer token is required to bind
anything else).

Each MCP client with a connection gets its own tool executor, so its own current
interpreter session; which sessions each client may name is :mod:`interpreter.mcp_sessions`:

- stdio: the one client of the process; its sessions are deleted when stdin closes;
- streamable HTTP with a session (``Mcp-Session-Id``, protocol versions up to
  2025-11-25): one executor per MCP session; a client may only name sessions it created,
  no other client may list or name them, and they are deleted when the MCP session ends
  (terminated or expired);
- streamable HTTP without a session (the stateless 2026-07-28 protocol): each request
  stands alone, with no current session: ``run_code``, ``upload_file`` and
  ``create_session`` without ``session_id`` start a session and the result names it; such
  a request may name only sessions that stateless requests started (session ids are
  144-bit random, so knowing one is the right to use it); those sessions close after
  ``stateless_idle_timeout_s`` in which no code runs in them, when the server stops, or
  at once when the call that started one failed.

The tools and instructions a client is given say which of these it is: a stateless
request lists the tools of :func:`interpreter.mcp_sessions.stateless_tools`, where
``session_id`` is what carries state, and the others those of :mod:`interpreter.tools`,
with a current session. ``keep_sessions`` keeps every session when its client ends or the
server stops (their notebooks stay readable anyway).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.stdio import stdio_server

from interpreter._version import __version__
from interpreter.client import AsyncClient, ClientError
from interpreter.exposure import cannot_bind
from interpreter.mcp_auth import BearerAuth
from interpreter.mcp_executor import StreamingToolExecutor, client_error, reporter
from interpreter.mcp_service import ServiceFacts, service_facts
from interpreter.mcp_sessions import (
    STATELESS_IDLE_TIMEOUT_S,
    StatelessRequests,
    connection_refusal,
    duration,
    stateless_tools,
)
from interpreter.tools import (
    RUN_CODE_OUTPUT_SCHEMA,
    TOOLS,
    ImagePart,
    ToolCall,
    ToolResult,
    ToolSpec,
)

log = logging.getLogger(__name__)

_HOW_TO_WORK = (
    "Errors come back with their traceback; fix the code and run "
    "it again. Tables come back with a summary of shape and dtypes; plots as images. "
    "Put input files in the workspace with upload_file; read results with read_file. "
    "When output is too long it is cut and the result names the artifact that holds the "
    "whole text: read it in parts with read_artifact. To pick up an earlier analysis, "
    "upload its notebook (.ipynb) and the files it reads, then call rebuild_from_notebook."
)

INSTRUCTIONS = (
    "A stateful Python interpreter. run_code executes code in a persistent Jupyter kernel: "
    "variables, imports and loaded data survive between calls, so work step by step and "
    "build on earlier results. " + _HOW_TO_WORK
)


def stateless_instructions(idle_timeout_s: float = STATELESS_IDLE_TIMEOUT_S) -> str:
    """The instructions for a stateless client: state lives in a session it names."""
    return (
        "A stateful Python interpreter, reached by stateless requests. run_code executes "
        "code in a persistent Jupyter kernel, one per session: variables, imports and "
        "loaded data survive between calls that pass the same session_id. There is no "
        "current session: a call without session_id starts a new, empty one, and its "
        "result gives the session_id to pass to every later call, so work step by step "
        "and build on earlier results. A session closes by itself after "
        f"{duration(idle_timeout_s)} in which no code runs in it. " + _HOW_TO_WORK
    )


# Hints for hosts deciding whether to ask the user before a call.
_ANNOTATIONS: dict[str, types.ToolAnnotations] = {
    "run_code": types.ToolAnnotations(
        title="Run Python code", read_only_hint=False, destructive_hint=True, idempotent_hint=False
    ),
    "create_session": types.ToolAnnotations(
        title="Create a session", read_only_hint=False, destructive_hint=False
    ),
    "list_sessions": types.ToolAnnotations(title="List sessions", read_only_hint=True),
    "close_session": types.ToolAnnotations(
        title="Close a session", read_only_hint=False, destructive_hint=True, idempotent_hint=True
    ),
    "upload_file": types.ToolAnnotations(
        title="Upload a file", read_only_hint=False, destructive_hint=True, idempotent_hint=True
    ),
    "read_file": types.ToolAnnotations(title="Read a file", read_only_hint=True),
    "read_artifact": types.ToolAnnotations(title="Read part of an artifact", read_only_hint=True),
    "list_files": types.ToolAnnotations(title="List files", read_only_hint=True),
    "restart": types.ToolAnnotations(
        title="Restart the kernel", read_only_hint=False, destructive_hint=True
    ),
    "rebuild_from_notebook": types.ToolAnnotations(
        title="Rebuild state from a notebook",
        read_only_hint=False,
        destructive_hint=True,
        idempotent_hint=False,
    ),
    "get_notebook": types.ToolAnnotations(title="Get the notebook", read_only_hint=True),
}


@dataclass(frozen=True)
class Target:
    """Where the tools send their calls."""

    url: str
    api_key: str | None = None


@dataclass(frozen=True)
class Options:
    """How the MCP server treats its clients."""

    #: Keep the interpreter sessions a connection created when it ends.
    keep_sessions: bool = False
    #: stdio has one client; HTTP has many.
    transport: Literal["stdio", "http"] = "stdio"
    #: Sessions that stateless requests start close after this many seconds in which no
    #: code runs in them (see :mod:`interpreter.mcp_sessions`).
    stateless_idle_timeout_s: float = STATELESS_IDLE_TIMEOUT_S


def mcp_tools(
    facts: ServiceFacts | None = None, *, specs: tuple[ToolSpec, ...] = TOOLS
) -> list[types.Tool]:
    """The tool list as MCP ``Tool`` objects; ``facts`` about the service (backend, limits,
    packages) are added to the description of ``run_code``. ``specs`` are the tools'
    words: :data:`interpreter.tools.TOOLS` (with a current session), or
    :func:`interpreter.mcp_sessions.stateless_tools` for a stateless client."""
    tools = []
    for t in specs:
        description = t.description
        if t.name == "run_code" and facts is not None and (about := facts.describe()):
            description += "\n\n" + about
        tools.append(
            types.Tool(
                name=t.name,
                description=description,
                input_schema=t.parameters,
                output_schema=RUN_CODE_OUTPUT_SCHEMA if t.name == "run_code" else None,
                annotations=_ANNOTATIONS.get(t.name),
            )
        )
    return tools


def to_call_result(result: ToolResult) -> types.CallToolResult:
    """Text parts become text content, images become MCP image content, in order.

    Code that failed (raised, timed out, was interrupted, killed its kernel) is an error
    result for MCP, with its structured data kept."""
    content: list[types.TextContent | types.ImageContent] = []
    for part in result.parts:
        if isinstance(part, ImagePart):
            content.append(
                types.ImageContent(
                    data=base64.b64encode(part.data).decode("ascii"), mime_type=part.mime
                )
            )
        else:
            content.append(types.TextContent(text=part.text))
    return types.CallToolResult(
        content=list(content),
        structured_content=result.structured,
        is_error=result.is_error or result.code_failed,
    )


class Connections:
    """The tool executors of the live MCP connections, one each, on one SDK client; which
    sessions each client may name is :mod:`interpreter.mcp_sessions`."""

    def __init__(self, client: AsyncClient, facts: ServiceFacts, options: Options) -> None:
        self.client = client
        self.facts = facts
        self.options = options
        idle = options.stateless_idle_timeout_s
        #: The tools as a client with a current session reads them, and as a stateless
        #: one does.
        self.tools = mcp_tools(facts)
        self.stateless_tools = mcp_tools(facts, specs=stateless_tools(idle))
        self.stateless_instructions = stateless_instructions(idle)
        self._live: set[StreamingToolExecutor] = set()
        self._stdio = StreamingToolExecutor(client)
        self._live.add(self._stdio)
        #: Stateless HTTP requests, and the sessions they started (closed by their idle
        #: timeout, or deleted when the server stops).
        self._stateless = StatelessRequests(client, idle)

    def stateless(self, ctx: ServerRequestContext[Any, Any]) -> bool:
        """Whether this request stands alone: streamable HTTP without an MCP session (the
        2026-07-28 protocol). stdio always has its one client's current session."""
        if self.options.transport == "stdio":
            return False
        return self._connection(ctx).session_id is None

    @staticmethod
    def _connection(ctx: ServerRequestContext[Any, Any]) -> Any:
        # The SDK keeps per-connection state and teardown on its Connection object; the
        # request context reaches it only through its session (no public accessor).
        return ctx.session._connection

    async def execute(self, ctx: ServerRequestContext[Any, Any], call: ToolCall) -> ToolResult:
        """Run a tool call for the client this request came from (see the module)."""
        if self.options.transport == "stdio":
            executor, own_only = self._stdio, False
        elif self.stateless(ctx):
            return await self._stateless.execute(call)
        else:
            executor, own_only = self._connection_executor(self._connection(ctx)), True
        refused = connection_refusal(executor, call, self.client.base_url, own_only=own_only)
        if refused is not None:
            return refused
        return await executor.execute(call)

    def _connection_executor(self, connection: Any) -> StreamingToolExecutor:
        executor = connection.state.get(_STATE_KEY)
        if not isinstance(executor, StreamingToolExecutor):
            executor = StreamingToolExecutor(self.client, own_sessions_only=True)
            connection.state[_STATE_KEY] = executor
            self._live.add(executor)
            connection.exit_stack.push_async_callback(self.release, executor)
        return executor

    async def release(self, executor: StreamingToolExecutor) -> None:
        """A connection ended: delete its sessions (unless kept)."""
        if executor not in self._live:
            return
        self._live.discard(executor)
        if not self.options.keep_sessions:
            with anyio.CancelScope(shield=True), contextlib.suppress(ClientError):
                await executor.close()

    async def close(self) -> None:
        for executor in list(self._live):
            await self.release(executor)
        if not self.options.keep_sessions:
            with anyio.CancelScope(shield=True):
                await self._stateless.close()


_STATE_KEY = "interp.executor"


def build_server(target: Target, options: Options | None = None) -> Server[Connections]:
    """The MCP server object; its lifespan owns the SDK client and the connections.

    Sessions a connection created are deleted when it ends, or when the server stops
    (their notebooks stay readable on the service), unless ``options.keep_sessions``.
    """
    opts = options or Options()

    @contextlib.asynccontextmanager
    async def lifespan(_: Server[Connections]) -> AsyncIterator[Connections]:
        async with AsyncClient(target.url, api_key=target.api_key, timeout=60) as client:
            connections = Connections(client, await service_facts(client), opts)
            try:
                yield connections
            finally:
                await connections.close()

    async def list_tools(
        ctx: ServerRequestContext[Connections], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        connections = ctx.lifespan_context
        if connections.stateless(ctx):
            return types.ListToolsResult(tools=connections.stateless_tools)
        return types.ListToolsResult(tools=connections.tools)

    async def call_tool(
        ctx: ServerRequestContext[Connections], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        connections = ctx.lifespan_context

        async def report(progress: float, message: str) -> None:
            await ctx.session.report_progress(progress, None, message)

        token = reporter.set(report)
        try:
            call = ToolCall(params.name, dict(params.arguments or {}))
            result = await connections.execute(ctx, call)
        except (ClientError, ExceptionGroup) as exc:
            # The service is unreachable or broke the protocol: tell the model, keep serving.
            error = client_error(exc)
            if error is None:
                raise
            return types.CallToolResult(
                content=[types.TextContent(text=f"Error: {error}")], is_error=True
            )
        finally:
            reporter.reset(token)
        return to_call_result(result)

    server = Server(
        "interp",
        version=__version__,
        title="Stateful Python interpreter",
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    server.middleware.append(_stateless_discovery)
    return server


async def _stateless_discovery(
    ctx: ServerRequestContext[Connections, Any], call_next: CallNext
) -> HandlerResult:
    """A stateless client learns the instructions from ``server/discover`` (it has no
    handshake): it is given the ones that say it has no current session. (The rest of
    the chain answers with the result as it goes on the wire, a dict.)"""
    result = await call_next(ctx)
    if ctx.method == "server/discover" and isinstance(result, dict) and "instructions" in result:
        connections = ctx.lifespan_context
        if connections.stateless(ctx):
            return {**result, "instructions": connections.stateless_instructions}
    return result


async def serve_stdio(target: Target, options: Options | None = None) -> None:
    """Serve MCP over this process's stdin/stdout until the host closes it."""
    server = build_server(target, options)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(
    target: Target,
    *,
    host: str,
    port: int,
    tokens: list[str] | None = None,
    options: Options | None = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp`` (on ``sock`` when given,
    bound there already); with ``tokens``, every request needs ``Authorization: Bearer
    <one of them>``."""
    import uvicorn

    opts = options or Options(transport="http")
    server = build_server(target, opts)
    app: Any = server.streamable_http_app(host=host)
    if tokens:
        app = BearerAuth(app, tokens)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    auth = "bearer token required" if tokens else "no authentication"
    print(
        f"MCP (streamable HTTP) on http://{host}:{port}/mcp ({auth})", file=sys.stderr, flush=True
    )
    await uvicorn.Server(config).serve(sockets=[sock] if sock is not None else None)


class HttpStartFailed(Exception):
    """The MCP server's port could not be bound: the one line that says why."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, bound before the server says it serves there;
    :class:`HttpStartFailed` saying why not (a port in use was uvicorn's raw line after
    the announcement, with exit status 3)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:
        raise HttpStartFailed(cannot_bind("MCP", host, port, exc, "--http PORT")) from None


def run(
    target: Target,
    *,
    http_port: int | None = None,
    host: str = "127.0.0.1",
    tokens: list[str] | None = None,
    keep_sessions: bool = False,
    stateless_idle_timeout_s: float = STATELESS_IDLE_TIMEOUT_S,
) -> int:
    """Run the MCP server until it is closed. Returns the process exit status."""
    if http_port is None:
        anyio.run(serve_stdio, target, Options(keep_sessions=keep_sessions))
    else:
        options = Options(
            keep_sessions=keep_sessions,
            transport="http",
            stateless_idle_timeout_s=stateless_idle_timeout_s,
        )
        sock = listening_socket(host, http_port)
        anyio.run(_serve_http, target, host, http_port, tokens, options, sock)
    return 0


async def _serve_http(
    target: Target,
    host: str,
    port: int,
    tokens: list[str] | None,
    options: Options,
    sock: socket.socket,
) -> None:
    await serve_http(target, host=host, port=port, tokens=tokens, options=options, sock=sock)
