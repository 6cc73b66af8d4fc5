"""``interp mcp`` over stdio, driven by the official MCP client against a real broker: a
model cannot send the API key to a URL of its choosing through ``read_artifact``, cannot
reach another session's files with ``..``, and gets a tool error (not a protocol error)
for an empty path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
from mcp import Client as MCPClient
from mcp import StdioServerParameters

from tests.conftest import REPO, Server
from tests.integration.listener import listener


def _texts(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _created(result: types.CallToolResult) -> str:
    """The session id in create_session's answer ("Created session <id>; ...")."""
    return _texts(result).split()[2].rstrip(";.")


def test_mcp_read_artifact_sends_nothing_elsewhere_and_paths_stay_in_their_session(
    local_server: Server,
) -> None:
    env = {**os.environ, "INTERP_URL": local_server.url, "INTERP_API_KEY": local_server.api_key}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "interpreter", "mcp"], env=env, cwd=str(REPO)
    )

    async def walk(elsewhere_url: str) -> None:
        with anyio.fail_after(120):
            async with MCPClient(params) as mcp:
                first = _created(await mcp.call_tool("create_session", {}))
                wrote = await mcp.call_tool(
                    "upload_file", {"path": "secret.txt", "content": "top secret"}
                )
                assert not wrote.is_error, _texts(wrote)
                second = _created(await mcp.call_tool("create_session", {}))
                assert first != second

                for artifact in (
                    f"{elsewhere_url}/steal?x=1",
                    f"{elsewhere_url}/v1/sessions/{first}/artifacts/{'a' * 64}",
                    f"/v1/sessions/{first}/notebook",
                ):
                    refused = await mcp.call_tool("read_artifact", {"artifact": artifact})
                    assert refused.is_error
                    assert "is not an artifact of this service" in _texts(refused)

                escape = f"../../{first}/files/secret.txt"
                read = await mcp.call_tool("read_file", {"path": escape})
                assert read.is_error and "path_not_allowed" in _texts(read)
                assert "top secret" not in _texts(read)
                wrote = await mcp.call_tool(
                    "upload_file", {"path": escape, "content": "overwritten"}
                )
                assert wrote.is_error and "path_not_allowed" in _texts(wrote)
                etc = await mcp.call_tool("read_file", {"path": "../../etc/passwd"})
                assert etc.is_error and "must not contain '..'" in _texts(etc)
                kept = await mcp.call_tool("read_file", {"path": "secret.txt", "session_id": first})
                assert _texts(kept) == "top secret"

                for path in ("", "/"):
                    empty = await mcp.call_tool("upload_file", {"path": path, "content": "x"})
                    assert empty.is_error and "a file path is required" in _texts(empty)
                # The connection is still fine after all that.
                ok = await mcp.call_tool("run_code", {"code": "6 * 7"})
                assert not ok.is_error and "42" in _texts(ok)

    with listener() as elsewhere:
        anyio.run(walk, elsewhere.url)
        assert elsewhere.requests == []


def test_an_mcp_package_too_old_is_named_with_what_is_missing(tmp_path: Path) -> None:
    # With mcp 1.x kept by pip, `interp mcp` said only "needs the mcp package: pip install
    # 'interp[mcp]'", which the user had just done. A module that will not import stands
    # in for the old package here.
    shadow = tmp_path / "shadow"
    (shadow / "mcp_types").mkdir(parents=True)
    (shadow / "mcp_types" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp_types'\", name='mcp_types')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(shadow)}
    done = subprocess.run(
        [sys.executable, "-m", "interpreter", "mcp"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert "version 2.3 or later (No module named 'mcp_types')" in done.stderr
    assert "pip install -U 'interp[mcp]'" in done.stderr
