"""A throwaway HTTP listener on a free loopback port that records every request it gets:
the proof that the SDK sent nothing (least of all its API key) to a URL it refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Listener:
    """Where it listens (``url``) and what reached it (``requests``: path and headers)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.requests: list[tuple[str, dict[str, str]]] = []


@contextmanager
def listener() -> Iterator[Listener]:
    """Serve on 127.0.0.1 until the block ends; every request is answered 200 ``stolen``."""
    holder: list[Listener] = []

    class Handler(BaseHTTPRequestHandler):
        def _record(self) -> None:
            holder[0].requests.append((self.path, dict(self.headers.items())))
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.end_headers()
            self.wfile.write(b"stolen")

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _record

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder.append(Listener(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
