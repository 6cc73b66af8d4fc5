"""A ZMQ context that the garbage collector can take without hanging its thread.

pyzmq destroys a context nobody closed in its ``__del__``: it closes the sockets it still
tracks (weakly) and then waits in ``term`` until every socket of the context is closed. When
the context and a socket of its are garbage in one reference cycle (a jupyter_client manager
holding its context and its control socket, a client its channels), the collector clears the
weak references before it runs any finalizer, so the socket is not closed, and ``term`` waits
for it on the collecting thread, for good: the socket's own finalizer would close it, but
only once ``term`` returned. Whichever thread happened to collect, the broker's event loop
among them, hung there (seen in CI with py-spy: ``Context.__del__ -> destroy -> term``).

:class:`Context` closes the sockets it can reach and leaves ``term`` to a thread of its own,
which returns once the collector has finalized the rest. Contexts are still closed by hand
wherever their owner ends; this is for the paths that drop one.
"""

from __future__ import annotations

import contextlib
import threading

import zmq
import zmq.asyncio


class Context(zmq.asyncio.Context):
    """``zmq.asyncio.Context`` whose finalizer never waits."""

    def __del__(self) -> None:
        if self.closed or getattr(self, "_shadow", False):
            return
        for sock in list(getattr(self, "_sockets", None) or ()):
            if not sock.closed:
                sock.close(linger=0)
        # At interpreter exit no thread can start: the process's end frees the context.
        with contextlib.suppress(RuntimeError):
            threading.Thread(target=self.term, name="zmq-context-term", daemon=True).start()
