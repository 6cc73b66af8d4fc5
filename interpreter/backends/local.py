"""The local backend: the kernel is a subprocess of the broker (no isolation)."""

from __future__ import annotations

import os
import sys
from typing import Any

from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions


class LocalSessionProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, with the session's cwd and an allowlisted env.

    The kernel runs with the broker's user and sees the host's files: this backend is for
    development and trusted code only. The README says so, and the broker warns at start.
    """

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Called from ``KernelManager.start_kernel`` (and on restart) before the launch.

        Pops the :class:`LaunchOptions`, sets the working directory to the workspace and
        replaces the environment with the kernel's allowlisted one (security.md H-24).
        """
        options: LaunchOptions | None = kwargs.pop(LAUNCH_KWARG, None)
        if options is not None:
            home = options.runtime_dir / "home"
            home.mkdir(parents=True, exist_ok=True)
            path = os.pathsep.join([os.path.dirname(sys.executable), os.defpath.strip(":")])
            kwargs["env"] = options.kernel_env(home=str(home), extra_path=path)
            kwargs["cwd"] = str(options.workspace)
        return dict(await super().pre_launch(**kwargs))
