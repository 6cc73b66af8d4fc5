"""Connections the broker holds: capped overall, before authentication, and per API key.

A client that opens connections and never finishes a request (one byte, then silence)
costs a descriptor each. Without a bound, a thousand of them exhaust the process's
descriptors and the broker stops answering anyone. :class:`GatedHTTPServer` bounds them:

* at most ``max_unauthenticated`` have not yet sent a request with a valid key; past it the
  oldest such connection is closed, once it has had ``EVICTION_GRACE_S`` to send its
  request and unless a whole request head waits on it (a client that connects and sends
  its request at once is never the one closed, even when the broker is slow to read it;
  a connection that sent one byte and stalled is);
* at most ``max_per_key`` belong to one API key (the key of their last request): a key's
  connection past it closes that key's longest idle connection (idle for
  ``EVICTION_GRACE_S`` at least, between requests, with no request waiting), or, when
  there is none, its request is answered 429 and the connection closed after it. A key
  that opens connections and keeps them alive (a request every few seconds) cannot take
  every connection of the broker and lock out the other keys and ``/healthz``;
* at most ``max_connections`` are open; past it a new connection evicts the oldest
  unauthenticated connection without a request waiting (however young); when there is
  none, the longest idle connection of the key holding the most connections; it is
  closed at once when none is idle.
* when accepting fails for want of descriptors (``EMFILE``), accepting pauses briefly
  instead of spinning on a listening socket that stays readable.

A connection with a request in progress is never the one closed. Header and body read
timeouts are tornado's (``idle_connection_timeout``, ``body_timeout``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import resource
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tornado import httputil
from tornado.http1connection import HTTP1Connection
from tornado.httpserver import HTTPServer
from tornado.httputil import HTTPServerRequest
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream

from interpreter.errors import TooManyConnections
from interpreter.settings import ENV_PREFIX

log = logging.getLogger(__name__)

#: Errors of accept() that mean "no descriptor or memory for now": pause, don't spin.
_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
#: How long accepting pauses after such an error.
ACCEPT_PAUSE_S = 0.1
#: Connections accepted per readiness event at most (others wait for the next turn).
ACCEPT_BATCH = 128
_GATE_ATTR = "_interp_gate"
#: How long a new connection has to send a request before it may be evicted.
EVICTION_GRACE_S = 0.5
#: Bytes looked at (without reading them) to see whether a request head has arrived.
MAX_PEEK = 16 << 10


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered to half the process's soft descriptor limit (kernels, the
    database and logs need the rest)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(8, min(wanted, soft // 2))


def key_share(wanted: int, max_connections: int, cap: int) -> int:
    """The connections one key may hold: ``wanted`` of ``max_connections``, lowered in
    proportion when the descriptor limit lowered ``max_connections`` to ``cap``."""
    return max(1, min(cap, wanted * cap // max_connections))


class GatedHTTPServer(HTTPServer):
    """tornado's HTTP server with connection caps (three more keyword arguments)."""

    #: Connections closed by the caps (refused at the door or evicted), for tests and logs.
    refused = 0
    evicted = 0

    def initialize(
        self,
        *args: Any,
        max_connections: int = 512,
        max_unauthenticated: int = 64,
        max_per_key: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().initialize(*args, **kwargs)
        cap = connection_cap(max_connections)
        self.max_connections = cap
        self.max_unauthenticated = min(max_unauthenticated, cap)
        wanted = max_connections if max_per_key is None else max_per_key
        self.max_per_key = key_share(wanted, max_connections, cap)
        # Insertion-ordered (the first is the oldest): stream -> when it was accepted.
        self._unauthenticated: dict[IOStream, float] = {}
        #: Connections that sent a request with a valid key: the key (its owner id).
        self._key_of: dict[IOStream, str] = {}
        #: The same, by key.
        self._of_key: dict[str, set[IOStream]] = {}
        #: Authenticated connections between two requests: since when.
        self._idle: dict[IOStream, float] = {}
        self._last_warning = -math.inf  # the first warning is logged, however soon after boot

    # -- accepting ---------------------------------------------------------------------

    def add_sockets(self, sockets: Iterable[socket.socket]) -> None:
        for sock in sockets:
            self._sockets[sock.fileno()] = sock
            self._handlers[sock.fileno()] = self._watch(sock)

    def _watch(self, sock: socket.socket) -> Callable[[], None]:
        """Accept on ``sock`` as it becomes readable; returns what stops it."""
        loop = IOLoop.current()
        state = {"watching": False, "stopped": False}

        def start() -> None:
            if not state["stopped"] and not state["watching"]:
                loop.add_handler(sock, ready, IOLoop.READ)
                state["watching"] = True

        def pause() -> None:
            if state["watching"]:
                loop.remove_handler(sock)
                state["watching"] = False
            loop.call_later(ACCEPT_PAUSE_S, start)

        def ready(fd: Any, events: int) -> None:
            for _ in range(ACCEPT_BATCH):
                if state["stopped"]:
                    return
                try:
                    conn, address = sock.accept()
                except BlockingIOError:
                    return
                except ConnectionAbortedError:
                    continue
                except OSError as exc:
                    if exc.errno not in _EXHAUSTED:
                        raise
                    self._warn(f"cannot accept connections: {exc.strerror}; pausing accept")
                    pause()
                    return
                self._handle_connection(conn, address)

        def stop() -> None:
            state["stopped"] = True
            if state["watching"]:
                loop.remove_handler(sock)
                state["watching"] = False

        start()
        return stop

    def handle_stream(self, stream: IOStream, address: tuple[Any, ...]) -> None:
        if len(self._connections) >= self.max_connections and not (
            self._evict_oldest(grace=0) or self._evict_idle_of_largest()
        ):
            self.refused += 1
            self._warn(
                f"{self.max_connections} connections open, each with a request in progress; "
                "refusing new ones"
            )
            stream.close()
            return
        super().handle_stream(stream, address)
        setattr(stream, _GATE_ATTR, self)
        self._unauthenticated[stream] = time.monotonic()
        while len(self._unauthenticated) > self.max_unauthenticated and self._evict_oldest(
            grace=EVICTION_GRACE_S
        ):
            pass

    def start_request(
        self, server_conn: object, request_conn: httputil.HTTPConnection
    ) -> httputil.HTTPMessageDelegate:
        delegate = super().start_request(server_conn, request_conn)
        stream = getattr(request_conn, "stream", None)
        if not isinstance(stream, IOStream):
            return delegate
        if stream in self._key_of:
            # Between two requests (the last one is answered): idle until the next head.
            self._idle[stream] = time.monotonic()
        else:
            # Waiting for a request again without ever having authenticated: evictable.
            self._unauthenticated.setdefault(stream, time.monotonic())
        return _RequestTracker(self, stream, delegate)

    def request_started(self, stream: IOStream) -> None:
        """A request head arrived: the connection is busy, not stalled."""
        self._unauthenticated.pop(stream, None)
        self._idle.pop(stream, None)

    def on_close(self, server_conn: object) -> None:
        stream = getattr(server_conn, "stream", None)
        if stream is not None:
            self._forget(stream)
        super().on_close(server_conn)

    def _forget(self, stream: IOStream) -> None:
        self._unauthenticated.pop(stream, None)
        self._idle.pop(stream, None)
        key = self._key_of.pop(stream, None)
        if key is not None:
            held = self._of_key[key]
            held.discard(stream)
            if not held:
                del self._of_key[key]

    def _evict_oldest(self, grace: float) -> bool:
        """Close the oldest connection that has not authenticated within ``grace`` seconds
        and has no request waiting; False if there is none."""
        if not self._unauthenticated:
            return False
        now = time.monotonic()
        for stream, accepted in self._unauthenticated.items():
            if now - accepted < grace:
                return False  # the rest are younger still
            if not _request_waiting(stream):
                break
        else:
            return False
        del self._unauthenticated[stream]
        self.evicted += 1
        self._warn(
            f"more than {self.max_unauthenticated} connections without a complete, "
            "authenticated request; closing the oldest"
        )
        stream.close()
        return True

    def _evict_idle(self, streams: Iterable[IOStream], grace: float) -> bool:
        """Close the longest idle of ``streams`` that has been idle for ``grace`` seconds
        and has no request waiting; False if there is none."""
        now = time.monotonic()
        idle = sorted((self._idle[s], id(s), s) for s in streams if s in self._idle)
        for since, _, stream in idle:
            if now - since < grace:
                return False  # the rest went idle later still
            if not _request_waiting(stream):
                self._forget(stream)
                self.evicted += 1
                stream.close()
                return True
        return False

    def _evict_idle_of_largest(self) -> bool:
        """At the cap: close the longest idle connection of the key that holds the most
        (of the next one if none of that key's is idle); False if none is idle."""
        holders = sorted(self._of_key.items(), key=lambda item: len(item[1]), reverse=True)
        for key, held in holders:
            count = len(held)
            if self._evict_idle(held, grace=0):
                self._warn(
                    f"{self.max_connections} connections open; closing an idle connection "
                    f"of the key that holds the most (key_id {key}, of its {count})"
                )
                return True
        return False

    def authenticated(self, stream: IOStream, key: str) -> bool:
        """``stream``'s request came with ``key``: it counts as the key's from now on.
        False when the key already holds its share and none of those is idle: the
        connection is then not counted, and is to be closed after its answer."""
        self._unauthenticated.pop(stream, None)
        before = self._key_of.get(stream)
        if before == key:
            return True
        if before is not None:
            self._forget(stream)  # a proxy's connection, carrying another key's request
        held = self._of_key.setdefault(key, set())
        if len(held) >= self.max_per_key and not self._evict_idle(held, EVICTION_GRACE_S):
            if not held:
                del self._of_key[key]
            self.refused += 1
            self._warn(
                f"key_id {key} already holds {self.max_per_key} connections, none idle for "
                f"{EVICTION_GRACE_S} s; refusing one more (429)"
            )
            return False
        held.add(stream)
        self._key_of[stream] = key
        return True

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning > 10:
            self._last_warning = now
            log.warning("%s (refused so far: %d, evicted: %d)", message, self.refused, self.evicted)


class _RequestTracker(httputil.HTTPMessageDelegate):
    """Passes one request through, telling the gate when its head has arrived."""

    def __init__(
        self, gate: GatedHTTPServer, stream: IOStream, inner: httputil.HTTPMessageDelegate
    ) -> None:
        self.gate, self.stream, self.inner = gate, stream, inner

    def headers_received(
        self,
        start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
        headers: httputil.HTTPHeaders,
    ) -> Awaitable[None] | None:
        self.gate.request_started(self.stream)
        return self.inner.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return self.inner.data_received(chunk)

    def finish(self) -> None:
        self.inner.finish()

    def on_connection_close(self) -> None:
        self.inner.on_connection_close()


def _request_waiting(stream: IOStream) -> bool:
    """Whether a whole request head has arrived on ``stream`` and waits to be read (the
    broker was busy): such a connection is served, not evicted."""
    pending = bytes(getattr(stream, "_read_buffer", b""))
    sock = getattr(stream, "socket", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            pending += sock.recv(MAX_PEEK, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    return b"\r\n\r\n" in pending or b"\n\n" in pending


def mark_authenticated(request: HTTPServerRequest, key: str) -> None:
    """The request's connection passed authentication with ``key`` (its owner id): it no
    longer counts (or is evicted) as unauthenticated, and counts as one of the key's.

    Raises :class:`TooManyConnections` (429) when the key already holds its share of the
    connections and none of them is idle; the connection is closed after that answer.
    """
    connection = request.connection
    stream = getattr(connection, "stream", None)
    gate = getattr(stream, _GATE_ATTR, None)
    if not isinstance(gate, GatedHTTPServer) or stream is None:
        return
    if gate.authenticated(stream, key):
        return
    if isinstance(connection, HTTP1Connection):
        # tornado then answers with "Connection: close" and closes once it is sent.
        connection._disconnect_on_finish = True
    raise TooManyConnections(
        f"This API key already holds {gate.max_per_key} connections to the service, its "
        f"share ({ENV_PREFIX}MAX_CONNECTIONS_PER_KEY), none of them idle (each has a "
        "request in progress or was answered just now); this connection is closed after "
        "this answer. Send requests over the connections you hold (keep-alive), or retry "
        "once one of them is done.",
        retry_after=1,
    )
