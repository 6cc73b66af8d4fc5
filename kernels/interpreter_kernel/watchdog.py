"""A kept kernel that no broker looks after ends itself.

A Docker broker that stops keeps its session containers running, so that the next broker
on the same data directory can reattach them. If no broker ever comes back, nothing on the
host would stop them. So while it runs, a broker touches a stamp file in every kernel's
runtime directory (``INTERP_BROKER_STAMP``); a daemon thread here checks it, and once the
stamp (or, before the first one, the kernel's own start) is older than
``INTERP_ORPHAN_AFTER_S`` seconds, it ends the kernel process, which ends its container.

This bounds careless leftovers, not hostile code: code in the kernel can touch the stamp or
stop this thread. The broker's own sweep (containers whose data directory is gone) and its
maximum session lifetime remain.
"""

from __future__ import annotations

import os
import threading
import time

#: Longest pause between two checks, in seconds.
MAX_CHECK_S = 30.0


def stale_for(stamp: str, started: float, now: float) -> float:
    """Seconds since a broker last touched ``stamp`` (since ``started`` if it never did)."""
    try:
        seen = max(os.stat(stamp).st_mtime, started)
    except OSError:
        seen = started
    return now - seen


def start_from_environment() -> threading.Thread | None:
    """Start the watchdog if the environment asks for one; returns its thread."""
    stamp = os.environ.get("INTERP_BROKER_STAMP", "")
    try:
        after = float(os.environ.get("INTERP_ORPHAN_AFTER_S", "0"))
    except ValueError:
        after = 0.0
    if not stamp or after <= 0:
        return None
    started = time.time()
    period = min(MAX_CHECK_S, max(after / 4, 0.5))

    def watch() -> None:
        while True:
            time.sleep(period)
            if stale_for(stamp, started, time.time()) > after:
                # No broker for too long: end the process (and with it the container).
                os._exit(75)

    thread = threading.Thread(target=watch, name="interp-orphan-watchdog", daemon=True)
    thread.start()
    return thread
