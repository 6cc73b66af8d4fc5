"""The policy stage on real kernels, both backends: rules allow and deny, denied code never
reaches the kernel, approvals hold the queue, limits are refused, the file reloads.

Each backend gets its own broker started with a policy file (``policy_file``) and an
operator key; the policy is the README's example plus the rules the tests need.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from interpreter.client import ApprovalRequiredEvent, Client, DoneEvent
from interpreter.client.render import render_execution
from interpreter.models import Execution
from tests.conftest import KEY, OTHER_KEY, REPO, Server, require_docker, start_server

OPERATOR = "test-operator-key-1"
LIMITED = "test-key-charlie"


def _prefix(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


POLICY = f"""
[approvals]
expire_after_s = 600

[[keys]]
name = "agent-bravo"
sha256 = "{_prefix(OTHER_KEY)}"
policy = "short-approvals"

[[keys]]
name = "agent-charlie"
sha256 = "{_prefix(LIMITED)}"
policy = "small"

[[keys]]
name = "ops-alice"
sha256 = "{_prefix(OPERATOR)}"

[policies.default]
default = "allow"

[[policies.default.rules]]
id = "no-subprocess"
decision = "deny"
message = "subprocess is not allowed for this key; use pandas to read the file"
match.imports = ["subprocess"]

[[policies.default.rules]]
id = "no-os-system"
decision = "deny"
message = "os.system is not allowed; use Python functions"
match.calls = ["os.system", "os.popen"]

[[policies.default.rules]]
id = "no-shell"
decision = "deny"
message = "shell escapes and %pip are not allowed"
match.shell = true

[[policies.default.rules]]
id = "no-outside-writes"
decision = "deny"
message = "write only inside the workspace"
match.writes_outside_workspace = true

[[policies.default.rules]]
id = "literal-imports"
decision = "deny"
message = "imports must name their module literally"
match.unknown = ["import"]

[[policies.default.rules]]
id = "no-network"
decision = "deny"
message = "no sockets"
match.imports = ["socket"]

[[policies.default.rules]]
id = "delete-needs-approval"
decision = "approve"
message = "deleting files needs a person's approval"
match.calls = ["os.remove", "shutil.rmtree", "pathlib.Path.unlink"]

[policies.short-approvals]
default = "allow"
approval_expire_after_s = 1

[[policies.short-approvals.rules]]
id = "delete-needs-approval"
decision = "approve"
match.calls = ["os.remove"]

[policies.small]
default = "allow"
limits.max_memory_mb = 256
limits.max_timeout_s = 30
limits.max_sessions = 1
limits.max_executions_per_minute = 3
"""


@pytest.fixture(scope="module", params=["local", "docker"])
def policy_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "docker":
        require_docker()
    root = Path(tempfile.mkdtemp(prefix=f"interp-policy-{request.param}-"))
    (root / "policy.toml").write_text(POLICY)
    srv = start_server(
        request.param,
        root / "data",
        api_keys=[KEY, OTHER_KEY, LIMITED],
        operator_keys=[OPERATOR],
        policy_file=root / "policy.toml",
        policy_poll_s=0.2,
        pool_size=0,
    )
    yield srv
    srv.thread.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def session(policy_server: Server) -> Iterator[tuple[httpx.Client, str]]:
    with policy_server.client() as client:
        resp = client.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        yield client, sid
        client.delete(f"/v1/sessions/{sid}")


def _run(client: httpx.Client, sid: str, code: str, **body: Any) -> dict[str, Any]:
    resp = client.post(f"/v1/sessions/{sid}/execute", json={"code": code, **body})
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


DENIED = [
    ("import subprocess\nsubprocess.run(['true'])", "no-subprocess"),
    ("from os import system as s\ns('true')", "no-os-system"),
    ("import os as o\nrun = o.system\nrun('true')", "no-os-system"),
    ("import os\nos.popen('true')", "no-os-system"),
    ("!true", "no-shell"),
    ("%%bash\ntrue", "no-shell"),
    ("%pip list", "no-shell"),
    ("open('/etc/interp-policy-test', 'w')", "no-outside-writes"),
    ("import importlib\nname = 'json'\nimportlib.import_module(name)", "literal-imports"),
    ("__import__('socket').socket()", "no-network"),
]


def test_each_rule_kind_denies_and_denied_code_never_reaches_the_kernel(
    session: tuple[httpx.Client, str],
) -> None:
    client, sid = session
    assert _run(client, sid, "ran = 0")["status"] == "ok"
    for code, rule in DENIED:
        ex = _run(client, sid, code + "\nran += 1")
        assert ex["status"] == "denied", (code, ex)
        assert ex["policy"]["decision"] == "deny" and ex["policy"]["rule"] == rule, code
        assert ex["execution_count"] is None and ex["started_at"] is None
        # Stored in SQLite as it was answered.
        again = client.get(f"/v1/sessions/{sid}/executions/{ex['id']}").json()
        assert again["status"] == "denied" and again["policy"]["rule"] == rule
    allowed = _run(client, sid, "import os\nos.getcwd()\nimport json\nran")
    assert allowed["status"] == "ok" and allowed["policy"]["decision"] == "allow"
    assert allowed["outputs"][0]["data"]["text/plain"] == "0"  # nothing denied ever ran


def test_a_long_cell_is_analysed_off_the_loop_and_still_denied(
    session: tuple[httpx.Client, str],
) -> None:
    client, sid = session
    code = "x = 1\n" * 30_000 + "import subprocess\n"
    ex = _run(client, sid, code)
    assert ex["status"] == "denied" and ex["policy"]["rule"] == "no-subprocess"
    assert client.get("/healthz").status_code == 200


def test_a_syntax_error_reaches_the_kernel_and_a_known_evasion_runs(
    session: tuple[httpx.Client, str],
) -> None:
    client, sid = session
    broken = _run(client, sid, "def f(:\n    pass")
    assert broken["status"] == "error" and broken["error"]["ename"] == "SyntaxError"
    assert broken["policy"]["facts"]["syntax_error"] is True
    # README "Policies": a computed attribute name is not os.system to the analyser.
    evasion = _run(client, sid, "import os\ngetattr(os, 'sys' + 'tem')('true')")
    assert evasion["status"] == "ok"
    assert evasion["policy"]["facts"]["unknown"] == ["getattr"]


def test_a_denial_is_data_in_sse_the_sdk_the_tool_text_and_the_notebook(
    policy_server: Server,
) -> None:
    with (
        Client(policy_server.url, api_key=KEY, timeout=120) as client,
        client.create_session() as sess,
    ):
        result = sess.run("import subprocess")
        assert result.denied and not result.ok
        assert result.policy is not None and result.policy.rule == "no-subprocess"
        events = list(sess.stream("import subprocess\nprint(1)"))
        assert [type(e) for e in events] == [DoneEvent]
        done = events[0]
        assert isinstance(done, DoneEvent) and done.execution.status == "denied"
        text = "\n".join(render_execution(result.execution))
        assert text.startswith("status: denied")
        assert "use pandas to read the file" in text and "'no-subprocess'" in text
        nb = sess.notebook()
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(cells) == 2
    for cell in cells:
        meta = cell["metadata"]["interp"]
        assert meta["status"] == "denied" and cell["outputs"] == []
        assert meta["policy"]["rule"] == "no-subprocess"
        assert cell["execution_count"] is None
    from interpreter.cells import plan

    assert [p.skip for p in plan(nb)] == ["recorded_failure", "recorded_failure"]


def _operator(server: Server) -> httpx.Client:
    return server.client(OPERATOR)


def _pending_for(server: Server, execution_id: str) -> dict[str, Any]:
    """Wait (long poll, no sleep) until the approval of ``execution_id`` is listed."""
    deadline = time.monotonic() + 60
    with _operator(server) as op:
        while time.monotonic() < deadline:
            resp = op.get("/v1/approvals", params={"wait_s": 5})
            assert resp.status_code == 200, resp.text
            for item in resp.json()["approvals"]:
                if item["execution_id"] == execution_id:
                    return dict(item)
    raise AssertionError(f"no approval listed for {execution_id}")


def _submit(stack: ExitStack, client: httpx.Client, sid: str, code: str) -> httpx.Response:
    """Send an execute request; returns once it is queued (its headers are in)."""
    return stack.enter_context(
        client.stream("POST", f"/v1/sessions/{sid}/execute", json={"code": code})
    )


def _result(resp: httpx.Response) -> Execution:
    return Execution.model_validate_json(resp.read())


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_an_approval_holds_the_queue_in_order(
    policy_server: Server, session: tuple[httpx.Client, str], decision: str
) -> None:
    client, sid = session
    _run(client, sid, "order = []\nopen('doomed.txt', 'w').close()")
    with ExitStack() as stack:
        first = _submit(stack, client, sid, "import time\ntime.sleep(0.5)\norder.append('a')")
        held = _submit(stack, client, sid, "import os\nos.remove('doomed.txt')\norder.append('b')")
        after = _submit(stack, client, sid, "order.append('c')")
        held_id = held.headers["X-Execution-Id"]
        approval = _pending_for(policy_server, held_id)
        assert approval["rule"] == "delete-needs-approval" and approval["key"].startswith("key:")
        assert "os.remove" in approval["facts"]["calls"]
        # Nothing behind the held execution overtakes it.
        assert _result(first).status == "ok"
        behind = client.get(f"/v1/sessions/{sid}/executions/{after.headers['X-Execution-Id']}")
        assert behind.json()["status"] == "queued"
        assert client.get(f"/v1/sessions/{sid}/executions/{held_id}").json()["status"] == (
            "pending_approval"
        )
        with _operator(policy_server) as op:
            decided = op.post(
                f"/v1/approvals/{approval['id']}/{decision}", json={"comment": "checked the file"}
            )
            assert decided.status_code == 200, decided.text
            again = op.post(f"/v1/approvals/{approval['id']}/approve")
            assert again.status_code == 409
        held_ex = _result(held)
        assert _result(after).status == "ok"
    assert held_ex.policy is not None and held_ex.policy.approval is not None
    outcome = held_ex.policy.approval
    assert outcome.decided_by == "ops-alice" and outcome.comment == "checked the file"
    order = _run(client, sid, "order")["outputs"][0]["data"]["text/plain"]
    if decision == "approve":
        assert held_ex.status == "ok" and outcome.decision == "approved"
        assert order == "['a', 'b', 'c']"
    else:
        assert held_ex.status == "denied" and held_ex.reason == "approval_denied"
        assert outcome.decision == "denied" and order == "['a', 'c']"
        assert "ops-alice denied it (checked the file)" in "\n".join(render_execution(held_ex))
    nb = client.get(f"/v1/sessions/{sid}/notebook").json()
    cell = next(c for c in nb["cells"] if c["metadata"]["interp"]["execution_id"] == held_ex.id)
    assert cell["metadata"]["interp"]["policy"]["approval"]["decided_by"] == "ops-alice"


def test_an_unanswered_approval_expires_as_denied_and_is_announced_on_sse(
    policy_server: Server,
) -> None:
    with (
        Client(policy_server.url, api_key=OTHER_KEY, timeout=120) as client,
        client.create_session() as sess,
        policy_server.client(OTHER_KEY) as raw,
        ExitStack() as stack,
    ):
        events = []
        behind: httpx.Response | None = None
        for event in sess.stream("import os\nos.remove('nothing-here')"):
            events.append(event)
            if isinstance(event, ApprovalRequiredEvent):
                # Queued behind the held one while it waits: it must not overtake it.
                behind = _submit(stack, raw, sess.id, "print('behind')")
        assert isinstance(events[0], ApprovalRequiredEvent)
        assert events[0].approval.status == "pending"
        done = events[-1]
        assert isinstance(done, DoneEvent)
        ex = done.execution
        assert ex.status == "denied" and ex.reason == "approval_expired"
        assert ex.policy is not None and ex.policy.approval is not None
        outcome = ex.policy.approval
        assert outcome.decision == "expired" and outcome.decided_by == "service"
        assert behind is not None
        after = _result(behind)
        assert after.status == "ok" and after.stdout == "behind\n"
        assert after.started_at is not None and after.started_at >= outcome.decided_at
        assert sess.run("1 + 1").text == "2"  # the queue goes on


def test_agent_keys_cannot_list_or_decide_approvals(policy_server: Server) -> None:
    for key in (KEY, OTHER_KEY):
        with policy_server.client(key) as agent:
            assert agent.get("/v1/approvals").status_code == 403
            resp = agent.post("/v1/approvals/ap_x/approve", json={})
            assert resp.status_code == 403
            assert "operator key" in resp.json()["error"]["message"]
    with policy_server.client("not-a-key") as stranger:
        assert stranger.get("/v1/approvals").status_code == 401
    with _operator(policy_server) as op:
        assert op.post("/v1/approvals/ap_missing/deny").status_code == 404


def test_limits_beyond_the_keys_policy_are_refused(policy_server: Server) -> None:
    with policy_server.client(LIMITED) as client:
        too_big = client.post("/v1/sessions", json={"limits": {"memory_mb": 1024}})
        assert too_big.status_code == 422
        assert "policy 'small'" in too_big.json()["error"]["message"]
        assert too_big.json()["error"]["type"] == "policy_limit"
        created = client.post("/v1/sessions", json={})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        try:
            if policy_server.backend == "docker":
                assert created.json()["limits"]["memory_mb"] == 256  # default capped
            second = client.post("/v1/sessions", json={})
            assert second.status_code == 422 and "1 live sessions" in second.text
            slow = client.post(f"/v1/sessions/{sid}/execute", json={"code": "1", "timeout_s": 60})
            assert slow.status_code == 422 and "timeout_s at most 30" in slow.text
            codes = [
                client.post(f"/v1/sessions/{sid}/execute", json={"code": "1"}).status_code
                for _ in range(4)
            ]
            assert codes[:3] == [200, 200, 200] and codes[3] == 429
            limited = client.post(f"/v1/sessions/{sid}/execute", json={"code": "1"})
            assert limited.status_code == 429
            assert int(limited.headers["Retry-After"]) >= 1
            assert "3 executions per minute" in limited.json()["error"]["message"]
        finally:
            client.delete(f"/v1/sessions/{sid}")


def test_the_example_agent_reads_the_denial_and_rewrites_its_code(policy_server: Server) -> None:
    spec = importlib.util.spec_from_file_location("agent_loop", REPO / "examples" / "agent_loop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines: list[str] = []
    with Client(policy_server.url, api_key=KEY, timeout=120) as client:
        answer, _ = module.run_agent(
            client, module.ShellFirstModel.TASK, module.ShellFirstModel(), log=lines.append
        )
    assert answer == "sales.csv has 6 data rows."
    log = "\n".join(lines)
    assert "status: denied" in log and "use pandas to read the file" in log
    assert "Rewriting" in log


def test_hot_reload_keeps_sessions_and_a_broken_edit_keeps_the_last_good_policy(
    policy_server: Server, session: tuple[httpx.Client, str]
) -> None:
    client, sid = session
    path = policy_server.data_dir.parent / "policy.toml"
    op = _operator(policy_server)

    def reloaded_to(sha: str | None, error: bool) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status: dict[str, Any] = op.get("/v1/policy").json()
            if (status["error"] is not None) == error and (sha is None or status["sha256"] == sha):
                return status
            time.sleep(0.1)  # polling a state, not ordering events
        raise AssertionError("the policy was not reloaded")

    try:
        good = op.get("/v1/policy").json()
        broken = POLICY.replace('match.imports = ["subprocess"]', "match.imports = oops")
        path.write_text(broken)
        status = reloaded_to(good["sha256"], error=True)
        line = broken.splitlines().index("match.imports = oops") + 1
        assert f"line {line}" in status["error"], status["error"]
        assert _run(client, sid, "import subprocess")["status"] == "denied"  # still in force
        relaxed = POLICY.replace(
            'decision = "deny"\nmessage = "subprocess', 'decision = "allow"\nmessage = "subprocess'
        )
        path.write_text(relaxed)
        reloaded_to(hashlib.sha256(relaxed.encode()).hexdigest(), error=False)
        assert _run(client, sid, "import subprocess")["status"] == "ok"  # same session
    finally:
        path.write_text(POLICY)
        reloaded_to(hashlib.sha256(POLICY.encode()).hexdigest(), error=False)
        op.close()


def test_a_rebuild_goes_through_the_policy_too(policy_server: Server) -> None:
    """A notebook cannot smuggle denied code past the policy as a recorded 'ok' cell."""
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {"id": f"c{i}", "cell_type": "code", "source": src, "metadata": {},
             "outputs": [], "execution_count": None}
            for i, src in enumerate(("import subprocess\nsmuggled = True", "x = 1"))
        ],
    }  # fmt: skip
    with policy_server.client() as client:
        created = client.post("/v1/sessions", json={"from_notebook": nb})
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        try:
            assert created.json()["rebuild"]["failed"] == [0]
            check = _run(client, sid, "('smuggled' in globals(), x)")
            assert check["outputs"][0]["data"]["text/plain"] == "(False, 1)"
            cells = client.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
            code = [c for c in cells if c["cell_type"] == "code"]
            assert code[0]["metadata"]["interp"]["status"] == "denied"
        finally:
            client.delete(f"/v1/sessions/{sid}")
