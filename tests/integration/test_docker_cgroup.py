"""Kernel containers under one cgroup of the operator's choosing (``docker_cgroup_parent``).

Claimed from the warm pool or started cold, every kernel container of the broker goes
under that cgroup, so that an operator can weigh or cap all kernels together against the
broker and the rest of the host (README "Kernels' share of the CPU").
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

import pytest

from interpreter.backends.docker.engine import cgroup_driver, docker_client, list_broker_containers
from tests.conftest import require_docker, run, start_server

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _remove_cgroup(parent: str) -> None:
    """Remove the (by now empty) test cgroup wherever the engine made it."""
    for path in [CGROUP_ROOT / parent, *CGROUP_ROOT.glob(f"*/{parent}")]:
        with contextlib.suppress(OSError):
            os.rmdir(path)


def test_every_kernel_container_goes_under_the_configured_cgroup(tmp_path: Path) -> None:
    require_docker()
    driver = cgroup_driver()
    assert driver in ("cgroupfs", "systemd"), driver
    name = f"interp-test-{uuid.uuid4().hex[:8]}"
    parent = f"{name}.slice" if driver == "systemd" else name
    srv = start_server("docker", tmp_path / "data", pool_size=1, docker_cgroup_parent=parent)
    try:
        broker = srv.thread.broker
        with srv.client() as api:
            deadline = time.monotonic() + 120
            while "interp_warm_kernels 1.0" not in api.get("/metrics").text:
                assert time.monotonic() < deadline, "the pool never filled"
                time.sleep(0.2)
            claimed = api.post("/v1/sessions", json={})
            # Other limits than the pool's: this one starts cold.
            cold = api.post("/v1/sessions", json={"limits": {"memory_mb": 256}})
            assert claimed.status_code == cold.status_code == 201, (claimed.text, cold.text)
            for sid in (claimed.json()["id"], cold.json()["id"]):
                assert run(api, sid, "6 * 7")["outputs"][0]["data"]["text/plain"] == "42"
            pool = broker.backend.pool  # type: ignore[attr-defined]
            assert pool is not None and pool.claimed == 1
            containers = list_broker_containers(broker.broker_id)
            # The claimed kernel, the cold one and the pool's refill.
            assert len(containers) >= 3, containers
            engine = docker_client()
            for container in containers:
                info = engine.api.inspect_container(container.id)
                assert info["HostConfig"]["CgroupParent"] == parent, container
                pid = info["State"]["Pid"]
                if pid:  # a refill may still be starting
                    cgroups = Path(f"/proc/{pid}/cgroup").read_text()
                    assert f"/{parent}/" in cgroups or f"/{parent}:" in cgroups, cgroups
    finally:
        srv.thread.stop()
        _remove_cgroup(parent)
