"""A warm kernel brings its workspace quota; a session that misses the pool gets its own.

A session created while the pool has a ready kernel does not make a quota of its own (the
claim moves the slot's in). When two sessions race for one ready kernel, the one that
falls through to a cold start must still get its quota, made by the provisioner.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from interpreter import quota
from tests.conftest import Server, require_docker, run, start_server

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
DISK_MB = 48


@pytest.fixture
def pooled() -> Iterator[Server]:
    require_docker()
    if quota.unavailable_reason() is not None:
        pytest.fail(f"disk quotas unavailable here: {quota.unavailable_reason()}")
    data_dir = Path(tempfile.mkdtemp(prefix="interp-pq-"))
    srv = start_server("docker", data_dir, pool_size=1, default_disk_mb=DISK_MB)
    yield srv
    srv.thread.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


def _workspace_size_mb(srv: Server, sid: str) -> int:
    with srv.client() as api:
        code = "import os\ns = os.statvfs('.')\ns.f_blocks * s.f_frsize >> 20"
        result = run(api, sid, code)
    return int(result["outputs"][0]["data"]["text/plain"])


def test_claimed_and_fallen_through_sessions_both_have_their_quota(pooled: Server) -> None:
    with pooled.client() as api:
        deadline = time.monotonic() + 120
        while "interp_warm_kernels 1.0" not in api.get("/metrics").text:
            assert time.monotonic() < deadline, "the pool never filled"
            time.sleep(0.2)

        def create() -> str:
            with pooled.client() as client:
                resp = client.post("/v1/sessions", json={})
                assert resp.status_code == 201, resp.text
                sid: str = resp.json()["id"]
                return sid

        with ThreadPoolExecutor(2) as pool:
            sids = list(pool.map(lambda _: create(), range(2)))
        for sid in sids:
            workspace = pooled.data_dir / "sessions" / sid / "workspace"
            assert os.path.ismount(workspace), sid
            # The filesystem the kernel sees is the quota's, not the host's disk.
            assert DISK_MB - 8 <= _workspace_size_mb(pooled, sid) <= DISK_MB, sid
        for sid in sids:
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            assert not os.path.ismount(pooled.data_dir / "sessions" / sid / "workspace")
