"""The local backend: the kernel is a subprocess of the broker (no isolation)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from interpreter.backends import kernel_output
from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions
from interpreter.backends.kernel_output import KernelOutput


class LocalSessionProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, with the session's cwd and an allowlisted env.

    The kernel runs with the broker's user and sees the host's files: this backend is for
    development and trusted code only. The README says so, and the broker warns at start.
    What the kernel process itself writes goes to the broker's log
    (:mod:`interpreter.backends.kernel_output`), not to the broker's stderr.
    """

    session_id: str | None = None
    output: KernelOutput | None = None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Called from ``KernelManager.start_kernel`` (and on restart) before the launch.

        Pops the :class:`LaunchOptions`, sets the working directory to the workspace and
        replaces the environment with the kernel's allowlisted one (docs/security.md H-24).
        """
        options: LaunchOptions | None = kwargs.pop(LAUNCH_KWARG, None)
        if options is not None:
            home = options.runtime_dir / "home"
            home.mkdir(parents=True, exist_ok=True)
            path = os.pathsep.join([os.path.dirname(sys.executable), os.defpath.strip(":")])
            kwargs["env"] = options.kernel_env(home=str(home), extra_path=path)
            kwargs["cwd"] = str(options.workspace)
            self.session_id = options.session_id
        kwargs["stdout"], kwargs["stderr"] = subprocess.PIPE, subprocess.STDOUT
        return dict(await super().pre_launch(**kwargs))

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
        info = await super().launch_kernel(cmd, **kwargs)
        process = self.process
        if process is not None and process.stdout is not None:
            # The reader owns the pipe from now on (jupyter_client would close it when the
            # kernel exits, under the loop's feet).
            pipe, process.stdout = process.stdout, None
            name = self.session_id or str(self.kernel_id)
            self.output = await kernel_output.follow(pipe, name)
        return info

    async def logs_tail(self) -> str:
        """The kernel's last lines of output (the report of a kernel that did not start)."""
        return self.output.tail() if self.output is not None else ""


#: AF_UNIX socket paths are limited to 108 bytes, the terminating NUL included (unix(7)).
UNIX_PATH_MAX = 107


class LocalBackend:
    """Kernels as subprocesses of the broker (no isolation; development only)."""

    name = "local"
    kernel_name = "python3"
    isolated = False
    keep_on_shutdown = False
    image: str | None = None

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.packages: Mapping[str, str] = {}

    async def tidy(self) -> None:
        return None

    async def reachable(self, *, fresh: bool = False) -> bool:
        return True  # kernels are this machine's processes

    def configure(self, manager: Any, options: LaunchOptions) -> None:
        # ipc sockets in the session's runtime dir: no ports to race for, nothing on the
        # network; tcp on loopback only when the path would not fit AF_UNIX's limit.
        prefix = options.runtime_dir / "kernel"
        if len(str(prefix)) + 8 < UNIX_PATH_MAX:
            manager.transport = "ipc"
            manager.ip = str(prefix)
        else:
            manager.transport = "tcp"
            manager.ip = "127.0.0.1"

    def runtime_dir(self, session_id: str) -> Path:
        return Path(self.settings.data_dir) / "run" / session_id[-12:]

    async def start(self, template: LaunchOptions) -> None:
        return None

    async def close(self) -> None:
        return None

    def warm_kernels(self) -> int:
        return 0

    def brings_workspace(self, options: LaunchOptions) -> bool:
        return False

    def can_reattach(self, record_backend: str) -> bool:
        return False

    async def reattach(self, manager: Any, provisioner_info: Any, options: LaunchOptions) -> None:
        raise NotImplementedError

    async def leftovers(self, broker_id: str) -> list[Any]:
        return []

    def matches(self, leftover: Any, session_id: str, provisioner_info: Any) -> bool:
        return False

    async def sweep_abandoned(self) -> list[str]:
        return []

    async def remove(self, leftover: Any) -> None:
        return None
