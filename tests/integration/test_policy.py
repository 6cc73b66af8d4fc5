"""The policy stage on real kernels, both backends: rules allow and deny, denied code never
reaches the kernel, approvals hold the queue, limits are refused, the file reloads.

Each backend gets its own broker started with a policy file (``policy_file``) and an
operator key; the policy is the README's example plus the rules the tests need.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing
from functools import partial
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
#: Listed both as an agent's key and as an operator's: it must not decide its own code.
DUAL = "test-key-ops-and-agent"
#: Bound to the "strict" policy (default deny) of the rule kinds below.
STRICT = "test-key-delta"
#: Bound to the README's example "tight" policy, appended to the file as written there.
TIGHT = "test-key-echo"
#: Bound to the same policy: its own executions per minute, for a second test.
TIGHT_TOO = "test-key-foxtrot"


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

[[keys]]
name = "ops-dual"
sha256 = "{_prefix(DUAL)}"

[[keys]]
name = "agent-delta"
sha256 = "{_prefix(STRICT)}"
policy = "strict"

[[keys]]
name = "agent-echo"
sha256 = "{_prefix(TIGHT)}"
policy = "tight"

[[keys]]
name = "agent-foxtrot"
sha256 = "{_prefix(TIGHT_TOO)}"
policy = "tight"

[policies.default]
default = "allow"

[[policies.default.rules]]
id = "ops-may-use-subprocess"
decision = "allow"
match.keys = ["ops-*"]
match.imports = ["subprocess", "subprocess.*"]

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

[policies.strict]
default = "deny"
default_message = "only math, and csv in etl sessions"

[[policies.strict.rules]]
id = "fix-syntax"
decision = "deny"
message = "this cell does not parse; fix it first"
match.syntax_error = true

[[policies.strict.rules]]
id = "no-bash"
decision = "deny"
match.magics = ["bash", "!"]

[[policies.strict.rules]]
id = "no-pip"
decision = "deny"
match.magics = ["pip"]

[[policies.strict.rules]]
id = "no-dynamic-exec"
decision = "deny"
match.dynamic_exec = true

[[policies.strict.rules]]
id = "short-cells"
decision = "deny"
match.timeout_s_over = 20

[[policies.strict.rules]]
id = "etl-csv"
decision = "allow"
match.session_metadata = {{ team = "etl" }}
match.imports = ["csv"]

[[policies.strict.rules]]
id = "small-sessions"
decision = "deny"
match.limits_over = {{ memory_mb = 300 }}

[[policies.strict.rules]]
id = "math"
decision = "allow"
match.imports = ["math"]

[policies.small]
default = "allow"
limits.max_memory_mb = 256
limits.max_timeout_s = 30
limits.max_sessions = 1
limits.max_executions_per_minute = 3
"""


def _readme_tight() -> str:
    """The README's example "tight" policy, as the README writes it."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("[policies.tight]") :]
    return "\n" + block[: block.index("```")]


POLICY += _readme_tight()


@pytest.fixture(scope="module", params=["local", "docker"])
def policy_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    if request.param == "docker":
        require_docker()
    root = Path(tempfile.mkdtemp(prefix=f"interp-policy-{request.param}-"))
    (root / "policy.toml").write_text(POLICY)
    srv = start_server(
        request.param,
        root / "data",
        api_keys=[KEY, OTHER_KEY, LIMITED, DUAL, STRICT, TIGHT, TIGHT_TOO],
        operator_keys=[OPERATOR, DUAL],
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

    assert [p.skip for p in plan(nb)] == ["never_ran", "never_ran"]


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
        announced = events[0].approval
        assert announced.status == "pending"
        # The event carries the code, the facts that matched and the rule.
        assert announced.code == "import os\nos.remove('nothing-here')"
        assert announced.rule == "delete-needs-approval" and announced.policy == "short-approvals"
        assert "os.remove" in announced.facts["calls"] and announced.facts["imports"] == ["os"]
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


HELD = "import os\nos.remove('nothing-here')"


def _withdrawn(server: Server, ex: Execution, approval_id: str, reason: str) -> None:
    """``ex`` was held and ended ``cancelled`` (``reason``) before anyone decided: never
    sent to the kernel, no notebook cell, its approval withdrawn and closed to decisions."""
    assert (ex.status, ex.reason) == ("cancelled", reason)
    assert ex.started_at is None and ex.execution_count is None
    assert ex.policy is not None and ex.policy.approval is not None
    outcome = ex.policy.approval
    assert (outcome.decision, outcome.decided_by, outcome.comment) == (
        "withdrawn",
        "service",
        reason,
    )
    assert "withdrawn before anyone decided" in "\n".join(render_execution(ex))
    with _operator(server) as op:
        approval = op.get(f"/v1/approvals/{approval_id}").json()
        assert approval["status"] == "withdrawn" and approval["outcome"]["comment"] == reason
        late = op.post(f"/v1/approvals/{approval_id}/approve", json={})
        assert late.status_code == 409 and "withdrawn by service" in late.text
        pending = op.get("/v1/approvals").json()["approvals"]
        assert approval_id not in [a["id"] for a in pending]


def _no_cell_for(client: httpx.Client, sid: str, execution_id: str) -> None:
    nb = client.get(f"/v1/sessions/{sid}/notebook").json()
    ids = [c["metadata"].get("interp", {}).get("execution_id") for c in nb["cells"]]
    assert execution_id not in ids


@pytest.mark.parametrize("how", ["interrupt", "by_id"])
def test_an_interrupt_cancels_a_held_execution_and_withdraws_its_approval(
    policy_server: Server, session: tuple[httpx.Client, str], how: str
) -> None:
    """A plain interrupt, or one naming the held execution, ends it at once as a queued
    cell would end (it never reached the kernel), and the queue behind it moves on."""
    client, sid = session
    with ExitStack() as stack:
        held = _submit(stack, client, sid, HELD)
        behind = _submit(stack, client, sid, "print('behind')")
        held_id = held.headers["X-Execution-Id"]
        approval = _pending_for(policy_server, held_id)
        params = {"execution_id": held_id} if how == "by_id" else {}
        resp = client.post(f"/v1/sessions/{sid}/interrupt", params=params)
        assert resp.status_code == 200, resp.text
        # Ended when the interrupt is answered, not when the approval would expire.
        now = client.get(f"/v1/sessions/{sid}/executions/{held_id}").json()
        assert (now["status"], now["reason"]) == ("cancelled", "cancelled")
        ex = _result(held)
        after = _result(behind)
    assert after.status == "ok" and after.stdout == "behind\n"
    _withdrawn(policy_server, ex, approval["id"], "cancelled")
    _no_cell_for(client, sid, held_id)


@pytest.mark.parametrize("keep_queued", [False, True])
def test_a_restart_cancels_a_held_execution_and_it_never_runs_on_the_new_kernel(
    policy_server: Server, session: tuple[httpx.Client, str], keep_queued: bool
) -> None:
    client, sid = session
    generation = client.get(f"/v1/sessions/{sid}").json()["generation"]
    with ExitStack() as stack:
        held = _submit(stack, client, sid, HELD)
        behind = _submit(stack, client, sid, "print('behind')")
        held_id = held.headers["X-Execution-Id"]
        approval = _pending_for(policy_server, held_id)
        resp = client.post(f"/v1/sessions/{sid}/restart", json={"keep_queued": keep_queued})
        assert resp.status_code == 200, resp.text
        assert resp.json()["generation"] == generation + 1
        now = client.get(f"/v1/sessions/{sid}/executions/{held_id}").json()
        assert (now["status"], now["reason"]) == ("cancelled", "restarted")
        ex = _result(held)
        after = _result(behind)
    _withdrawn(policy_server, ex, approval["id"], "restarted")
    assert ex.state_lost  # written against the state the restart threw away
    if keep_queued:  # what was kept runs on the new kernel, after the cancelled one
        assert (after.status, after.generation, after.stdout) == ("ok", generation + 1, "behind\n")
    else:
        assert (after.status, after.reason) == ("cancelled", "restarted")
    _no_cell_for(client, sid, held_id)


def test_a_held_execution_ends_cancelled_when_its_session_is_deleted(
    policy_server: Server,
) -> None:
    with policy_server.client() as client:
        sid = _session(client)
        with ExitStack() as stack:
            held = _submit(stack, client, sid, HELD)
            approval = _pending_for(policy_server, held.headers["X-Execution-Id"])
            assert client.delete(f"/v1/sessions/{sid}").status_code in (200, 204)
            ex = _result(held)
        _withdrawn(policy_server, ex, approval["id"], "session_closed")
        _no_cell_for(client, sid, ex.id)


def test_a_held_execution_ends_cancelled_when_the_broker_stops(tmp_path: Path) -> None:
    """A drain does not wait its grace for code nobody approved: the held execution is
    cancelled first, like the queued ones (it never ran, and never will)."""
    (tmp_path / "policy.toml").write_text(POLICY)
    srv = start_server(
        "local",
        tmp_path / "data",
        operator_keys=[OPERATOR],
        policy_file=tmp_path / "policy.toml",
        pool_size=0,
        shutdown_grace_s=60,
    )
    try:
        with srv.client() as client, ExitStack() as stack:
            sid = _session(client)
            held = _submit(stack, client, sid, HELD)
            behind = _submit(stack, client, sid, "print('behind')")
            approval = _pending_for(srv, held.headers["X-Execution-Id"])
            srv.thread.call(srv.thread.broker.drain())
            ex = _result(held)
            after = _result(behind)
            _withdrawn(srv, ex, approval["id"], "broker_shutdown")
            assert (after.status, after.reason) == ("cancelled", "broker_shutdown")
    finally:
        srv.thread.stop()


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

    def reloaded_to(sha: str | None, error: str | None) -> dict[str, Any]:
        """Poll until the policy in force is ``sha`` and the file's error contains
        ``error`` (None: no error). The file is written in place, as an editor may: a
        check that reads it half-written reports that state first (an empty file), and
        the next check the whole edit."""
        deadline = time.monotonic() + 30
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = op.get("/v1/policy").json()
            found = status["error"]
            errs = found is None if error is None else found is not None and error in found
            if errs and (sha is None or status["sha256"] == sha):
                return status
            time.sleep(0.1)  # polling a state, not ordering events
        raise AssertionError(f"the policy was not reloaded: {status}")

    try:
        good = op.get("/v1/policy").json()
        broken = POLICY.replace('match.imports = ["subprocess"]', "match.imports = oops")
        path.write_text(broken)
        line = broken.splitlines().index("match.imports = oops") + 1
        # The last good policy stays in force, and the error names the broken line.
        reloaded_to(good["sha256"], error=f"line {line}")
        assert _run(client, sid, "import subprocess")["status"] == "denied"  # still in force
        relaxed = POLICY.replace(
            'decision = "deny"\nmessage = "subprocess', 'decision = "allow"\nmessage = "subprocess'
        )
        path.write_text(relaxed)
        reloaded_to(hashlib.sha256(relaxed.encode()).hexdigest(), error=None)
        assert _run(client, sid, "import subprocess")["status"] == "ok"  # same session
        # An edit that keeps the size and the mtime (a tool restoring it, or two edits in
        # one tick of the file system's clock) is seen too: the content is compared.
        before = path.stat()
        tight = relaxed.replace('"allow"\nmessage = "subprocess', '"deny"\nmessage = "subprocess ')
        assert len(tight) == len(relaxed)
        path.write_text(tight)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        reloaded_to(hashlib.sha256(tight.encode()).hexdigest(), error=None)
        assert _run(client, sid, "import subprocess")["status"] == "denied"
    finally:
        path.write_text(POLICY)
        reloaded_to(hashlib.sha256(POLICY.encode()).hexdigest(), error=None)
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


def _session(client: httpx.Client, **body: Any) -> str:
    resp = client.post("/v1/sessions", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def _decided(ex: dict[str, Any]) -> tuple[str, str | None]:
    return ex["status"], ex["policy"]["rule"]


def test_each_rule_kind_of_a_key_specific_policy_on_a_real_kernel(policy_server: Server) -> None:
    """The "strict" policy of one key: magics, dynamic exec, syntax errors denied; session
    metadata, timeouts and limits matched; rules that allow what its default denies."""
    with policy_server.client(STRICT) as client:
        etl = _session(client, metadata={"team": "etl"}, limits={"memory_mb": 256})
        big = _session(client, limits={"memory_mb": 512})
        # The server's default timeout is above the policy's 20 s: ask for less.
        run = partial(_run, client, timeout_s=10)
        try:
            denied = [
                ("x = 1", None),  # the default: deny
                ("def f(:\n    pass", "fix-syntax"),
                ("%%bash\necho ran > ran.txt", "no-bash"),
                ("!echo ran > ran.txt", "no-bash"),
                ("%pip --version", "no-pip"),
                ("import math\nsrc = 'ran = 1'\nexec(src)", "no-dynamic-exec"),
            ]
            for code, rule in denied:
                ex = run(etl, code)
                assert _decided(ex) == ("denied", rule), (code, ex)
            assert "only math" in run(etl, "y = 2")["policy"]["message"]
            # Allowed by rules the default would deny: math anywhere, csv in etl sessions.
            ok = run(etl, "import math\nexec('ran = math.sqrt(16)')")
            assert _decided(ok) == ("ok", "math")
            assert _decided(run(etl, "import csv\nimport math")) == ("ok", "etl-csv")
            assert _decided(run(etl, "import math", timeout_s=25)) == (
                "denied",
                "short-cells",
            )
            last = run(etl, "import math\nimport os\n(ran, os.path.exists('ran.txt'))")
            assert _decided(last) == ("ok", "math")
            assert last["outputs"][0]["data"]["text/plain"] == "(4.0, False)"
            # Without the metadata csv falls through; a session above the limit is denied.
            assert _decided(run(big, "import csv")) == ("denied", "small-sessions")
            assert _decided(run(big, "import math")) == ("denied", "small-sessions")
        finally:
            client.delete(f"/v1/sessions/{etl}")
            client.delete(f"/v1/sessions/{big}")
    # The same cells under the default policy of another key: allowed.
    with policy_server.client(KEY) as other:
        sid = _session(other)
        try:
            assert _decided(_run(other, sid, "x = 1\nx")) == ("ok", None)
            assert _decided(_run(other, sid, "import subprocess")) == ("denied", "no-subprocess")
        finally:
            other.delete(f"/v1/sessions/{sid}")


def test_known_evasions_run_on_a_real_kernel(session: tuple[httpx.Client, str]) -> None:
    """README "What a policy does not catch": rows of the table, run under a policy that
    denies os.system; they are not caught and they run."""
    client, sid = session
    rows = [
        "import os\nfns = [os.system]\nfns[0]('echo 1 > e1.txt')",
        "import os\nclass T:\n    run = os.system\nT.run('echo 1 > e2.txt')",
        "def run(f):\n    return f('echo 1 > e3.txt')\nimport os\nrun(os.system)",
    ]
    for code in rows:
        ex = _run(client, sid, code)
        assert _decided(ex) == ("ok", None), (code, ex)
    # A star import the analyser cannot read: unknown, and it runs.
    star = _run(client, sid, "from pty import *\nopenpty")
    assert _decided(star) == ("ok", None) and star["policy"]["facts"]["unknown"] == ["star_import"]
    # A module held by a name the cell binds; a standard-library function that runs the
    # command it is given (no os, no subprocess in the cell); Python text run by a function
    # the analyser does not read; a module found among many values.
    for code in (
        "import pathlib\nfor m in [pathlib]:\n    m.os.system('echo 1 > e4.txt')",
        "import pydoc\npydoc.pipepager('', 'echo 1 > e5.txt')",
        "import code\ncode.InteractiveInterpreter().runsource(\n"
        "    \"import os; os.system('echo 1 > e6.txt')\")",
        "import sys\nm = dict(sys.modules)\nm['os'].system('echo 1 > e7.txt')",
    ):
        ex = _run(client, sid, code)
        assert _decided(ex) == ("ok", None), (code, ex)
    check = _run(client, sid, "import os\nsorted(f for f in os.listdir() if f[0] == 'e')")
    assert check["outputs"][0]["data"]["text/plain"] == str([f"e{i}.txt" for i in range(1, 8)])
    # What the analyser now catches stays denied on the same kernel.
    for code in (
        "import os.path\nos.path.os.system('echo 1 > c.txt')",
        "exec(\"import os; os.system('echo 1 > c.txt')\")",
        "from os import *\nsystem('echo 1 > c.txt')",
        "import os\n(f := os.system)('echo 1 > c.txt')",
        "import os\nvars(os)['system']('echo 1 > c.txt')",
        "import sys\nsys.modules['os'].system('echo 1 > c.txt')",
        "import pathlib\npathlib.os.system('echo 1 > c.txt')",
        "import tempfile\ntempfile._os.system('echo 1 > c.txt')",
    ):
        assert _decided(_run(client, sid, code)) == ("denied", "no-os-system"), code
    for code in (
        "%%writefile /etc/interp-policy-test\nx",
        "import os\nos.rename('e1.txt', '/tmp/e1.txt')",
    ):
        assert _decided(_run(client, sid, code)) == ("denied", "no-outside-writes"), code
    check = _run(client, sid, "import os\n(os.path.exists('c.txt'), os.path.exists('e1.txt'))")
    assert check["outputs"][0]["data"]["text/plain"] == "(False, True)"


#: Ways a cell started a process past the README's "tight" policy (an outside tester's
#: cells, made to leave a file behind), and the rule of that policy that now denies each.
TIGHT_DENIED = [
    ("import sys\nsys.modules['os'].popen('touch t1.txt').read()", "no-processes-or-network"),
    ("pathlib.os.popen('touch t2.txt').read()", "no-processes-or-network"),  # after a cell's import
    ("import pandas\npandas.io.common.os.popen('touch t3.txt').read()", "no-processes-or-network"),
    (
        "import asyncio\np = await asyncio.create_subprocess_exec('touch', 't4.txt')\n"
        "await p.wait()",
        "no-async-processes",
    ),
    (
        "import asyncio\nloop = asyncio.get_running_loop()\n"
        "t, _ = await loop.subprocess_shell(asyncio.SubprocessProtocol, 'touch t5.txt')",
        "no-async-processes",
    ),
    (
        "import timeit\ntimeit.timeit(\"import os; os.popen('touch t10.txt').read()\", number=1)",
        "no-processes-or-network",
    ),
    (
        "import pathlib\n[m for m in [pathlib]][0].os.popen('touch t11.txt').read()",
        "no-processes-or-network",
    ),
    (
        "globals()['__builtins__'].__import__('os').popen('touch t12.txt').read()",
        "no-processes-or-network",
    ),
    (
        "import operator\noperator.attrgetter('os')(pathlib).popen('touch t13.txt').read()",
        "no-processes-or-network",
    ),
    ("get_ipython().kernel.shell.getoutput('touch t14.txt')", "no-shell"),
    ("get_ipython().getoutput('touch t6.txt')", "no-shell"),
    ("from IPython.utils.process import getoutput\ngetoutput('touch t7.txt')", "no-shell"),
    ("x = !!touch t8.txt", "no-shell"),
    ("x = %sx touch t9.txt", "no-shell"),
]


def test_the_readme_tight_policy_denies_each_way_a_tester_started_a_process(
    policy_server: Server,
) -> None:
    """The README's "tight" policy let ``sys.modules['os'].popen``, ``pathlib.os.popen``,
    ``pandas.io.common.os.popen``, ``asyncio.create_subprocess_exec`` and IPython's
    ``getoutput`` start a process; each is now denied, none reaches the kernel, and
    ordinary data analysis still runs under it."""
    with policy_server.client(TIGHT) as client:
        sid = _session(client)
        try:
            assert _decided(_run(client, sid, "import pathlib")) == ("ok", None)
            for code, rule in TIGHT_DENIED:
                ex = _run(client, sid, code)
                assert _decided(ex) == ("denied", rule), (code, ex)
                assert ex["policy"]["message"].startswith("this key may not"), ex
            work = _run(
                client,
                sid,
                "import pandas as pd\nimport numpy as np\nfrom pathlib import Path\n"
                "df = pd.DataFrame({'a': np.arange(3)})\ndf.to_csv('d.csv', index=False)\n"
                "(int(pd.read_csv('d.csv')['a'].sum()), np.zeros(2).ctypes.data > 0,"
                " sorted(p.name for p in Path('.').glob('t*.txt')))",
            )
            assert _decided(work) == ("ok", None), work
            assert work["outputs"][0]["data"]["text/plain"] == "(3, True, [])"
        finally:
            client.delete(f"/v1/sessions/{sid}")


#: Variables that name what Python, IPython or a package of the image runs, imports or
#: loads by itself, and a word of the reason each is refused with.
HOOK_ENV = {
    "PYTHONBREAKPOINT": ("os.system", "breakpoint() calls the function it names"),
    "BROWSER": ('sh -c "id > b.txt" %s', "webbrowser"),
    "PAGER": ("sh -c id", "pydoc's pager"),
    "MANPAGER": ("sh -c id", "pydoc's pager"),
    "EDITOR": ("sh -c id", "editing tools run"),
    "VISUAL": ("sh -c id", "editing tools run"),
    "SHELL": ("/workspace/sh", "IPython runs shell commands"),
    "PYTHONWARNINGS": ("ignore::evil.Warning", "imports a module"),
    "PYZMQ_BACKEND": ("evil", "pyzmq imports the module"),
    "LOKY_PICKLER": ("evil", "joblib imports the module"),
    "PYTHONSAFEPATH": ("", "where Python finds the code it imports"),
    "PYTHONPYCACHEPREFIX": ("/workspace/c", "compiled code"),
    "MPLCONFIGDIR": ("/workspace", "matplotlibrc"),
    "OPENSSL_CONF": ("/workspace/o.cnf", "OpenSSL loads"),
    "LD_AUDIT": ("/workspace/a.so", "dynamic loader"),
    "JUPYTER_CONFIG_DIR": ("/workspace", "Jupyter set-up"),
    "BASH_ENV": ("/workspace/x.sh", "a shell runs the script"),
    "X13PATH": ("/workspace", "statsmodels runs"),
}


def test_a_session_env_cannot_name_code_that_later_code_runs(policy_server: Server) -> None:
    """Under the README's tight policy, {"env": {"PYTHONBREAKPOINT": "os.system"}} then
    breakpoint("id"), or BROWSER="sh -c ..." then import antigravity, ran commands the
    policy never saw (found by an outside security tester). Such variables are refused
    with a 422 that says why, for every key and in every place a client sets variables
    (E2B's envs: tests/integration/test_e2b.py); other names are still taken."""
    with policy_server.client(TIGHT) as client:
        before = client.get("/v1/sessions").json()["sessions"]
        for name, (value, why) in HOOK_ENV.items():
            resp = client.post("/v1/sessions", json={"env": {"OK_NAME": "1", name: value}})
            assert resp.status_code == 422, (name, resp.text)
            message = resp.json()["error"]["message"]
            assert f"variable '{name}' is reserved: " in message and why in message, message
        assert client.get("/v1/sessions").json()["sessions"] == before  # none started
        sid = _session(client, env={"REPORT_TITLE": "Q3", "PYTHONHASHSEED": "0"})
        try:
            ex = _run(client, sid, "import sys\nsys.flags.hash_randomization")
            assert ex["outputs"][0]["data"]["text/plain"] == "0", ex
        finally:
            client.delete(f"/v1/sessions/{sid}")


#: Cells an outside security tester ran past the README's "tight" policy (made to leave a
#: file ``u<n>.txt``), in groups run in order, each with what the policy now does with it: the
#: rule that denies it, ``NameError`` (a later cell calling what a denied one was to name),
#: or ``ok``. An introspection walk, ``__import__`` given to ``map``, ``exec``/``eval``/
#: ``__import__`` kept under a name for a later cell, packages of the kernel image that run a
#: command, and the IPython shell kept by an earlier cell.
TIGHT_EVASIONS: list[list[tuple[str, str]]] = [
    [
        (
            "w = [c for c in ().__class__.__base__.__subclasses__()"
            " if c.__name__ == '_wrap_close'][0]\n"
            "w.__init__.__globals__['system']('touch u1.txt')",
            "nothing-unread",
        )
    ],
    [("m = list(map(__import__, ['os']))[0]\nm.system('touch u2.txt')", "nothing-unread")],
    [
        ("r = exec", "nothing-unread"),
        ("r('import o' + 's; o' + 's.system(\"touch u3.txt\")')", "NameError"),
    ],
    [("imp = __import__", "nothing-unread"), ("imp('os').system('touch u4.txt')", "NameError")],
    [
        ("ev = eval", "nothing-unread"),
        ("ev('__im' + 'port__(\"o\" + \"s\")').system('touch u5.txt')", "NameError"),
    ],
    [("__builtins__.exec('import o' + 's; o' + 's.system(\"touch u6.txt\")')", "nothing-unread")],
    [("import pexpect\npexpect.run('touch u7.txt')", "no-command-packages")],
    [
        (
            "import ptyprocess\nptyprocess.PtyProcess.spawn(['touch', 'u8.txt']).wait()",
            "no-command-packages",
        )
    ],
    [
        (
            "import tornado.process\ntornado.process.Subprocess(['touch', 'u9.txt']).proc.wait()",
            "no-command-packages",
        )
    ],
    [
        (
            "from matplotlib.testing import subprocess_run_for_testing as run\n"
            "run(['touch', 'u10.txt'])",
            "no-command-packages",
        )
    ],
    [
        (
            "from jupyter_client.launcher import launch_kernel\n"
            "launch_kernel(['touch', 'u11.txt']).wait()",
            "no-command-packages",
        )
    ],
    [("import psutil\npsutil.Popen(['touch', 'u12.txt']).wait()", "no-command-packages")],
    [("ip = get_ipython()", "ok"), ("ip.getoutput('touch u13.txt')", "no-shell")],
    [
        ("import asyncio as a", "ok"),
        (
            "p = await a.create_subprocess_exec('touch', 'u14.txt')\nawait p.wait()",
            "no-async-processes",
        ),
    ],
]
_U_FILES = "from pathlib import Path\nprint(*sorted(p.name for p in Path('.').glob('u*.txt')))"


def test_the_readme_tight_policy_denies_introspection_aliases_and_packages_that_run_commands(
    policy_server: Server,
) -> None:
    """Each group of cells leaves its file under a key whose policy allows it; under the
    README's "tight" policy the cell that would run a command, or keep a function that
    runs code for a later cell, is denied, and no file appears (found by an outside
    security tester)."""
    every = sorted(f"u{n}.txt" for n in range(1, len(TIGHT_EVASIONS) + 1))
    with policy_server.client(OTHER_KEY) as client:
        sid = _session(client)
        try:
            for cells in TIGHT_EVASIONS:
                for code, _verdict in cells:
                    ex = _run(client, sid, code)
                    assert _decided(ex) == ("ok", None), (code, ex)
            listed = _run(client, sid, _U_FILES)
            assert listed["stdout"] == " ".join(every) + "\n", listed
        finally:
            client.delete(f"/v1/sessions/{sid}")
    with policy_server.client(TIGHT_TOO) as client:
        sid = _session(client)
        try:
            for cells in TIGHT_EVASIONS:
                for code, verdict in cells:
                    ex = _run(client, sid, code)
                    if verdict == "ok":
                        assert _decided(ex) == ("ok", None), (code, ex)
                    elif verdict == "NameError":
                        assert ex["status"] == "error", (code, ex)
                        assert ex["error"]["ename"] == "NameError", (code, ex)
                    else:
                        assert _decided(ex) == ("denied", verdict), (code, ex)
            listed = _run(client, sid, _U_FILES)
            assert _decided(listed) == ("ok", None), listed
            assert listed["stdout"] == "\n", listed
        finally:
            client.delete(f"/v1/sessions/{sid}")


def test_a_key_that_is_agent_and_operator_cannot_decide_its_own_code_and_the_decision_is_chained(
    policy_server: Server, tmp_path: Path
) -> None:
    with policy_server.client(DUAL) as dual:
        sid = _session(dual)
        try:
            # An allow rule for this key's name: what the default policy denies others.
            assert _decided(_run(dual, sid, "import subprocess")) == (
                "ok",
                "ops-may-use-subprocess",
            )
            with ExitStack() as stack:
                held = _submit(stack, dual, sid, "import os\nos.remove('missing')")
                approval = _pending_for(policy_server, held.headers["X-Execution-Id"])
                own = dual.post(f"/v1/approvals/{approval['id']}/approve", json={})
                assert own.status_code == 403, own.text
                error = own.json()["error"]
                assert error["type"] == "self_approval"
                assert "same key" in error["message"] and "ops-dual" in error["message"]
                assert dual.get(f"/v1/approvals/{approval['id']}").json()["status"] == "pending"
                with _operator(policy_server) as op:
                    decided = op.post(
                        f"/v1/approvals/{approval['id']}/deny", json={"comment": "not yours"}
                    )
                    assert decided.status_code == 200, decided.text
                ex = _result(held)
            assert ex.status == "denied" and ex.policy is not None
            assert ex.policy.approval is not None and ex.policy.approval.decided_by == "ops-alice"
        finally:
            dual.delete(f"/v1/sessions/{sid}")
    # The decision is in the chain: a forged approver is named by `interp audit verify`.
    copy = tmp_path / "data"
    shutil.copytree(policy_server.data_dir / "sessions" / sid, copy / "sessions" / sid)
    with (
        closing(sqlite3.connect(policy_server.data_dir / "state.db")) as src,
        closing(sqlite3.connect(copy / "state.db")) as dst,
    ):
        src.backup(dst)
        dst.execute("DELETE FROM executions WHERE session_id != ?", (sid,))
        dst.execute("DELETE FROM audit_links WHERE session_id != ?", (sid,))
        dst.execute("DELETE FROM sessions WHERE id != ?", (sid,))
        dst.commit()
    assert _verify(copy)[0] == 0
    with closing(sqlite3.connect(copy / "state.db")) as db:
        db.execute(
            "UPDATE executions SET data_json = json_set(data_json,"
            " '$.policy.approval.decided_by', 'ops-mallory') WHERE id = ?",
            (ex.id,),
        )
        db.commit()
    code, out = _verify(copy)
    assert code == 1, out
    assert ex.id in out and "policy" in out and "ops-mallory" in out


def _verify(data: Path) -> tuple[int, str]:
    """``interp audit verify`` as a real command: exit code and output."""
    interp = Path(sys.executable).parent / "interp"
    proc = subprocess.run(
        [str(interp), "audit", "verify", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr
