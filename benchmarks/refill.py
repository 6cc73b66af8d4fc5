"""Does the warm pool's refill slow the sessions already running? (issue 10: "the pool
refills without slowing running sessions").

One broker with a pool of ``pool`` and one running session that does ``1+1`` without a
pause, on its own connection and thread. Blocks come in pairs:

* refill: another client creates ``pool`` sessions, which empties the pool; the block
  starts once they are answered and lasts until the pool is full again (its containers
  started, their kernels ready);
* quiet: the pool is full and nothing else happens, for as long as the refill block took.

Both kinds ask the broker how full its pool is at the same pace. Between blocks, outside
the timing, the harness waits for the pool, deletes the refill block's sessions and waits
again. The session's round trips in each kind of block are compared (p50 and p95). Every
loop is bounded in count and time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from benchmarks import service

#: At most this many round trips per block (the block normally ends on time first).
MAX_PER_BLOCK = 5000
#: A block's longest time (a refill normally takes one or two seconds).
MAX_BLOCK_S = 60.0
#: How often the harness asks for the pool's size during a block (both kinds).
POLL_S = 0.1
#: The quiet time after a pool refill and after deletes, before the next block.
SETTLE_S = 1.0


def running_session(pool: int = 2, pairs: int = 5) -> dict[str, Any]:
    """``{"quiet": [ms...], "refill": [ms...], "refilled": [s...]}``: the running session's
    round trips by kind of block, and how long each refill took to fill the pool (from the
    claims' answers)."""
    out: dict[str, Any] = {"quiet": [], "refill": [], "refilled": []}
    with service.serve("docker", pool) as broker, broker.client() as api:
        broker.wait_warm(pool)
        sid = service.create(api)
        with broker.client() as own:
            for _ in range(10):
                service.execute(own, sid, "1+1")
            for _ in range(pairs):
                broker.wait_warm(pool)
                time.sleep(SETTLE_S)
                refill = _Block(broker, api, pool)
                out["refill"] += refill.run(own, sid, claim=True)
                out["refilled"].append(refill.took_s)
                broker.wait_warm(pool)
                for other in refill.claimed:
                    api.delete(f"/v1/sessions/{other}")
                broker.wait_warm(pool)
                time.sleep(SETTLE_S)
                out["quiet"] += _Block(broker, api, pool).run(own, sid, last_s=refill.took_s)
        api.delete(f"/v1/sessions/{sid}")
    return out


class _Block:
    """``1+1`` on a thread while the harness watches the pool: with ``claim``, the pool
    emptied first and the block over once it is full again; else over after ``last_s``."""

    def __init__(self, broker: service.Broker, api: Any, pool: int) -> None:
        self.broker, self.api, self.pool = broker, api, pool
        self.claimed: list[str] = []
        self.took_s = 0.0

    def run(self, own: Any, sid: str, *, claim: bool = False, last_s: float = 0.0) -> list[float]:
        samples: list[float] = []
        stop = threading.Event()

        def drive() -> None:
            while not stop.is_set() and len(samples) < MAX_PER_BLOCK:
                samples.append(service.timed(service.execute, own, sid, "1+1")[0])

        if claim:
            # The claims themselves (two session starts on the broker's loop) are not the
            # refill: the running session is timed from when they have been answered.
            self.claimed = [service.create(self.api) for _ in range(self.pool)]
        runner = threading.Thread(target=drive, name="running-session")
        runner.start()
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < MAX_BLOCK_S and runner.is_alive():
                ready = self.broker.warm(self.api)
                if claim and ready >= self.pool:
                    break
                if not claim and time.monotonic() - t0 >= last_s:
                    break
                time.sleep(POLL_S)
        finally:
            self.took_s = time.monotonic() - t0
            stop.set()
            runner.join(timeout=60)
        return samples
