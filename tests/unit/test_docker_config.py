"""Golden tests of the kernel container configuration (docs/security.md §2.B, §5.2 layer 1)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from interpreter.backends.base import BASE_KERNEL_ENV, LaunchOptions
from interpreter.backends.docker.config import (
    CONTAINER_RUNTIME_DIR,
    LABEL_DATA_DIR,
    LABEL_POOL,
    KernelUser,
    build_container_config,
    cgroup_parent_problem,
    container_labels,
    container_name,
    kernel_command,
)
from interpreter.backends.docker.engine import _abandoned

PACKAGE = Path(__file__).resolve().parents[2] / "interpreter"
ARGV = ["python", "-m", "interpreter_kernel", "-f", "{connection_file}"]


def _options(**changes: object) -> LaunchOptions:
    options = LaunchOptions(
        session_id="s-123",
        owner="owner-hash",
        session_dir=Path("/srv/interp/sessions/s-123"),
        workspace=Path("/srv/interp/sessions/s-123/workspace"),
        runtime_dir=Path("/srv/interp/run/s-123"),
        memory_mb=512,
        cpus=1.5,
        pids=128,
        tmp_size_mb=64,
        extra={"broker_id": "b-1"},
    )
    return dataclasses.replace(options, **changes)  # type: ignore[arg-type]


def _config(options: LaunchOptions | None = None) -> dict[str, Any]:
    options = options or _options()
    return build_container_config(
        options,
        command=kernel_command(ARGV),
        name="interp-s-123-abcd",
        user=KernelUser(),
        labels=container_labels(options),
    )


GOLDEN: dict[str, Any] = {
    "image": "interp-kernel:latest",
    "command": ["python", "-m", "interpreter_kernel", "-f", "/run/interp/kernel.json"],
    "name": "interp-s-123-abcd",
    "labels": {
        "org.interp.session": "s-123",
        "org.interp.owner": "owner-hash",
        "org.interp.broker": "b-1",
    },
    "environment": {
        **BASE_KERNEL_ENV,
        "HOME": "/tmp",
        "INTERP_SESSION_ID": "s-123",
        # The kernel reads its container's cgroup (interpreter_kernel.oom_watch).
        "INTERP_OOM_WATCH": "1",
    },
    "user": "10001:10001",
    "working_dir": "/workspace",
    "detach": True,
    "stdin_open": False,
    "tty": False,
    "network_mode": "none",
    "ipc_mode": "private",
    "cgroupns": "private",
    "privileged": False,
    "devices": [],
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges:true"],
    "read_only": True,
    "tmpfs": {"/tmp": "rw,nosuid,nodev,noexec,size=64m,mode=1777"},
    "shm_size": "64m",
    "mounts": [
        {
            "Type": "bind",
            "Source": "/srv/interp/sessions/s-123/workspace",
            "Target": "/workspace",
            "ReadOnly": False,
            "BindOptions": {"Propagation": "rprivate"},
        },
        {
            "Type": "bind",
            "Source": "/srv/interp/run/s-123",
            "Target": "/run/interp",
            "ReadOnly": False,
            "BindOptions": {"Propagation": "rprivate"},
        },
    ],
    "init": True,
    "mem_limit": "512m",
    "memswap_limit": "512m",
    "nano_cpus": 1_500_000_000,
    "cpu_shares": 1024,
    "pids_limit": 128,
    "ulimits": [
        {"Name": "nofile", "Soft": 1024, "Hard": 1024},
        {"Name": "core", "Soft": 0, "Hard": 0},
    ],
    "log_config": {"Type": "json-file", "Config": {"max-size": "1m", "max-file": "1"}},
    "auto_remove": False,
    "restart_policy": {"Name": "no"},
}


def test_config_matches_golden() -> None:
    assert _config() == GOLDEN


def test_runtime_is_added_only_when_asked() -> None:
    assert "runtime" not in _config()
    assert _config(_options(runtime="runsc"))["runtime"] == "runsc"


def test_cgroup_parent_is_added_only_when_set() -> None:
    assert "cgroup_parent" not in _config()
    assert _config(_options(cgroup_parent="interp-kernels"))["cgroup_parent"] == "interp-kernels"


@pytest.mark.parametrize(
    ("parent", "driver", "fine"),
    [
        ("interp-kernels", "cgroupfs", True),
        ("/interp/kernels", "cgroupfs", True),
        ("interp-kernels.slice", "cgroupfs", True),
        ("interp-kernels.slice", "systemd", True),
        ("interp-kernels", "systemd", False),
        ("system.slice/interp.slice", "systemd", False),
        ("interp-kernels", None, True),
    ],
)
def test_the_cgroup_parent_must_suit_the_engine_driver(
    parent: str, driver: str | None, fine: bool
) -> None:
    problem = cgroup_parent_problem(parent, driver)
    assert (problem is None) is fine, problem
    if not fine:
        assert problem is not None and "interp-kernels.slice" in problem


def test_memory_and_swap_are_always_equal() -> None:
    config = _config(_options(memory_mb=300))
    assert config["mem_limit"] == config["memswap_limit"] == "300m"


def test_env_is_exactly_the_kernel_env() -> None:
    options = _options(env={"MY_FLAG": "1"})
    expected = {**options.kernel_env(home="/tmp"), "INTERP_OOM_WATCH": "1"}
    assert _config(options)["environment"] == expected


# Whatever the session asks for (limits, env, image, extra), these never change (H-04).
FIXED = (
    "user",
    "working_dir",
    "network_mode",
    "ipc_mode",
    "cgroupns",
    "privileged",
    "devices",
    "cap_drop",
    "security_opt",
    "read_only",
    "init",
    "ulimits",
    "log_config",
    "auto_remove",
    "restart_policy",
    "stdin_open",
    "tty",
)


@pytest.mark.parametrize(
    "changes",
    [
        {"memory_mb": 4096, "cpus": 0.25, "pids": 16, "tmp_size_mb": 1},
        {"env": {"PRIVILEGED": "true", "NETWORK": "host", "HOME": "/root"}},
        {"extra": {"broker_id": "x", "privileged": True, "network_mode": "host", "user": "0"}},
        {"image": "other:1", "runtime": "runsc"},
        {"session_id": "../../etc", "owner": "root"},
    ],
)
def test_hardening_does_not_depend_on_the_session(changes: dict[str, object]) -> None:
    golden = {key: GOLDEN[key] for key in FIXED}
    config = _config(_options(**changes))
    assert {key: config[key] for key in FIXED} == golden
    assert [m["Target"] for m in config["mounts"]] == ["/workspace", "/run/interp"]
    forbidden = {
        "pid_mode",
        "userns_mode",
        "cap_add",
        "volumes",
        "volumes_from",
        "sysctls",
        "oom_kill_disable",
        "oom_score_adj",
        "cgroup_parent",
        "group_add",
        "dns",
    }
    assert forbidden.isdisjoint(config)


def test_security_opt_never_disables_seccomp() -> None:
    assert not any("seccomp" in opt for opt in GOLDEN["security_opt"])


def test_root_kernel_user_is_refused() -> None:
    with pytest.raises(ValueError, match="root"):
        KernelUser(0, 0)


def test_relative_host_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        _config(_options(workspace=Path("relative/ws")))


def test_container_names_are_docker_safe() -> None:
    name = container_name("a/b c:d" + "x" * 80, "beef")
    assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+", name)
    assert name.endswith("-beef")
    assert len(name) < 64


def test_pool_label_only_for_pool_containers() -> None:
    assert "org.interp.pool" not in container_labels(_options())
    assert container_labels(_options(), pool_slot="ab12")["org.interp.pool"] == "ab12"


def _package_sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize(
    "needle", ["exec_run", "exec_create", "exec_start", "put_archive", "get_archive", "docker cp"]
)
def test_package_never_execs_or_copies_into_containers(needle: str) -> None:
    # H-03: no `docker exec`, `docker cp` or archive API on session containers, ever.
    sources = _package_sources()
    assert sources, "package sources not found"
    offenders = [str(p.relative_to(PACKAGE)) for p in sources if needle in p.read_text()]
    assert offenders == []


def test_backends_create_containers_only_through_the_config_builder() -> None:
    # containers.run would pull a missing image and skip the create/start/cleanup path.
    backends = PACKAGE / "backends"
    sources = sorted(backends.rglob("*.py"))
    assert [p.name for p in sources if "containers.run(" in p.read_text()] == []
    creators = [
        str(p.relative_to(backends)) for p in sources if "containers.create(" in p.read_text()
    ]
    assert creators == ["docker/engine.py"]


def test_a_warm_pool_container_starts_with_a_low_cpu_weight() -> None:
    options = _options()
    config = build_container_config(
        options,
        command=kernel_command(ARGV),
        name="interp-s-123-abcd",
        user=KernelUser(),
        labels=container_labels(options, pool_slot="0123456789abcdef"),
        background=True,
    )
    assert config["cpu_shares"] == 128
    assert {k: v for k, v in config.items() if k not in ("cpu_shares", "labels")} == {
        k: v for k, v in _config(options).items() if k not in ("cpu_shares", "labels")
    }


def _row(labels: dict[str, str], source: Path | None = None) -> dict[str, Any]:
    """A container as the engine lists it (the fields the sweep reads)."""
    mounts = (
        [] if source is None else [{"Destination": CONTAINER_RUNTIME_DIR, "Source": str(source)}]
    )
    return {"Id": "c1", "Labels": {"org.interp.broker": "b1", **labels}, "Mounts": mounts}


def test_the_sweep_judges_a_container_by_its_brokers_data_directory(tmp_path: Path) -> None:
    alive, gone = tmp_path / "data", tmp_path / "deleted"
    alive.mkdir()
    renamed = alive / "pool" / "p1" / "run"  # a claim renamed it away: the path is gone
    # Labelled: only the data directory counts.
    assert not _abandoned(_row({LABEL_DATA_DIR: str(alive), LABEL_POOL: "p1"}, renamed))
    assert not _abandoned(_row({LABEL_DATA_DIR: str(alive)}, renamed))
    assert _abandoned(_row({LABEL_DATA_DIR: str(gone)}, alive))
    # Started before the label: the runtime directory, except for pooled containers.
    assert not _abandoned(_row({LABEL_POOL: "p1"}, renamed))
    assert _abandoned(_row({}, renamed))
    assert not _abandoned(_row({}, alive))
    assert not _abandoned(_row({}))


def test_container_labels_name_the_data_directory(tmp_path: Path) -> None:
    options = LaunchOptions(
        session_id="s1",
        owner="o1",
        session_dir=tmp_path / "s",
        workspace=tmp_path / "s" / "workspace",
        runtime_dir=tmp_path / "run" / "s1",
        extra={"broker_id": "b1", "data_dir": str(tmp_path)},
    )
    assert container_labels(options)[LABEL_DATA_DIR] == str(tmp_path)
    assert container_labels(options, pool_slot="p1")[LABEL_DATA_DIR] == str(tmp_path)
