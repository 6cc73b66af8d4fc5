"""Giving freed memory back to the system, so the broker's size follows its load down.

Two glibc behaviours keep a Python process at its peak. It raises its mmap threshold each
time a large block is freed (up to 32 MiB), after which large strings and buffers (kernel
messages, output text) come from the heap, where fragmentation keeps them resident: fixing
the threshold keeps blocks of 128 KiB and more in their own mappings, which go back the
moment they are freed. And memory freed by worker threads (store writes, notebook saves,
Docker calls: each thread has its own malloc arena) stays resident although Python holds
none of it: measured with the load suite, 45 Docker sessions created, used and closed left
the broker 39 MB larger with 0.4 MB of live Python objects, and ``malloc_trim(0)`` brought
it back to 3 MB above its start. The broker trims once per housekeeping round
(``cull_interval_s``), off the event loop. Nothing happens off glibc.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

#: ``mallopt`` parameter number of the mmap threshold (glibc's ``M_MMAP_THRESHOLD``).
_M_MMAP_THRESHOLD = -3
#: Blocks at least this large get their own mapping.
MMAP_THRESHOLD = 128 << 10


def release_large_blocks() -> bool:
    """Fix glibc's mmap threshold for this process; False where that is not possible."""
    if not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return False


def _find_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None
    return trim


_TRIM = _find_trim()


def trim() -> bool:
    """Return the allocator's free memory to the system; whether any was returned.
    Blocking for a few milliseconds: run it in a thread."""
    if _TRIM is None:
        return False
    return bool(_TRIM(0))


#: An execution that produced at least this much output is followed by a trim.
TRIM_AFTER_BYTES = 8 << 20
#: Seconds between two trims started by :func:`trim_soon`.
TRIM_EVERY_S = 1.0
_last_trim = 0.0
_trims: set[asyncio.Future[bool]] = set()


def trim_soon() -> None:
    """Trim in a worker thread now, unless a trim started less than a second ago. Called
    on the event loop when a large execution has ended, so that memory freed by a flood
    goes back at once rather than at the next housekeeping round."""
    global _last_trim
    loop = asyncio.get_running_loop()
    if _TRIM is None or loop.time() - _last_trim < TRIM_EVERY_S:
        return
    _last_trim = loop.time()
    future = loop.run_in_executor(None, trim)
    _trims.add(future)
    future.add_done_callback(_trims.discard)
