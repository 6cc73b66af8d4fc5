"""Every executed cell is in the session's notebook and its store, with the right status,
however often the broker is killed: a cancelled cell never enters the notebook; a cell cut
off by a DELETE keeps its execution count; the cells queued behind a session's last
allowed kernel death are cancelled, and the death says that no kernel replaced it.

The Docker case (kernels outlive their broker) has a cell running across two SIGKILLs,
which stays on record; a reattached cell keeps its own timeout; and the SDK's stream of a
cell resumes across a restart with no event lost or repeated.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from interpreter.audit_verify import verify
from interpreter.client import Client, DoneEvent, StdoutEvent
from tests.conftest import KEY, require_docker, run
from tests.faults.conftest import Broker, notebook_cell, wait_for

#: Prints a number every 0.1 s until the test drops a file named ``stop`` in its workspace.
LOOP = (
    "import os, time\ni = 0\nwhile not os.path.exists('stop'):\n"
    "    print(i, flush=True)\n    i += 1\n    time.sleep(0.1)\nprint('stopped', flush=True)"
)


def _start(broker: Broker, sid: str, code: str, **body: Any) -> tuple[threading.Thread, str]:
    """Submit ``code`` from a thread that waits for its end; returns it and the id."""
    got: dict[str, str] = {}
    ready = threading.Event()

    def go() -> None:
        try:
            with (
                broker.client() as api,
                api.stream(
                    "POST", f"/v1/sessions/{sid}/execute", json={"code": code, **body}
                ) as resp,
            ):
                got["id"] = resp.headers["X-Execution-Id"]
                ready.set()
                resp.read()
        except httpx.HTTPError:
            pass  # the broker was killed under it
        finally:
            ready.set()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    assert ready.wait(60) and "id" in got, "no execution id"
    return thread, got["id"]


def _execution(api: httpx.Client, sid: str, eid: str) -> dict[str, Any]:
    ex: dict[str, Any] = api.get(f"/v1/sessions/{sid}/executions/{eid}").json()
    return ex


def _stop(broker: Broker, sid: str) -> None:
    (broker.session_dir(sid) / "workspace" / "stop").write_text("")


def _cells(broker: Broker, sid: str) -> dict[str, dict[str, Any]]:
    """The code cells of the notebook file, by execution id."""
    nb = json.loads((broker.session_dir(sid) / "notebook.ipynb").read_text())
    return {
        c["metadata"]["interp"]["execution_id"]: c for c in nb["cells"] if c["cell_type"] == "code"
    }


def _audit_ok(broker: Broker, sid: str) -> None:
    """`interp audit verify` passes, and the notebook file has a cell, with the stored
    status, for exactly the executions that ran (in their order)."""
    report = verify(broker.data_dir, sid)
    assert report.ok, [str(p) for s in report.sessions for p in s.problems]
    cells = _cells(broker, sid)
    ran = [(i, s) for i, s in broker.executions(sid) if s not in ("cancelled", "denied")]
    assert [(i, c["metadata"]["interp"]["status"]) for i, c in cells.items()] == ran


# ------------------------------------------------------------------------ local backend


def test_a_queued_cell_cancelled_by_id_is_cancelled_and_stays_out_of_the_notebook(
    brokers: Callable[..., Broker],
) -> None:
    """It was stored ``interrupted`` (reason ``cancelled``); after a broker restart it was
    written into the notebook, and `interp audit verify` found that cell's digest was not
    the one its chain link recorded."""
    broker = brokers("local")
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        first = run(api, sid, "a = 1")
        looping, running = _start(broker, sid, LOOP)
        wait_for(lambda: _execution(api, sid, running)["status"] == "running")
        waiting, queued = _start(broker, sid, "never = 1")
        resp = api.post(f"/v1/sessions/{sid}/interrupt", params={"execution_id": queued})
        assert resp.status_code in (200, 204), resp.text
        cancelled = wait_for(
            lambda: (e := _execution(api, sid, queued))["status"] != "queued" and e
        )
        assert (cancelled["status"], cancelled["reason"]) == ("cancelled", "cancelled")
        _stop(broker, sid)
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "idle")
    waiting.join(30)
    looping.join(30)
    broker.kill()
    for _ in range(2):  # every start used to write the never-run cell back
        broker = brokers("local")
        with broker.client() as api:
            wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "closed")
        assert not broker.logged("written back from the store")
        assert list(_cells(broker, sid)) == [first["id"], running]
        assert dict(broker.executions(sid))[queued] == "cancelled"
        _audit_ok(broker, sid)
        broker.kill()


def test_a_cell_cut_off_by_delete_keeps_its_execution_count(
    brokers: Callable[..., Broker],
) -> None:
    broker = brokers("local")
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        run(api, sid, "a = 1")
        thread, eid = _start(broker, sid, LOOP)
        wait_for(lambda: "3" in _execution(api, sid, eid)["stdout"])
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
        ex = wait_for(lambda: (e := _execution(api, sid, eid))["status"] != "running" and e)
        assert ex["status"] == "interrupted" and ex["stdout"].startswith("0\n")
        assert ex["execution_count"] == 2
        assert notebook_cell(api, sid, eid)["execution_count"] == 2
    thread.join(30)


def test_cells_queued_behind_the_last_allowed_death_are_cancelled(
    brokers: Callable[..., Broker],
) -> None:
    """They came back ``kernel_died`` (reason ``restart_limit``) with no error though they
    never ran; the death itself said "A fresh kernel was started", then that the session
    failed."""
    broker = brokers("local", "--restart-limit", "1")
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        first = run(api, sid, "import os; os._exit(1)")
        assert first["status"] == "kernel_died"
        assert "A fresh kernel was started" in first["error"]["evalue"]
        dies = "import os, time\nwhile not os.path.exists('go'):\n    time.sleep(0.05)\nos._exit(1)"
        dying_thread, dying = _start(broker, sid, dies)
        wait_for(lambda: _execution(api, sid, dying)["status"] == "running")
        queued_thread, queued = _start(broker, sid, "never = 1")
        (broker.session_dir(sid) / "workspace" / "go").write_text("")
        died = wait_for(lambda: (e := _execution(api, sid, dying))["status"] != "running" and e)
        assert died["status"] == "kernel_died"
        message = died["error"]["evalue"]
        assert "A fresh kernel was started" not in message, message
        assert "No fresh kernel was started and the session is closed" in message, message
        assert "create a new session" in message
        never = wait_for(lambda: (e := _execution(api, sid, queued))["status"] != "queued" and e)
        assert (never["status"], never["reason"]) == ("cancelled", "restart_limit"), never
        assert never["error"]["ename"] == "Cancelled"
        assert never["error"]["evalue"].startswith("Not run.")
        assert "create a new session" in never["error"]["evalue"]
        assert never["execution_count"] is None
    dying_thread.join(30)
    queued_thread.join(30)


# ----------------------------------------------------------------------- docker backend


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class _HeldResume(httpx.HTTPTransport):
    """The SDK's own transport, except that its resume of a stream waits until the test
    saw the sessions reattached: while a session reattaches, its events endpoint answers
    the stored record (``unknown``) as final, which is the broker's business, not this
    test's."""

    def __init__(self, reattached: threading.Event) -> None:
        super().__init__()
        self.reattached = reattached

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            self.reattached.wait(120)
        return super().handle_request(request)


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"^\d+$", text, flags=re.M)]


@pytest.mark.docker
def test_cells_running_across_broker_kills_stay_on_record(
    brokers: Callable[..., Broker],
) -> None:
    """Three cells run while the broker is SIGKILLed: (a) one runs on across a second
    SIGKILL: it vanished from the notebook for good (only the store had it, ``unknown``);
    (b) one with ``timeout_s`` was bounded by the service's maximum once reattached, so
    the cell queued behind it got nothing; (c) one streamed through the SDK, whose resume
    after the restart sent ids the new broker numbered from 1 again: it skipped live
    output."""
    require_docker()
    port = str(_free_port())
    broker = brokers("docker", "--port", port)
    with broker.client() as api:
        a, b, c = (api.post("/v1/sessions", json={}).json()["id"] for _ in range(3))
        run(api, a, "x = 1")
        _, long_a = _start(broker, a, LOOP)
        _, bounded = _start(broker, b, "import time\nwhile True:\n    time.sleep(0.1)", timeout_s=4)
        for sid, eid in ((a, long_a), (b, bounded)):
            wait_for(lambda s=sid, e=eid: _execution(api, s, e)["status"] == "running")

    streamed: list[str] = []
    done: list[Any] = []
    stream_ids: list[str] = []

    reattached = threading.Event()

    def consume() -> None:
        try:
            transport = _HeldResume(reattached)
            with Client(broker.url, api_key=KEY, timeout=120, transport=transport) as client:
                session = client.get_session(c)
                for event in session.stream(LOOP, on_start=stream_ids.append):
                    if isinstance(event, StdoutEvent):
                        streamed.append(event.text)
                    elif isinstance(event, DoneEvent):
                        done.append(event.execution)
        except Exception as exc:
            done.append(exc)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    wait_for(lambda: len(_numbers("".join(streamed))) >= 3, what="streamed output")
    broker.kill()
    broker = brokers("docker", "--port", port)
    with broker.client() as api:
        for sid in (a, b, c):
            wait_for(lambda s=sid: api.get(f"/v1/sessions/{s}").json()["status"] != "starting")
        reattached.set()
        # (b): bounded by what was left of its own timeout; the next cell runs.
        after = run(api, b, "'next'", timeout_s=30)
        assert after["status"] == "ok", after
        ended = _execution(api, b, bounded)
        assert ended["status"] == "unknown" and ended["duration_ms"] is not None
        # (c): the stream goes on; once stopped, it has every event once.
        gone = len(streamed)
        wait_for(lambda: len(streamed) > gone + 5 or done, what="output after restart")
        _stop(broker, c)
        consumer.join(60)
        assert done, "the SDK stream never ended"
        final = done[0]
        assert not isinstance(final, Exception), repr(final)
        text = "".join(streamed)
        numbers = _numbers(text)
        assert numbers == sorted(set(numbers)), "an event was repeated"
        # The record has what the client was sent, up to the lines printed while no broker
        # ran (its start as of its last progress write, if one came before the kill).
        kept = _numbers(final.stdout)
        assert kept == sorted(set(kept)) and set(kept) <= set(numbers), final.stdout[:200]
        assert final.stdout.endswith("stopped\n") and text.endswith("stopped\n")
        assert kept[-5:] == numbers[-5:]
    broker.kill()  # (a) is still running: the second kill
    broker = brokers("docker", "--port", port)
    with broker.client() as api:
        wait_for(lambda: api.get(f"/v1/sessions/{a}").json()["status"] != "starting")
        _stop(broker, a)
        wait_for(lambda: api.get(f"/v1/sessions/{a}").json()["status"] == "idle")
        ex = _execution(api, a, long_a)
        assert ex["status"] == "unknown" and ex["stdout"].endswith("stopped\n"), ex
        cell = notebook_cell(api, a, long_a)
        assert cell["metadata"]["interp"]["status"] == "unknown"
        for sid in (a, b, c):
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    for sid in (a, b, c):
        _audit_ok(broker, sid)
    assert long_a in _cells(broker, a)
    assert stream_ids and stream_ids[0] in _cells(broker, c)


@pytest.mark.docker
def test_output_streamed_before_a_shutdown_that_keeps_the_kernel_stays_on_record(
    brokers: Callable[..., Broker],
) -> None:
    """A broker stopped with SIGTERM keeps its kernels for the next one (the Docker
    default). A cell running across it lost what it had printed before the stop: its
    record and notebook cell held only what the next broker saw (16..29 of 0..29)."""
    require_docker()
    port = str(_free_port())
    broker = brokers("docker", "--port", port)
    ticking = LOOP.replace("i += 1", "i += 1\n    if i == 4:\n        open('ticked', 'w').close()")
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        _, eid = _start(broker, sid, ticking)
    # Printed 0..3 (0.1 s apart) before it wrote the file.
    wait_for(lambda: (broker.session_dir(sid) / "workspace" / "ticked").exists(), what="ticks")
    broker.stop()
    broker = brokers("docker", "--port", port)
    with broker.client() as api:
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] != "starting")
        _stop(broker, sid)
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "idle")
        ex = _execution(api, sid, eid)
        assert ex["status"] == "unknown" and ex["stdout"].endswith("stopped\n"), ex
        numbers = _numbers(ex["stdout"])
        assert numbers[:3] == [0, 1, 2], ex["stdout"][:200]
        cell = notebook_cell(api, sid, eid)
        text = "".join(o.get("text", "") for o in cell["outputs"])
        assert _numbers(text)[:3] == [0, 1, 2] and text.endswith("stopped\n"), text[:200]
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    _audit_ok(broker, sid)


def _stored_stdout(broker: Broker, eid: str) -> str:
    """The stdout of ``eid`` as the store holds it now (not the broker's memory)."""
    import sqlite3

    db = sqlite3.connect(broker.data_dir / "state.db")
    try:
        row = db.execute("SELECT data_json FROM executions WHERE id = ?", (eid,)).fetchone()
    finally:
        db.close()
    return str(json.loads(row[0])["stdout"]) if row else ""


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_output_printed_before_a_sigkill_stays_on_record(
    brokers: Callable[..., Broker], backend: str
) -> None:
    """A broker killed mid-cell lost all the cell had printed, which its client had seen:
    the store held the cell as it was when it started. A running cell's record now gets
    its output so far every few seconds. Docker: the next broker reattaches the kernel,
    and the cell's output is what was saved, a line marking the gap, then the rest; local:
    the kernel died with its broker, and the cell closed on record keeps what was saved."""
    if backend == "docker":
        require_docker()
    port = str(_free_port())
    broker = brokers(backend, "--port", port)
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        _, eid = _start(broker, sid, LOOP)
    wait_for(lambda: len(_numbers(_stored_stdout(broker, eid))) >= 3, what="a progress write")
    saved = _numbers(_stored_stdout(broker, eid))
    broker.kill()
    broker = brokers(backend, "--port", port)
    with broker.client() as api:
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] != "starting")
        if backend == "docker":
            _stop(broker, sid)
            wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "idle")
        ex = _execution(api, sid, eid)
        assert ex["status"] == "unknown", ex
        numbers = _numbers(ex["stdout"])
        assert numbers[: len(saved)] == saved, ex["stdout"][:300]
        cell = notebook_cell(api, sid, eid)
        text = "".join(o.get("text", "") for o in cell["outputs"] if o.get("name") == "stdout")
        assert _numbers(text)[: len(saved)] == saved, text[:300]
        if backend == "docker":
            assert "the service restarted here" in ex["stderr"], ex["stderr"]
            assert ex["stdout"].endswith("stopped\n")
            assert cell["execution_count"] is not None
        api.delete(f"/v1/sessions/{sid}")
    _audit_ok(broker, sid)


#: Prints a 30,000-character line every 0.05 s until the test drops a file named ``stop``.
FLOOD_LOOP = (
    "import os, sys, time\ni = 0\nwhile not os.path.exists('stop'):\n"
    "    sys.stdout.write('line %d ' % i + 'y' * 30000 + '\\n'); sys.stdout.flush()\n"
    "    i += 1\n    time.sleep(0.05)\nprint('stopped', flush=True)"
)
_CUT = re.compile(r"\[\.\.\. (\d+) characters omitted; ([^\]]*)\]")


@pytest.mark.parametrize(
    ("backend", "signal"), [("local", "kill"), ("docker", "kill"), ("docker", "stop")]
)
def test_a_cut_output_saved_before_a_broker_restart_counts_what_was_printed(
    brokers: Callable[..., Broker], backend: str, signal: str
) -> None:
    """The progress write of a cell that printed past the output budget keeps it cut, with
    a notice promising the full text in an artifact made when the cell ends. Killed: the
    next broker (Docker) fed that text back as printed, counted only what it cut of it
    again ("139 characters omitted" of megabytes), and stored the 100 KB as the "full
    text"; the local backend's closed cell kept promising an artifact that never came
    (found by an outside operations tester). The notice now counts every character
    printed and not shown, says the full text is lost, and no artifact claims it. A
    SIGTERM that keeps the kernel stores the full text so far: the notice names it."""
    if backend == "docker":
        require_docker()
    port = str(_free_port())
    broker = brokers(backend, "--port", port)
    with broker.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        _, eid = _start(broker, sid, FLOOD_LOOP)
    # A progress write that cut about ten lines (300 KB) printed so far.
    wait_for(
        lambda: (
            (found := _CUT.search(_stored_stdout(broker, eid))) is not None
            and int(found.group(1)) > 200_000
        ),
        what="a cut progress write",
    )
    saved = int(_CUT.findall(_stored_stdout(broker, eid))[0][0])
    broker.kill() if signal == "kill" else broker.stop()
    broker = brokers(backend, "--port", port)
    with broker.client() as api:
        wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] != "starting")
        if backend == "docker":
            _stop(broker, sid)
            wait_for(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "idle")
        ex = _execution(api, sid, eid)
        assert ex["status"] == "unknown" and ex["truncated"], ex["status"]
        ((count, where),) = _CUT.findall(ex["stdout"])
        kept = re.findall(r"the artifact \S+/artifacts/(\w+) holds its full text up to", where)
        assert "the rest is lost" in where if kept else "full text is lost" in where, where
        assert bool(kept) == (signal == "stop"), where
        assert int(count) >= saved, count
        if backend == "local":
            # Every line up to the last one shown was printed (30,008 characters or more
            # each). (Docker: what it printed while no broker ran is missing, and said so.)
            last = max(int(n) for n in re.findall(r"^line (\d+) ", ex["stdout"], flags=re.M))
            assert int(count) >= (last + 1) * 30_008 - len(ex["stdout"]), count
        cell = notebook_cell(api, sid, eid)
        texts = [o["text"] for o in cell["outputs"] if o.get("name") == "stdout"]
        assert texts and all("full text in the artifact" not in t for t in texts), texts[0][:300]
        ((nb_count, nb_where),) = _CUT.findall(texts[0])
        assert nb_where == where and int(nb_count) >= saved
        if backend == "docker":
            assert "the service restarted here" in ex["stderr"]
            assert ex["stdout"].endswith("stopped\n")
        # No artifact of the execution calls the kept text the full text; the one stored
        # at a SIGTERM holds the full text up to then.
        for ref in ex["artifacts"]:
            text = (broker.session_dir(sid) / "artifacts" / ref["id"]).read_bytes()
            if ref["id"] in kept:
                assert text.startswith(b"line 0 ") and len(text) > saved
            else:
                assert not text.startswith(b"line 0 "), ref
        assert [ref["id"] for ref in ex["artifacts"] if ref["id"] in kept] == kept
        api.delete(f"/v1/sessions/{sid}")
    _audit_ok(broker, sid)
