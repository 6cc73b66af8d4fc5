"""What the broker tells a provisioner about the session it launches a kernel for."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Keyword under which ``LaunchOptions`` travel through ``KernelManager.start_kernel``.
LAUNCH_KWARG = "interp"

#: Environment every kernel gets; nothing of the broker's own environment leaks in (H-24).
BASE_KERNEL_ENV: dict[str, str] = {
    "PYTHONNOUSERSITE": "1",
    # `python -m` would put the workspace first on sys.path, so a planted `ipykernel/`
    # there could take over every kernel start; the launcher appends it at the end instead.
    "PYTHONSAFEPATH": "1",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TERM": "dumb",
    "NO_COLOR": "1",
}


@dataclass
class LaunchOptions:
    """Per-session launch parameters, built by the broker (never from raw client input).

    Attributes:
        session_id: the session the kernel serves (container label, log context).
        owner: hash of the API key that owns the session (container label).
        session_dir: broker-private directory of the session (not visible to the kernel).
        workspace: host directory that is the kernel's working directory
            (``/workspace`` inside a container); the only writable place it shares.
        runtime_dir: host directory for connection material / ipc sockets.
        env: extra environment variables the client asked for (already validated).
        memory_mb, cpus, pids, tmp_size_mb: resource limits (already capped).
        disk_mb: size of the workspace's own filesystem (interpreter.quota); None: none.
        image: container image (docker backend only).
        runtime: container runtime such as ``runsc`` (docker backend only).
        cgroup_parent: the cgroup the container goes under (docker backend only); None:
            the engine's default.
        pool: warm kernels the provisioner may claim a first kernel from, set by the
            backend's ``configure`` (docker: a ``ContainerPool``); never used for a
            restart. Passing it here, per launch, keeps provisioners free of global state.
    """

    session_id: str
    owner: str
    session_dir: Path
    workspace: Path
    runtime_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    memory_mb: int = 1024
    cpus: float = 1.0
    pids: int = 256
    tmp_size_mb: int = 256
    disk_mb: int | None = None
    image: str = "interp-kernel:latest"
    runtime: str | None = None
    cgroup_parent: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    pool: Any = field(default=None, compare=False, repr=False)

    def kernel_env(self, *, home: str, extra_path: str | None = None) -> dict[str, str]:
        """The full, allowlisted environment of the kernel process."""
        env = dict(BASE_KERNEL_ENV)
        env["HOME"] = home
        env["INTERP_SESSION_ID"] = self.session_id
        if extra_path:
            env["PATH"] = extra_path
        env.update(self.env)
        return env


@dataclass(frozen=True)
class Leftover:
    """A kernel an earlier broker process left running (for example a container).

    Attributes:
        id: the backend's id for it (a container id).
        session_id: the session it served, or ``None`` (e.g. a warm-pool container).
    """

    id: str
    session_id: str | None = None
