"""``interp mcp``: the interpreter's tools over the Model Context Protocol.

Built on the official ``mcp`` SDK (low-level ``Server``, so the tool descriptions and JSON
schemas are exactly those of :mod:`interpreter.tools`). It talks to a running service
through the async SDK client (``interp mcp`` starts an embedded service when no URL is
given).

Transports: stdio (the default; what desktop MCP hosts launch) and streamable HTTP
(``--http PORT``, loopback by default, at ``/mcp``).
"""

from __future__ import annotations

import base64
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from interpreter._version import __version__
from interpreter.client import AsyncClient, ClientError
from interpreter.tools import TOOLS, AsyncToolExecutor, ImagePart, ToolCall, ToolResult

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "A stateful Python interpreter. run_code executes code in a persistent Jupyter kernel: "
    "variables, imports and loaded data survive between calls, so work step by step and "
    "build on earlier results. Errors come back with their traceback; fix the code and run "
    "it again. Tables come back with a summary of shape and dtypes; plots as images. "
    "Put input files in the workspace with upload_file; read results with read_file."
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
    "upload_file": types.ToolAnnotations(
        title="Upload a file", read_only_hint=False, destructive_hint=True, idempotent_hint=True
    ),
    "read_file": types.ToolAnnotations(title="Read a file", read_only_hint=True),
    "list_files": types.ToolAnnotations(title="List files", read_only_hint=True),
    "restart": types.ToolAnnotations(
        title="Restart the kernel", read_only_hint=False, destructive_hint=True
    ),
    "get_notebook": types.ToolAnnotations(title="Get the notebook", read_only_hint=True),
}


@dataclass(frozen=True)
class Target:
    """Where the tools send their calls."""

    url: str
    api_key: str | None = None


def mcp_tools() -> list[types.Tool]:
    """The tool list as MCP ``Tool`` objects."""
    return [
        types.Tool(
            name=t.name,
            description=t.description,
            input_schema=t.parameters,
            annotations=_ANNOTATIONS.get(t.name),
        )
        for t in TOOLS
    ]


def to_call_result(result: ToolResult) -> types.CallToolResult:
    """Text parts become text content, images become MCP image content, in order."""
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
    return types.CallToolResult(content=list(content), is_error=result.is_error)


def build_server(target: Target) -> Server[AsyncToolExecutor]:
    """The MCP server object; its lifespan owns the SDK client and the tool executor.

    Sessions the executor created are deleted when the server stops (their notebooks
    stay readable on the service).
    """

    @contextlib.asynccontextmanager
    async def lifespan(_: Server[AsyncToolExecutor]) -> AsyncIterator[AsyncToolExecutor]:
        async with AsyncClient(target.url, api_key=target.api_key, timeout=60) as client:
            executor = AsyncToolExecutor(client)
            try:
                yield executor
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(ClientError):
                    await executor.close()

    async def list_tools(
        ctx: ServerRequestContext[AsyncToolExecutor], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_tools())

    async def call_tool(
        ctx: ServerRequestContext[AsyncToolExecutor], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        executor = ctx.lifespan_context
        try:
            result = await executor.execute(ToolCall(params.name, dict(params.arguments or {})))
        except ClientError as exc:
            # The service is unreachable or broke the protocol: tell the model, keep serving.
            return types.CallToolResult(
                content=[types.TextContent(text=f"Error: {exc}")], is_error=True
            )
        return to_call_result(result)

    return Server(
        "interp",
        version=__version__,
        title="Stateful Python interpreter",
        instructions=INSTRUCTIONS,
        lifespan=lifespan,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(target: Target) -> None:
    """Serve MCP over this process's stdin/stdout until the host closes it."""
    server = build_server(target)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(target: Target, *, host: str, port: int) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp``."""
    import uvicorn

    server = build_server(target)
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    print(f"MCP (streamable HTTP) on http://{host}:{port}/mcp", file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve()


def run(target: Target, *, http_port: int | None = None, host: str = "127.0.0.1") -> int:
    """Run the MCP server until it is closed. Returns the process exit status."""
    if http_port is None:
        anyio.run(serve_stdio, target)
    else:
        anyio.run(_serve_http, target, host, http_port)
    return 0


async def _serve_http(target: Target, host: str, port: int) -> None:
    await serve_http(target, host=host, port=port)
