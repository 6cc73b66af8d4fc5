"""Prometheus metrics of one broker (a registry of its own, so tests can run several).

Counters and histograms are updated where things happen; gauges (sessions by status,
queued executions, warm kernels, uploads being received) are read from the broker at
scrape time. HTTP requests are labelled by route template (``/v1/sessions/{session_id}``),
never by raw path, so session ids never become label values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from interpreter.shares import SharedBudget

#: Statuses of live sessions (a closed session leaves the broker: see ``sessions_closed``).
SESSION_STATUSES = ("starting", "idle", "busy", "dead")
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_LONG_BUCKETS = (600, 1800, 3600, 7200, 21600, 86400)
_HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_START_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 120)


def duration_buckets(max_timeout_s: float) -> tuple[float, ...]:
    """Execution duration buckets up to the largest timeout a request may ask (and it)."""
    below = {b for b in (*_DURATION_BUCKETS, *_LONG_BUCKETS) if b < max_timeout_s}
    return (*sorted(below), float(max_timeout_s))


class _GaugesCollector(Collector):
    """Gauges computed at scrape time from the broker's live state."""

    def __init__(
        self,
        session_counts: Callable[[], dict[str, int]],
        queued: Callable[[], int],
        warm_kernels: Callable[[], int],
        uploads: Callable[[], int],
        large_bodies: Callable[[], int],
    ) -> None:
        self._counts = session_counts
        self._queued = queued
        self._warm = warm_kernels
        self._uploads = uploads
        self._large = large_bodies
        self._values: tuple[dict[str, int], int, int, int, int] = ({}, 0, 0, 0, 0)

    def read(self) -> None:
        """Read the broker's state now, on its event loop: a scrape renders in a worker
        thread, which must not walk the loop's live dicts."""
        self._values = (
            dict(self._counts()),
            self._queued(),
            self._warm(),
            self._uploads(),
            self._large(),
        )

    def collect(self) -> Iterable[Metric]:
        counts, queued, warm, uploads, large = self._values
        family = GaugeMetricFamily(
            "interp_sessions", "Live sessions of the broker, by status.", labels=["status"]
        )
        for status in SESSION_STATUSES:
            family.add_metric([status], counts.get(status, 0))
        yield family
        yield GaugeMetricFamily(
            "interp_queued_executions",
            "Executions waiting in session queues (not yet running).",
            value=queued,
        )
        yield GaugeMetricFamily(
            "interp_warm_kernels",
            "Kernels ready in the backend's warm pool (0 without a pool).",
            value=warm,
        )
        yield GaugeMetricFamily(
            "interp_uploads_receiving",
            "File uploads whose body is being received (capped by max_concurrent_uploads, "
            "and per key by max_concurrent_uploads_per_key).",
            value=uploads,
        )
        yield GaugeMetricFamily(
            "interp_large_body_bytes",
            "Bytes of request bodies over max_body_bytes (notebooks) held now (capped by "
            "max_large_bodies_bytes, and per key by max_large_bodies_bytes_per_key).",
            value=large,
        )


class Metrics:
    """Everything ``/metrics`` shows for one broker.

    Args:
        session_counts: live sessions by status, read at scrape time.
        queued: executions waiting in queues, read at scrape time.
        warm_kernels: ready kernels of the warm pool, read at scrape time.
        max_timeout_s: the largest execution timeout (the top duration bucket).
        process: whether to export this process's CPU, memory and file descriptors.
    """

    def __init__(
        self,
        session_counts: Callable[[], dict[str, int]],
        *,
        queued: Callable[[], int] = lambda: 0,
        warm_kernels: Callable[[], int] = lambda: 0,
        max_timeout_s: float = 3600.0,
        process: bool = True,
    ) -> None:
        #: Uploads being received now, in all and by key (the API counts them against
        #: its caps).
        self.uploads = SharedBudget()
        #: Bytes of large (notebook) request bodies held now, in all and by key (the API's
        #: budget of them).
        self.large_bodies = SharedBudget()
        self.registry = CollectorRegistry(auto_describe=True)
        self.executions = Counter(
            "interp_executions",
            "Finished executions, by status.",
            ["status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "interp_execution_duration_seconds",
            "Wall time of executions.",
            buckets=duration_buckets(max_timeout_s),
            registry=self.registry,
        )
        self.restarts = Counter(
            "interp_kernel_restarts",
            "Kernel restarts, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.kernel_start = Histogram(
            "interp_kernel_start_seconds",
            "Time to start a new session's kernel until it is ready, by backend.",
            ["backend"],
            buckets=_START_BUCKETS,
            registry=self.registry,
        )
        self.sessions_closed = Counter(
            "interp_sessions_closed",
            "Sessions closed, by reason (deleted, idle_timeout, max_lifetime, ...).",
            ["reason"],
            registry=self.registry,
        )
        self.sessions_purged = Counter(
            "interp_sessions_purged",
            "Closed sessions whose record the retention removed (INTERP_RETAIN_CLOSED_DAYS).",
            registry=self.registry,
        )
        self.http_requests = Counter(
            "interp_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.http_duration = Histogram(
            "interp_http_request_duration_seconds",
            "Time to answer HTTP requests (streams: until the stream ends), by route template "
            "and method.",
            ["route", "method"],
            buckets=_HTTP_BUCKETS,
            registry=self.registry,
        )
        self._gauges = _GaugesCollector(
            session_counts,
            queued,
            warm_kernels,
            lambda: self.uploads.held,
            lambda: self.large_bodies.held,
        )
        self.registry.register(self._gauges)
        if process:
            ProcessCollector(registry=self.registry)

    def execution_finished(self, status: str, duration_ms: float | None) -> None:
        self.executions.labels(status).inc()
        if duration_ms is not None:
            self.duration.observe(duration_ms / 1000)

    def request_answered(self, route: str, method: str, status: int, seconds: float) -> None:
        self.http_requests.labels(route, method, str(status)).inc()
        self.http_duration.labels(route, method).observe(seconds)

    async def scrape(self) -> bytes:
        """The exposition text for ``/metrics``: the broker's gauges read on the loop, the
        rest rendered in a worker thread. Rendering the registry and reading this
        process's ``/proc`` entries took about 2 ms, all of it on the event loop."""
        self._gauges.read()
        text = await asyncio.to_thread(generate_latest, self.registry)
        return bytes(text)
