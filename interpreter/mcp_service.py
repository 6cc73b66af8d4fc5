"""What the MCP server tells a model about the service behind it: the backend, the limits
that apply and the packages the kernel has, fetched once at startup through the SDK."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from interpreter.client import AsyncClient, ClientError, NotFoundError
from interpreter.tools.specs import packages_sentence

log = logging.getLogger(__name__)


#: How each per-session limit of ``GET /v1/info`` reads in a description.
_LIMITS = {
    "memory_mb": "memory {:g} MiB",
    "cpus": "{:g} CPUs",
    "pids": "{:g} processes",
    "disk_mb": "workspace disk {:g} MiB",
}


@dataclass(frozen=True)
class ServiceFacts:
    """The service as far as a model should know it; empty fields are unknown."""

    backend: str = ""
    isolated: bool | None = None
    network: bool | None = None
    default_timeout_s: float | None = None
    max_timeout_s: float | None = None
    limits: dict[str, float] = field(default_factory=dict)
    packages: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """A paragraph for the ``run_code`` description."""
        lines = []
        if self.backend:
            where = ""
            if self.isolated is not None:
                where = (
                    " (each session runs in its own isolated container)"
                    if self.isolated
                    else " (sessions run as local processes, without isolation)"
                )
            lines.append(f"Backend: {self.backend}{where}.")
        if self.network is not None:
            lines.append(
                "Network: "
                + ("available." if self.network else "none (no downloads, no pip install).")
            )
        if self.default_timeout_s is not None:
            text = f"Time limit: {self.default_timeout_s:g} s per call by default"
            if self.max_timeout_s is not None:
                text += f", at most {self.max_timeout_s:g} s with timeout_s"
            lines.append(text + ".")
        parts = [_LIMITS[k].format(v) for k, v in self.limits.items() if k in _LIMITS]
        if parts:
            lines.append("Limits per session: " + ", ".join(parts) + ".")
        elif self.backend == "local":
            lines.append("Limits per session: none enforced (local backend).")
        if self.packages:
            lines.append(packages_sentence(self.packages))
        return "About this service:\n" + "\n".join(lines) if lines else ""


async def service_facts(client: AsyncClient) -> ServiceFacts:
    """Ask the service (``info()``, or ``health()`` from an older service); never raises."""
    try:
        info = await client.info()
    except NotFoundError:  # a service from before /v1/info
        info = None
    except ClientError as exc:
        log.warning("could not read the service's description: %s", exc)
        return ServiceFacts()
    if info is None:
        try:
            health = await client.health()
        except ClientError as exc:
            log.warning("could not read the service's description: %s", exc)
            return ServiceFacts()
        return ServiceFacts(backend=str(health.get("backend") or ""))
    limits = info.default_limits.model_dump(exclude_none=True) if info.default_limits else {}
    return ServiceFacts(
        backend=info.backend,
        isolated=info.isolated,
        network=info.network,
        default_timeout_s=info.default_timeout_s,
        max_timeout_s=info.max_timeout_s,
        limits=limits,
        packages=dict(info.packages),
    )
