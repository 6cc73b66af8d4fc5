"""Disk: a broker that cannot make quotas (not root) says so and never pretends.

The broker runs as ``nobody`` here (only possible when the tests run as root): /v1/info
names why there is no quota, and a session that asks for one is refused with the reason.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import KEY, REPO, skip_or_fail, spawn_serve, stop_serve

NOBODY = 65534


@pytest.fixture(scope="module", autouse=True)
def _root() -> None:
    """Skipped unless root, failed instead under INTERP_REQUIRE_DOCKER=1 (CI runs as root)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        skip_or_fail("needs root and setpriv to start a broker as another user", "Disk tests")


@pytest.fixture
def reachable_by_nobody() -> Iterator[None]:
    """Let ``nobody`` reach this checkout (and its .venv): a clean clone may sit in a
    private temporary directory. Search permission only, taken back afterwards."""
    changed = []
    for parent in [*reversed(REPO.parents), REPO]:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, mode | stat.S_IXOTH)
            changed.append((parent, mode))
    try:
        yield
    finally:
        for parent, mode in changed:
            os.chmod(parent, stat.S_IMODE(mode))


@pytest.mark.usefixtures("reachable_by_nobody")
def test_a_broker_that_cannot_make_quotas_says_why_and_refuses_to_pretend() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="interp-adv-"))
    os.chown(data_dir, NOBODY, NOBODY)
    proc, url = spawn_serve(
        *("--backend", "local", "--data-dir", str(data_dir), "--api-key", KEY),
        wrapper=("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"),
    )
    try:
        headers = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
            info = api.get("/v1/info").json()
            assert info["disk_quota"].startswith("the broker is not root")
            asked = api.post("/v1/sessions", json={"limits": {"disk_mb": 64}})
            assert asked.status_code == 422
            assert "disk_mb cannot be enforced on this server" in asked.json()["error"]["message"]
            # (A session's kernel is not started here: this checkout's interpreter need not
            # be executable by nobody. The choice of disk_mb is unit-tested in
            # tests/unit/test_disk_bounds.py.)
    finally:
        stop_serve(proc)
        shutil.rmtree(data_dir, ignore_errors=True)
