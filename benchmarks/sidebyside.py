"""This build against other revisions, all up at once: ``1+1`` taken request by request.

This machine's speed drifts within minutes (eleventh round of ``benchmarks/README.md``: the
broker's loop used 3.0 ms of CPU for a ``1+1`` in one broker and 4.4 ms in another minutes
later), so two builds measured one after the other differ by more than a small change
does. Here the raw floor and one broker of each build are up at the same time and are
driven in turn, one request each, the order of the builds reversed every other turn: every
build sees the machine at the same moments. Each round starts fresh brokers.

    .venv/bin/python -m benchmarks.sidebyside --against HEAD~1 [--against REV ...]

Each revision is checked out in a temporary git worktree and served from there: ``python -m
interpreter`` imports the package from its working directory before the installed one. The
environment (``.venv``) is this build's, so a revision that needs other dependencies
cannot be compared this way.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks import floors, service

THIS = "this build"
#: The repository this build is in (revisions are checked out from it).
REPO = Path(__file__).resolve().parents[1]
WARM_UP = 30


@dataclass
class Figure:
    build: str
    round: int
    ms: float
    ratio: float
    cpu_ms: float


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached checkout of ``rev`` for as long as the block runs."""
    root = Path(tempfile.mkdtemp(prefix="interp-sidebyside-"))
    path = root / "wt"
    git = ["git", "-C", str(REPO), "worktree"]
    made = subprocess.run(
        [*git, "add", "--detach", "--quiet", str(path), rev], capture_output=True, text=True
    )
    if made.returncode != 0:
        root.rmdir()
        raise SystemExit(f"cannot check out {rev!r}: {made.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run([*git, "remove", "--force", str(path)], check=False, capture_output=True)
        subprocess.run([*git, "prune"], check=False, capture_output=True)
        root.rmdir()


def compare(builds: dict[str, Path | None], backend: str, turns: int, rounds: int) -> list[Figure]:
    """``turns`` round trips of each build and of the floor, in turn, per round."""
    loop = asyncio.new_event_loop()
    raw = floors.raw_kernel(backend)
    kernel = loop.run_until_complete(raw.__aenter__())

    def floor_once() -> None:
        loop.run_until_complete(kernel.execute("1+1"))

    figures: list[Figure] = []
    try:
        for _ in range(WARM_UP):
            floor_once()
        for n in range(rounds):
            with contextlib.ExitStack() as stack:
                brokers, calls = {}, {}
                for name, cwd in builds.items():
                    broker = stack.enter_context(service.serve(backend, cwd=cwd))
                    api = stack.enter_context(broker.client(timeout=floors.EXEC_TIMEOUT_S))
                    sid = service.create(api)
                    brokers[name] = broker
                    calls[name] = _caller(api, sid)
                    for _ in range(WARM_UP):
                        calls[name]()
                floor: list[float] = []
                times: dict[str, list[float]] = {name: [] for name in builds}
                cpu0 = {name: b.cpu_s() for name, b in brokers.items()}
                names = list(builds)
                for turn in range(turns):
                    floor.append(_timed(floor_once))
                    for name in names if turn % 2 == 0 else names[::-1]:
                        times[name].append(_timed(calls[name]))
                base = statistics.median(floor)
                figures.append(Figure("floor", n + 1, base, 1.0, 0.0))
                for name, broker in brokers.items():
                    ms = statistics.median(times[name])
                    cpu = (broker.cpu_s() - cpu0[name]) / turns * 1000
                    figures.append(Figure(name, n + 1, ms, ms / base, cpu))
    finally:
        loop.run_until_complete(raw.__aexit__(None, None, None))
        loop.close()
    return figures


def _caller(api: httpx.Client, sid: str) -> Callable[[], None]:
    def call() -> None:
        service.execute(api, sid, "1+1")

    return call


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def table(figures: list[Figure]) -> str:
    lines = [
        "| build | round | 1+1 p50 | ratio to the floor | broker CPU per 1+1 |",
        "|---|---|---|---|---|",
    ]
    for f in figures:
        cpu = f"{f.cpu_ms:.2f} ms" if f.build != "floor" else ""
        ratio = f"{f.ratio:.2f}x" if f.build != "floor" else ""
        lines.append(f"| {f.build} | {f.round} | {f.ms:.2f} ms | {ratio} | {cpu} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", action="append", default=[], metavar="REV")
    parser.add_argument("--backend", default="local", choices=["local", "docker"])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.turns < 1 or args.rounds < 1:
        parser.error("--turns and --rounds must be at least 1")
    with contextlib.ExitStack() as stack:
        builds: dict[str, Path | None] = {THIS: None}
        for rev in args.against:
            builds[rev] = stack.enter_context(worktree(rev))
        print(f"1+1 side by side, {args.backend} backend, {args.turns} turns x {args.rounds}")
        print(table(compare(builds, args.backend, args.turns, args.rounds)))


if __name__ == "__main__":
    main()
