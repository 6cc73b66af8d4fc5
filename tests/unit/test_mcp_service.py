"""What the MCP server's run_code description says about the service's limits."""

from __future__ import annotations

import pytest

from interpreter.mcp_service import ServiceFacts


def test_a_local_service_with_disk_quotas_names_the_disk_limit() -> None:
    # GET /v1/info of a local backend with quotas: only disk_mb among the limits.
    text = ServiceFacts(backend="local", isolated=False, limits={"disk_mb": 1024}).describe()
    assert "Limits per session: workspace disk 1024 MiB." in text


def test_every_limit_is_named() -> None:
    limits = {"memory_mb": 512.0, "cpus": 1.5, "pids": 256.0, "disk_mb": 1024.0}
    text = ServiceFacts(backend="docker", isolated=True, limits=limits).describe()
    assert (
        "Limits per session: memory 512 MiB, 1.5 CPUs, 256 processes, workspace disk 1024 MiB."
        in text
    )


@pytest.mark.parametrize(
    ("backend", "line"),
    [("local", "Limits per session: none enforced (local backend)."), ("docker", None)],
)
def test_limits_it_cannot_name_leave_no_empty_list(backend: str, line: str | None) -> None:
    text = ServiceFacts(backend=backend, limits={"gpus": 1}).describe()
    assert "Limits per session: ." not in text
    if line is None:
        assert "Limits per session" not in text
    else:
        assert line in text
