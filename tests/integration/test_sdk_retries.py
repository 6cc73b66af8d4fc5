"""A retried run never runs twice: the SDK against a real broker, through a proxy that
loses the first answer.

The proxy forwards TCP on loopback. For the first connection it lets the request reach the
broker, which runs the code, and then closes the client's side instead of passing the
answer on. The SDK sees a connection that broke without an answer and sends the call again
with the same ``Idempotency-Key``; the broker hands back the first run.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from interpreter.client import AsyncClient, AsyncSession, Client, DoneEvent, Session, StdoutEvent
from tests.conftest import Server

FAST = 0.01
KEY_HEADER = re.compile(rb"^idempotency-key:\s*(\S+)\r$", re.IGNORECASE | re.MULTILINE)


class AnswerDroppingProxy:
    """Forwards connections to ``upstream``; the first ``drop`` of them lose their answer."""

    def __init__(self, upstream: str, drop: int = 1) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.drop = drop
        self.requests: list[bytes] = []  # the bytes each connection sent, in order
        self.dropped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def keys(self) -> list[str]:
        return [m.decode() for raw in self.requests for m in KEY_HEADER.findall(raw)]

    def close(self) -> None:
        self._stop.set()
        self._accept.join(5)
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def _serve(self) -> None:
        index = 0
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            thread = threading.Thread(
                target=self._relay, args=(conn, index < self.drop), daemon=True
            )
            self._threads.append(thread)
            thread.start()
            index += 1

    def _relay(self, client: socket.socket, drop: bool) -> None:
        sent = bytearray()
        self.requests.append(b"")
        slot = len(self.requests) - 1
        upstream = socket.create_connection(self.upstream)

        def forward() -> None:
            try:
                while data := client.recv(65536):
                    sent.extend(data)
                    self.requests[slot] = bytes(sent)
                    upstream.sendall(data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)

        up = threading.Thread(target=forward, daemon=True)
        up.start()
        try:
            while data := upstream.recv(65536):
                if drop:  # the broker began its answer (headers come first): lose it all
                    self.dropped.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            up.join(5)


@pytest.fixture
def proxy(local_server: Server) -> Iterator[AnswerDroppingProxy]:
    p = AnswerDroppingProxy(local_server.url)
    yield p
    p.close()


@pytest.fixture
def direct(local_server: Server) -> Iterator[Session]:
    """A session made without the proxy, so that its first connection is the run's."""
    with (
        Client(local_server.url, api_key=local_server.api_key) as client,
        client.create_session() as session,
    ):
        session.run("n = 0", raise_on_error=True)
        yield session


def executed(session: Session) -> int:
    return session.refresh().execution_count


def test_a_run_whose_answer_was_lost_is_retried_and_runs_once(
    local_server: Server, proxy: AnswerDroppingProxy, direct: Session
) -> None:
    before = executed(direct)
    with Client(proxy.url, api_key=local_server.api_key, retry_backoff=FAST) as client:
        session = Session(client, direct.info)
        result = session.run("n += 1\nn")
    assert proxy.dropped.is_set()
    assert [r.split(b"\r\n", 1)[0] for r in proxy.requests] == [
        f"POST /v1/sessions/{direct.id}/execute HTTP/1.1".encode()
    ] * 2
    assert executed(direct) == before + 1  # sent twice, run once
    assert direct.run("n").text == "1"
    assert result.ok and result.text == "1"  # the first run's answer
    first, second = proxy.keys()
    assert first == second  # because the retry carried the first attempt's key
    assert result.reason is None and result.generation == direct.info.generation == 1


def test_a_stream_whose_answer_was_lost_is_retried_and_runs_once(
    local_server: Server, proxy: AnswerDroppingProxy, direct: Session
) -> None:
    before = executed(direct)
    with Client(proxy.url, api_key=local_server.api_key, retry_backoff=FAST) as client:
        session = Session(client, direct.info)
        events = list(session.stream("import time\ntime.sleep(0.5)\nn += 1\nprint(n)\nn"))
    assert proxy.dropped.is_set() and len(proxy.requests) == 2
    assert len(set(proxy.keys())) == 1
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.result.text == "1"
    assert StdoutEvent("1\n") in events or done.result.stdout == "1\n"
    assert executed(direct) == before + 1
    assert direct.run("n").text == "1"


async def test_async_run_whose_answer_was_lost_runs_once(
    local_server: Server, proxy: AnswerDroppingProxy, direct: Session
) -> None:
    before = executed(direct)
    async with AsyncClient(proxy.url, api_key=local_server.api_key, retry_backoff=FAST) as client:
        session = AsyncSession(client, direct.info)
        result = await session.run("n += 1\nn")
    assert proxy.dropped.is_set() and len(set(proxy.keys())) == 1 and len(proxy.keys()) == 2
    assert result.text == "1"
    assert executed(direct) == before + 1


def test_without_retries_the_lost_answer_is_an_error_and_the_code_ran_once(
    local_server: Server, proxy: AnswerDroppingProxy, direct: Session
) -> None:
    from interpreter.client import ConnectionFailed

    before = executed(direct)
    with Client(proxy.url, api_key=local_server.api_key, max_retries=0) as client:
        session = Session(client, direct.info)
        with pytest.raises(ConnectionFailed, match="cannot talk to"):
            session.run("n += 1\nn")
    assert len(proxy.requests) == 1
    # It runs on without its client (the answer's headers, lost, came before the result).
    deadline = time.monotonic() + 30
    while executed(direct) != before + 1:
        assert time.monotonic() < deadline, "the run whose answer was lost never ran"
        time.sleep(0.05)
    assert direct.run("n").text == "1"  # once
