"""Running the broker: pick the backend, bind, serve, and shut down cleanly on signals."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sqlite3
import tempfile
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from interpreter import backends, exposure, memory, storage_floor
from interpreter.api.app import make_app
from interpreter.api.base import DRAIN_LIMIT
from interpreter.api.connections import GatedHTTPServer
from interpreter.api.e2b.app import make_e2b_app
from interpreter.broker import SessionBroker
from interpreter.datadir_lock import DataDirInUse, DataDirLock
from interpreter.errors import BackendUnavailable
from interpreter.logs import announce, complain
from interpreter.settings import Settings
from interpreter.store import open_sessions_on

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Request line and headers of one request at most.
MAX_HEADER_BYTES = 64 << 10
#: Connections the kernel queues before the broker accepts them: a burst of new ones
#: (a flood) must not fill the queue so that real clients' connects time out.
LISTEN_BACKLOG = 2048


class StartupFailed(SystemExit):
    """The service cannot start as configured; the message is one line for the terminal,
    saying what is wrong and what to do. ``interp serve`` prints it as ``interp: error:``
    and exits 2, as for a bad setting; uncaught (an embedded service), it still ends the
    program with the message and no traceback."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def check_bind(settings: Settings) -> None:
    """Refuse to expose an unauthenticated service beyond this machine."""
    try:
        exposure.check_bind(settings.host, authenticated=bool(settings.api_keys))
    except StartupFailed:
        raise
    except SystemExit as exc:
        raise StartupFailed(str(exc.code)) from None


def prepare_data_dir(path: Path) -> None:
    """Create the data directory and make sure the broker can write in it
    (``StartupFailed`` if not): a file in its place, a read-only filesystem or missing
    permissions otherwise end the start in a traceback from wherever it first writes."""
    where = f"the data directory {path} (--data-dir or INTERP_DATA_DIR)"
    if path.exists() and not path.is_dir():
        raise StartupFailed(f"{where} is not a directory: give a directory, or a path to create.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as exc:
        doing = "create" if not path.is_dir() else "write in"
        raise StartupFailed(
            f"cannot {doing} {where}: {exc.strerror or exc}; give a directory this user "
            "can write in, on a writable filesystem."
        ) from None


def _bind(settings: Settings, port: int, what: str) -> list[socket.socket]:
    """The listening sockets of ``port``, or ``StartupFailed`` saying why not."""
    try:
        return bind_sockets(port, settings.host, backlog=LISTEN_BACKLOG)
    except OSError as exc:
        raise StartupFailed(exposure.cannot_bind(what, settings.host, port, exc)) from None


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
        "max_per_key": settings.max_connections_per_key,
    }


async def start(settings: Settings, backend: str | None = None) -> RunningServer:
    """Start the broker and listen; returns once requests are accepted."""
    check_bind(settings)
    memory.release_large_blocks()
    if backend:
        chosen = await asyncio.to_thread(backends.create, backend, settings)
    else:
        chosen = await asyncio.to_thread(backends.resolve, settings)
        if settings.backend == "auto" and chosen.name != "docker":
            await asyncio.to_thread(_keep_docker_sessions, settings)
    await asyncio.to_thread(prepare_data_dir, settings.data_dir)
    await asyncio.to_thread(_warn_about_room, settings, chosen.isolated)
    # Before anything reads the data directory: a second broker's recovery would close
    # the first one's live sessions. Raises DataDirInUse.
    lock = DataDirLock.acquire(settings.data_dir)
    try:
        await asyncio.to_thread(_check_record_is_there, settings)
        try:
            broker = SessionBroker(settings, chosen)
        except sqlite3.DatabaseError as exc:
            if _for_want_of_room(exc, settings):
                raise _disk_full(settings) from None
            raise StartupFailed(
                f"{settings.db_path} cannot be read as the service's record ({exc}): "
                "restore it from a backup, or move it away to start with an empty record "
                "(the sessions in it are then no longer known)."
            ) from None
        try:
            await broker.open()
        except (OSError, sqlite3.Error) as exc:
            if _for_want_of_room(exc, settings):
                raise _disk_full(settings) from None
            raise
        await chosen.start(broker.factory.pool_template())
        app = make_app(broker, settings)
        # Per-route limits are enforced by the handlers (413 with a JSON body); tornado's
        # own cap only has to cover them and the window in which rejected bodies drain.
        largest = max(
            settings.max_upload_bytes, settings.max_body_bytes, settings.max_notebook_body_bytes
        )
        cap = largest + DRAIN_LIMIT + 1024
        http = GatedHTTPServer(app, **connection_options(settings, cap))
    except BaseException:
        lock.release()
        raise
    host = settings.host if ":" not in settings.host else f"[{settings.host}]"
    running = RunningServer(broker=broker, http=http, url="", lock=lock)
    try:
        sockets = _bind(settings, settings.port, "the API")
    except StartupFailed:
        await running.stop()
        raise
    http.add_sockets(sockets)
    running.url = f"http://{host}:{sockets[0].getsockname()[1]}"
    ports = [p for p in (settings.e2b_port, settings.e2b_envd_port) if p is not None]
    if ports:
        e2b = GatedHTTPServer(make_e2b_app(broker, settings), **connection_options(settings, cap))
        urls = []
        for wanted in ports:
            try:
                bound = _bind(settings, wanted, "the E2B surface")
            except StartupFailed:
                await running.stop()
                raise
            e2b.add_sockets(bound)
            urls.append(f"http://{host}:{bound[0].getsockname()[1]}")
        running.e2b_http, running.e2b_urls = e2b, tuple(urls)
    return running


def _for_want_of_room(exc: BaseException, settings: Settings) -> bool:
    """Whether opening the record failed because its disk is full: SQLite says so
    ("database or disk is full"), or says "disk I/O error" (its shared-memory file could
    not grow) with less than 1 MiB left."""
    if storage_floor.failure_reason(exc) == "storage_full":
        return True
    try:
        return storage_floor.free_mb(settings.data_dir) < 1
    except OSError:
        return False


def _check_record_is_there(settings: Settings) -> None:
    """Refuse to start with an empty record beside sessions it has lost: a ``state.db``
    that is missing or empty (0 bytes: truncated, or a failed copy) while ``sessions/``
    holds notebooks. SQLite would take it for a new database, and the service would
    start knowing none of those sessions, without a word."""
    db = settings.db_path
    try:
        size = db.stat().st_size
    except FileNotFoundError:
        size = None
    except OSError:
        return  # said when it is opened
    if size:
        return
    try:
        kept = sum(1 for d in settings.sessions_dir.iterdir() if (d / "notebook.ipynb").is_file())
    except OSError:
        return
    if kept:
        state = "missing" if size is None else "empty (0 bytes)"
        raise StartupFailed(
            f"{db} is {state}, but {settings.sessions_dir} holds the notebooks of {kept} "
            "session(s) it recorded. Restore state.db from a backup; or, to start with an "
            f"empty record, move {settings.sessions_dir} away first (its notebooks stay "
            "readable, and `interp rebuild NOTEBOOK` brings one's state back in a new "
            "session)."
        )


def _disk_full(settings: Settings) -> StartupFailed:
    """The refusal to start on a data disk with no room for the record's first writes."""
    return StartupFailed(
        f"The disk of the data directory {settings.data_dir} is full: the service's record "
        "cannot be written. Free space on it (or choose another --data-dir), then start "
        "again; nothing in the record was changed."
    )


def _warn_about_room(settings: Settings, quotas: bool) -> None:
    """Warn when the data disk is already below its floor (every new session, cell and
    upload would be refused with no word at the start), or, with workspace ``quotas``,
    when one session's default quota is more than the disk has above the floor: the
    workspace filesystems are sparse, so their quotas are promised, not reserved, and a
    kernel that writes into a full disk gets I/O errors."""
    quota = settings.default_disk_mb if quotas else 0
    try:
        free = storage_floor.free_mb(settings.data_dir)
    except OSError:
        return
    room = free - settings.min_free_mb
    if room < 0:
        log.warning(
            "the data disk has %d MiB free, below --min-free-mb %d: new sessions, cells "
            "and uploads are refused (507 storage_full) until space is freed on it. Free "
            "space, give the data directory a larger disk, or lower --min-free-mb.",
            free,
            settings.min_free_mb,
        )
    elif quota and room < quota:
        log.warning(
            "the data disk has %d MiB free above --min-free-mb, less than one session's "
            "workspace quota (--default-disk-mb %d): quotas are not reserved, so sessions "
            "can fill the disk. Give the data directory more room or lower the quota.",
            max(room, 0),
            quota,
        )


def _keep_docker_sessions(settings: Settings) -> None:
    """Refuse the local fallback of ``auto`` when the data directory holds open Docker
    sessions: the local backend cannot reach their containers, so its recovery would
    close them for good, while the containers still run with their state (an engine
    that is only late at boot, or being restarted)."""
    kept = open_sessions_on(settings.db_path, "docker")
    if kept:
        raise StartupFailed(
            f"{settings.data_dir} holds {kept} open Docker session(s), and the Docker "
            "backend cannot run now (see the warning above): --backend auto will not close "
            "them by falling back to the local backend. Start the engine and start again "
            "(their containers keep their state), or give --backend local to close them."
        )


def serve(settings: Settings) -> int:
    """Run until SIGINT, SIGTERM or SIGHUP; then stop kernels (or detach) and flush notebooks."""

    async def main() -> int:
        try:
            running = await start(settings)
        except (BackendUnavailable, StartupFailed) as exc:
            complain(settings.log_format, "error", exc.message)
            return 2
        except DataDirInUse as exc:
            complain(settings.log_format, "error", str(exc))
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # SIGHUP: the terminal or the ssh session that started it went away.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
        fmt = settings.log_format
        if not settings.api_keys:
            announce(
                fmt,
                "No API key configured: serving loopback only, without authentication.",
                "no_api_key",
            )
        backend = running.broker.backend.name
        announce(
            fmt,
            f"interp ({backend} backend) listening on {running.url}",
            "listening",
            backend=backend,
            url=running.url,
        )
        if running.e2b_urls:
            announce(
                fmt,
                f"E2B-compatible surface on {', '.join(running.e2b_urls)}",
                "e2b_listening",
                urls=list(running.e2b_urls),
            )
        await stop.wait()
        grace = settings.shutdown_grace_s
        hint = f" (running cells get up to {grace:g} s; signal again to stop now)" if grace else ""
        kernels = (
            "kernels keep running for the next start"
            if running.broker.backend.keep_on_shutdown
            else "stopping kernels"
        )
        announce(fmt, f"Shutting down: {kernels}, flushing notebooks...{hint}", "stopping")

        def hurry() -> None:
            # A second Ctrl-C was ignored without a word while cells had their grace.
            announce(fmt, "Stopping now: running cells get no more time.", "hurried")
            running.broker.hurry()

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, hurry)
        await running.stop()
        announce(fmt, "Stopped.", "stopped")
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
