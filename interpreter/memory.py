"""Giving freed memory back to the system, so the broker's size follows its load down.

glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), after
which large strings and buffers (kernel messages, output text) come from the heap, where
fragmentation keeps them resident long after they are freed: the broker would stay at its
peak. Fixing the threshold keeps blocks of 128 KiB and more in their own mappings, which
go back to the system the moment they are freed. Nothing happens off glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys

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
