"""Disk: the data directory running low, and quotas across a broker restart.

These cases need a data directory whose disk can really run low, so the broker here has
its own: a small ext4 filesystem loop-mounted for this module (root only, like quotas).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from tests.adversarial.conftest import (
    Broker,
    assert_nothing_left,
    loop_devices_on,
    mounts_under,
    remove_leftovers,
    start_broker,
    stop_broker,
)
from tests.conftest import require_docker, require_quotas, settled

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module", autouse=True)
def _quotas() -> None:
    """Skipped without disk quotas, failed instead under INTERP_REQUIRE_DOCKER=1 (CI)."""
    require_quotas()


DATA_DISK_MB = 400
FLOOR_MB = 150


@pytest.fixture(scope="module")
def small_disk() -> Iterator[Path]:
    """A data directory on a 400 MiB filesystem of its own."""
    require_docker()
    root = Path(tempfile.mkdtemp(prefix="interp-adv-"))
    image = root.with_suffix(".img")
    with open(image, "wb") as fh:
        fh.truncate(DATA_DISK_MB << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(root)], check=True)
    try:
        yield root / "data"
    finally:
        for target in sorted(mounts_under(root), reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)
        image.unlink()
        shutil.rmtree(root, ignore_errors=True)


def _start(data_dir: Path) -> Broker:
    return start_broker(
        "docker",
        data_dir,
        "--min-free-mb",
        str(FLOOR_MB),
        "--default-disk-mb",
        "16",
        "--keep-containers-on-shutdown",
    )


def _free_mb(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_bavail * st.f_frsize) >> 20


def test_low_data_disk_is_507_storage_full_for_new_work_and_keeps_what_was_kept(
    small_disk: Path,
) -> None:
    broker = _start(small_disk)
    filler = small_disk / "filler"
    try:
        with broker.client() as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            ok = api.post(f"/v1/sessions/{sid}/execute", json={"code": "x = 41\nprint(x)"})
            assert ok.json()["stdout"] == "41\n"
            # The disk runs low (what else fills it does not matter).
            room = _free_mb(small_disk) - (FLOOR_MB - 50)
            subprocess.run(["fallocate", "-l", f"{room}M", str(filler)], check=True)
            assert _free_mb(small_disk) < FLOOR_MB
            refused = [
                api.post(f"/v1/sessions/{sid}/execute", json={"code": "x += 1"}),
                api.put(f"/v1/sessions/{sid}/files/a.txt", content=b"a"),
                api.post("/v1/sessions", json={}),
            ]
            for resp in refused:
                assert resp.status_code == 507, resp.text
                error = resp.json()["error"]
                assert error["type"] == "storage_full"
                assert "nearly full" in error["message"] and "MiB free" in error["message"]
            # Health says so (it said "ok" while every new piece of work got a 507).
            health = api.get("/healthz")
            assert health.status_code == 200
            assert (health.json()["status"], health.json()["storage"]) == ("degraded", "low")
            # What was kept is kept: the notebook is whole and the state untouched.
            nb = api.get(f"/v1/sessions/{sid}/notebook").json()
            nbformat.validate(nbformat.from_dict(nb))
            assert [c["source"] for c in nb["cells"]] == ["x = 41\nprint(x)"]
            filler.unlink()
            again = api.post(f"/v1/sessions/{sid}/execute", json={"code": "x += 1\nprint(x)"})
            assert again.json()["stdout"] == "42\n", again.text
            assert api.get("/healthz").json()["storage"] == "ok"
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
        assert broker.errors == []
    finally:
        filler.unlink(missing_ok=True)
        stop_broker(broker)
        remove_leftovers(broker)


def test_quota_survives_a_broker_restart_and_delete_leaves_nothing(small_disk: Path) -> None:
    broker = _start(small_disk)
    try:
        with broker.client() as api:
            sid = api.post("/v1/sessions", json={"limits": {"disk_mb": 24}}).json()["id"]
            resp = api.post(
                f"/v1/sessions/{sid}/execute",
                json={"code": "open('kept.txt', 'w').write('kept')\nv = 'alive'"},
            )
            assert resp.json()["status"] == "ok", resp.text
        stop_broker(broker)  # the kernel stays (keep-containers-on-shutdown)
        workspace = small_disk / "sessions" / sid / "workspace"
        broker = _start(small_disk)
        with broker.client() as api:
            info = settled(api, sid)
            assert info["status"] == "idle" and info["limits"]["disk_mb"] == 24
            assert os.path.ismount(workspace)
            code = (
                "import errno\ntry:\n    open('big', 'wb').write(b'x' * (40 << 20))\n"
                "except OSError as e:\n    print(errno.errorcode[e.errno])\n"
                "import os\nos.remove('big')\nprint(v, open('kept.txt').read())"
            )
            out = api.post(f"/v1/sessions/{sid}/execute", json={"code": code}).json()
            assert out["stdout"] == "ENOSPC\nalive kept\n", out
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            assert_nothing_left(broker, [sid])
            # The files stay readable after the delete, copied out of the quota.
            listing = api.get(f"/v1/sessions/{sid}/files").json()
            assert [e["name"] for e in listing["entries"]] == ["kept.txt"]
        assert not os.path.ismount(workspace)
        assert not (small_disk / "sessions" / sid / "workspace.img").exists()
        assert loop_devices_on(small_disk) == []
        assert broker.errors == []
    finally:
        stop_broker(broker)
        remove_leftovers(broker)


def test_a_pooled_kernel_hands_its_quota_to_the_session(small_disk: Path) -> None:
    broker = start_broker(
        "docker", small_disk, "--default-disk-mb", "16", "--min-free-mb", "0", "--pool-size", "1"
    )
    try:
        with broker.client() as api:
            deadline = time.monotonic() + 90
            while "interp_warm_kernels 1.0" not in api.get("/metrics").text:
                assert time.monotonic() < deadline, "the pool did not fill"
                time.sleep(0.2)
            sid = api.post("/v1/sessions", json={}).json()["id"]
            code = (
                "import errno, os\nst = os.statvfs('/workspace')\n"
                "try:\n    open('big', 'wb').write(b'x' * (32 << 20))\n    err = None\n"
                "except OSError as e:\n    err = errno.errorcode[e.errno]\n"
                "os.remove('big')\n"
                "print(os.environ['INTERP_SESSION_ID'][:5], st.f_blocks * st.f_frsize >> 20, err)"
            )
            out = api.post(f"/v1/sessions/{sid}/execute", json={"code": code}).json()
            pooled, size_mb, err = out["stdout"].split()
            assert pooled == "pool-" and int(size_mb) <= 16 and err == "ENOSPC", out
            session_dir = small_disk / "sessions" / sid
            assert os.path.ismount(session_dir / "workspace")
            assert (session_dir / "workspace.img").exists()
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            assert_nothing_left(broker, [sid])
        stop_broker(broker)
        # The pool's own slots are gone with it: no mount, no loop device is left.
        assert mounts_under(small_disk) == [] and loop_devices_on(small_disk) == []
        assert broker.errors == []
    finally:
        stop_broker(broker)
        remove_leftovers(broker)


def test_a_crashed_broker_releases_quotas_its_kernels_did_not_outlive(small_disk: Path) -> None:
    """Local kernels die with their broker: the next broker closes their sessions and
    releases each quota (mount, loop device, image), keeping the files."""
    broker = start_broker("local", small_disk, "--min-free-mb", "0")
    try:
        with broker.client() as api:
            sid = api.post("/v1/sessions", json={"limits": {"disk_mb": 16}}).json()["id"]
            code = "open('kept.txt', 'w').write('kept')"
            assert api.post(f"/v1/sessions/{sid}/execute", json={"code": code}).status_code == 200
        workspace = small_disk / "sessions" / sid / "workspace"
        assert os.path.ismount(workspace)
        broker.proc.kill()  # no shutdown at all: the mount outlives the process
        broker.proc.wait(30)
        assert os.path.ismount(workspace)
        broker = start_broker("local", small_disk, "--min-free-mb", "0")
        with broker.client() as api:
            info = settled(api, sid)
            assert (info["status"], info["closed_reason"]) == ("closed", "broker_restarted")
            assert not os.path.ismount(workspace)
            assert not (small_disk / "sessions" / sid / "workspace.img").exists()
            # The killed broker's kernel may still hold the filesystem for a moment (it ends
            # when it notices its parent is gone); the loop device goes with it.
            deadline = time.monotonic() + 30
            while loop_devices_on(small_disk):
                assert time.monotonic() < deadline, loop_devices_on(small_disk)
                time.sleep(0.2)
            assert api.get(f"/v1/sessions/{sid}/files/kept.txt").content == b"kept"
        assert broker.errors == []
    finally:
        stop_broker(broker)
        remove_leftovers(broker)


def test_outputs_that_no_longer_fit_on_the_data_disk_name_storage_full(small_disk: Path) -> None:
    """Below the floor nothing new starts; a run already admitted whose image does not fit
    any more ends in an error that says so (not a bare broker_error), and that the code ran
    (found by an outside operations tester), the notebook whole."""
    broker = start_broker("docker", small_disk, "--min-free-mb", "0", "--default-disk-mb", "16")
    filler = small_disk / "filler"
    try:
        with broker.client() as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            assert api.post(f"/v1/sessions/{sid}/execute", json={"code": "a = 1"}).status_code
            room = _free_mb(small_disk) - 2
            subprocess.run(["fallocate", "-l", f"{room}M", str(filler)], check=True)
            code = (
                "from IPython.display import display\n"
                "display({'image/png': 'A' * (4 << 20), 'text/plain': 'big'}, raw=True)"
            )
            out = api.post(f"/v1/sessions/{sid}/execute", json={"code": code}).json()
            filler.unlink()
            assert out["status"] == "error" and out["reason"] == "storage_full", out
            assert out["error"]["ename"] == "StorageFull"
            assert "disk" in out["error"]["evalue"]
            # It ran to its end: not to be run again (it said "run it again").
            assert "This code ran to its end" in out["error"]["evalue"], out["error"]
            nb = api.get(f"/v1/sessions/{sid}/notebook").json()
            nbformat.validate(nbformat.from_dict(nb))
            again = api.post(f"/v1/sessions/{sid}/execute", json={"code": "print(a)"}).json()
            assert again["stdout"] == "1\n", again
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
        assert broker.errors == []
    finally:
        filler.unlink(missing_ok=True)
        stop_broker(broker)
        remove_leftovers(broker)


def test_a_quota_larger_than_the_disk_is_warned_about_at_start(small_disk: Path) -> None:
    """Workspace images are sparse: a quota is promised, not reserved, and one session
    writing within its 1 GiB quota filled a 64 MiB data disk (I/O errors in its kernel,
    507 for every other). Nothing said so at start."""
    from tests.conftest import spawn_serve

    log: list[str] = []
    data = small_disk.parent / "quota-warning"
    proc, _ = spawn_serve(
        "--backend", "docker", "--data-dir", str(data), "--pool-size", "0",
        "--default-disk-mb", "1024", "--min-free-mb", str(FLOOR_MB), log=log,
    )  # fmt: skip
    try:
        warned = [line for line in log if "less than one session's workspace quota" in line]
        assert len(warned) == 1, log
        assert "--default-disk-mb 1024" in warned[0]
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(data, ignore_errors=True)
