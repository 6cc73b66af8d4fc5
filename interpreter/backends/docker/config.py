"""The hardened container configuration of a kernel, as a pure function of LaunchOptions.

Everything the Docker engine is told about a session container is built here, from the
broker's :class:`~interpreter.backends.base.LaunchOptions` and constants of this module.
Nothing comes from an API client (docs/security.md H-04): the broker caps limits and validates
env before it builds the options, and this function adds the fixed hardening of §2.B.
The result is plain data (no docker SDK types) so that unit tests can compare it with a
golden copy and so that it can be logged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from interpreter.backends.base import LaunchOptions

#: Fixed non-root identity of the kernel inside the container (the image's user; H-14).
KERNEL_UID = 10001
KERNEL_GID = 10001

#: Where the session's workspace appears in the container; also the working directory.
CONTAINER_WORKSPACE = "/workspace"
#: Where the session's ipc runtime directory appears in the container.
CONTAINER_RUNTIME_DIR = "/run/interp"
#: File in a kernel's runtime directory that a broker touches while it looks after it.
BROKER_STAMP = "broker-alive"
#: The connection file the kernel reads (inside the runtime directory).
CONNECTION_FILE_NAME = "kernel.json"
CONTAINER_CONNECTION_FILE = f"{CONTAINER_RUNTIME_DIR}/{CONNECTION_FILE_NAME}"
#: Prefix of the ipc socket paths: the kernel binds ``<dir>/k-<port>``.
IPC_PREFIX_NAME = "k"

#: HOME of the kernel: the tmpfs, so nothing the kernel plants there survives a restart.
KERNEL_HOME = "/tmp"

LABEL_SESSION = "org.interp.session"
LABEL_OWNER = "org.interp.owner"
LABEL_BROKER = "org.interp.broker"
#: Set on warm-pool containers only: the pool slot the container was started for.
LABEL_POOL = "org.interp.pool"
#: The data directory of the broker that started the container. While it exists, a broker
#: may come back for the container; the sweep of abandoned containers goes by it.
LABEL_DATA_DIR = "org.interp.data_dir"

#: Open files per process (H-21); ipykernel needs a few dozen.
NOFILE_LIMIT = 1024
#: /dev/shm size (H-18 wants it explicit); it is charged to the memory limit like /tmp.
SHM_SIZE_MB = 64
#: Docker keeps what the kernel writes to the container's own stdout/stderr (outside
#: ipykernel's capture) in a log file on the host: bound it so it cannot fill the disk.
LOG_MAX_SIZE = "1m"
#: CPU weight of a warm-pool container until a session claims it (Docker's default is
#: 1024): a refill starting beside running sessions yields the CPU to them.
BACKGROUND_CPU_SHARES = 128
NORMAL_CPU_SHARES = 1024

_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


@dataclass(frozen=True)
class KernelUser:
    """The uid/gid the kernel process runs as (never 0, never from a client)."""

    uid: int = KERNEL_UID
    gid: int = KERNEL_GID

    def __post_init__(self) -> None:
        if self.uid <= 0 or self.gid <= 0:
            raise ValueError("the kernel must not run as root (uid/gid 0)")

    @property
    def spec(self) -> str:
        """The ``user`` string for the Docker API."""
        return f"{self.uid}:{self.gid}"


def container_name(session_id: str, suffix: str) -> str:
    """A readable, unique container name: ``interp-<session>-<suffix>``.

    Args:
        session_id: the session (or pool slot) the container serves.
        suffix: a random token; restarts create new containers under the same session.
    """
    return f"interp-{_NAME_UNSAFE.sub('_', session_id)[:40]}-{suffix}"


def container_labels(options: LaunchOptions, *, pool_slot: str | None = None) -> dict[str, str]:
    """Labels that let a broker find its own containers, and only its own (R-07).

    Args:
        options: the launch options; ``extra["broker_id"]`` names the broker and
            ``extra["data_dir"]`` (if set) its data directory.
        pool_slot: set for warm-pool containers, which have no session yet.
    """
    labels = {
        LABEL_SESSION: options.session_id,
        LABEL_OWNER: options.owner,
        LABEL_BROKER: str(options.extra.get("broker_id", "")),
    }
    data_dir = options.extra.get("data_dir")
    if data_dir:
        labels[LABEL_DATA_DIR] = str(data_dir)
    if pool_slot is not None:
        labels[LABEL_POOL] = pool_slot
    return labels


def kernel_command(argv: Sequence[str]) -> list[str]:
    """The kernelspec's argv with ``{connection_file}`` pointing at the in-container file."""
    return [arg.replace("{connection_file}", CONTAINER_CONNECTION_FILE) for arg in argv]


def build_container_config(
    options: LaunchOptions,
    *,
    command: Sequence[str],
    name: str,
    user: KernelUser,
    labels: Mapping[str, str],
    background: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``docker.DockerClient.containers.create``.

    Args:
        options: built by the broker; workspace and runtime_dir must be absolute host paths.
        command: the kernel command (see :func:`kernel_command`).
        name: the container name (see :func:`container_name`).
        user: the kernel's uid/gid; :data:`KERNEL_UID` unless the broker is not root.
        labels: see :func:`container_labels`.
        background: a warm-pool container: a low CPU weight until claimed.

    Returns:
        A dict of plain data; every hardening item of docs/security.md §2.B that Docker can
        express is set explicitly, so a changed engine default cannot weaken it.

    Raises:
        ValueError: a host path is relative or a limit is out of range.
    """
    for path in (options.workspace, options.runtime_dir):
        if not path.is_absolute():
            raise ValueError(f"host path must be absolute: {path}")
    if options.memory_mb < 16 or options.cpus <= 0 or options.pids < 8:
        raise ValueError("memory_mb, cpus or pids out of range")
    if options.tmp_size_mb < 1:
        raise ValueError("tmp_size_mb out of range")
    memory = f"{options.memory_mb}m"
    config: dict[str, Any] = {
        "image": options.image,
        "command": list(command),
        "name": name,
        "labels": dict(labels),
        "environment": _environment(options),
        "user": user.spec,
        "working_dir": CONTAINER_WORKSPACE,
        "detach": True,
        "stdin_open": False,
        "tty": False,
        # H-01 / H-22: no network at all (ZMQ runs over ipc sockets), no host namespaces.
        "network_mode": "none",
        "ipc_mode": "private",
        "cgroupns": "private",
        "privileged": False,
        "devices": [],
        # H-10, H-11, H-12: no capabilities, no privilege gain through setuid binaries;
        # the engine's default seccomp profile stays on (no seccomp= option at all).
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        # H-18: read-only image, the only writable places are the tmpfs and two binds.
        "read_only": True,
        "tmpfs": {
            "/tmp": f"rw,nosuid,nodev,noexec,size={options.tmp_size_mb}m,mode=1777",
        },
        "shm_size": f"{SHM_SIZE_MB}m",
        "mounts": [
            _bind(options.workspace, CONTAINER_WORKSPACE),
            _bind(options.runtime_dir, CONTAINER_RUNTIME_DIR),
        ],
        # H-20: an init reaps orphans (zombies count against pids) and forwards SIGTERM.
        "init": True,
        # H-15, H-16, H-17: cgroup limits; memory == memory+swap means no swap.
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": round(options.cpus * 1e9),
        "cpu_shares": BACKGROUND_CPU_SHARES if background else NORMAL_CPU_SHARES,
        "pids_limit": options.pids,
        # H-21: bounded fds, no core dumps.
        "ulimits": [
            {"Name": "nofile", "Soft": NOFILE_LIMIT, "Hard": NOFILE_LIMIT},
            {"Name": "core", "Soft": 0, "Hard": 0},
        ],
        "log_config": {
            "Type": "json-file",
            "Config": {"max-size": LOG_MAX_SIZE, "max-file": "1"},
        },
        # Death must stay observable (exit code, OOMKilled): never auto-remove or restart.
        "auto_remove": False,
        "restart_policy": {"Name": "no"},
    }
    if options.runtime:
        config["runtime"] = options.runtime  # H-06, e.g. gVisor's runsc
    if options.cgroup_parent:
        config["cgroup_parent"] = options.cgroup_parent
    return config


def cgroup_parent_problem(parent: str, driver: str | None) -> str | None:
    """Why the engine, whose cgroup driver is ``driver``, cannot put kernel containers
    under ``parent``; None when it can. The systemd driver takes a slice's unit name; the
    cgroupfs driver takes a path (made when missing)."""
    if driver == "systemd" and ("/" in parent or not parent.endswith(".slice")):
        return (
            f"docker_cgroup_parent {parent!r}: this Docker engine uses the systemd cgroup "
            "driver, which takes a slice name such as 'interp-kernels.slice'"
        )
    return None


def runtime_problem(runtime: str, known: Iterable[str]) -> str | None:
    """Why kernels cannot run under ``runtime`` on an engine that has the runtimes
    ``known`` (``docker info``); None when they can."""
    names = sorted(known)
    if runtime in names:
        return None
    return (
        f"docker_runtime {runtime!r} is not a runtime of this Docker engine (it has: "
        f"{', '.join(names) or 'none listed'}). Register it with the engine (daemon.json "
        "'runtimes', then restart dockerd) or leave --docker-runtime out"
    )


def missing_images_problem(missing: Sequence[str]) -> str | None:
    """Why the allowed images ``missing`` from the engine stop the start; None if none."""
    if not missing:
        return None
    return (
        f"docker_images: {', '.join(repr(m) for m in missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not on this Docker engine, so every session "
        "asking for it would fail. Build or pull it (docker pull NAME), or take it out of "
        "--docker-images / INTERP_DOCKER_IMAGES"
    )


def _environment(options: LaunchOptions) -> dict[str, str]:
    env = options.kernel_env(home=KERNEL_HOME)
    # The cgroup the kernel sees is its container's own: it can tell the user at once when
    # a process of the session is killed for memory (interpreter_kernel.oom_watch).
    env["INTERP_OOM_WATCH"] = "1"
    orphan_after = float(options.extra.get("orphan_after_s") or 0)
    if orphan_after > 0:
        # The kernel's watchdog (interpreter_kernel.watchdog) ends a kept container that
        # no broker has stamped for this long.
        env["INTERP_BROKER_STAMP"] = f"{CONTAINER_RUNTIME_DIR}/{BROKER_STAMP}"
        env["INTERP_ORPHAN_AFTER_S"] = f"{orphan_after:g}"
    return env


def _bind(source: Path, target: str) -> dict[str, Any]:
    return {
        "Type": "bind",
        "Source": str(source),
        "Target": target,
        "ReadOnly": False,
        "BindOptions": {"Propagation": "rprivate"},
    }
