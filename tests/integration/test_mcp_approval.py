"""``interp mcp`` while the service's policy holds ``run_code`` for a person's approval:
the host is told so, by the official MCP client's progress notifications.

The progress said "running for 2 s", "running for 4 s" while the code waited for an
operator and had not started; nothing said an approval was needed (found by an outside
agent tester).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client as MCPClient
from mcp import StdioServerParameters

from tests.conftest import KEY, REPO, Server, own_server
from tests.integration.mcp_host import mcp_env

OPERATOR = "mcp-operator-key-1"

POLICY = """
[policies.default]
default = "allow"

[[policies.default.rules]]
id = "delete-needs-approval"
decision = "approve"
message = "deleting files needs a person's approval"
match.calls = ["os.remove"]
"""

#: Held for approval (os.remove), then silent until the test writes 'go' in the workspace,
#: so the test decides when it ends, whatever the machine's speed.
HELD_CODE = (
    "import os, time\n"
    "if os.path.exists('x.csv'):\n"
    "    os.remove('x.csv')\n"
    "while not os.path.exists('go'):\n"
    "    time.sleep(0.05)\n"
    "print('done')"
)

HELD = (
    "waiting for a person's approval (rule 'delete-needs-approval': deleting files needs "
    "a person's approval); the code has not started (approval "
)


@pytest.fixture(scope="module")
def policy_server() -> Iterator[Server]:
    root = Path(tempfile.mkdtemp(prefix="interp-mcp-approval-"))
    (root / "policy.toml").write_text(POLICY)
    with own_server(
        "interp-mcp-approval-data-",
        operator_keys=[OPERATOR],
        policy_file=root / "policy.toml",
        pool_size=0,
    ) as srv:
        yield srv


def test_progress_says_the_code_waits_for_approval_until_it_runs(
    policy_server: Server,
) -> None:
    messages: list[str] = []
    changed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        nonlocal changed
        messages.append(message or "")
        changed.set()
        changed = anyio.Event()

    async def seen(predicate: str) -> int:
        """Wait until a message starting with ``predicate`` came; its index."""
        while True:
            for i, m in enumerate(messages):
                if m.startswith(predicate):
                    return i
            await changed.wait()

    async def operator_then_go(url: str) -> None:
        with anyio.fail_after(30):  # the stream says it at once; the heartbeat in 2 s
            await seen(HELD)
            await seen("waiting for approval for ")
        op = {"Authorization": f"Bearer {OPERATOR}"}
        async with httpx.AsyncClient(base_url=url, headers=op, timeout=30) as http:
            [approval] = (await http.get("/v1/approvals")).json()["approvals"]
            assert HELD + approval["id"] + ")" in messages
            # Until it is approved, the heartbeat says what the code waits for.
            held_at = next(i for i, m in enumerate(messages) if m.startswith(HELD))
            waiting = messages[held_at + 1 :]
            assert waiting and all(m.startswith("waiting for approval for ") for m in waiting)
            resp = await http.post(f"/v1/approvals/{approval['id']}/approve", json={})
            assert resp.status_code == 200, resp.text
        # Approved and silent: the heartbeat says it runs.
        await seen("running for ")
        agent = {"Authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=url, headers=agent, timeout=30) as http:
            put = await http.put(f"/v1/sessions/{approval['session_id']}/files/go", content=b"")
            assert put.status_code == 201, put.text

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "interpreter", "mcp"],
        env=mcp_env(policy_server),
        cwd=str(REPO),
    )

    async def main() -> types.CallToolResult:
        with anyio.fail_after(120):
            async with MCPClient(params) as client, anyio.create_task_group() as tasks:
                tasks.start_soon(operator_then_go, policy_server.url)
                return await client.call_tool(
                    "run_code",
                    {"code": HELD_CODE, "timeout_s": 60},
                    progress_callback=on_progress,
                )

    result = anyio.run(main)
    text = "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))
    assert not result.is_error and "done" in text, text
    held_at = next(i for i, m in enumerate(messages) if m.startswith(HELD))
    # Nothing before the hold said the code ran.
    assert not any(m.startswith("running for ") for m in messages[:held_at]), messages
