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
import time
from typing import Any

from benchmarks import floors, service
from benchmarks.floors import BUFFERED, ONE_MESSAGE_PER_LINE

WARM_UP = 10


def round_trips(backend: str, n: int, rounds: int = 5) -> dict[str, dict[str, Any]]:
    """``{"floor": {...}, "api": {...}}`` with the keys of :func:`floors.round_trips` and
    :func:`service.round_trips` (``rtt``, ``sse``, ``lines``, ``buffered``)."""
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
                t0 = time.perf_counter()
                lines = loop.run_until_complete(kernel.execute(code))
                floor[key] = ((time.perf_counter() - t0) * 1000, lines)
                ms, result = service.timed(service.execute, api, sid, code)
                out[key] = (ms, len(result["stdout"].splitlines()))
            api.delete(f"/v1/sessions/{sid}")
    finally:
        loop.run_until_complete(raw.__aexit__(None, None, None))
        loop.close()
    return {"floor": floor, "api": out}
