"""One kernel container: starting it hardened, watching its process, discarding it.

How a kernel is wired (docs/security.md §2.B, §2.C): the container has no network; the
kernel binds its five ZMQ sockets as files in the session's runtime directory, bind-mounted
at ``/run/interp``, and the broker connects to the same files on the host
(:mod:`~interpreter.backends.docker.ipc`). The container's configuration is a pure function
of the launch options (:mod:`~interpreter.backends.docker.config`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from jupyter_client.connect import KernelConnectionInfo

from interpreter.backends.base import LaunchOptions
from interpreter.backends.docker import ipc
from interpreter.backends.docker.config import (
    KernelUser,
    build_container_config,
    container_labels,
    container_name,
)
from interpreter.backends.docker.engine import (
    call_docker,
    create_and_start,
    inspect_state,
    logs_tail,
    remove,
)
from interpreter.errors import InterpreterError, KernelStartFailed

log = logging.getLogger(__name__)

#: Default deadline for a container to bind its sockets (``options.extra["start_timeout_s"]``).
START_TIMEOUT_S = 60.0


def kernel_user() -> KernelUser:
    """The identity kernels run as.

    A root broker runs kernels as uid/gid 10001 and hands them their directories with
    ``chown``. A broker that is not root cannot ``chown``: its kernels then run as the
    broker's own (non-zero) uid/gid, so they can write the directories the broker made.
    That still keeps the kernel non-root in its container, but the broker cannot take the
    runtime directory back after the sockets are bound (see ``docker_ipc.lock_runtime_dir``).
    """
    if os.geteuid() == 0:
        return KernelUser()
    return KernelUser(os.geteuid(), os.getegid())


# --------------------------------------------------------------------- running kernels


def exit_reason_of(state: dict[str, Any] | None) -> str | None:
    """Why a container stopped, from its inspected ``State`` (None while it runs).

    ``oom_killed`` (the cgroup OOM killer struck; Docker's flag is sticky and
    container-wide), ``signal:<n>`` (exit code 128+n), ``exit:<code>``, or
    ``container_gone`` when there is no container any more.
    """
    if state is None:
        return "container_gone"
    if state.get("Running") or state.get("Status") in ("created", "restarting"):
        return None
    if state.get("OOMKilled"):
        return "oom_killed"
    code = int(state.get("ExitCode", -1))
    if code > 128:
        return f"signal:{code - 128}"
    return f"exit:{code}"


@dataclass(frozen=True)
class HostProcess:
    """The container's init process as seen from the broker's /proc: a cheap liveness probe.

    ``poll()`` runs about once a second per busy session; asking the engine each time
    costs a thread and an HTTP round trip. When the broker shares the engine's pid
    namespace, reading ``/proc/<pid>/stat`` answers "still running" for free. The
    process is identified by its start time (pid reuse) and, once, by its cgroup naming
    the container. When any of that is unavailable the provisioner asks the engine.
    """

    pid: int
    start_ticks: str

    @classmethod
    def of_container(cls, container_id: str, pid: int) -> HostProcess | None:
        """Identify the init process ``pid`` of ``container_id``, or None if it is not ours."""
        if pid <= 0:
            return None
        try:
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
            fields = _stat_fields(pid)
        except OSError:
            return None
        if container_id not in cgroups or fields is None:
            return None
        return cls(pid, fields[19])

    def alive(self) -> bool:
        """True while the process runs (a zombie counts as dead)."""
        try:
            fields = _stat_fields(self.pid)
        except OSError:
            return False
        return fields is not None and fields[19] == self.start_ticks and fields[0] not in "ZX"


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (after the parenthesised command name)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return fields if len(fields) > 19 else None


@dataclass
class KernelContainer:
    """A started kernel container whose sockets are bound and verified.

    Attributes:
        container_id: full Docker id.
        name: container name.
        key: the HMAC key of this kernel (``secrets``-random, unique per container).
        workspace: host directory mounted at ``/workspace``.
        runtime_dir: host directory mounted at ``/run/interp`` (sockets, connection file).
        host_process: liveness shortcut, if the broker can see the container's init.
        pool_slot: the warm-pool slot the container was started for, if any.
        ready_reply: the kernel's ``kernel_info`` reply, once a pool has readied it: a
            session that claims it takes its language from there and skips its own
            request (``interpreter.readiness.wait_subscribed``).
    """

    container_id: str
    name: str
    key: bytes
    workspace: Path
    runtime_dir: Path
    host_process: HostProcess | None = None
    pool_slot: str | None = None
    ready_reply: dict[str, Any] | None = None


class KernelPool(Protocol):
    """Warm kernels a provisioner may claim for a session's first launch."""

    async def claim(
        self, options: LaunchOptions, *, command: Sequence[str] | None = None
    ) -> KernelContainer | None:
        """A ready kernel moved to the session's paths, or None (then start one cold)."""


def new_key() -> bytes:
    """A fresh HMAC key for one kernel (H-32: unique, random, never empty)."""
    return secrets.token_hex(32).encode("ascii")


def absolute_options(options: LaunchOptions) -> LaunchOptions:
    """The options with absolute host paths (Docker needs absolute bind sources)."""
    return dataclasses.replace(
        options,
        session_dir=options.session_dir.absolute(),
        workspace=options.workspace.absolute(),
        runtime_dir=options.runtime_dir.absolute(),
    )


async def start_kernel_container(
    options: LaunchOptions,
    *,
    command: Sequence[str],
    user: KernelUser,
    key: bytes,
    pool_slot: str | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> KernelContainer:
    """Start a hardened kernel container and wait until its sockets are bound and checked.

    Prepares the workspace and a fresh runtime directory, writes the in-container
    connection file, creates and starts the container, waits for the five sockets, checks
    them (H-31) and takes the runtime directory back from the kernel. Anything it created
    is removed again if a step fails or the caller is cancelled.

    Args:
        options: absolute paths required (see :func:`absolute_options`).
        command: the kernel command (``{connection_file}`` already substituted).
        user: the kernel's identity (see :func:`kernel_user`).
        key: the HMAC key to write into the connection file.
        pool_slot: set by the warm pool; adds the pool label.
        start_timeout_s: seconds until the sockets must be bound.

    Raises:
        KernelStartFailed: image missing, engine refused, container exited or too slow.
        BackendUnavailable: the engine cannot be reached.
    """
    runtime_dir = options.runtime_dir
    ipc.check_path_length(runtime_dir)
    kernel_info = ipc.connection_info(ipc.container_prefix(), key)
    await asyncio.to_thread(_prepare_dirs, options, user, kernel_info)
    config = build_container_config(
        options,
        command=command,
        name=container_name(options.session_id, secrets.token_hex(4)),
        user=user,
        labels=container_labels(options, pool_slot=pool_slot),
        background=pool_slot is not None,
    )
    create = asyncio.ensure_future(
        call_docker(
            "start the kernel container",
            create_and_start,
            config,
            failure=KernelStartFailed,
            image=options.image,
        )
    )
    try:
        info = await asyncio.shield(create)
    except asyncio.CancelledError:
        # The worker thread cannot be cancelled: let it finish, then remove what it made.
        with contextlib.suppress(Exception):
            late = await create
            await discard_container(late["Id"], runtime_dir)
        await asyncio.to_thread(ipc.remove_tree, runtime_dir)
        raise
    except BaseException:
        await asyncio.to_thread(ipc.remove_tree, runtime_dir)
        raise
    container_id: str = info["Id"]
    try:
        await _wait_for_sockets(container_id, runtime_dir, start_timeout_s)
        await asyncio.to_thread(_verify_and_lock, runtime_dir, user)
    except BaseException:
        await asyncio.shield(discard_container(container_id, runtime_dir))
        raise
    pid = int((info.get("State") or {}).get("Pid") or 0)
    return KernelContainer(
        container_id=container_id,
        name=config["name"],
        key=key,
        workspace=options.workspace,
        runtime_dir=runtime_dir,
        host_process=HostProcess.of_container(container_id, pid),
        pool_slot=pool_slot,
    )


def _prepare_dirs(
    options: LaunchOptions, user: KernelUser, kernel_info: KernelConnectionInfo
) -> None:
    try:
        ipc.prepare_workspace(options.workspace, user)
        ipc.prepare_runtime_dir(options.runtime_dir, user)
        ipc.write_connection_file(options.runtime_dir, kernel_info, user)
    except OSError as exc:
        log.error("cannot prepare kernel directories of %s: %s", options.session_id, exc)
        raise KernelStartFailed(
            "the session's kernel directories could not be prepared; see the broker log"
        ) from exc


def _verify_and_lock(runtime_dir: Path, user: KernelUser) -> None:
    ipc.verify_sockets(runtime_dir, user)
    ipc.lock_runtime_dir(runtime_dir)
    # Checked again: the kernel could have swapped a socket between the check and the lock.
    ipc.verify_sockets(runtime_dir, user)


async def discard_container(container_id: str, runtime_dir: Path) -> None:
    """Remove a container and its runtime directory; errors are logged, not raised."""
    try:
        await call_docker("remove a kernel container", remove, container_id)
    except InterpreterError:
        log.warning("could not remove kernel container %s", container_id[:12], exc_info=True)
    await asyncio.to_thread(ipc.remove_tree, runtime_dir)


async def _wait_for_sockets(container_id: str, runtime_dir: Path, limit_s: float) -> None:
    """Wait until the kernel has bound all its sockets; fail fast if the container exits."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    next_check = loop.time() + 0.5
    # lstat of five local files takes microseconds: done on the loop, unlike Docker calls.
    while not ipc.sockets_present(runtime_dir):
        now = loop.time()
        if now >= next_check:
            state = await call_docker("inspect a kernel container", inspect_state, container_id)
            reason = exit_reason_of(state)
            if reason is not None:
                tail = await call_docker("read container logs", logs_tail, container_id)
                log.warning(
                    "kernel container %s exited during start (%s):\n%s",
                    container_id[:12],
                    reason,
                    tail,
                )
                raise KernelStartFailed(
                    f"the kernel container stopped while starting ({reason}); "
                    "the broker log has its output"
                )
            next_check = now + 0.5
        if now >= deadline:
            raise KernelStartFailed(f"the kernel did not start within {limit_s:.0f} s")
        await asyncio.sleep(0.02)
