"""Isolation of Docker sessions, proven from inside kernels through the API.

The hostile probes (network, Docker socket, host files and /proc, privilege escalation,
other sessions, fork and memory bombs) live in tests/adversarial/, under its guard.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import httpx
import pytest

from interpreter.backends.docker.engine import list_broker_containers
from tests.conftest import Server, run

pytestmark = [pytest.mark.docker, pytest.mark.parametrize("server", ["docker"], indirect=True)]


def _text(result: dict[str, object]) -> str:
    assert result["status"] == "ok", result
    outputs = result["outputs"]
    assert isinstance(outputs, list)
    return str(outputs[0]["data"]["text/plain"])


def test_unprivileged_and_read_only(api: httpx.Client, shared_session: str) -> None:
    code = (
        "import os\nstatus = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "try:\n    open('/evil', 'w')\n    root_write = 'allowed'\n"
        "except OSError as e:\n    root_write = type(e).__name__\n"
        "st = os.statvfs('/tmp')\n"
        "(os.getuid(), os.getgid(), status['CapEff'].strip(), status['CapBnd'].strip(),"
        " status['NoNewPrivs'].strip(), root_write, st.f_blocks * st.f_frsize <= 64 << 20)"
    )
    text = _text(run(api, shared_session, code))
    uid, gid, cap_eff, cap_bnd, nnp, root_write, tmp_capped = ast.literal_eval(text)
    assert uid != 0 and gid != 0
    assert cap_eff == cap_bnd == "0000000000000000"
    assert nnp == "1"
    assert root_write in ("OSError", "PermissionError")
    assert tmp_capped
    # The workspace is writable.
    assert run(api, shared_session, "open('w.txt', 'w').write('ok')")["status"] == "ok"


def test_limits_reach_the_container(api: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session(limits={"memory_mb": 300, "cpus": 0.5, "pids": 100})
    code = (
        "def read(p):\n    try:\n        return open(p).read().strip()\n"
        "    except OSError:\n        return None\n"
        "(read('/sys/fs/cgroup/memory/memory.limit_in_bytes') or read('/sys/fs/cgroup/memory.max'),"
        " read('/sys/fs/cgroup/pids/pids.max') or read('/sys/fs/cgroup/pids.max'))"
    )
    memory, pids = ast.literal_eval(_text(run(api, sid, code)))
    assert int(memory) == 300 * 1024 * 1024
    assert pids == "100"


def test_delete_removes_the_container(server: Server, api: httpx.Client) -> None:
    broker_id = server.thread.broker.broker_id
    before = {c.id for c in list_broker_containers(broker_id)}
    sid = api.post("/v1/sessions", json={"limits": {"pids": 200}}).json()["id"]
    mine = {c.id for c in list_broker_containers(broker_id)} - before
    assert len(mine) == 1
    assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    assert not mine & {c.id for c in list_broker_containers(broker_id)}
