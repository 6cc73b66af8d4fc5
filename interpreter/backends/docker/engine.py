"""The Docker engine, as the backend talks to it: one client, errors translated, and the
few synchronous calls every other module makes through :func:`call_docker` (off the loop).

Docker errors become :mod:`interpreter.errors` in one place, :func:`docker_errors`. The
functions for the broker (listing and removing this broker's containers) are synchronous;
the backend runs them in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import docker
import docker.errors

from interpreter.backends.docker.config import (
    CONTAINER_RUNTIME_DIR,
    LABEL_BROKER,
    LABEL_DATA_DIR,
    LABEL_OWNER,
    LABEL_POOL,
    LABEL_SESSION,
)
from interpreter.errors import BackendUnavailable, InterpreterError, KernelStartFailed
from interpreter.image import DEFAULT_IMAGE, missing_image_message

log = logging.getLogger(__name__)

T = TypeVar("T")

#: HTTP timeout of calls to the Docker engine, in seconds.
DOCKER_TIMEOUT_S = 60.0
#: Attempts at creating and starting a container when the engine answers 5xx.
CREATE_ATTEMPTS = 3
#: How long a removal waits for another call's removal of the same container to finish.
REMOVAL_WAIT_S = 30.0
#: How often it looks meanwhile, in seconds.
REMOVAL_POLL_S = 0.05


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
        runtime_dir: the host source of its ``/run/interp`` bind mount, if it has one.
    """

    id: str
    name: str
    session_id: str
    owner: str
    pool_slot: str | None
    status: str
    created: datetime
    runtime_dir: str | None = None

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


def engine_version() -> dict[str, Any]:
    """The engine's ``docker version`` answer (its parts' versions, the host kernel's);
    empty when it does not answer it."""
    try:
        answer = docker_client().version()
    except (docker.errors.DockerException, OSError):
        return {}
    return answer if isinstance(answer, dict) else {}


def engine_info() -> dict[str, Any]:
    """The engine's ``docker info`` answer (blocking)."""
    answer = docker_client().info()
    return answer if isinstance(answer, dict) else {}


def cgroup_driver(info: Mapping[str, Any] | None = None) -> str | None:
    """The engine's cgroup driver (``cgroupfs`` or ``systemd``), None if it does not say."""
    driver = (engine_info() if info is None else info).get("CgroupDriver")
    return str(driver) if driver else None


def runtimes(info: Mapping[str, Any]) -> list[str]:
    """The names of the container runtimes the engine has (``runc``, ``runsc``...)."""
    known = info.get("Runtimes")
    return [str(name) for name in known] if isinstance(known, dict) else []


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
                runtime_dir=next(iter(_runtime_sources(row)), None),
            )
        )
    return summaries


def mounted_runtime_dirs() -> set[str]:
    """The host directories kernel containers of any broker on this engine, running or
    not, have bind-mounted at ``/run/interp`` (synchronous).

    Raises:
        BackendUnavailable: the engine cannot be reached.
    """
    with docker_errors("list kernel containers"):
        rows = docker_client().api.containers(all=True, filters={"label": LABEL_BROKER})
    return {source for row in rows for source in _runtime_sources(row)}


def _runtime_sources(row: dict[str, Any]) -> list[str]:
    return [
        str(mount["Source"])
        for mount in row.get("Mounts") or []
        if mount.get("Destination") == CONTAINER_RUNTIME_DIR and mount.get("Source")
    ]


def abandoned_containers() -> list[str]:
    """Ids of kernel containers (of any broker on this engine) whose broker's data
    directory is gone from the host, so that no broker can ever reattach them
    (synchronous). Brokers sharing an engine see the same host paths (bind mounts need
    that anyway).

    A container names its data directory in a label. One started before that label
    existed is judged by its runtime directory's bind mount instead, unless it came from
    the warm pool: a claim renamed that directory then, and a claimed kernel still ran for
    its session after its mount's source path was gone.

    Raises:
        BackendUnavailable: the engine cannot be reached.
    """
    with docker_errors("list kernel containers"):
        rows = docker_client().api.containers(all=True, filters={"label": LABEL_BROKER})
    return [row["Id"] for row in rows if _abandoned(row)]


def _abandoned(row: dict[str, Any]) -> bool:
    labels = row.get("Labels") or {}
    data_dir = labels.get(LABEL_DATA_DIR)
    if data_dir:
        return _gone(data_dir)
    if LABEL_POOL in labels:
        return False
    return any(_gone(source) for source in _runtime_sources(row))


def _gone(path: str) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False  # not ours to judge (e.g. no permission): leave it
    return False


def remove_container(container_id: str) -> None:
    """Kill and remove one container; a container that is already gone is fine (synchronous).

    Raises:
        BackendUnavailable: the engine cannot be reached or refused.
    """
    with docker_errors("remove a kernel container"):
        remove(docker_client(), container_id)


# --------------------------------------------------------------- Docker calls (threads)


def rename_container(client: docker.DockerClient, container_id: str, name: str) -> None:
    """Give a container another name (its labels cannot change, its name can)."""
    client.api.rename(container_id, name)


def set_cpu_shares(client: docker.DockerClient, container_id: str, shares: int) -> None:
    """Change a running container's CPU weight."""
    client.api.update_container(container_id, cpu_shares=shares)


def create_and_start(client: docker.DockerClient, config: dict[str, Any]) -> dict[str, Any]:
    """Create and start a container; an engine-side (5xx) failure is retried twice.

    A freshly started engine was seen to fail the very first container start of a run
    with a server error; the next attempt succeeds. Client errors (a bad config, a missing
    image) are not retried. Runs in a worker thread, so the pauses block nothing.
    """
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            return create_and_start_once(client, config)
        except docker.errors.APIError as exc:
            if not exc.is_server_error() or attempt == CREATE_ATTEMPTS:
                raise
            log.warning(
                "starting container %s failed (attempt %d of %d), retrying: %s",
                config.get("name"),
                attempt,
                CREATE_ATTEMPTS,
                exc.explanation or exc,
            )
            remove(client, str(config["name"]))
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def create_and_start_once(client: docker.DockerClient, config: dict[str, Any]) -> dict[str, Any]:
    container = client.containers.create(**config)
    try:
        container.start()
        info: dict[str, Any] = client.api.inspect_container(container.id)
    except BaseException:
        remove(client, container.id)
        raise
    return info


def inspect_state(client: docker.DockerClient, container_id: str) -> dict[str, Any] | None:
    try:
        info = client.api.inspect_container(container_id)
    except docker.errors.NotFound:
        return None
    state: dict[str, Any] = info.get("State") or {}
    return state


def signal_container(client: docker.DockerClient, container_id: str, signum: int) -> None:
    try:
        client.api.kill(container_id, signal=signum)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: the container is not running (already dead)
            raise


def remove(client: docker.DockerClient, container_id: str) -> None:
    """Kill and remove a container, and return only once it is gone.

    The engine answers 409 when another call is already removing the container (a second
    removal, or one that met the engine's own). That call may still be under way, so this
    one waits for the container to disappear, for at most :data:`REMOVAL_WAIT_S`; a
    container still there after that raises the engine's answer.
    """
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: removal already in progress
            raise
        if not _gone_within(client, container_id, REMOVAL_WAIT_S):
            raise


def _gone_within(client: docker.DockerClient, container_id: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        try:
            client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(REMOVAL_POLL_S)


def logs_tail(client: docker.DockerClient, container_id: str) -> str:
    try:
        raw: bytes = client.api.logs(container_id, stdout=True, stderr=True, tail=20)
    except docker.errors.NotFound:
        return ""
    return raw.decode("utf-8", "replace")[-2000:]
