"""A stateless MCP client is told the truth, and its sessions do not pile up.

The official ``mcp`` client (2.3) speaks the stateless protocol (2026-07-28) over
streamable HTTP by default: each request stands alone, so the server has no current
session for it. Its tools say so (``session_id`` is what carries state; omitted, a call
starts a new session whose id the result gives), and every session such a request starts
closes after a short idle time, since nothing tells the server that the client has gone.
Clients with a current session (the handshake protocol over HTTP, stdio) are told what
they were told before, and their sessions keep the service's idle timeout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client as MCPClient
from mcp import StdioServerParameters

from interpreter.mcp_server import INSTRUCTIONS
from interpreter.tools import TOOL_NAMES, TOOLS
from tests.conftest import REPO, Server, own_server
from tests.integration.mcp_host import mcp_env, mcp_http

#: The words that promised a stateless client a session it does not have.
CURRENT_SESSION_PROMISE = "Omit it to use the current session"


def _texts(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _session(server: Server, session_id: str) -> dict[str, Any]:
    with server.client() as api:
        record: dict[str, Any] = api.get(f"/v1/sessions/{session_id}").json()
        return record


def _started(result: types.CallToolResult) -> str:
    assert result.structured_content is not None, _texts(result)
    return str(result.structured_content["session_id"])


def test_a_stateless_client_is_told_that_session_id_carries_the_state(
    local_server: Server, tmp_path: Path
) -> None:
    """The tester's case: the tools promised that omitting session_id continues the
    current session, so a model lost its variables (`y = 5`, then `y * 2`: NameError).
    Now the tools, the instructions and each result say how state persists, and doing
    what they say keeps it."""

    async def main(url: str) -> list[str]:
        with anyio.fail_after(90):
            async with MCPClient(url) as client:
                assert client.protocol_version == "2026-07-28"
                instructions = client.instructions or ""
                assert "There is no current session" in instructions, instructions
                assert "pass to every later call" in instructions

                tools = {t.name: t for t in (await client.list_tools()).tools}
                assert list(tools) == list(TOOL_NAMES)
                words = json.dumps([t.model_dump(mode="json") for t in tools.values()])
                assert CURRENT_SESSION_PROMISE not in words
                assert "is now the current" not in words and "current one for" not in words
                run_code = tools["run_code"]
                assert "State persists between calls" not in (run_code.description or "")
                assert "State persists within a session" in (run_code.description or "")
                assert "Backend: local" in (run_code.description or "")  # facts still added
                session_id = run_code.input_schema["properties"]["session_id"]["description"]
                assert "starts a new, empty session" in session_id
                assert "its result gives the session_id to pass next time" in session_id
                assert "after 10 minutes in which no code runs" in session_id
                assert run_code.input_schema["required"] == ["code"]
                for name in ("read_file", "list_files", "restart", "get_notebook"):
                    assert "session_id" in tools[name].input_schema["required"], name
                listed = tools["list_sessions"].description or ""
                assert listed.startswith("Lists no sessions to this client"), listed

                first = await client.call_tool("run_code", {"code": "y = 5"})
                sid = _started(first)
                assert not first.is_error, _texts(first)
                assert f'pass session_id "{sid}"' in _texts(first)
                assert "closes by itself after 10 minutes" in _texts(first)
                # Without session_id: a new, empty session, as the tools say.
                fresh = await client.call_tool("run_code", {"code": "y * 2"})
                assert "NameError" in _texts(fresh) and _started(fresh) != sid
                # With it: the state is there.
                again = await client.call_tool("run_code", {"code": "y * 2", "session_id": sid})
                assert not again.is_error and "10" in _texts(again), _texts(again)
                assert again.structured_content is not None
                assert "Session:" not in _texts(again)  # it started nothing
                return [sid, _started(fresh)]

    with mcp_http(local_server, tmp_path / "mcp.stderr") as url:
        started = anyio.run(main, url)
        for sid in started:
            record = _session(local_server, sid)
            assert record["status"] != "closed" and record["idle_timeout_s"] == 600, record
    # Deleted when the server stopped, as before.
    assert {_session(local_server, sid)["status"] for sid in started} == {"closed"}


def test_sessions_of_stateless_calls_close_after_their_idle_timeout(tmp_path: Path) -> None:
    """The tester's leak: five calls without session_id left five sessions open until the
    MCP server stopped. Now each closes after the idle timeout; one the model keeps using
    stays open with its state, and naming a closed one says that it expired."""
    idle_s = 4
    with (
        own_server("interp-mcp-idle-", cull_interval_s=0.2) as broker,
        mcp_http(broker, tmp_path / "mcp.stderr", "--stateless-idle-timeout", str(idle_s)) as url,
    ):

        async def main() -> tuple[list[str], str]:
            with anyio.fail_after(120):
                async with MCPClient(url) as client:
                    tools = {t.name: t for t in (await client.list_tools()).tools}
                    assert f"after {idle_s} seconds" in (tools["run_code"].description or "")
                    dropped = []
                    for i in range(4):
                        result = await client.call_tool("run_code", {"code": f"i = {i}"})
                        assert f"after {idle_s} seconds in which no code runs" in _texts(result)
                        dropped.append(_started(result))
                    kept = _started(await client.call_tool("run_code", {"code": "n = 0"}))
                    deadline = anyio.current_time() + 60
                    while any(_session(broker, s)["status"] != "closed" for s in dropped):
                        assert anyio.current_time() < deadline, "the idle sessions stayed open"
                        step = {"code": "n += 1", "session_id": kept}
                        ran = await client.call_tool("run_code", step)
                        assert not ran.is_error, _texts(ran)
                        await anyio.sleep(0.5)
                    value = await client.call_tool("run_code", {"code": "n", "session_id": kept})
                    assert not value.is_error and int(_texts(value).split()[-1]) > 0
                    late = await client.call_tool(
                        "run_code", {"code": "i", "session_id": dropped[0]}
                    )
                    assert late.is_error and "expired (idle_timeout)" in _texts(late)
                    return dropped, kept

        dropped, kept = anyio.run(main)
        for sid in dropped:
            record = _session(broker, sid)
            assert record["closed_reason"] == "idle_timeout", record
        assert _session(broker, kept)["status"] != "closed"


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_clients_with_a_current_session_are_told_of_it_as_before(
    local_server: Server, tmp_path: Path, transport: str
) -> None:
    """The handshake protocol over HTTP (an MCP session) and stdio keep a current session:
    their tools and instructions are those of interpreter.tools, and their sessions the
    service's idle timeout."""

    async def main(target: str | StdioServerParameters) -> str:
        with anyio.fail_after(90):
            mode: Any = "legacy" if transport == "http" else "auto"
            async with MCPClient(target, mode=mode) as client:
                assert client.instructions == INSTRUCTIONS
                tools = (await client.list_tools()).tools
                for tool, spec in zip(tools, TOOLS, strict=True):
                    assert tool.name == spec.name
                    assert tool.input_schema == spec.parameters, tool.name
                    assert (tool.description or "").startswith(spec.description), tool.name
                first = await client.call_tool("run_code", {"code": "y = 5"})
                assert "Session:" not in _texts(first)
                second = await client.call_tool("run_code", {"code": "y * 2"})
                assert not second.is_error and "10" in _texts(second), _texts(second)
                return _started(second)

    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "interpreter", "mcp", "--keep-sessions"],
            env=mcp_env(local_server),
            cwd=str(REPO),
        )
        sid = anyio.run(main, params)
    else:
        with mcp_http(local_server, tmp_path / "mcp.stderr", "--keep-sessions") as url:
            sid = anyio.run(main, url)
    record = _session(local_server, sid)
    assert record["status"] != "closed" and record["idle_timeout_s"] is None, record
    with local_server.client() as api:
        api.delete(f"/v1/sessions/{sid}")
