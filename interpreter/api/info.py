"""``GET /v1/info``: what code run by this service can expect (backend, limits, packages)."""

from __future__ import annotations

import asyncio
import functools
from importlib import metadata

from interpreter import quota
from interpreter._version import __version__
from interpreter.backends import Backend
from interpreter.models import ServiceInfo, ServiceLimits
from interpreter.settings import Settings


@functools.cache
def _environment_packages() -> dict[str, str]:
    """Distributions of this Python environment: what a local kernel (a subprocess on the
    same interpreter) can import."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(name, dist.version)
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


async def service_info(backend: Backend, settings: Settings) -> ServiceInfo:
    """The answer of ``GET /v1/info`` (the environment is scanned once, off the loop)."""
    packages = dict(backend.packages)
    if not packages and not backend.isolated:
        packages = await asyncio.to_thread(_environment_packages)
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
        disk_quota=why_not or "enforced",
    )
