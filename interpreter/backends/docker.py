"""The Docker backend: every kernel in its own hardened container, ZMQ over ipc sockets.

:class:`DockerProvisioner` is a jupyter_client kernel provisioner (entry point
``interpreter-docker``, chosen by ``kernels/python3-docker/kernel.json``). The broker drives
it through ``AsyncKernelManager``; the provisioner turns the Popen-shaped calls into Docker
calls, each one in a worker thread (``asyncio.to_thread``) because the docker SDK blocks.

How a kernel is wired (security.md §2.B, §2.C):

* the container has no network; the kernel binds its five ZMQ sockets as files in the
  session's runtime directory, bind-mounted at ``/run/interp``; the broker connects to the
  same files on the host (:mod:`interpreter.backends.docker_ipc`);
* the container's configuration is a pure function of the LaunchOptions
  (:mod:`interpreter.backends.docker_config`);
* a restart is a fresh container, so tmpfs pages pinned by an OOM are gone too (H-18);
* :meth:`DockerProvisioner.get_provisioner_info` holds what a restarted broker needs to
  find the container again (:func:`reattach`).

Docker errors become :mod:`interpreter.errors` in one place, :func:`docker_errors`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import docker
import docker.errors
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.provisioning.provisioner_base import KernelProvisionerBase

from interpreter.backends import docker_ipc as ipc
from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions
from interpreter.backends.docker_config import (
    LABEL_BROKER,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_SESSION,
    KernelUser,
    build_container_config,
    container_labels,
    container_name,
    kernel_command,
)
from interpreter.errors import BackendUnavailable, InterpreterError, KernelStartFailed
from interpreter.images import DEFAULT_IMAGE, missing_image_message

if TYPE_CHECKING:
    from interpreter.backends.docker_pool import ContainerPool

log = logging.getLogger(__name__)

T = TypeVar("T")

#: HTTP timeout of calls to the Docker engine, in seconds.
DOCKER_TIMEOUT_S = 60.0
#: Attempts at creating and starting a container when the engine answers 5xx.
CREATE_ATTEMPTS = 3
#: Default deadline for a container to bind its sockets (``options.extra["start_timeout_s"]``).
START_TIMEOUT_S = 60.0
#: Used when a provisioner has no kernelspec (it was rebuilt by :func:`reattach`).
DEFAULT_ARGV = ("python", "-m", "interpreter_kernel", "-f", "{connection_file}")
#: ``poll()`` result for a container that no longer exists.
GONE_EXIT_CODE = -1


# ----------------------------------------------------------------------------- errors


@contextlib.contextmanager
def docker_errors(
    action: str,
    *,
    failure: type[InterpreterError] = BackendUnavailable,
    image: str | None = None,
) -> Iterator[None]:
    """Translate docker SDK errors raised inside the block into :mod:`interpreter.errors`.

    ``docker.errors.NotFound`` for a container passes through unchanged: callers treat a
    vanished container as a state (it died, someone removed it), not as an error.

    Args:
        action: what was being done, for the message ("start the kernel container").
        failure: the error for an engine that answered with an error.
        image: the image in use, so a missing one gets the command that builds it.

    Raises:
        KernelStartFailed: the image is missing.
        BackendUnavailable: the engine could not be reached (or ``failure``'s class for an
            engine that answered with an error).
    """
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        # The image helper knows the exact build command (``interp images build``).
        raise KernelStartFailed(missing_image_message(image or DEFAULT_IMAGE)) from exc
    except docker.errors.NotFound:
        raise
    except docker.errors.APIError as exc:
        detail = exc.explanation or str(exc)
        raise failure(f"could not {action}: Docker engine said {detail}") from exc
    except (docker.errors.DockerException, OSError) as exc:
        # The SDK lets requests' connection errors through; they derive from OSError.
        raise BackendUnavailable(
            f"could not {action}: the Docker engine is not reachable ({exc})"
        ) from exc


@functools.lru_cache(maxsize=1)
def docker_client() -> docker.DockerClient:
    """The broker's Docker client, made on first use (never at import).

    It follows the usual ``DOCKER_HOST`` / ``DOCKER_TLS_VERIFY`` conventions. The client is
    thread-safe for the small calls made here and is shared by every provisioner.
    """
    return docker.from_env(timeout=DOCKER_TIMEOUT_S, max_pool_size=32)


async def call_docker(
    action: str,
    fn: Callable[..., T],
    *args: Any,
    failure: type[InterpreterError] = BackendUnavailable,
    image: str | None = None,
) -> T:
    """Run ``fn(client, *args)`` in a worker thread, errors translated (:func:`docker_errors`).

    Every Docker call of this backend goes through here, off the event loop.
    """

    def run() -> T:
        with docker_errors(action, failure=failure, image=image):
            return fn(docker_client(), *args)

    return await asyncio.to_thread(run)


# ------------------------------------------------------------ functions for the broker
#
# These are synchronous: the broker calls them through ``asyncio.to_thread`` at startup.


@dataclass(frozen=True)
class ContainerSummary:
    """One container of this broker, as found by :func:`list_broker_containers`.

    Attributes:
        id: the full container id.
        name: the container name.
        session_id: the session label; for warm-pool containers ``pool-<slot>`` (a pooled
            container keeps the labels of its creation; the session that claimed it is
            recorded in that session's provisioner info).
        owner: the owner label (empty for pool containers).
        pool_slot: the pool slot for warm-pool containers, else None.
        status: Docker's state: ``running``, ``exited``, ``created``, ``paused``, ...
        created: creation time (UTC).
    """

    id: str
    name: str
    session_id: str
    owner: str
    pool_slot: str | None
    status: str
    created: datetime

    @property
    def pooled(self) -> bool:
        """A warm-pool container (``ContainerPool.start`` removes leftovers of those)."""
        return self.pool_slot is not None


def docker_available(timeout: float = 2.0) -> bool:
    """Whether a Docker engine answers a ping within ``timeout`` seconds (synchronous)."""
    try:
        client = docker.from_env(timeout=timeout)
    except (docker.errors.DockerException, OSError):
        return False
    try:
        return bool(client.ping())
    except (docker.errors.DockerException, OSError):
        return False
    finally:
        client.close()


def list_broker_containers(broker_id: str) -> list[ContainerSummary]:
    """Every container, running or not, labelled with ``broker_id`` (synchronous).

    Raises:
        BackendUnavailable: the engine cannot be reached.
    """
    if not broker_id:
        raise ValueError("broker_id must not be empty")
    with docker_errors("list kernel containers"):
        rows = docker_client().api.containers(
            all=True, filters={"label": f"{LABEL_BROKER}={broker_id}"}
        )
    summaries = []
    for row in rows:
        labels = row.get("Labels") or {}
        if labels.get(LABEL_BROKER) != broker_id:  # defensive: filter is exact, but check
            continue
        names = row.get("Names") or [""]
        summaries.append(
            ContainerSummary(
                id=row["Id"],
                name=names[0].lstrip("/"),
                session_id=labels.get(LABEL_SESSION, ""),
                owner=labels.get(LABEL_OWNER, ""),
                pool_slot=labels.get(LABEL_POOL),
                status=row.get("State", "unknown"),
                created=datetime.fromtimestamp(int(row.get("Created", 0)), tz=UTC),
            )
        )
    return summaries


def remove_container(container_id: str) -> None:
    """Kill and remove one container; a container that is already gone is fine (synchronous).

    Raises:
        BackendUnavailable: the engine cannot be reached or refused.
    """
    with docker_errors("remove a kernel container"):
        _remove(docker_client(), container_id)


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


# --------------------------------------------------------------- Docker calls (threads)


def _create_and_start(client: docker.DockerClient, config: dict[str, Any]) -> dict[str, Any]:
    """Create and start a container; an engine-side (5xx) failure is retried twice.

    A freshly started engine was seen to fail the very first container start of a run
    with a server error; the next attempt succeeds. Client errors (a bad config, a missing
    image) are not retried. Runs in a worker thread, so the pauses block nothing.
    """
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            return _create_and_start_once(client, config)
        except docker.errors.APIError as exc:
            if not exc.is_server_error() or attempt == CREATE_ATTEMPTS:
                raise
            log.warning(
                "starting container %s failed (attempt %d of %d), retrying: %s",
                config.get("name"), attempt, CREATE_ATTEMPTS, exc.explanation or exc,
            )
            _remove(client, str(config["name"]))
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def _create_and_start_once(client: docker.DockerClient, config: dict[str, Any]) -> dict[str, Any]:
    container = client.containers.create(**config)
    try:
        container.start()
        info: dict[str, Any] = client.api.inspect_container(container.id)
    except BaseException:
        _remove(client, container.id)
        raise
    return info


def inspect_state(client: docker.DockerClient, container_id: str) -> dict[str, Any] | None:
    try:
        info = client.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return None
    state: dict[str, Any] = info.get("State") or {}
    return state


def _signal(client: docker.DockerClient, container_id: str, signum: int) -> None:
    try:
        client.api.kill(container_id, signal=signum)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: the container is not running (already dead)
            raise


def _remove(client: docker.DockerClient, container_id: str) -> None:
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: removal already in progress
            raise


def _logs_tail(client: docker.DockerClient, container_id: str) -> str:
    try:
        raw: bytes = client.api.logs(container_id, stdout=True, stderr=True, tail=20)
    except docker.errors.NotFound:
        return ""
    return raw.decode("utf-8", "replace")[-2000:]


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
    """

    container_id: str
    name: str
    key: bytes
    workspace: Path
    runtime_dir: Path
    host_process: HostProcess | None = None
    pool_slot: str | None = None


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
    )
    create = asyncio.ensure_future(
        call_docker(
            "start the kernel container",
            _create_and_start,
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
        await call_docker("remove a kernel container", _remove, container_id)
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
                tail = await call_docker("read container logs", _logs_tail, container_id)
                log.warning("kernel container %s exited during start (%s):\n%s",
                            container_id[:12], reason, tail)
                raise KernelStartFailed(
                    f"the kernel container stopped while starting ({reason}); "
                    "the broker log has its output"
                )
            next_check = now + 0.5
        if now >= deadline:
            raise KernelStartFailed(f"the kernel did not start within {limit_s:.0f} s")
        await asyncio.sleep(0.02)


# ------------------------------------------------------------------------- provisioner


class DockerProvisioner(KernelProvisionerBase):
    """Runs one kernel in one hardened Docker container (H-26: never reused).

    ``AsyncKernelManager`` creates it from the kernelspec and calls the methods below; each
    docstring says when. A restart reuses this instance (jupyter_client 8.x): ``cleanup``
    removes the old container and the next ``launch_kernel`` starts a new one with the same
    HMAC key, so existing clients keep working; a warm-pool kernel is only taken for the
    first launch, never for a restart.

    Attributes:
        pool: a :class:`~interpreter.backends.docker_pool.ContainerPool` the broker may
            install; first launches whose options match its template claim a warm
            container from it instead of starting one cold.
    """

    pool: ClassVar[ContainerPool | None] = None

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
        (security.md R-02). Called by the broker when ``is_alive`` turns False, before it
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
        await call_docker("signal a kernel container", _signal, kernel.container_id, signum)

    async def kill(self, restart: bool = False) -> None:
        """SIGKILL the container's init; the whole container stops at once.

        Called from ``KernelManager.kill_kernel`` (``shutdown_kernel(now=True)``, and the
        last step of a graceful shutdown that timed out). A dead container is fine.
        """
        await self.send_signal(signal.SIGKILL)

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
        if self.pool is not None and not self._restarting:
            kernel = await self.pool.claim(options, command=cmd)
        if kernel is None:
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
            state = await call_docker(
                "inspect a kernel container", inspect_state, kernel.container_id
            )
            self._final_reason = exit_reason_of(state) or "removed"
            await call_docker("remove a kernel container", _remove, kernel.container_id)
            await asyncio.to_thread(ipc.remove_tree, kernel.runtime_dir)
            self._kernel = None
        self._exit_code = None
        self._restarting = restart

    async def logs_tail(self) -> str:
        """The last lines the kernel container printed (for the broker log), or ''."""
        kernel = self._kernel
        if kernel is None:
            return ""
        return await call_docker("read container logs", _logs_tail, kernel.container_id)

    def get_shutdown_wait_time(self, recommended: float = 5.0) -> float:
        """Seconds a graceful shutdown may take before SIGTERM/SIGKILL escalate.

        Called from ``KernelManager.finish_shutdown``. Containers stop about as fast as
        processes (the init forwards SIGTERM at once), so jupyter's recommendation stands.
        """
        return recommended

    def get_stable_start_time(self, recommended: float = 10.0) -> float:
        """Upper bound for a kernel (re)start; a container start adds a second or two."""
        return recommended + 5.0

    # -- persistence (broker restarts, security.md R-07) -------------------------------

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
