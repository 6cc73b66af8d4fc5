"""Disk: the workspace quota is a filesystem of its own; the kernel writes nowhere else."""

from __future__ import annotations

import ast
import os
import subprocess
import time

import pytest

from tests.adversarial.conftest import Attack, Broker, mounts_under
from tests.conftest import KEY, require_quotas, runtime_dir_of


@pytest.fixture(scope="module", autouse=True)
def _quotas() -> None:
    """Skipped without disk quotas, failed instead under INTERP_REQUIRE_DOCKER=1 (CI)."""
    require_quotas()


FILL = (
    "import errno, os\nwritten = 0\ncode = None\n"
    "try:\n"
    "    with open('big.bin', 'wb') as f:\n"
    "        for _ in range(128):\n"
    "            f.write(b'x' * (1 << 20))\n"
    "            f.flush()\n"
    "            written += 1\n"
    "except OSError as e:\n"
    "    code = errno.errorcode[e.errno]\n"
    "st = os.statvfs('.')\n"
    "(code, written, st.f_blocks * st.f_frsize >> 20)"
)


def test_writes_past_the_quota_fail_with_enospc_and_the_session_stays_usable(
    adv: Broker, attack: Attack
) -> None:
    sid = attack.session(limits={"disk_mb": 32})
    info = attack.api.get(f"/v1/sessions/{sid}").json()
    assert info["limits"]["disk_mb"] == 32
    attack.run(sid, "keep = 'state'")
    code, written, size_mb = ast.literal_eval(attack.text(sid, FILL))
    assert code == "ENOSPC"
    assert 20 <= written < 32 and size_mb <= 32
    # The host paid for what the quota allows, no more.
    image = adv.data_dir / "sessions" / sid / "workspace.img"
    assert os.stat(image).st_blocks * 512 <= 33 << 20
    assert mounts_under(adv.data_dir / "sessions" / sid) == [
        str((adv.data_dir / "sessions" / sid / "workspace").resolve())
    ]
    # Still usable: state kept, space comes back once the file is gone, to the host too
    # (the image gives freed blocks back: mounted with discard).
    assert attack.text(sid, "os.remove('big.bin'); os.sync(); keep") == "'state'"
    deadline = time.monotonic() + 30
    while os.stat(image).st_blocks * 512 > 12 << 20:
        assert time.monotonic() < deadline, os.stat(image).st_blocks * 512
        time.sleep(0.1)
    assert attack.text(sid, "open('small.bin', 'wb').write(b'y' * (4 << 20))") == str(4 << 20)


def test_uploads_past_the_remaining_quota_are_507_and_leave_nothing(
    adv: Broker, attack: Attack
) -> None:
    sid = attack.session(limits={"disk_mb": 16})
    resp = attack.api.put(f"/v1/sessions/{sid}/files/huge.bin", content=b"z" * (20 << 20))
    assert resp.status_code == 507, resp.text
    error = resp.json()["error"]
    assert error["type"] == "disk_quota_exceeded"
    assert "disk quota" in error["message"] and "limits.disk_mb" in error["message"]
    names = [e["name"] for e in attack.api.get(f"/v1/sessions/{sid}/files").json()["entries"]]
    assert names == []  # neither the file nor a temporary upload file
    resp = attack.api.put(f"/v1/sessions/{sid}/files/fits.bin", content=b"z" * (1 << 20))
    assert resp.status_code == 201, resp.text
    assert attack.text(sid, "import os\nos.path.getsize('fits.bin')") == str(1 << 20)


def test_an_upload_into_a_workspace_out_of_files_is_its_quota_not_the_host_disk(
    adv: Broker, attack: Attack
) -> None:
    """Out of inodes (many empty files), not of bytes: still the session's quota (507
    disk_quota_exceeded, saying so), never the service's disk (storage_full)."""
    sid = attack.session(limits={"disk_mb": 16})
    made = attack.text(
        sid,
        "import os\nos.mkdir('many')\nn = 0\ntry:\n    while n < 200000:\n"
        "        open(f'many/{n}', 'w').close()\n        n += 1\nexcept OSError as e:\n"
        "    err = e.errno\n(n > 100, err == 28)",
    )
    assert made == "(True, True)"
    resp = attack.api.put(f"/v1/sessions/{sid}/files/more.txt", content=b"x")
    assert resp.status_code == 507, resp.text
    error = resp.json()["error"]
    assert error["type"] == "disk_quota_exceeded", error
    assert "as many files as" in error["message"]


def test_quota_is_within_the_server_maximum_and_shown(adv: Broker, attack: Attack) -> None:
    info = attack.api.get("/v1/info").json()
    assert info["disk_quota"] == "enforced"
    assert info["max_limits"]["disk_mb"] == 256 and info["default_limits"]["disk_mb"] == 64
    too_big = attack.api.post("/v1/sessions", json={"limits": {"disk_mb": 100000}})
    assert too_big.status_code == 422
    assert "disk_mb 100000 exceeds the server maximum 256" in too_big.json()["error"]["message"]
    assert attack.api.post("/v1/sessions", json={"limits": {"disk_mb": 1}}).status_code == 422
    sid = attack.session()
    assert attack.api.get(f"/v1/sessions/{sid}").json()["limits"]["disk_mb"] == 64


@pytest.mark.parametrize("adv", ["docker"], indirect=True)
def test_the_kernel_cannot_write_on_the_host_outside_its_quota(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    code = (
        "import os\nwritable = []\n"
        "for d in ['/', '/etc', '/home', '/opt', '/usr', '/usr/local', '/var', '/var/tmp',"
        " '/run', '/run/interp', '/root', '/srv', '/mnt']:\n"
        "    try:\n"
        "        open(os.path.join(d, '.probe'), 'w').close()\n"
        "        writable.append(d)\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        "    open('/run/interp/kernel.json', 'a').write('x' * 1000)\n"
        "    conn = 'appended'\n"
        "except OSError as e:\n"
        "    conn = type(e).__name__\n"
        "try:\n"
        "    os.rename('/run/interp/kernel.json', '/run/interp/moved')\n"
        "    moved = 'renamed'\n"
        "except OSError as e:\n"
        "    moved = type(e).__name__\n"
        "(writable, conn, moved)"
    )
    writable, conn, moved = ast.literal_eval(attack.text(sid, code))
    assert writable == []
    assert conn == moved == "PermissionError"
    runtime = runtime_dir_of(adv.data_dir, sid)
    st = os.stat(runtime / "kernel.json")
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o640)
    assert os.stat(runtime).st_uid == 0


def test_a_fork_that_does_not_fit_its_quota_is_507_and_one_that_fits_keeps_the_files(
    adv: Broker, attack: Attack
) -> None:
    source = attack.session(limits={"disk_mb": 32})
    attack.run(source, "open('data.bin', 'wb').write(b'd' * (12 << 20))\nkept = 1")
    small = attack.api.post("/v1/sessions", json={"from_session": source, "limits": {"disk_mb": 8}})
    assert small.status_code == 507, small.text
    error = small.json()["error"]
    assert error["type"] == "disk_quota_exceeded" and "limits.disk_mb 8" in error["message"]
    fork = attack.session(from_session=source, limits={"disk_mb": 32})
    assert attack.text(fork, "import os\nos.path.getsize('data.bin')") == str(12 << 20)
    # The refused fork left no mount, image or kernel behind.
    closed = [
        s["id"]
        for s in attack.api.get("/v1/sessions").json()["sessions"]
        if s["closed_reason"] == "start_failed"
    ]
    assert closed
    attack.sessions += [(KEY, sid) for sid in closed]


def test_the_filesystems_lost_and_found_is_not_listed_as_the_users(
    adv: Broker, attack: Attack
) -> None:
    """ext4 keeps ``lost+found`` at the root of a quota's filesystem (e2fsck makes it again
    after a host crash; ``mklost+found`` is its maker): the files API does not list it."""
    sid = attack.session(limits={"disk_mb": 16})
    workspace = adv.data_dir / "sessions" / sid / "workspace"
    subprocess.run(["mklost+found"], cwd=workspace, check=True, capture_output=True)
    assert (workspace / "lost+found").is_dir()
    listed = attack.api.get(f"/v1/sessions/{sid}/files").json()["entries"]
    assert listed == []
    attack.api.put(f"/v1/sessions/{sid}/files/sub/lost+found", content=b"mine")
    names = [
        e["path"] for e in attack.api.get(f"/v1/sessions/{sid}/files?path=sub").json()["entries"]
    ]
    assert names == ["sub/lost+found"]  # a user's file of that name elsewhere is listed
