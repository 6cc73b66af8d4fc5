"""One harness, one run: the floors, this service on each backend, and Kernel Gateway.

Usage (from the repository root, with the dev virtualenv)::

    .venv/bin/python -m benchmarks.run [--quick] [--backends local,docker] [--idle 200]
        [--no-gateway] [--only SCENARIO,...] [--kernel-cgroup NAME]

``--kernel-cgroup`` puts every kernel container, the floor's and the service's, under that
cgroup (``INTERP_DOCKER_CGROUP_PARENT``); give it a CPU weight first (README "Kernels'
share of the CPU"). The run prints the weight the containers' cgroup has.

Scenarios (each bounded in count; every request and execution has a time limit):

* ``cold``: create to first result (``1+1``) with no pool; raw: start a kernel, ``1+1``;
* ``warm``: the same from a full warm pool, 40 times (Docker backend only; pool refilled
  between runs);
* ``refill``: a running session's ``1+1`` from two claims' answers until the pool is full again,
  against the same session for as long with the pool full and quiet, in turns, five
  pairs (Docker backend only; ``benchmarks/refill.py``);
* ``rtt``: ``1+1`` round trips (API: JSON and SSE), then 10,000 lines one message each and
  10,000 lines in one message, every line counted; the floor and the service are both up
  and are driven in alternating blocks (``benchmarks/paired.py``), so drift hits both;
* ``load``: 20 sessions x 50 executions at once: throughput, p50, p95; broker memory;
* ``idle``: per-session memory and broker memory with ``--idle`` idle sessions (default 20;
  ``--idle 200`` for the issue's 200 Docker sessions, which takes several minutes);
* ``long``: broker CPU per execution over cells 901-1000 of a session that plots every
  10th cell and over cells 1-100 of a fresh one, each in its own broker, the cells
  alternating, 0.3 s after each, the notebook's saves included (``--quick``: 200 cells,
  windows of 50);
* ``replay``: a 50-cell session replayed (``interp replay``'s function) against its run,
  five pairs in one broker, medians (``--quick``: 20 cells, two pairs).

Every figure is printed with its ratio to the floor of the same run: the local floor for
the local backend and Kernel Gateway, the container floor for the Docker backend.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import floors, gateway, paired, refill, service
from benchmarks.floors import p

ALL = ("cold", "warm", "refill", "rtt", "load", "idle", "long", "replay")


class Table:
    """Rows of (figure, variant, value, unit, ratio to the floor, target)."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str]] = []

    def add(
        self,
        figure: str,
        variant: str,
        value: float,
        unit: str,
        floor: float | None = None,
        target: str = "",
        note: str = "",
    ) -> None:
        ratio = f"{value / floor:.2f}x" if floor else ""
        shown = f"{value:.1f} {unit}" + (f" ({note})" if note else "")
        self.rows.append((figure, variant, shown, ratio, target))
        print(f"  {figure:34s} {variant:22s} {shown:34s} {ratio:>7s}  {target}", flush=True)

    def markdown(self) -> str:
        out = ["| figure | variant | value | ratio to floor | target |", "|---|---|---|---|---|"]
        out += [f"| {' | '.join(row)} |" for row in self.rows]
        return "\n".join(out)


def bounded(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one scenario; a failure is reported and the run goes on."""
    t0 = time.monotonic()
    try:
        return fn(*args)
    except Exception as exc:
        print(f"  {name}: FAILED after {time.monotonic() - t0:.0f} s: {exc!r}", flush=True)
        return None
    finally:
        print(f"  ({name}: {time.monotonic() - t0:.0f} s)", flush=True)


def container_weight(parent: str | None) -> str:
    """The CPU weight of the cgroup the kernel containers go under, as the host says it."""
    root = Path("/sys/fs/cgroup")
    name = (parent or "docker").strip("/")
    for path, what in (
        (root / "cpu" / name / "cpu.shares", "cpu.shares (cgroup v1; one host thread: 1024)"),
        (root / name / "cpu.weight", "cpu.weight (cgroup v2; one host process: 100)"),
    ):
        with contextlib.suppress(OSError):
            return f"/{name}, {what} {path.read_text().strip()}"
    return f"/{name}, weight unknown (not made yet, or another layout)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    parser.add_argument("--backends", default="local,docker")
    parser.add_argument("--only", default=",".join(ALL), help="comma-separated scenarios")
    parser.add_argument("--idle", type=int, default=20, help="idle sessions to hold")
    parser.add_argument("--no-gateway", action="store_true")
    parser.add_argument("--kernel-cgroup", help="cgroup for every kernel container")
    args = parser.parse_args()
    if args.kernel_cgroup:
        os.environ["INTERP_DOCKER_CGROUP_PARENT"] = args.kernel_cgroup
    quick = args.quick
    n_rtt, n_create = (20, 3) if quick else (200, 10)
    # A p95 needs samples past 20 (of 10 it is their maximum); warm creates are cheap.
    n_warm = 3 if quick else 40
    sessions, execs = (4, 10) if quick else (20, 50)
    cells, window = (200, 50) if quick else (1000, 100)
    only = set(args.only.split(","))
    backends = args.backends.split(",")
    if "docker" in backends:
        from interpreter.backends.docker.engine import docker_available

        if not docker_available():
            print("docker: no engine answers; the Docker backend and floor are skipped")
            backends.remove("docker")
    use_gateway = not args.no_gateway and gateway.ensure_venv()
    print(
        f"benchmarks.run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}, "
        f"{platform.processor() or platform.machine()}, backends {backends}"
    )
    if "docker" in backends:
        print(f"  docker kernels' cgroup: {container_weight(args.kernel_cgroup)}")
    if not args.no_gateway and not use_gateway:
        print(f"  {gateway.NOT_INSTALLED}")
    t = Table()
    floor: dict[str, dict[str, Any]] = {b: {} for b in backends}
    ok = "local" in backends

    if "cold" in only:
        print("cold: create to first result (p50)", flush=True)
        for b in backends:
            raw = bounded(f"floor {b}", lambda b=b: asyncio.run(floors.cold_create(b, n_create)))
            if raw:
                floor[b]["cold"] = p(raw, 0.5)
                t.add("cold create to 1st result", f"floor {b}", p(raw, 0.5), "ms")
        for b in backends:
            api = bounded(f"api {b}", service.create_to_first_result, b, n_create, 0)
            if api:
                t.add(
                    "cold create to 1st result",
                    f"API {b}",
                    p(api, 0.5),
                    "ms",
                    floor[b].get("cold"),
                    "<= 1.15x (docker)" if b == "docker" else "",
                )
    if "warm" in only and "docker" in backends:
        print("warm: create to first result from a full pool of 2", flush=True)
        api = bounded("api docker warm", service.create_to_first_result, "docker", n_warm, 2)
        if api:
            t.add("warm create to 1st result", "API docker p50", p(api, 0.5), "ms", None, "<= 30")
            t.add("warm create to 1st result", "API docker p95", p(api, 0.95), "ms", None, "<= 60")
    if "refill" in only and "docker" in backends:
        print("refill: a running session's 1+1, quiet vs while the pool refills", flush=True)
        pairs = 2 if quick else 5
        seen = bounded("api docker refill", refill.running_session, 2, pairs)
        if seen:
            quiet, busy = seen["quiet"], seen["refill"]
            for q, name in ((0.5, "p50"), (0.95, "p95")):
                t.add("running 1+1, pool quiet", f"API docker {name}", p(quiet, q), "ms")
                t.add(
                    "running 1+1, pool refilling",
                    f"API docker {name}",
                    p(busy, q),
                    "ms",
                    p(quiet, q),
                    "<= 1.1x quiet",
                    note=f"{len(busy)} round trips",
                )
            if seen["refilled"]:
                t.add("pool refill after 2 claims", "API docker", p(seen["refilled"], 0.5), "s")
    if "rtt" in only:
        print(f"rtt: 1+1 x {n_rtt} (p50), 10,000 lines; floor and API in turns", flush=True)
        pairs: dict[str, dict[str, Any]] = {}
        for b in backends:
            pair = bounded(f"floor and api {b}", paired.round_trips, b, n_rtt)
            if not pair:
                continue
            pairs[b] = pair
            raw = pair["floor"]
            floor[b].update(raw)
            t.add("1+1 round trip", f"floor {b}", p(raw["rtt"], 0.5), "ms")
            for key in ("lines", "buffered"):
                ms, lines = raw[key]
                t.add(f"10k lines, {key}", f"floor {b}", ms, "ms", note=f"{lines} lines")
        if use_gateway:
            gw = bounded("gateway", gateway.measure, n_rtt, True, True)
            if gw:
                fl = floor.get("local", {})
                t.add(
                    "1+1 round trip",
                    "Kernel Gateway nodelay",
                    p(gw[0], 0.5),
                    "ms",
                    p(fl["rtt"], 0.5) if fl.get("rtt") else None,
                )
                if gw[1] is not None:
                    flood_s, received = gw[1]
                    t.add(
                        "10k lines, lines",
                        "Kernel Gateway nodelay",
                        flood_s * 1000,
                        "ms",
                        fl.get("lines", (None,))[0],
                        note=f"{received} lines",
                    )
        for b, pair in pairs.items():
            api = pair["api"]
            fl = floor[b]
            base = p(fl["rtt"], 0.5) if fl.get("rtt") else None
            t.add("1+1 round trip", f"API {b} JSON", p(api["rtt"], 0.5), "ms", base, "<= 1.25x")
            t.add("1+1 round trip", f"API {b} SSE", p(api["sse"], 0.5), "ms", base, "<= 1.25x")
            for key in ("lines", "buffered"):
                ms, lines = api[key]
                target = "<= 1.3x, 10000 lines" if key == "lines" else ""
                ratios = "/".join(f"{r:.2f}" for r in api[f"{key}_ratios"])
                t.add(
                    f"10k lines, {key}",
                    f"API {b}",
                    ms,
                    "ms",
                    fl.get(key, (None,))[0],
                    target,
                    note=f"{lines} lines; medians of {len(api[f'{key}_ratios'])} pairs,"
                    f" each ratio {ratios}",
                )
    if "load" in only:
        print(f"load: {sessions} sessions x {execs} executions at once", flush=True)
        for b in backends:
            raw = bounded(
                f"floor {b}", lambda b=b: asyncio.run(floors.concurrent(b, sessions, execs))
            )
            if raw:
                floor[b]["load"] = raw
                t.add("concurrent throughput", f"floor {b}", raw["throughput"], "exec/s")
                t.add("concurrent p50 / p95", f"floor {b}", p(raw["latencies"], 0.5), "ms",
                      note=f"p95 {p(raw['latencies'], 0.95):.1f}")  # fmt: skip
        for b in backends:
            api = bounded(f"api {b}", service.concurrent, b, sessions, execs)
            if not api:
                continue
            fl = floor[b].get("load")
            t.add(
                "concurrent throughput",
                f"API {b}",
                api["throughput"],
                "exec/s",
                fl["throughput"] if fl else None,
                ">= 1.0x",
                note=f"{len(api['errors'])} errors",
            )
            p50, p95 = p(api["latencies"], 0.5), p(api["latencies"], 0.95)
            t.add("concurrent p50 / p95", f"API {b}", p50, "ms",
                  note=f"p95 {p95:.1f} = {p95 / p50:.2f}x p50", target="p95 <= 2x p50")  # fmt: skip
    if "idle" in only:
        print(f"idle: {args.idle} idle sessions", flush=True)
        for b in backends:
            idle = bounded(f"api {b}", service.idle_sessions, b, args.idle)
            if not idle:
                continue
            n = idle["sessions"]
            t.add(
                f"broker RSS, {n} idle sessions",
                f"API {b}",
                idle["broker_rss_mb"],
                "MB",
                target=f"<= {100 + n} MB",
                note=f"{idle['broker_rss_empty_mb']:.0f} MB empty, {len(idle['errors'])} errors",
            )
            if idle.get("per_session_mb") is not None:
                t.add("memory per idle session", f"API {b}", idle["per_session_mb"], "MiB")
    if "long" in only and ok:
        print(
            f"long: the last {window} of {cells} cells and a fresh session's first {window}, "
            f"a plot every 10th, {service.LONG_PAUSE_S} s after each",
            flush=True,
        )
        for b in backends:
            long = bounded(f"api {b}", service.long_session, b, cells, window)
            if long:
                first = long["cpu_first_ms"]
                t.add(
                    f"broker CPU per exec, cells 1-{window}",
                    f"API {b}",
                    first,
                    "ms",
                    note=f"p50 rtt {p(long['wall_first'], 0.5):.1f} ms",
                )
                t.add(
                    f"broker CPU per exec, last {window} of {cells}",
                    f"API {b}",
                    long["cpu_last_ms"],
                    "ms",
                    first,
                    f"<= 1.2x cells 1-{window}",
                    note=f"p50 rtt {p(long['wall_last'], 0.5):.1f} ms",
                )
    if "replay" in only:
        print("replay: a 50-cell notebook against its original run", flush=True)
        for b in backends:
            rep = bounded(f"api {b}", service.replay, b, 20 if quick else 50, 2 if quick else 5)
            if rep:
                t.add("replay of the session", f"API {b} original", rep["original_s"] * 1000, "ms")
                t.add(
                    "replay of the session",
                    f"API {b} replay",
                    rep["replay_s"] * 1000,
                    "ms",
                    rep["original_s"] * 1000,
                    "<= 1.1x",
                    note=f"median of {len(rep['ratios'])} pairs, each ratio "
                    + "/".join(f"{r:.2f}" for r in rep["ratios"])
                    + f"; {rep['matched']} cells matched in each; both timed from create to "
                    f"close; replayed cells alone {rep['replay_cells_s'] * 1000:.0f} ms",
                )
    print("\n" + t.markdown())


if __name__ == "__main__":
    main()
