"""The round trips of the floor and of the service, taken in alternating blocks.

This machine's speed drifts by a third within minutes (the local floor's ``1+1`` read 2.8,
3.5 and 4.0 ms in runs minutes apart), so a floor measured first and the service measured
a minute later give a ratio that says as much about the drift as about the broker. Here a
raw kernel and a service session are both up at once and are driven in turns: ``rounds``
blocks of ``1+1`` on the floor, then the same on the service (JSON and SSE alternately),
and the 10,000-line cases back to back. Each side is idle while the other runs.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from benchmarks import floors, service
from benchmarks.floors import BUFFERED, ONE_MESSAGE_PER_LINE

WARM_UP = 10
#: Pairs of 10,000-line runs (floor and service) per case.
FLOODS = 3


def _median_run(runs: list[tuple[float, int]]) -> tuple[float, int]:
    """The median time of ``runs`` and the fewest lines any of them received."""
    return statistics.median(ms for ms, _ in runs), min(lines for _, lines in runs)


def round_trips(
    backend: str, n: int, rounds: int = 5, floods: int = FLOODS
) -> dict[str, dict[str, Any]]:
    """``{"floor": {...}, "api": {...}}`` with the keys of :func:`floors.round_trips` and
    :func:`service.round_trips` (``rtt``, ``sse``, ``lines``, ``buffered``). The 10,000-line
    cases run ``floods`` times on each side, in pairs: each is (median ms, fewest lines
    received), and the API's ``lines_ratios``/``buffered_ratios`` hold each pair's ratio."""
    loop = asyncio.new_event_loop()
    raw = floors.raw_kernel(backend)
    kernel = loop.run_until_complete(raw.__aenter__())
    try:
        with service.serve(backend) as broker, broker.client() as api:
            sid = service.create(api)
            for _ in range(WARM_UP):
                loop.run_until_complete(kernel.execute("1+1"))
                service.execute(api, sid, "1+1")
                service.execute_sse(api, sid, "1+1")
            floor: dict[str, Any] = {"rtt": []}
            out: dict[str, Any] = {"rtt": [], "sse": []}
            per_round = max(1, n // rounds)
            for _ in range(rounds):
                for _ in range(per_round):
                    t0 = time.perf_counter()
                    loop.run_until_complete(kernel.execute("1+1"))
                    floor["rtt"].append((time.perf_counter() - t0) * 1000)
                for _ in range(per_round):
                    out["rtt"].append(service.timed(service.execute, api, sid, "1+1")[0])
                    out["sse"].append(service.timed(service.execute_sse, api, sid, "1+1")[0])
            for key, code in (("lines", ONE_MESSAGE_PER_LINE), ("buffered", BUFFERED)):
                floor_runs: list[tuple[float, int]] = []
                api_runs: list[tuple[float, int]] = []
                for turn in range(floods):
                    # In pairs, the order reversed every other pair: one pair alone swung
                    # the ratio from 1.07x to 1.40x between runs as the floor's own time
                    # moved (1.7 to 2.8 s for the same 10,000 lines in Docker).
                    for side in ("floor", "api") if turn % 2 == 0 else ("api", "floor"):
                        if side == "floor":
                            t0 = time.perf_counter()
                            lines = loop.run_until_complete(kernel.execute(code))
                            floor_runs.append(((time.perf_counter() - t0) * 1000, lines))
                        else:
                            ms, result = service.timed(service.execute, api, sid, code)
                            api_runs.append((ms, len(result["stdout"].splitlines())))
                floor[key] = _median_run(floor_runs)
                out[key] = _median_run(api_runs)
                pairs = zip(api_runs, floor_runs, strict=True)
                out[f"{key}_ratios"] = [a[0] / f[0] for a, f in pairs]
            api.delete(f"/v1/sessions/{sid}")
    finally:
        loop.run_until_complete(raw.__aexit__(None, None, None))
        loop.close()
    return {"floor": floor, "api": out}
