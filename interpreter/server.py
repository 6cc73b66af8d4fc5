"""Running the broker: pick the backend, bind, serve, and shut down cleanly on signals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from interpreter import backends, exposure, memory
from interpreter.api.app import make_app
from interpreter.api.base import DRAIN_LIMIT
from interpreter.api.connections import GatedHTTPServer
from interpreter.api.e2b.app import make_e2b_app
from interpreter.broker import SessionBroker
from interpreter.datadir_lock import DataDirInUse, DataDirLock
from interpreter.errors import BackendUnavailable
from interpreter.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Request line and headers of one request at most.
MAX_HEADER_BYTES = 64 << 10
#: Connections the kernel queues before the broker accepts them: a burst of new ones
#: (a flood) must not fill the queue so that real clients' connects time out.
LISTEN_BACKLOG = 2048


def check_bind(settings: Settings) -> None:
    """Refuse to expose an unauthenticated service beyond this machine."""
    exposure.check_bind(settings.host, authenticated=bool(settings.api_keys))


@dataclass
class RunningServer:
    """A started broker and HTTP server."""

    broker: SessionBroker
    http: HTTPServer
    url: str
    #: The E2B-compatible surface, when enabled: its server and its URL(s), code port first.
    e2b_http: HTTPServer | None = None
    e2b_urls: tuple[str, ...] = ()
    #: The data directory's lock, held until the broker is closed.
    lock: DataDirLock | None = None

    async def stop(self) -> None:
        """Drain while still listening (new work gets 503 ``shutting_down``, ``/healthz``
        503 ``draining``), then stop listening and close the broker."""
        servers = [self.http] + ([self.e2b_http] if self.e2b_http is not None else [])
        try:
            await self.broker.drain()
            for server in servers:
                server.stop()
            await self.broker.shutdown()
            for server in servers:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(5):
                        await server.close_all_connections()
        finally:
            if self.lock is not None:
                self.lock.release()


def connection_options(settings: Settings, cap: int) -> dict[str, Any]:
    """Keyword arguments of an HTTP server: body cap, read timeouts, connection caps."""
    return {
        "max_body_size": cap,
        # Bodies are streamed (never buffered whole): the buffer holds headers and a chunk.
        "max_buffer_size": 4 << 20,
        "max_header_size": MAX_HEADER_BYTES,
        # tornado uses this for the headers of each request, and for keep-alive idling.
        "idle_connection_timeout": settings.header_timeout_s,
        "body_timeout": settings.body_timeout_s,
        "max_connections": settings.max_connections,
        "max_unauthenticated": settings.max_unauthenticated_connections,
    }


async def start(settings: Settings, backend: str | None = None) -> RunningServer:
    """Start the broker and listen; returns once requests are accepted."""
    check_bind(settings)
    memory.release_large_blocks()
    if backend:
        chosen = await asyncio.to_thread(backends.create, backend, settings)
    else:
        chosen = await asyncio.to_thread(backends.resolve, settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # Before anything reads the data directory: a second broker's recovery would close
    # the first one's live sessions. Raises DataDirInUse.
    lock = DataDirLock.acquire(settings.data_dir)
    try:
        broker = SessionBroker(settings, chosen)
        await broker.open()
        await chosen.start(broker.factory.pool_template())
        app = make_app(broker, settings)
        # Per-route limits are enforced by the handlers (413 with a JSON body); tornado's
        # own cap only has to cover them and the window in which rejected bodies drain.
        cap = max(settings.max_upload_bytes, settings.max_body_bytes) + DRAIN_LIMIT + 1024
        http = GatedHTTPServer(app, **connection_options(settings, cap))
        sockets = bind_sockets(settings.port, settings.host, backlog=LISTEN_BACKLOG)
    except BaseException:
        lock.release()
        raise
    http.add_sockets(sockets)
    port = sockets[0].getsockname()[1]
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    running = RunningServer(broker=broker, http=http, url=f"http://{host}:{port}", lock=lock)
    ports = [p for p in (settings.e2b_port, settings.e2b_envd_port) if p is not None]
    if ports:
        e2b = GatedHTTPServer(make_e2b_app(broker, settings), **connection_options(settings, cap))
        urls = []
        for wanted in ports:
            try:
                bound = bind_sockets(wanted, settings.host, backlog=LISTEN_BACKLOG)
            except OSError as exc:
                await running.stop()
                raise SystemExit(
                    f"Cannot serve the E2B surface on {settings.host}:{wanted}: {exc.strerror}."
                ) from None
            e2b.add_sockets(bound)
            urls.append(f"http://{host}:{bound[0].getsockname()[1]}")
        running.e2b_http, running.e2b_urls = e2b, tuple(urls)
    return running


def serve(settings: Settings) -> int:
    """Run until SIGINT/SIGTERM; then stop kernels (or detach) and flush notebooks."""

    async def main() -> int:
        try:
            running = await start(settings)
        except BackendUnavailable as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
        except DataDirInUse as exc:
            print(f"interp: error: {exc}", file=sys.stderr, flush=True)
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if not settings.api_keys:
            print(
                "No API key configured: serving loopback only, without authentication.", flush=True
            )
        backend = running.broker.backend.name
        print(f"interp ({backend} backend) listening on {running.url}", flush=True)
        if running.e2b_urls:
            print(f"E2B-compatible surface on {', '.join(running.e2b_urls)}", flush=True)
        await stop.wait()
        print("Shutting down: stopping kernels and flushing notebooks...", flush=True)
        await running.stop()
        print("Stopped.", flush=True)
        return 0

    return asyncio.run(main())


class ServerThread:
    """The broker on its own event loop in a background thread (tests, embedding, MCP).

    Example:
        >>> with ServerThread(Settings(data_dir=tmp, port=0, backend="local")) as srv:
        ...     httpx.get(srv.url + "/healthz")
    """

    def __init__(self, settings: Settings, backend: str | None = None) -> None:
        self.settings = settings
        self.backend = backend
        self.url = ""
        self.e2b_urls: tuple[str, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: RunningServer | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="interp-server", daemon=True)

    @property
    def broker(self) -> SessionBroker:
        assert self._running is not None
        return self._running.broker

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self._running = loop.run_until_complete(start(self.settings, self.backend))
            self.url = self._running.url
            self.e2b_urls = self._running.e2b_urls
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

    def start(self) -> ServerThread:
        self._thread.start()
        self._ready.wait(120)
        if self._error is not None:
            raise self._error
        return self

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        """Run a coroutine on the server's loop and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if self._loop is None or self._running is None:
            return
        running = self._running
        self._running = None
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(running.stop(), self._loop).result(120)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
