"""The Docker backend's kernel provisioner: every kernel in its own hardened container.

:class:`DockerProvisioner` is a jupyter_client kernel provisioner (entry point
``interpreter-docker``, chosen by ``kernels/python3-docker/kernel.json``). The broker drives
it through ``AsyncKernelManager``; the provisioner turns the Popen-shaped calls into Docker
calls, each one in a worker thread. A restart is a fresh container, so tmpfs pages pinned
by an OOM are gone too (docs/security.md H-18). :meth:`DockerProvisioner.get_provisioner_info`
holds what a restarted broker needs to find the container again (:func:`reattach`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any, cast

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase

from interpreter import quota
from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions
from interpreter.backends.docker import ipc, removals
from interpreter.backends.docker.config import KernelUser, kernel_command
from interpreter.backends.docker.container import (
    START_TIMEOUT_S,
    HostProcess,
    KernelContainer,
    KernelPool,
    absolute_options,
    exit_reason_of,
    kernel_user,
    new_key,
    start_kernel_container,
)
from interpreter.backends.docker.engine import (
    call_docker,
    inspect_state,
    logs_tail,
    remove,
    signal_container,
)
from interpreter.errors import BackendUnavailable, KernelStartFailed

log = logging.getLogger(__name__)

#: Used when a provisioner has no kernelspec (it was rebuilt by :func:`reattach`).
DEFAULT_ARGV = ("python", "-m", "interpreter_kernel", "-f", "{connection_file}")
#: ``poll()`` result for a container that no longer exists.
GONE_EXIT_CODE = -1


# ------------------------------------------------------------------------- provisioner


class DockerProvisioner(KernelProvisionerBase):
    """Runs one kernel in one hardened Docker container (H-26: never reused).

    ``AsyncKernelManager`` creates it from the kernelspec and calls the methods below; each
    docstring says when. A restart reuses this instance (jupyter_client 8.x): ``cleanup``
    removes the old container and the next ``launch_kernel`` starts a new one with the same
    HMAC key, so existing clients keep working; a warm-pool kernel is only taken for the
    first launch, never for a restart.

    A first launch whose options carry a warm pool (``options.pool``, set by the backend)
    and match its template claims a ready container from it instead of starting one cold.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._options: LaunchOptions | None = None
        self._kernel: KernelContainer | None = None
        self._user = kernel_user()
        self._key: bytes | None = None
        self._exit_code: int | None = None
        self._final_reason: str | None = None
        self._restarting = False

    # -- state ------------------------------------------------------------------------

    @property
    def has_process(self) -> bool:
        """Whether a container is managed; True from ``launch_kernel`` until ``cleanup``.

        Read by ``KernelManager.has_kernel``; it stays True after the container died so
        that the manager's kill/wait/cleanup sequence still runs.
        """
        return self._kernel is not None

    @property
    def container(self) -> KernelContainer | None:
        """The managed container (id, name, directories), or None."""
        return self._kernel

    @property
    def ready_reply(self) -> dict[str, Any] | None:
        """The ``kernel_info`` reply of the kernel, if a pool readied it (a claimed one);
        None for a kernel started for this session."""
        return self._kernel.ready_reply if self._kernel is not None else None

    @property
    def options(self) -> LaunchOptions | None:
        """The launch options of the current session, once ``pre_launch`` has run."""
        return self._options

    async def poll(self) -> int | None:
        """None while the container runs, else its exit code (-1 when it is gone).

        Called from ``KernelManager.is_alive`` (about once a second while code runs, every
        0.1 s while the manager waits for a shutdown). Cheap: the broker's /proc answers
        when it can (:class:`HostProcess`); only otherwise the engine is asked, off-loop.
        """
        kernel = self._kernel
        if kernel is None:
            return 0
        if self._exit_code is not None:
            return self._exit_code
        if kernel.host_process is not None and kernel.host_process.alive():
            return None
        state = await call_docker("inspect a kernel container", inspect_state, kernel.container_id)
        if state is None:
            self._exit_code = GONE_EXIT_CODE
        elif exit_reason_of(state) is None:
            return None
        else:
            self._exit_code = int(state.get("ExitCode", GONE_EXIT_CODE))
        return self._exit_code

    async def exit_reason(self) -> str | None:
        """Why the kernel's container stopped; None while it runs.

        One of ``oom_killed``, ``signal:<n>``, ``exit:<code>``, ``container_gone``
        (docs/security.md R-02). Called by the broker when ``is_alive`` turns False, before it
        restarts the kernel; after ``cleanup`` it still returns the reason of the removed
        container until the next launch.
        """
        kernel = self._kernel
        if kernel is None:
            return self._final_reason
        state = await call_docker("inspect a kernel container", inspect_state, kernel.container_id)
        return exit_reason_of(state)

    async def wait(self) -> int | None:
        """Wait until the container has stopped and return its exit code.

        Called from ``KernelManager.finish_shutdown`` and ``kill_kernel``, always under a
        timeout of theirs; polling keeps a cancelled wait from leaving a blocked thread.
        """
        while True:
            code = await self.poll()
            if code is not None:
                return code
            await asyncio.sleep(0.1)

    # -- signals ----------------------------------------------------------------------

    async def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the container's init, which forwards it to the kernel.

        Called from ``KernelManager.signal_kernel`` (the kernelspec interrupts by message,
        so SIGINT is only sent when the broker asks for it explicitly). Signal 0 only
        checks that the kernel still runs (raises ``ProcessLookupError`` if not).
        """
        kernel = self._kernel
        if kernel is None:
            return
        if signum == 0:
            if await self.poll() is not None:
                raise ProcessLookupError("the kernel container is not running")
            return
        await call_docker(
            "signal a kernel container", signal_container, kernel.container_id, signum
        )

    async def kill(self, restart: bool = False) -> None:
        """SIGKILL the container's init; the whole container stops at once.

        Called from ``KernelManager.kill_kernel`` (``shutdown_kernel(now=True)``, and the
        last step of a graceful shutdown that timed out). A dead container is fine; one the
        engine cannot be asked to kill (it does not answer) is removed once it answers.
        """
        try:
            await self.send_signal(signal.SIGKILL)
        except BackendUnavailable:
            kernel = self._kernel
            if kernel is None:
                raise
            log.warning(
                "the Docker engine does not answer: kernel container %s is removed once it does",
                kernel.name,
            )
            removals.later(kernel.container_id)

    async def terminate(self, restart: bool = False) -> None:
        """SIGTERM the container's init, which forwards it to the kernel.

        Called from ``KernelManager.finish_shutdown`` when the kernel did not exit after
        its shutdown request within half the shutdown wait time.
        """
        await self.send_signal(signal.SIGTERM)

    # -- lifecycle --------------------------------------------------------------------

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Take the session's LaunchOptions and prepare the manager for the ipc transport.

        Called from ``KernelManager.pre_start_kernel`` on every start and restart, with the
        kwargs of ``start_kernel``. Pops ``interp`` (the LaunchOptions) and keeps it for
        later launches. Every other kwarg (``env``, ``cwd``, ...) is dropped on purpose and
        the base class is not called: it would copy the broker's environment into the
        kernel's (H-24); the container's env comes from the options alone.

        Raises:
            KernelStartFailed: no LaunchOptions, or a runtime path too long for sockets.
        """
        options = kwargs.pop(LAUNCH_KWARG, None) or self._options
        if not isinstance(options, LaunchOptions):
            raise KernelStartFailed(
                "the docker kernel backend needs LaunchOptions: start_kernel(interp=...)"
            )
        options = absolute_options(options)
        ipc.check_path_length(options.runtime_dir)
        self._options = options
        manager = self.parent
        if manager is not None:
            manager.transport = "ipc"
            manager.ip = ipc.host_prefix(options.runtime_dir)
        argv = self.kernel_spec.argv if self.kernel_spec is not None else DEFAULT_ARGV
        return {"cmd": kernel_command(argv)}

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Start (or claim from the pool) the container; return the host connection info.

        Called from ``KernelManager.launch_kernel`` right after ``pre_launch``. Returns when
        the kernel's sockets are bound and verified; the manager loads the returned info
        (transport ipc, host socket prefix, key) and writes its own, broker-private
        connection file from it.

        Raises:
            KernelStartFailed: see :func:`start_kernel_container`.
            BackendUnavailable: the engine cannot be reached.
        """
        options = self._options
        if options is None:
            raise KernelStartFailed("launch_kernel called before pre_launch")
        kernel: KernelContainer | None = None
        pool = cast("KernelPool | None", options.pool)
        if pool is not None and not self._restarting:
            kernel = await pool.claim(options, command=cmd)
        if kernel is None:
            if options.disk_mb:
                # Not made up front when a warm kernel was expected (it brings its own);
                # a no-op when the workspace already has its quota.
                await asyncio.to_thread(
                    quota.attach, options.session_dir, options.workspace, options.disk_mb
                )
            key = self._key if (self._restarting and self._key) else new_key()
            kernel = await start_kernel_container(
                options,
                command=cmd,
                user=self._user,
                key=key,
                start_timeout_s=float(options.extra.get("start_timeout_s", START_TIMEOUT_S)),
            )
        self._kernel = kernel
        self._key = kernel.key
        self._exit_code = None
        self._final_reason = None
        self._restarting = False
        self.connection_info = self._host_connection_info()
        return self.connection_info

    def _host_connection_info(self) -> KernelConnectionInfo:
        assert self._kernel is not None
        kernel_name = getattr(self.parent, "kernel_name", "") or ""
        prefix = ipc.host_prefix(self._kernel.runtime_dir)
        return ipc.connection_info(prefix, self._kernel.key, kernel_name)

    async def cleanup(self, restart: bool = False) -> None:
        """Remove the container and its runtime directory (the workspace stays).

        Called from ``KernelManager.cleanup_resources`` at the end of every shutdown and
        restart. With ``restart`` the next ``launch_kernel`` starts a fresh container:
        nothing of the old one (processes, tmpfs) survives. The reason the old container
        stopped is kept for :meth:`exit_reason`.
        """
        kernel = self._kernel
        if kernel is not None:
            try:
                state = await call_docker(
                    "inspect a kernel container", inspect_state, kernel.container_id
                )
                self._final_reason = exit_reason_of(state) or "removed"
                await call_docker("remove a kernel container", remove, kernel.container_id)
            except BackendUnavailable:
                # The engine does not answer: the container goes once it does (removals).
                log.warning(
                    "the Docker engine does not answer: kernel container %s is removed once "
                    "it does",
                    kernel.name,
                )
                self._final_reason = self._final_reason or "engine_unreachable"
                removals.later(kernel.container_id)
            await asyncio.to_thread(ipc.remove_tree, kernel.runtime_dir)
            self._kernel = None
        self._exit_code = None
        self._restarting = restart

    async def logs_tail(self) -> str:
        """The last lines the kernel container printed (for the broker log), or ''."""
        kernel = self._kernel
        if kernel is None:
            return ""
        return await call_docker("read container logs", logs_tail, kernel.container_id)

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        """Seconds a graceful shutdown may take before SIGTERM/SIGKILL escalate.

        Called from ``KernelManager.finish_shutdown``. Containers stop about as fast as
        processes (the init forwards SIGTERM at once), so jupyter's recommendation stands.
        """
        return recommended

    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        """Upper bound for a kernel (re)start; a container start adds a second or two."""
        return recommended + 5.0

    # -- persistence (broker restarts, docs/security.md R-07) -------------------------------

    async def get_provisioner_info(self) -> dict[str, Any]:
        """Everything a new broker process needs to reattach to this container.

        Called by the broker after a start or restart; it stores the result with the
        session (it contains the HMAC key, so keep it broker-private). JSON-serialisable.
        """
        info: dict[str, Any] = await super().get_provisioner_info()
        connection = dict(self.connection_info)
        key = connection.get("key", b"")
        connection["key"] = key.decode("ascii") if isinstance(key, bytes) else key
        info["connection_info"] = connection
        kernel = self._kernel
        options = self._options
        # Top-level copies so a reconciler can match containers without knowing the layout.
        info["container_id"] = kernel.container_id if kernel else None
        info["container_name"] = kernel.name if kernel else None
        info["docker"] = {
            "container_id": kernel.container_id if kernel else None,
            "container_name": kernel.name if kernel else None,
            "runtime_dir": str(kernel.runtime_dir) if kernel else None,
            "workspace": str(kernel.workspace) if kernel else None,
            "pool_slot": kernel.pool_slot if kernel else None,
            "container_ip": ipc.container_prefix(),
            "session_id": options.session_id if options else None,
            "owner": options.owner if options else None,
            "broker_id": options.extra.get("broker_id") if options else None,
            "kernel_uid": self._user.uid,
            "kernel_gid": self._user.gid,
        }
        return info

    async def load_provisioner_info(self, provisioner_info: dict[str, Any]) -> None:
        """Restore a provisioner for a container started by an earlier broker process.

        Called by :func:`reattach`. Afterwards ``poll``, ``send_signal``, ``kill``,
        ``exit_reason`` and ``cleanup`` work on that container again.
        """
        await super().load_provisioner_info(provisioner_info)
        connection: dict[str, Any] = dict(provisioner_info["connection_info"])
        key = connection.get("key", "")
        key_bytes = key.encode("ascii") if isinstance(key, str) else bytes(key)
        connection["key"] = key_bytes
        self.connection_info = cast(KernelConnectionInfo, connection)
        self._key = key_bytes
        saved = provisioner_info["docker"]
        self._user = KernelUser(int(saved["kernel_uid"]), int(saved["kernel_gid"]))
        if saved.get("container_id") is None:
            self._kernel = None
            return
        container_id = str(saved["container_id"])
        state = await call_docker("inspect a kernel container", inspect_state, container_id)
        pid = int((state or {}).get("Pid") or 0)
        self._kernel = KernelContainer(
            container_id=container_id,
            name=str(saved["container_name"]),
            key=key_bytes,
            workspace=Path(saved["workspace"]),
            runtime_dir=Path(saved["runtime_dir"]),
            host_process=HostProcess.of_container(container_id, pid) if state else None,
            pool_slot=saved.get("pool_slot"),
        )
        self._exit_code = None

    async def verify_sockets(self) -> None:
        """Check the kernel's sockets (H-31) before the broker (re)connects a client.

        Raises:
            KernelStartFailed: an endpoint is missing or is not the kernel's socket.
        """
        if self._kernel is None:
            raise KernelStartFailed("no kernel container")
        await asyncio.to_thread(ipc.verify_sockets, self._kernel.runtime_dir, self._user)


async def reattach(
    manager: Any, provisioner_info: dict[str, Any], options: LaunchOptions
) -> DockerProvisioner:
    """Make a fresh ``AsyncKernelManager`` manage a container that outlived its broker.

    The manager must be built like the broker builds it for a new session (kernel name
    ``python3-docker``, a broker-private ``connection_file``) but not started. Afterwards
    ``is_alive``, ``interrupt_kernel``, ``restart_kernel`` (a fresh container with the same
    options) and ``shutdown_kernel`` work, and ``manager.client()`` connects to the kernel.

    Args:
        manager: the ``AsyncKernelManager``.
        provisioner_info: what :meth:`DockerProvisioner.get_provisioner_info` returned.
        options: the session's launch options (as for ``start_kernel``).

    Raises:
        KernelStartFailed: the container has stopped or is gone, or its sockets fail the
            checks; the broker then marks the session failed and removes the container.
    """
    provisioner = DockerProvisioner(
        kernel_id=provisioner_info["kernel_id"],
        kernel_spec=manager.kernel_spec,
        parent=manager,
    )
    await provisioner.load_provisioner_info(provisioner_info)
    provisioner._options = absolute_options(options)
    if not provisioner.has_process or await provisioner.poll() is not None:
        reason = await provisioner.exit_reason() or "no container"
        raise KernelStartFailed(f"the kernel container cannot be reattached ({reason})")
    await provisioner.verify_sockets()
    manager.kernel_id = provisioner_info["kernel_id"]
    manager.provisioner = provisioner
    manager.load_connection_info(provisioner.connection_info)
    # jupyter_client has no public "adopt" API. restart_kernel replays these start kwargs;
    # and unless a start counts as attempted, its pending-state wrapper reuses the already
    # resolved ready future of the shutdown half of a restart and fails with
    # InvalidStateError.
    manager._launch_args = {LAUNCH_KWARG: options}
    manager._attempted_start = True
    return provisioner
