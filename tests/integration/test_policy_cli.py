"""``interp serve --policy-file`` refuses a bad file in one line; ``interp approvals``
lists, decides and watches held executions with an operator key (local backend)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from interpreter.broker import owner_of
from interpreter.terminal import visible
from tests.conftest import KEY, REPO, Server, serve_argv, start_server
from tests.integration.test_cli import cli_env, interp, one_cell_notebook

OPERATOR = "test-operator-key-2"
POLICY = """\
[policies.default]
default = "allow"

[[policies.default.rules]]
id = "no-subprocess"
decision = "deny"
message = "subprocess is not allowed for this key; use pandas to read the file"
match.imports = ["subprocess"]

[[policies.default.rules]]
id = "delete-needs-approval"
decision = "approve"
message = "deleting files needs a person's approval"
match.calls = ["os.remove"]
"""


@pytest.fixture(scope="module")
def held_server() -> Iterator[Server]:
    root = Path(tempfile.mkdtemp(prefix="interp-policy-cli-"))
    (root / "policy.toml").write_text(POLICY)
    srv = start_server(
        "local",
        root / "data",
        operator_keys=[OPERATOR],
        policy_file=root / "policy.toml",
        e2b_port=0,
    )
    yield srv
    srv.thread.stop()
    shutil.rmtree(root, ignore_errors=True)


def test_serve_refuses_a_bad_policy_file_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text(POLICY.replace('decision = "approve"', 'decision = "perhaps"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
    proc = subprocess.run(
        serve_argv("--backend", "local", "--data-dir", str(tmp_path / "data"),
                   "--policy-file", str(bad)),
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "line 12: policies.default.rules.1.decision" in lines[0]
    assert str(bad) in lines[0]


def test_approvals_list_approve_and_watch(held_server: Server) -> None:
    operator = {"INTERP_OPERATOR_KEY": OPERATOR}
    agent_view = interp(held_server, "approvals")
    assert agent_view.returncode == 2 and "operator key" in agent_view.stderr
    with held_server.client(KEY) as client, ExitStack() as stack:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        stack.callback(client.delete, f"/v1/sessions/{sid}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
        env.update({"INTERP_URL": held_server.url, **operator})
        watch = subprocess.Popen(
            [sys.executable, "-m", "interpreter", "approvals", "--watch"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
        )  # fmt: skip
        stack.callback(watch.kill)
        held = stack.enter_context(
            client.stream(
                "POST",
                f"/v1/sessions/{sid}/execute",
                json={"code": "import os\nos.remove('missing.txt')"},
            )
        )
        execution_id = held.headers["X-Execution-Id"]
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the live view shows it as it arrives
        assert "pending" in first and f"session={sid}" in first
        approval_id = first.split()[0]
        # While it stays pending, the watch's question waits on the service for a change:
        # it used to ask again at once (about 870 requests a second), then once a second.
        before = _approval_lists(client)
        time.sleep(2)
        assert _approval_lists(client) - before <= 1
        listed = interp(held_server, "approvals", env_extra=operator)
        assert listed.returncode == 0 and approval_id in listed.stdout
        approved = interp(
            held_server, "approvals", "approve", approval_id, "-m", "ok to try",
            env_extra={**operator, "INTERP_API_KEY": ""},
        )  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert "approved by" in approved.stdout and "(ok to try)" in approved.stdout
        held.read()
        result = client.get(f"/v1/sessions/{sid}/executions/{execution_id}")
        assert result.json()["status"] == "error"  # it ran: the file is missing
        twice = interp(held_server, "approvals", "deny", approval_id, env_extra=operator)
        assert twice.returncode == 2 and "already decided" in twice.stderr


#: The approvals list's route label in the metrics (its route template).
APPROVALS_ROUTE = "/v1/approvals"


def _metric_lines(client: httpx.Client) -> list[str]:
    return client.get("/metrics").text.splitlines()


def _approval_lists(client: httpx.Client) -> float:
    """How many ``GET /v1/approvals`` the service has answered (its request counter)."""
    counted = [
        float(line.rsplit(" ", 1)[1])
        for line in _metric_lines(client)
        if line.startswith("interp_http_requests_total{")
        and f'route="{APPROVALS_ROUTE}"' in line
        and 'method="GET"' in line
    ]
    assert counted, "no request counter for the approvals list"
    return sum(counted)


def test_the_e2b_surface_reports_a_denial_as_the_runs_error(held_server: Server) -> None:
    from e2b_code_interpreter import Sandbox

    url = held_server.thread.e2b_urls[0]
    sbx = Sandbox.create(api_key=KEY, api_url=url, sandbox_url=url)
    try:
        execution = sbx.run_code("import subprocess\nprint('ran')")
        assert execution.logs.stdout == []
        assert execution.error is not None and execution.error.name == "PolicyDenied"
        assert "use pandas to read the file" in execution.error.value
        assert sbx.run_code("print('fine')").logs.stdout == ["fine\n"]
    finally:
        sbx.kill()


def test_mcp_run_code_returns_the_denial_as_text_the_model_reads(held_server: Server) -> None:
    import anyio
    from mcp import Client as MCPClient
    from mcp import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
    env.update({"INTERP_URL": held_server.url, "INTERP_API_KEY": KEY})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "interpreter", "mcp"], env=env, cwd=str(REPO)
    )
    texts: list[str] = []
    flags: list[bool] = []

    async def main() -> None:
        with anyio.fail_after(120):
            async with MCPClient(params) as client:
                result = await client.call_tool("run_code", {"code": "import subprocess"})
                flags.append(bool(result.is_error))
                texts.extend(getattr(part, "text", "") for part in result.content)

    anyio.run(main)
    text = "\n".join(texts)
    assert flags == [True]
    assert text.startswith("status: denied") and "use pandas to read the file" in text


def test_interp_run_says_why_code_was_denied(held_server: Server) -> None:
    out = interp(held_server, "run", "-c", "import subprocess\nprint('ran')")
    assert out.returncode == 1 and "ran" not in out.stdout
    assert "status denied (policy)" in out.stderr
    assert "use pandas to read the file" in out.stderr


def test_the_async_client_lists_and_denies_approvals(held_server: Server) -> None:
    import anyio

    from interpreter.client import AsyncClient

    async def decide(execution_id: str) -> tuple[str, str | None, list[str]]:
        async with AsyncClient(held_server.url, api_key=OPERATOR) as client:
            pending = await client.list_approvals(wait_s=10)
            mine = next(a for a in pending if a.execution_id == execution_id)
            await client.deny(mine.id, "not today")
            again = await client.get_approval(mine.id)
            assert again.outcome is not None
            denied = [a.id for a in await client.list_approvals("denied")]
            return again.status, again.outcome.comment, denied

    with held_server.client(KEY) as client, ExitStack() as stack:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        stack.callback(client.delete, f"/v1/sessions/{sid}")
        held = stack.enter_context(
            client.stream(
                "POST", f"/v1/sessions/{sid}/execute", json={"code": "import os\nos.remove('x')"}
            )
        )
        status, comment, denied = anyio.run(decide, held.headers["X-Execution-Id"])
        held.read()
        assert held.json()["status"] == "denied"
    assert (status, comment) == ("denied", "not today")
    assert denied


def test_sigterm_on_interp_run_ends_its_pending_approval_and_session(held_server: Server) -> None:
    """SIGTERM left the session and the approval it waited for alive (an operator could
    still approve code nobody waited for); it now does what Ctrl-C does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
    env.update({"INTERP_URL": held_server.url, "INTERP_API_KEY": KEY})
    proc = subprocess.Popen(
        [sys.executable, "-m", "interpreter", "run", "-c", "import os\nos.remove('x')"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:  # wait until it is held
        lines.append(line)
        if "held for approval" in line:
            break
    approval_id = lines[-1].split("held for approval ")[1].split()[0]
    sid = next(line.split()[-2] for line in lines if line.rstrip().endswith(" ready"))
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, "".join(lines) + err
    assert "interrupting" in err and "Traceback" not in err
    with held_server.client(KEY) as agent, held_server.client(OPERATOR) as operator:
        info = agent.get(f"/v1/sessions/{sid}").json()
        assert (info["status"], info["closed_reason"]) == ("closed", "deleted"), info
        approval = operator.get(f"/v1/approvals/{approval_id}").json()
        assert approval["status"] == "withdrawn", approval
        assert approval["outcome"]["decided_by"] == "service", approval


def test_interp_replay_says_when_a_cell_waits_for_approval(
    held_server: Server, tmp_path: Path
) -> None:
    """`interp replay` waited on a held cell without a word; it now says which cell and
    which approval, as `interp run` does, and goes on once an operator decides."""
    code = "import os\nif os.path.exists('x'):\n    os.remove('x')\nprint('checked')"
    stream = {"output_type": "stream", "name": "stdout", "text": "checked\n"}
    notebook = tmp_path / "held.ipynb"
    notebook.write_text(json.dumps(one_cell_notebook(code, [stream])))
    proc = subprocess.Popen(
        [sys.executable, "-m", "interpreter", "replay", str(notebook)],
        env=cli_env(held_server), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "held for approval" in line:
            break
    assert lines and lines[-1].startswith("interp: cell 0 held for approval "), lines
    assert "deleting files needs a person's approval" in lines[-1]
    approval_id = lines[-1].split("held for approval ")[1].split()[0]
    with held_server.client(OPERATOR) as operator:
        decided = operator.post(f"/v1/approvals/{approval_id}/approve", json={})
        assert decided.status_code == 200, decided.text
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, "".join(lines) + err
    assert "ALL MATCH" in out, out


def test_the_approvals_list_waits_until_it_differs_from_the_clients_etag(
    held_server: Server,
) -> None:
    """``?wait_s=`` answered at once while any approval was pending, so a live view asked
    again and again; with ``If-None-Match`` it waits until the list changes (else 304)."""
    with ExitStack() as stack:
        operator = stack.enter_context(held_server.client(OPERATOR))
        agent = stack.enter_context(held_server.client(KEY))

        def hold() -> tuple[str, httpx.Response]:
            """A new session whose code waits for approval, and its execute request."""
            sid = agent.post("/v1/sessions", json={}).json()["id"]
            stack.callback(agent.delete, f"/v1/sessions/{sid}")
            code = {"code": "import os\nos.remove('x')"}
            request = agent.stream("POST", f"/v1/sessions/{sid}/execute", json=code)
            return sid, stack.enter_context(request)

        # One approval already pending: the list is not empty when the client asks.
        hold()
        first = operator.get("/v1/approvals")
        assert first.json()["approvals"]
        etag = first.headers["ETag"]
        unchanged = operator.get(
            "/v1/approvals", params={"wait_s": 0.2}, headers={"If-None-Match": etag}
        )
        assert (unchanged.status_code, unchanged.headers["ETag"]) == (304, etag)

        answers: list[httpx.Response] = []
        asked = threading.Event()

        def long_poll() -> None:
            asked.set()
            answers.append(
                operator.get(
                    "/v1/approvals", params={"wait_s": 30}, headers={"If-None-Match": etag}
                )
            )

        poller = threading.Thread(target=long_poll)
        poller.start()
        asked.wait()
        sid, held = hold()
        poller.join(60)
        (changed,) = answers
        assert changed.status_code == 200 and changed.headers["ETag"] != etag
        mine = [a for a in changed.json()["approvals"] if a["session_id"] == sid]
        assert [a["execution_id"] for a in mine] == [held.headers["X-Execution-Id"]]
        for approval in first.json()["approvals"] + mine:
            operator.post(f"/v1/approvals/{approval['id']}/deny", json={})


def test_an_operator_request_is_logged_with_the_key_id_every_route_uses(
    held_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """The access log named an operator by its policy name on approval routes and by its
    owner id on all others; one key now has one ``key_id`` in the logs."""
    caplog.set_level(logging.INFO, "interpreter.access")
    with held_server.client(OPERATOR) as operator:
        rid = operator.get("/v1/approvals").headers["X-Request-Id"]
    deadline = time.monotonic() + 20
    while not (lines := [r for r in caplog.records if getattr(r, "request_id", None) == rid]):
        assert time.monotonic() < deadline, "no access line"
        time.sleep(0.02)
    assert [r.key_id for r in lines] == [owner_of(OPERATOR)]  # type: ignore[attr-defined]


def test_approvals_use_the_operator_key_and_their_help_says_which(held_server: Server) -> None:
    """The help said "--api-key, else $INTERP_OPERATOR_KEY" while --api-key said it
    defaulted to $INTERP_API_KEY, which the command did fall back on."""
    shown = interp(None, "approvals", "--help")
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())
    assert "--api-key API_KEY Operator key (default $INTERP_OPERATOR_KEY;" in text
    assert "default $INTERP_API_KEY" not in text
    # An operator key in the agent's variable is not taken: one line says what to do.
    agent_var = interp(held_server, "approvals", env_extra={"INTERP_API_KEY": OPERATOR})
    assert agent_var.returncode == 2
    assert agent_var.stderr == (
        "interp: approvals needs an operator key: give --api-key KEY or set "
        "$INTERP_OPERATOR_KEY ($INTERP_API_KEY, an agent's key, is not used)\n"
    )
    flag = interp(held_server, "approvals", "--api-key", OPERATOR)
    assert flag.returncode == 0, flag.stderr


def test_the_sdk_watches_approvals_with_one_waiting_request_per_change(
    held_server: Server,
) -> None:
    """``Client.watch_approvals`` yields the list now, then again only when it changes:
    each question waits on the service (``If-None-Match``), so a pending approval that
    stays pending costs no requests, and a new one arrives as soon as it is held."""
    from interpreter.client import AsyncClient, Client

    with ExitStack() as stack:
        agent = metrics = stack.enter_context(held_server.client(KEY))

        def hold() -> str:
            sid = agent.post("/v1/sessions", json={}).json()["id"]
            stack.callback(agent.delete, f"/v1/sessions/{sid}")
            code = {"code": "import os\nos.remove('x')"}
            stack.enter_context(agent.stream("POST", f"/v1/sessions/{sid}/execute", json=code))
            return sid

        first_sid = hold()
        client = stack.enter_context(Client(held_server.url, api_key=OPERATOR))
        watch = client.watch_approvals(wait_s=20)
        stack.callback(watch.close)
        now = next(watch)
        assert first_sid in {a.session_id for a in now}
        got: list[list[str]] = []
        # The first question's count lands once its answer is sent: wait for it.
        deadline = time.monotonic() + 10
        while not any(f'route="{APPROVALS_ROUTE}"' in line for line in _metric_lines(metrics)):
            assert time.monotonic() < deadline, "the watch's first question was not counted"
            time.sleep(0.05)
        before = _approval_lists(metrics)
        waiter = threading.Thread(target=lambda: got.append([a.session_id for a in next(watch)]))
        waiter.start()
        time.sleep(1.5)  # unchanged: the watch's one question is still waiting
        assert not got and _approval_lists(metrics) == before
        second_sid = hold()
        waiter.join(30)
        assert got and {first_sid, second_sid} <= set(got[0])

        async def async_first() -> list[str]:
            async with AsyncClient(held_server.url, api_key=OPERATOR) as aclient:
                async for current in aclient.watch_approvals(wait_s=5):
                    return [a.session_id for a in current]
            return []

        import asyncio

        assert {first_sid, second_sid} <= set(asyncio.run(async_first()))
        for approval in client.list_approvals():
            client.deny(approval.id)


#: The outside tester's code: escape sequences in a comment that, printed raw, move the
#: cursor up, erase the approval's line and write another (a harmless rule, harmless code).
DISGUISED = (
    '__import__("os").remove("db")#\x1b[A\x1b[2K\x1b[Gap_x pending rule=(default)'
    "\x1b[B\x1b[2K\x1b[G    x = 1 \u202e\x9b2J\x07\n"
    "print('second line')\n"
)


def test_the_approvals_text_views_show_an_agents_control_characters_escaped(
    held_server: Server, tmp_path: Path
) -> None:
    """`interp approvals` (list, --watch, approve/deny) printed the held code's first line
    raw: an escape sequence in a comment erased and rewrote what the operator read before
    deciding (found by an outside security tester). Every text view now shows each
    control character as its escape, and says that more lines follow."""
    operator = {"INTERP_OPERATOR_KEY": OPERATOR}
    with held_server.client(KEY) as client, ExitStack() as stack:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        stack.callback(client.delete, f"/v1/sessions/{sid}")
        env = {**cli_env(held_server), **operator}
        watch = subprocess.Popen(
            [sys.executable, "-m", "interpreter", "approvals", "--watch"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
        )  # fmt: skip
        stack.callback(watch.kill)
        held = stack.enter_context(
            client.stream("POST", f"/v1/sessions/{sid}/execute", json={"code": DISGUISED})
        )
        assert held.status_code == 200
        assert watch.stdout is not None
        watched = watch.stdout.readline() + watch.stdout.readline()
        approval_id = watched.split()[0]
        listed = interp(held_server, "approvals", env_extra=operator)
        denied = interp(held_server, "approvals", "deny", approval_id, env_extra=operator)
        assert listed.returncode == 0 and denied.returncode == 0, listed.stderr + denied.stderr
        for shown in (watched, listed.stdout, denied.stdout):
            head, code, *rest = shown.splitlines()
            assert not rest, shown
            assert head.startswith(approval_id) and "rule=delete-needs-approval" in head
            assert visible(shown, lines=True) == shown  # nothing a terminal acts on
            assert code == (
                '    __import__("os").remove("db")#\\x1b[A\\x1b[2K\\x1b[Gap_x pending '
                "rule=(default)\\x1b[B\\x1b[2K\\x1b[G    x = 1 \\u202e\\x9b2J\\x07"
                f"  [+1 line: interp approvals show {approval_id}]"
            )
        # The JSON view was already escaped (json.dumps), and is the whole code.
        whole = interp(held_server, "approvals", "show", approval_id, env_extra=operator)
        assert json.loads(whole.stdout)["code"] == DISGUISED
        assert "\x1b" not in whole.stdout


def test_replay_and_rebuild_show_a_notebooks_control_characters_escaped(
    held_server: Server, tmp_path: Path
) -> None:
    """`interp replay` printed a cell's first line, and `interp rebuild` its summary
    quoting cells' first lines, as the notebook had them: an agent's escape sequences
    reached the terminal."""
    code = "x = 1  # \x1b]0;title\x07\x1b[2K\nprint('now')"
    recorded = {"output_type": "stream", "name": "stdout", "text": "then\n"}
    notebook = tmp_path / "escapes.ipynb"
    notebook.write_text(json.dumps(one_cell_notebook(code, [recorded])))
    replayed = interp(held_server, "replay", str(notebook))
    assert replayed.returncode == 1, replayed.stderr
    assert "\x1b" not in replayed.stdout, replayed.stdout
    assert "x = 1  # \\x1b]0;title\\x07\\x1b[2K" in replayed.stdout
    assert "stdout differs" in replayed.stdout
    notebook.write_text(json.dumps(one_cell_notebook(code + "\n1/0", [recorded])))
    rebuilt = interp(held_server, "rebuild", str(notebook), "--quiet")
    assert "\x1b" not in rebuilt.stdout, rebuilt.stdout
    assert "`x = 1  # \\x1b]0;title\\x07\\x1b[2K`" in rebuilt.stdout, rebuilt.stdout
    sid = rebuilt.stdout.split("session: ")[1].split()[0]
    with held_server.client(KEY) as client:
        client.delete(f"/v1/sessions/{sid}")
