"""Large outputs stay reachable: the model text names the artifact holding the whole text,
artifacts answer HEAD and byte ranges, and the SDK, the function-calling tool and the MCP
tool read a range of one (a real broker, local backend: artifacts do not depend on it)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator

import anyio
import httpx
import pytest
from mcp import Client as MCPClient
from mcp import StdioServerParameters

from interpreter.client import Client
from interpreter.client.render import render_execution
from interpreter.models import ArtifactRef
from interpreter.tools import ToolExecutor
from interpreter.tools.logic import artifact_text
from tests.conftest import REPO, Server

# 30,000 lines of 2-byte characters and digits: far over the 100,000-character budget,
# and every byte range is likely to cut a character in two.
CODE = "for i in range(30000):\n    print(f'é{i:05d}ü')"
FULL = "".join(f"é{i:05d}ü\n" for i in range(30000))


@pytest.fixture(scope="module")
def client(local_server: Server) -> Iterator[Client]:
    with Client(local_server.url, api_key=local_server.api_key) as c:
        yield c


@pytest.fixture(scope="module")
def cut(client: Client) -> Iterator[tuple[str, ArtifactRef, str]]:
    """A session whose execution printed FULL, which was cut; its stdout artifact."""
    with client.create_session() as session:
        execution = session.run(CODE)
        assert execution.truncated and len(execution.stdout) < len(FULL)
        (ref,) = execution.artifacts
        text = "\n".join(render_execution(execution))
        yield session.id, ref, text


def test_model_text_names_the_artifact_with_the_whole_text(
    cut: tuple[str, ArtifactRef, str],
) -> None:
    _, ref, text = cut
    assert ref.size == len(FULL.encode())
    assert f"the full text is in artifact stdout: {ref.url} ({ref.size:,} bytes)" in text
    assert "read_artifact" in text


def test_artifacts_answer_head_and_byte_ranges(
    local_server: Server, cut: tuple[str, ArtifactRef, str]
) -> None:
    _, ref, _ = cut
    whole = FULL.encode()
    with local_server.client() as api:
        head = api.head(ref.url)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(whole))
        assert head.headers["accept-ranges"] == "bytes"
        assert head.headers["content-type"].startswith("text/plain")

        part = api.get(ref.url, headers={"Range": "bytes=10-19"})
        assert part.status_code == 206 and part.content == whole[10:20]
        assert part.headers["content-range"] == f"bytes 10-19/{len(whole)}"
        tail = api.get(ref.url, headers={"Range": "bytes=-7"})
        assert tail.status_code == 206 and tail.content == whole[-7:]
        open_end = api.get(ref.url, headers={"Range": f"bytes={len(whole) - 3}-"})
        assert open_end.content == whole[-3:]
        past_end = api.get(ref.url, headers={"Range": f"bytes={len(whole) + 5}-"})
        assert past_end.status_code == 416
        assert past_end.headers["content-range"] == f"bytes */{len(whole)}"
        assert past_end.json()["error"]["type"] == "range_not_satisfiable"
        assert f"{len(whole)} bytes" in past_end.json()["error"]["message"]
        # Not a byte range we serve (several ranges, another unit): the whole body.
        for header in ("bytes=0-1,5-6", "lines=1-2", "bytes=9-3"):
            whole_again = api.get(ref.url, headers={"Range": header})
            assert whole_again.status_code == 200 and whole_again.content == whole

        missing = api.head(ref.url[:-4] + "0000")
        assert missing.status_code == 404 and missing.content == b""


def test_sdk_reads_a_range(client: Client, cut: tuple[str, ArtifactRef, str]) -> None:
    sid, ref, _ = cut
    whole = FULL.encode()
    session = client.get_session(sid)
    assert session.read_artifact(ref, 100, 50) == whole[100:150]
    assert session.read_artifact(ref.id, len(whole) - 10) == whole[-10:]
    assert session.read_artifact(ref.url, 0, len(whole) + 99) == whole


def test_read_artifact_tool_pages_through_the_whole_text(
    client: Client, cut: tuple[str, ArtifactRef, str]
) -> None:
    sid, ref, _ = cut
    executor = ToolExecutor(client)
    pieces, offset, reads = [], 0, 0
    while True:
        args = {"artifact": ref.url, "offset": offset, "length": 33_333, "session_id": sid}
        result = executor.execute({"name": "read_artifact", "arguments": args})
        assert not result.is_error, result.text
        header, _, text = result.text.partition("\n")
        pieces.append(text)
        reads += 1
        found = re.search(r"continue with offset=(\d+)", header)
        if found is None:
            assert header.endswith("; the end]") and f"of {ref.size}" in header
            break
        offset = int(found.group(1))
    # Every character exactly once, although the reads cut characters in two.
    assert "".join(pieces) == FULL and reads == -(-ref.size // 33_333)
    by_id = executor.execute(
        {"name": "read_artifact", "arguments": {"artifact": ref.id, "session_id": sid}}
    )
    assert by_id.text.startswith(f"[artifact {ref.url}: bytes 0-19999 of {ref.size}")
    bad = executor.execute(
        {"name": "read_artifact", "arguments": {"artifact": ref.url, "offset": 10**9}}
    )
    assert bad.is_error and "outside the artifact" in bad.text


def test_artifact_text_keeps_characters_whole() -> None:
    data = "aé".encode()  # b"a\xc3\xa9"
    assert artifact_text(data[:2], at_start=True) == ("a", 0, 1)
    assert artifact_text(data[2:], at_start=False) == ("", 1, 0)
    assert artifact_text(data[1:], at_start=False) == ("é", 0, 2)


def test_mcp_read_artifact(local_server: Server, cut: tuple[str, ArtifactRef, str]) -> None:
    _, ref, _ = cut

    async def walk() -> str:
        env = {**os.environ, "INTERP_URL": local_server.url}
        env["INTERP_API_KEY"] = local_server.api_key
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "interpreter", "mcp"], env=env, cwd=str(REPO)
        )
        async with MCPClient(params) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert tools["read_artifact"].annotations is not None
            assert tools["read_artifact"].annotations.read_only_hint is True
            result = await mcp.call_tool(
                "read_artifact", {"artifact": ref.url, "offset": 0, "length": 9}
            )
            assert not result.is_error
            return "\n".join(getattr(c, "text", "") for c in result.content)

    text = anyio.run(walk)
    assert text == f"[artifact {ref.url}: bytes 0-8 of {ref.size}; continue with offset=9]\n" + (
        FULL.encode()[:9].decode()
    )


def test_head_needs_a_key(local_server: Server, cut: tuple[str, ArtifactRef, str]) -> None:
    _, ref, _ = cut
    with httpx.Client(base_url=local_server.url) as anonymous:
        assert anonymous.head(ref.url).status_code == 401
