"""``GET /v1/info``: what code run by this service can expect (backend, limits, packages)."""

from __future__ import annotations

import asyncio

from interpreter import quota
from interpreter._version import __version__
from interpreter.backends import Backend
from interpreter.image.packages import environment_packages
from interpreter.models import ServiceInfo, ServiceLimits
from interpreter.settings import Settings


async def service_info(backend: Backend, settings: Settings) -> ServiceInfo:
    """The answer of ``GET /v1/info`` (the environment is scanned once, off the loop)."""
    packages = dict(backend.packages)
    if not packages and not backend.isolated:
        packages = await asyncio.to_thread(environment_packages)
    default = maximum = None
    if backend.isolated:
        default = ServiceLimits(
            memory_mb=settings.default_memory_mb,
            cpus=settings.default_cpus,
            pids=settings.default_pids,
        )
        maximum = ServiceLimits(
            memory_mb=settings.max_memory_mb, cpus=settings.max_cpus, pids=settings.max_pids
        )
    why_not = quota.unavailable_reason()
    if why_not is None:
        default = default or ServiceLimits()
        maximum = maximum or ServiceLimits()
        default.disk_mb = settings.default_disk_mb or None
        maximum.disk_mb = settings.max_disk_mb
    return ServiceInfo(
        version=__version__,
        backend=backend.name,
        isolated=backend.isolated,
        network=not backend.isolated,
        default_timeout_s=settings.default_timeout_s,
        max_timeout_s=settings.max_timeout_s,
        default_limits=default,
        max_limits=maximum,
        packages=packages,
        images=[settings.docker_image, *settings.docker_images] if backend.isolated else [],
        disk_quota=why_not or "enforced",
    )
