"""Prometheus metrics of one broker (a registry of its own, so tests can run several)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

SESSION_STATUSES = ("starting", "idle", "busy", "dead", "closed")


class _SessionCollector(Collector):
    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "interp_sessions", "Sessions known to the broker, by status.", labels=["status"]
        )
        counts = self._counts()
        for status in SESSION_STATUSES:
            family.add_metric([status], counts.get(status, 0))
        yield family


class Metrics:
    """Counters and histograms the broker updates; sessions are counted at scrape time."""

    def __init__(self, session_counts: Callable[[], dict[str, int]]) -> None:
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
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.restarts = Counter(
            "interp_kernel_restarts",
            "Kernel restarts, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.registry.register(_SessionCollector(session_counts))

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
