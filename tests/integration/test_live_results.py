"""Live partial results and resumable event streams, against a real broker (local backend).

* ``GET .../executions/{id}`` of a running execution holds the output so far;
* every SSE event carries an ``id:``; ``GET .../executions/{id}/events?after=N`` (or the
  ``Last-Event-ID`` header) replays what came after N, then goes on live;
* the SDK's ``stream()`` resumes by itself when its connection is cut in the middle of an
  event: a TCP proxy here cuts it, and every event arrives exactly once.

Cells wait for a gate file in their workspace, which the test creates once the state it
needs is reached, so nothing depends on timing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from interpreter.client import (
    AsyncClient,
    AsyncSession,
    Client,
    DoneEvent,
    OutputEvent,
    Session,
    StdoutEvent,
)
from tests.conftest import Server

GATE = "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.01)\n"


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class StreamCuttingProxy:
    """Forwards TCP to ``upstream``. In the first answer that contains ``marker`` it passes
    on only the bytes up to the end of the marker (the middle of an SSE frame), then
    closes both sides. Other connections pass untouched."""

    def __init__(self, upstream: str, marker: bytes) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.marker = marker
        self.cut = threading.Event()
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def close(self) -> None:
        self._stop.set()
        self._accept.join(5)
        self._listener.close()
        for thread in self._threads:
            thread.join(5)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(None)
            thread = threading.Thread(target=self._relay, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _relay(self, client: socket.socket) -> None:
        slot = len(self.requests)
        self.requests.append(b"")
        upstream = socket.create_connection(self.upstream)

        def forward() -> None:
            try:
                while data := client.recv(65536):
                    self.requests[slot] += data
                    upstream.sendall(data)
            except OSError:
                pass
            finally:  # the client is gone: let the broker close its side too
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_WR)

        up = threading.Thread(target=forward, daemon=True)
        up.start()
        seen = b""
        try:
            while data := upstream.recv(65536):
                if not self.cut.is_set():
                    seen += data
                    at = seen.find(self.marker)
                    if at >= 0:
                        self.cut.set()
                        keep = len(data) - (len(seen) - at - len(self.marker))
                        client.sendall(data[:keep])
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
def direct(local_server: Server) -> Iterator[Session]:
    with Client(local_server.url, api_key=local_server.api_key) as client:
        session = client.create_session()
        yield session
        session.close()


def test_a_running_execution_answers_with_its_output_so_far(
    local_server: Server, direct: Session
) -> None:
    code = (
        "from IPython.display import display, HTML\n"
        "print('partial 1', flush=True)\n"
        "display(HTML('<b>so far</b>'))\n" + GATE + "print('the rest')\n'final'"
    )
    ids: list[str] = []
    runner = threading.Thread(target=lambda: list(direct.stream(code, on_start=ids.append)))
    runner.start()
    with local_server.client() as api:
        wait_for("the execution id", lambda: ids)
        url = f"/v1/sessions/{direct.id}/executions/{ids[0]}"
        running = wait_for(
            "the output so far",
            lambda: (lambda e: e if e["outputs"] else None)(api.get(url).json()),
        )
        assert running["status"] == "running"
        assert running["stdout"] == "partial 1\n"
        assert [o["data"]["text/html"] for o in running["outputs"]] == ["<b>so far</b>"]
        assert running["error"] is None
        direct.upload("go", "")
        runner.join(60)
        final = api.get(url).json()
    assert final["status"] == "ok" and final["stdout"] == "partial 1\nthe rest\n"
    assert [o["type"] for o in final["outputs"]] == ["display_data", "execute_result"]


def _events(text: str) -> list[dict[str, str]]:
    frames = []
    for block in text.strip().split("\n\n"):
        frame: dict[str, str] = {}
        for line in block.split("\n"):
            name, _, value = line.partition(": ")
            frame[name] = value
        frames.append(frame)
    return frames


def test_events_carry_ids_and_resume_after_one(local_server: Server, direct: Session) -> None:
    code = "for i in range(3):\n    print(i, flush=True)\n    display(i)\n1/0"
    with local_server.client() as api:
        streamed = api.post(
            f"/v1/sessions/{direct.id}/execute",
            json={"code": code},
            headers={"Accept": "text/event-stream"},
        )
        frames = _events(streamed.text)
        ex_id = streamed.headers["x-execution-id"]
        assert [int(f["id"]) for f in frames] == list(range(1, len(frames) + 1))
        assert frames[-1]["event"] == "done" and frames[-2]["event"] == "error"
        url = f"/v1/sessions/{direct.id}/executions/{ex_id}/events"
        assert _events(api.get(url).text) == frames  # from the start
        assert _events(api.get(url, params={"after": 4}).text) == frames[4:]
        by_header = api.get(url, headers={"Last-Event-ID": str(len(frames) - 2)})
        assert _events(by_header.text) == frames[-2:]
        # Past the end (or after `done`): the final record is still delivered.
        assert _events(api.get(url, params={"after": 999}).text) == frames[-1:]
        bad = api.get(url, params={"after": "x1"})
        assert bad.status_code == 400 and "after must be an event id" in bad.text
        # A well-formed id too long to be one says why (it said "in ASCII digits").
        long = api.get(url, params={"after": "1" * 13})
        assert long.status_code == 400 and "of at most 12 ASCII digits" in long.text
        assert api.get(url.replace(ex_id, "ex_missing")).status_code == 404


def test_stream_resumes_after_a_cut_connection_without_loss_or_repeat(
    local_server: Server, direct: Session
) -> None:
    code = (
        "for i in range(5):\n    print(f'before {i}', flush=True)\n"
        "print('cut-here', flush=True)\n" + GATE + "for i in range(5):\n"
        "    print(f'after {i}', flush=True)\n    display(i)\n'last'"
    )
    expected = "".join(f"before {i}\n" for i in range(5)) + "cut-here\n"
    expected += "".join(f"after {i}\n" for i in range(5))
    proxy = StreamCuttingProxy(local_server.url, b"cut-here")
    try:
        with Client(proxy.url, api_key=local_server.api_key) as client:
            session = Session(client, direct.info)
            events = []
            for event in session.stream(code):
                events.append(event)
                if isinstance(event, StdoutEvent) and "cut-here" in event.text:
                    # Only the resumed stream can hold it: the cut fell inside its frame.
                    assert proxy.cut.is_set()
                    direct.upload("go", "")
    finally:
        proxy.close()
    stdout = "".join(e.text for e in events if isinstance(e, StdoutEvent))
    assert stdout == expected  # nothing lost, nothing twice
    shown = [e.output.data["text/plain"] for e in events if isinstance(e, OutputEvent)]
    assert shown == ["0", "1", "2", "3", "4", "'last'"]
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.execution.stdout == expected
    assert sum(isinstance(e, DoneEvent) for e in events) == 1
    resumed = [r for r in proxy.requests if b"/events?after=" in r.split(b"\r\n", 1)[0]]
    assert len(resumed) == 1
    after = int(resumed[0].split(b"after=", 1)[1].split(b" ", 1)[0])
    assert after >= 1  # it resumed after the events it had, not from the start


async def test_async_stream_resumes_after_a_cut_connection(
    local_server: Server, direct: Session
) -> None:
    code = "for i in range(4):\n    print(f'line {i}', flush=True)\nprint('cut-here')\n" + GATE
    code += "print('after')\n7"
    proxy = StreamCuttingProxy(local_server.url, b"cut-here")
    try:
        async with AsyncClient(proxy.url, api_key=local_server.api_key) as client:
            session = AsyncSession(client, direct.info)
            events = []
            async for event in session.stream(code):
                events.append(event)
                if isinstance(event, StdoutEvent) and "cut-here" in event.text:
                    assert proxy.cut.is_set()
                    direct.upload("go", "")
    finally:
        proxy.close()
    stdout = "".join(e.text for e in events if isinstance(e, StdoutEvent))
    assert stdout == "line 0\nline 1\nline 2\nline 3\ncut-here\nafter\n"
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.result.text == "7"


def test_a_repeated_execute_resumes_after_its_last_event_id(
    local_server: Server, direct: Session
) -> None:
    body = {"code": "for i in range(3):\n    print(i, flush=True)\n    display(i)"}
    headers = {"Accept": "text/event-stream", "Idempotency-Key": "resume-after-2"}
    with local_server.client() as api:
        url = f"/v1/sessions/{direct.id}/execute"
        first = _events(api.post(url, json=body, headers=headers).text)
        again = api.post(url, json=body, headers={**headers, "Last-Event-ID": "2"})
        assert again.headers["idempotent-replayed"] == "true"
        assert _events(again.text) == first[2:]  # the same run, after event 2


def test_a_repeat_of_a_running_stream_gets_its_events_from_the_first(
    local_server: Server, direct: Session
) -> None:
    """A retry whose first request's answer was lost (a proxy's 502, a reset before the
    headers) got the run's events from the moment it came: the SDK's retried stream
    started mid-output. It gets them from the first now, and an event id the run has not
    reached is refused instead of being given again to other events."""
    direct.run("import os\nif os.path.exists('go'): os.remove('go')")
    body = {"code": "print('one', flush=True)\nprint('two', flush=True)\n" + GATE + "'end'"}
    headers = {"Accept": "text/event-stream", "Idempotency-Key": "repeat-from-the-first"}
    url = f"/v1/sessions/{direct.id}/execute"
    with local_server.client() as api:
        with api.stream("POST", url, json=body, headers=headers) as first:
            seen = ""
            lines = first.iter_lines()
            while "two" not in seen:
                seen += next(lines)
            ex_id = first.headers["x-execution-id"]
        # The first request is gone, the run waits at its gate: the retry comes.
        ahead = api.get(f"/v1/sessions/{direct.id}/executions/{ex_id}/events?after=999")
        assert ahead.status_code == 400 and ahead.json()["error"]["type"] == "event_id_ahead"
        with api.stream("POST", url, json=body, headers=headers) as again:
            assert again.headers["idempotent-replayed"] == "true"
            direct.upload("go", "")
            frames = _events(again.read().decode())
    stdout = "".join(json.loads(f["data"])["text"] for f in frames if f.get("event") == "stdout")
    assert stdout == "one\ntwo\n"
    assert [int(f["id"]) for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1]["event"] == "done"


def test_a_resume_from_before_a_floods_kept_events_is_gone_not_missing(
    local_server: Server, direct: Session
) -> None:
    """The events of a flood past the resume log (1 MiB of text) existed and were let go:
    a resume from before them answers 410 events_expired and says to read the execution,
    which still holds the output so far (it was 404, read as "no such execution"). That
    output so far ends with what the cell printed last: past the in-memory limit (4 MiB)
    it stopped where memory did, so a poller never saw the flood end."""
    direct.run("import os\nif os.path.exists('go'): os.remove('go')")
    code = (
        "for i in range(3000):\n    print(str(i) * 500, flush=True)\n"
        "print('flooded', flush=True)\n" + GATE + "'end'"
    )
    ids: list[str] = []
    runner = threading.Thread(target=lambda: list(direct.stream(code, on_start=ids.append)))
    runner.start()
    try:
        with local_server.client() as api:
            wait_for("the execution id", lambda: ids)
            url = f"/v1/sessions/{direct.id}/executions/{ids[0]}"
            # Its whole flood printed (the tail of the output so far), the cell waits.
            wait_for("the flood", lambda: "flooded" in api.get(url).json()["stdout"], 60)
            gone = api.get(f"{url}/events", params={"after": 1})
            assert gone.status_code == 410, gone.text
            error = gone.json()["error"]
            assert error["type"] == "events_expired"
            assert "GET the execution" in error["message"]
            running = api.get(url).json()
            assert running["status"] == "running" and running["stdout"]
    finally:
        direct.upload("go", "")
        runner.join(60)
