"""A ZMQ context and one of its sockets, garbage in one reference cycle, are collected
without hanging the collecting thread (interpreter/zmqctx.py).

With pyzmq's own context the collection below never returns: the collector clears the
context's weak references to its sockets before any finalizer runs, and the context's
``__del__`` then waits in ``term`` for a socket nothing will close until it returns. A CI
run hung there for good, on the thread of an in-process broker's event loop. The check runs
in a process of its own, so a hang is a failure, not a hung suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CYCLE = """
import gc, sys, threading, weakref
import zmq
from interpreter.zmqctx import Context

gc.disable()

class Holder:
    pass

h = Holder()
h.ctx = Context()
h.sock = h.ctx.socket(zmq.DEALER)
h.sock.connect(sys.argv[1])
h.sock.send(b"a request for a kernel that is gone", zmq.NOBLOCK)
h.me = h
gone = weakref.ref(h.ctx)
del h
gc.collect()
print("collected", flush=True)
for thread in threading.enumerate():
    if thread.name == "zmq-context-term":
        thread.join(10)
gc.collect()
print("terminated" if gone() is None else "still alive", flush=True)
"""


def test_a_context_collected_with_an_open_socket_in_a_cycle_does_not_hang(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CYCLE, f"ipc://{tmp_path}/nobody"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["collected", "terminated"], done.stdout
