"""Isolation of Docker sessions, proven from inside kernels through the API."""

from __future__ import annotations

import ast
import time
from collections.abc import Callable

import httpx
import pytest

from interpreter.backends.docker.engine import list_broker_containers
from tests.conftest import REPO, Server, run

pytestmark = [pytest.mark.docker, pytest.mark.parametrize("server", ["docker"], indirect=True)]


def _text(result: dict[str, object]) -> str:
    assert result["status"] == "ok", result
    outputs = result["outputs"]
    assert isinstance(outputs, list)
    return str(outputs[0]["data"]["text/plain"])


def test_no_network(api: httpx.Client, shared_session: str) -> None:
    code = (
        "import socket\nerrors = []\n"
        "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
        "except OSError as e:\n    errors.append(type(e).__name__)\n"
        "try:\n    socket.getaddrinfo('example.com', 80)\n"
        "except OSError as e:\n    errors.append(type(e).__name__)\n"
        "ifaces = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n"
        "(errors, ifaces)"
    )
    assert _text(run(api, shared_session, code)) == "(['OSError', 'gaierror'], ['lo'])"


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


def test_host_files_and_environment_are_invisible(
    api: httpx.Client, shared_session: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The broker runs in this process: a secret in its environment must not reach kernels.
    monkeypatch.setenv("INTERP_CANARY_TOKEN", "s3cr3t")
    code = (
        f"import os\n(os.path.exists({str(REPO)!r}), sorted(os.environ),"
        " any('s3cr3t' in open(f'/proc/{p}/environ', errors='ignore').read()"
        " for p in os.listdir('/proc')"
        " if p.isdigit() and os.access(f'/proc/{p}/environ', os.R_OK)))"
    )
    repo_visible, names, secret_anywhere = ast.literal_eval(_text(run(api, shared_session, code)))
    assert repo_visible is False and secret_anywhere is False
    assert "INTERP_CANARY_TOKEN" not in names
    assert not [n for n in names if n.startswith(("AWS", "DOCKER", "SSH", "GITHUB"))]


def test_sessions_cannot_reach_each_other(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    a, b = new_session(), new_session()
    run(api, a, "open('only_in_a.txt', 'w').write('a')\nimport os\nws = os.path.realpath('.')")
    code = (
        "import os\n"
        "found = []\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    skip = ('/proc', '/sys', '/dev')\n"
        "    dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip]\n"
        "    found += [os.path.join(root, f) for f in files if f == 'only_in_a.txt']\n"
        "(sorted(os.listdir('/workspace')), found,"
        " [l.split()[4] for l in open('/proc/self/mountinfo') if 'workspace' in l])"
    )
    listing, found, mounts = ast.literal_eval(_text(run(api, b, code)))
    assert "only_in_a.txt" not in listing
    assert found == []
    assert mounts == ["/workspace"]


def test_fork_bomb_hits_pids_limit_and_others_stay_responsive(
    server: Server, api: httpx.Client, new_session: Callable[..., str]
) -> None:
    canary = new_session()
    run(api, canary, "secret = 42")
    bomb = new_session(limits={"pids": 64})
    code = (
        "import os, time\nn = 0\n"
        "try:\n"
        "    while n < 1000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(20)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('fork failed after', n, e.errno)\n"
    )
    result = run(api, bomb, code, timeout_s=60)
    assert result["status"] == "ok"
    assert result["stdout"].startswith("fork failed after")
    assert int(result["stdout"].split()[3]) < 64
    started = time.monotonic()
    assert _text(run(api, canary, "secret")) == "42"
    assert time.monotonic() - started < 2
    assert httpx.get(f"{server.url}/healthz").status_code == 200


def test_memory_hog_dies_oom_and_session_recovers(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session(limits={"memory_mb": 256})
    run(api, sid, "keep = 1")
    result = run(api, sid, "hog = b'x' * (1024 * 1024 * 1024)", timeout_s=60)
    assert result["status"] == "kernel_died"
    assert result["reason"] == "oom_killed"
    assert result["state_lost"] is True
    assert _text(run(api, sid, "sum(range(10))")) == "45"


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
