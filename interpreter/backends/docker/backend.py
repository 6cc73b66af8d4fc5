"""The Docker backend as the broker sees it (:class:`~interpreter.backends.Backend`).

It owns the warm pool (started after startup recovery, handed to provisioners in each
session's launch options), reattaches containers that outlived an earlier broker, finds
and removes the containers an earlier broker left, and reads the kernel image's package
list for notebook metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interpreter.backends.base import LaunchOptions, Leftover
from interpreter.backends.docker import ipc, removals, rundirs
from interpreter.backends.docker.config import (
    cgroup_parent_problem,
    missing_images_problem,
    runtime_problem,
)
from interpreter.backends.docker.engine import (
    abandoned_containers,
    cgroup_driver,
    docker_available,
    engine_info,
    engine_version,
    list_broker_containers,
    mounted_runtime_dirs,
    remove_container,
    runtimes,
)
from interpreter.backends.docker.patches import outdated
from interpreter.backends.docker.pool import ContainerPool
from interpreter.backends.docker.provisioner import reattach
from interpreter.backends.docker.stamps import stamp_forever, stamp_interval
from interpreter.errors import BackendUnavailable, KernelStartFailed
from interpreter.image import image_status
from interpreter.image.packages import image_packages
from interpreter.settings import Settings

if TYPE_CHECKING:
    from jupyter_client.manager import AsyncKernelManager


log = logging.getLogger(__name__)

#: Seconds an answer of the engine to ``reachable`` is reused, and how long one waits.
REACH_CACHE_S = 5.0
REACH_TIMEOUT_S = 2.0
#: How old an unmounted runtime directory of another data directory's broker must be for
#: this broker to remove it at its start (made for a container, it is mounted in seconds).
STALE_AFTER_S = 3600.0


def configuration_problem(settings: Settings) -> str | None:
    """Why the engine cannot run kernels as ``settings`` say (a cgroup parent of the wrong
    form, a runtime it lacks, an allowed image it does not have); None when it can. Said
    at the start: each would otherwise fail every session that meets it (blocking)."""
    info = engine_info()
    parent = settings.docker_cgroup_parent
    problem = cgroup_parent_problem(parent, cgroup_driver(info)) if parent else None
    if problem is None and settings.docker_runtime:
        problem = runtime_problem(settings.docker_runtime, runtimes(info))
    if problem is None:
        missing = [i for i in settings.docker_images if not image_status(i).exists]
        problem = missing_images_problem(missing)
    return problem


class DockerBackend:
    """Kernels in hardened containers. Building one asks the engine about the image
    (blocking: build it off the event loop)."""

    name = "docker"
    kernel_name = "python3-docker"
    isolated = True

    def __init__(self, settings: Settings) -> None:
        problem = configuration_problem(settings)
        if problem:
            raise BackendUnavailable(problem + ".")
        self.settings = settings
        self.keep_on_shutdown = settings.keep_containers_on_shutdown
        self.image: str | None = settings.docker_image
        self.packages: Mapping[str, str] = image_packages(settings.docker_image)
        for problem in outdated(engine_version()):
            log.critical(
                "%s: kernels share it, so it is an escape route from every container "
                "(docs/security.md H-02). Update it (unless your distribution backported "
                "the fix without changing the version).",
                problem,
            )
        try:
            #: This broker's directory of kernel runtime directories (rundirs).
            self.run_root = rundirs.broker_dir(
                settings.runtime_dir or rundirs.default_root(), settings.data_dir
            )
        except (rundirs.RuntimeRootUnusable, KernelStartFailed) as exc:
            raise BackendUnavailable(str(exc)) from None
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot make the kernels' runtime directory: {exc}; give a directory this "
                "user can write in with --runtime-dir (INTERP_RUNTIME_DIR)"
            ) from None
        #: Runtime directories handed out before the start's sweep (which spares them).
        self._handed: set[str] | None = set()
        #: Leftover containers' runtime directories, removed with them.
        self._leftover_dirs: dict[str, str] = {}
        self.pool: ContainerPool | None = None
        self._stamping: asyncio.Task[None] | None = None
        #: When the engine was last asked whether it answers, and its answer.
        self._reach = (-REACH_CACHE_S, True)

    async def reachable(self, *, fresh: bool = False) -> bool:
        """Whether the engine answers a ping, asked at most every :data:`REACH_CACHE_S`
        unless ``fresh`` (off the loop): during an outage every creation is a 503 while
        health said ok."""
        asked, answered = self._reach
        if not fresh and time.monotonic() - asked < REACH_CACHE_S:
            return answered
        answered = await asyncio.to_thread(docker_available, REACH_TIMEOUT_S)
        self._reach = (time.monotonic(), answered)
        return answered

    def configure(self, manager: AsyncKernelManager, options: LaunchOptions) -> None:
        # The provisioner sets the transport (ipc in the runtime directory) at pre_launch.
        options.pool = self.pool

    def runtime_dir(self, session_id: str) -> Path:
        path = rundirs.new_kernel_dir(self.run_root)
        if self._handed is not None:
            self._handed.add(str(path))
        return path

    async def start(self, template: LaunchOptions) -> None:
        # What an earlier broker on this data directory left in its runtime directories:
        # all but those a container still mounts (a kept kernel, one recovery reattaches
        # or removes: see remove) and those handed out since this broker began.
        listed = await asyncio.to_thread(rundirs.entries, self.run_root)
        mounted = await asyncio.to_thread(mounted_runtime_dirs)
        handed, self._handed = self._handed or set(), None
        removed = len(await asyncio.to_thread(rundirs.sweep, listed, mounted | handed))
        removed += await asyncio.to_thread(
            rundirs.sweep_others, self.run_root.parent, self.run_root, mounted, STALE_AFTER_S
        )
        if removed:
            log.info("removed %d stale kernel runtime directories", removed)
        orphan_after = self.settings.orphan_kernel_timeout_s
        if orphan_after > 0:
            self._stamping = asyncio.create_task(
                stamp_forever(self.run_root, stamp_interval(orphan_after)),
                name="broker-stamps",
            )
        if self.settings.pool_size <= 0:
            return
        # The pool's workspaces live in <data_dir>/pool, on the same filesystem as the
        # sessions' (a claim renames a workspace); its kernels' runtime directories beside
        # the sessions' ones.
        pool = ContainerPool(
            self.settings.pool_size,
            template,
            self.settings.data_dir,
            run_root=self.run_root,
            start_timeout_s=self.settings.kernel_start_timeout_s,
        )
        await pool.start()
        self.pool = pool

    async def tidy(self) -> None:
        await removals.retry()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await removals.retry()
        if self._stamping is not None:
            self._stamping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._stamping
            self._stamping = None
        if self.pool is not None:
            pool, self.pool = self.pool, None
            await pool.close()

    def warm_kernels(self) -> int:
        return self.pool.ready_count if self.pool is not None else 0

    def brings_workspace(self, options: LaunchOptions) -> bool:
        pool = self.pool
        return pool is not None and pool.ready_count > 0 and pool.matches(options)

    def can_reattach(self, record_backend: str) -> bool:
        return record_backend == self.name

    async def reattach(
        self,
        manager: AsyncKernelManager,
        provisioner_info: dict[str, Any],
        options: LaunchOptions,
    ) -> None:
        await reattach(manager, provisioner_info, options)

    async def leftovers(self, broker_id: str) -> list[Leftover]:
        containers = await asyncio.to_thread(list_broker_containers, broker_id)
        self._leftover_dirs = {c.id: c.runtime_dir for c in containers if c.runtime_dir}
        return [Leftover(id=c.id, session_id=c.session_id or None) for c in containers]

    def matches(
        self, leftover: Leftover, session_id: str, provisioner_info: dict[str, Any]
    ) -> bool:
        # A pooled container keeps its pool labels: match by the id the record holds.
        return leftover.session_id == session_id or leftover.id in json.dumps(provisioner_info)

    async def sweep_abandoned(self) -> list[str]:
        gone = await asyncio.to_thread(abandoned_containers)
        for container_id in gone:
            await asyncio.to_thread(remove_container, container_id)
        return gone

    async def remove(self, leftover: Leftover) -> None:
        await asyncio.to_thread(remove_container, leftover.id)
        runtime_dir = self._leftover_dirs.pop(leftover.id, None)
        if runtime_dir is not None and rundirs.owns(self.run_root, runtime_dir):
            await asyncio.to_thread(ipc.remove_tree, Path(runtime_dir))
