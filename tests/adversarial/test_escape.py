"""A hostile kernel tries to leave its container: network, Docker socket, host files,
/proc, privilege escalation, other sessions. Docker backend only (the local backend is not
isolated, and says so in /v1/info).

Moved here from tests/integration/test_docker_isolation.py so that every probe runs under
the adversarial guard.
"""

from __future__ import annotations

import ast
import os

import pytest

from tests.adversarial.conftest import BROKER_SECRET, Attack, Broker
from tests.conftest import REPO, runtime_dir_of

pytestmark = [pytest.mark.docker, pytest.mark.parametrize("adv", ["docker"], indirect=True)]


def test_no_network(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    code = (
        "import socket\nerrors = []\n"
        "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
        "except OSError as e:\n    errors.append(type(e).__name__)\n"
        "try:\n    socket.getaddrinfo('example.com', 80)\n"
        "except OSError as e:\n    errors.append(type(e).__name__)\n"
        "try:\n    socket.create_connection(('172.17.0.1', 2375), timeout=3)\n"
        "except OSError as e:\n    errors.append(type(e).__name__)\n"
        "ifaces = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n"
        "(errors, ifaces)"
    )
    assert attack.text(sid, code) == "(['OSError', 'gaierror', 'OSError'], ['lo'])"


def test_no_docker_socket(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    code = (
        "import os, socket\nfound = [p for p in ('/var/run/docker.sock', '/run/docker.sock',"
        " '/run/containerd/containerd.sock') if os.path.exists(p)]\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect('/var/run/docker.sock')\n    reach = 'connected'\n"
        "except OSError as e:\n    reach = type(e).__name__\n"
        "(found, reach, 'DOCKER_HOST' in os.environ)"
    )
    assert attack.text(sid, code) == "([], 'FileNotFoundError', False)"


def test_unprivileged_and_no_way_up(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    code = (
        "import ctypes, os\nstatus = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
        "libc = ctypes.CDLL(None, use_errno=True)\ntried = {}\n"
        "def attempt(name, f):\n"
        "    try:\n        r = f()\n        tried[name] = 'ok' if r in (None, 0) else 'failed'\n"
        "    except OSError as e:\n        tried[name] = type(e).__name__\n"
        "attempt('setuid', lambda: os.setuid(0))\n"
        "attempt('setgid', lambda: os.setgid(0))\n"
        "attempt('mount', lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None))\n"
        "attempt('unshare_user', lambda: libc.unshare(0x10000000))\n"
        "attempt('etc_write', lambda: open('/etc/passwd', 'a').close())\n"
        "attempt('chroot', lambda: os.chroot('/tmp'))\n"
        "import shutil\nsetuid_tools = [t for t in ('sudo', 'su', 'mount', 'newuidmap')"
        " if shutil.which(t) and os.stat(shutil.which(t)).st_mode & 0o4000]\n"
        "(os.getuid(), os.getgid(), status['CapEff'].strip(), status['CapBnd'].strip(),"
        " status['NoNewPrivs'].strip(), tried, setuid_tools)"
    )
    uid, gid, cap_eff, cap_bnd, nnp, tried, setuid_tools = ast.literal_eval(attack.text(sid, code))
    assert uid != 0 and gid != 0
    assert cap_eff == cap_bnd == "0000000000000000"
    assert nnp == "1"
    assert tried["setuid"] == tried["setgid"] == tried["chroot"] == "PermissionError"
    assert tried["etc_write"] in ("PermissionError", "OSError")
    assert tried["mount"] == tried["unshare_user"] == "failed"
    # Whatever a setuid binary would do, no_new_privs makes it run unprivileged.
    assert nnp == "1" or setuid_tools == []
    assert attack.text(sid, "import os\nos.getuid()") == str(uid)


def test_host_files_environment_and_proc_are_invisible(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    code = (
        f"import os\nrepo = os.path.exists({str(REPO)!r})\n"
        f"data = os.path.exists({str(adv.data_dir)!r})\n"
        f"needle = {BROKER_SECRET!r}\n"
        "envs = [f'/proc/{p}/environ' for p in os.listdir('/proc') if p.isdigit()]\n"
        "secret = any(needle in open(e, errors='ignore').read()"
        " for e in envs if os.access(e, os.R_OK))\n"
        "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "host_root = os.listdir('/proc/1/root') if os.access('/proc/1/root', os.R_OK) else None\n"
        "cmdlines = [open(f'/proc/{p}/cmdline', 'rb').read() for p in pids]\n"
        "broker_seen = any(b'interpreter' in c and b'serve' in c for c in cmdlines)\n"
        "(repo, data, secret, broker_seen, max(pids) < 1000 or len(pids) < 20,"
        " sorted(n for n in os.environ if n.startswith(('AWS', 'DOCKER', 'SSH', 'INTERP_API'))))"
    )
    repo, data, secret, broker_seen, few_pids, names = ast.literal_eval(attack.text(sid, code))
    assert (repo, data, secret, broker_seen, names) == (False, False, False, False, [])
    assert few_pids  # a pid namespace of its own: only the kernel's processes


def test_sessions_cannot_reach_each_other(adv: Broker, attack: Attack) -> None:
    a, b = attack.session(), attack.session()
    attack.run(a, "open('only_in_a.txt', 'w').write('a')")
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
    listing, found, mounts = ast.literal_eval(attack.text(b, code))
    assert "only_in_a.txt" not in listing
    assert found == []
    assert mounts == ["/workspace"]


def test_mountinfo_names_neither_the_data_directory_nor_the_session(
    adv: Broker, attack: Attack
) -> None:
    """``/proc/self/mountinfo`` shows the kernel the host path of each bind mount's source
    (docs/security.md H-30). Its runtime directory was ``<data-dir>/run/<the last 12
    characters of its session id>``: the kernel learnt where the broker keeps its data (a
    home directory names its user) and part of its own id (found by an outside security
    tester). Now it sees a random name in a neutral runtime directory, and its workspace
    (a quota here) is the root of a filesystem of its own."""
    sid = attack.session()
    mountinfo: str = ast.literal_eval(attack.text(sid, "open('/proc/self/mountinfo').read()"))
    binds = {line.split()[4]: line.split()[3] for line in mountinfo.splitlines()}
    assert binds["/workspace"] == "/", mountinfo
    runtime = binds["/run/interp"]
    assert runtime.rsplit("/", 1)[1] not in sid and len(runtime) < 60, runtime
    for path in (adv.data_dir, adv.data_dir.resolve()):
        assert str(path) not in mountinfo and path.name not in mountinfo
    token = sid.split("_", 1)[1]
    pieces = {token[i : i + 8] for i in range(len(token) - 7)}
    assert [p for p in pieces if p in mountinfo] == [], mountinfo
    # The same directory as the broker recorded: the kernel's own, mode 0700 until locked.
    recorded = runtime_dir_of(adv.data_dir, sid)
    assert recorded.name == runtime.rsplit("/", 1)[1]
    assert oct(os.stat(recorded.parent).st_mode & 0o777) == "0o700"
