"""Kernel backends: what the broker needs from "where kernels run", behind one object.

A backend has two faces. Towards jupyter_client it is a kernel provisioner (entry points
``interpreter-local`` and ``interpreter-docker``, chosen by the kernelspec); per-session
values reach it as one :class:`~interpreter.backends.base.LaunchOptions` passed to
``start_kernel(interp=...)``, which jupyter_client replays on every restart. Towards the
broker it is a :class:`Backend`: availability, transport, the warm pool, reattaching after a
broker restart, leftovers of an earlier broker, the kernel environment's package list and
what to keep on shutdown. Nothing above this package compares backend names.

Every method says who calls it. Nothing here imports the broker or the session.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from interpreter.backends.base import LaunchOptions as LaunchOptions
from interpreter.backends.base import Leftover as Leftover

if TYPE_CHECKING:
    from jupyter_client.manager import AsyncKernelManager

    from interpreter.settings import Settings


log = logging.getLogger(__name__)


class Backend(Protocol):
    """Where kernels run, as the broker sees it.

    Attributes:
        name: ``local`` or ``docker``; recorded on every session and notebook.
        kernel_name: the kernelspec the broker starts (``python3``, ``python3-docker``).
        isolated: whether a kernel is kept from the host (shown in warnings and health).
        keep_on_shutdown: whether a stopping broker leaves kernels running, to be
            reattached by the next one (docker with ``keep_containers_on_shutdown``).
        packages: exact package versions of the kernel environment, for notebook metadata
            (empty when unknown).
        image: the image the kernels run from, for notebook metadata (``None`` when none).
    """

    name: str
    kernel_name: str
    isolated: bool
    keep_on_shutdown: bool
    packages: Mapping[str, str]
    image: str | None

    def configure(self, manager: AsyncKernelManager, options: LaunchOptions) -> None:
        """Set transport and addresses on a new, unstarted kernel manager.

        Called from the broker's kernel wrapper each time it builds a manager, for a new
        session and for a reattached one. Also attaches what the provisioner needs beyond
        the session's values (the warm pool) to ``options``.
        """

    def runtime_dir(self, session_id: str) -> Path:
        """Where the next kernel of ``session_id`` keeps its connection material and ipc
        sockets (not created). Called by the session factory for each launch options it
        builds; the docker backend gives a fresh random path outside the data directory
        (its kernel sees the path, docs/security.md H-30)."""

    async def start(self, template: LaunchOptions) -> None:
        """Start background parts (the warm pool, whose kernels are launched with
        ``template``: what a session without limits or env gets). Called once by the
        server after startup recovery, so that pool kernels are not taken for leftovers."""

    async def close(self) -> None:
        """Stop background parts. Called once by the broker at shutdown, after sessions."""

    async def tidy(self) -> None:
        """Periodic housekeeping (every ``cull_interval_s``, on the loop; never blocks):
        for docker, remove the containers of sessions closed while the engine did not
        answer. Raises nothing the broker must handle."""

    async def reachable(self, *, fresh: bool = False) -> bool:
        """Whether the backend can start kernels as far as one can tell cheaply (the
        Docker engine answers); asked by ``/healthz``, so it is cached (unless ``fresh``)
        and never blocks."""

    def warm_kernels(self) -> int:
        """Kernels ready in the warm pool right now (0 when there is none). Called by the
        broker's metrics at scrape time, on the event loop: it must not block."""

    def brings_workspace(self, options: LaunchOptions) -> bool:
        """Whether a session with ``options`` will likely get a warm kernel whose workspace
        (with its disk quota) becomes the session's: then the session's own quota is not
        made up front (the backend attaches it itself if the claim falls through)."""

    def can_reattach(self, record_backend: str) -> bool:
        """Whether a session recorded under ``record_backend`` may still have a live kernel
        this backend can reattach (a local kernel dies with its broker). Called at startup
        recovery for each open session record."""

    async def reattach(
        self,
        manager: AsyncKernelManager,
        provisioner_info: dict[str, Any],
        options: LaunchOptions,
    ) -> None:
        """Make an unstarted ``manager`` manage a kernel that outlived an earlier broker.

        Called at startup recovery. Raises ``KernelStartFailed`` when the kernel is gone or
        fails the checks; the session is then closed.
        """

    async def leftovers(self, broker_id: str) -> list[Leftover]:
        """Kernels an earlier process of this broker left (labelled with ``broker_id``).
        Called once at startup recovery, before the pool starts."""

    def matches(
        self, leftover: Leftover, session_id: str, provisioner_info: dict[str, Any]
    ) -> bool:
        """Whether ``leftover`` is the kernel of the session recorded with these values."""

    async def remove(self, leftover: Leftover) -> None:
        """Remove a leftover kernel nobody reattached. Called at startup recovery."""

    async def sweep_abandoned(self) -> list[str]:
        """Remove the kernels of any broker whose data directory is gone (no broker can
        ever reattach them); returns their ids. Called once at startup recovery."""


def create(name: str, settings: Settings) -> Backend:
    """The backend called ``name`` (``local`` or ``docker``), without availability checks.

    Called by the server when a backend is given explicitly (tests, embedding).
    """
    if name == "local":
        from interpreter.backends.local import LocalBackend

        return LocalBackend(settings)
    if name == "docker":
        from interpreter.backends.docker.backend import DockerBackend

        return DockerBackend(settings)
    raise ValueError(f"unknown backend {name!r}; use 'local' or 'docker'")


def resolve(settings: Settings) -> Backend:
    """The backend ``settings.backend`` asks for; ``auto`` means docker when an engine and
    the image are there, else local with a warning. Blocking (asks the Docker engine):
    call it off the event loop. Raises ``BackendUnavailable`` for an explicit ``docker``
    that cannot run."""
    return create(_resolve_name(settings), settings)


#: Said whenever the local backend is chosen, by name or as the fallback.
LOCAL_WARNING = (
    "the LOCAL backend, which does NOT isolate kernels from this machine. "
    "Use it only for trusted code."
)


def _resolve_name(settings: Settings) -> str:
    if settings.backend == "local":
        log.warning("Using %s", LOCAL_WARNING)
        return "local"
    from interpreter.backends.docker.engine import docker_available
    from interpreter.errors import BackendUnavailable
    from interpreter.image import image_status, missing_image_message

    if not docker_available():
        if settings.backend == "docker":
            raise BackendUnavailable(
                "No Docker engine answers. Start one (e.g. `sudo dockerd &`) or run with "
                "--backend local (no isolation)."
            )
        log.warning("No Docker engine answers: using %s", LOCAL_WARNING)
        return "local"
    status = image_status(settings.docker_image)
    if not status.exists:
        message = missing_image_message(settings.docker_image)
        if settings.backend == "docker":
            raise BackendUnavailable(message)
        log.warning("%s Meanwhile using %s", message, LOCAL_WARNING)
        return "local"
    problem = status.problem()
    if problem:
        log.warning("%s", problem)
    return "docker"
