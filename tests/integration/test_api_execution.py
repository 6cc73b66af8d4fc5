"""Execution semantics through the HTTP API, on real kernels."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from interpreter.client import AsyncClient, BadRequestError, DoneEvent, NotFoundError, StdoutEvent
from interpreter.models import Execution
from tests.conftest import Server, await_status, run
from tests.integration.test_interrupts import (
    BEFORE_CODE_CALLBACK,
    GAP,
    INTO_THE_GAP,
    SIGINT_OPEN,
)


def sse_events(resp: httpx.Response) -> list[tuple[float, str, Any]]:
    """Read a whole SSE response as (arrival time, event name, data)."""
    events = []
    name = None
    for line in resp.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name:
            events.append((time.monotonic(), name, json.loads(line[6:])))
            name = None
    return events


def test_state_persists_across_calls(api: httpx.Client, shared_session: str) -> None:
    assert run(api, shared_session, "x = 41")["status"] == "ok"
    result = run(api, shared_session, "x + 1")
    assert result["status"] == "ok"
    assert result["outputs"][0]["data"]["text/plain"] == "42"
    assert result["outputs"][0]["type"] == "execute_result"


def test_stdout_streams_while_running(api: httpx.Client, shared_session: str) -> None:
    code = "import time\nprint('first', flush=True)\ntime.sleep(1.5)\nprint('second')"
    with api.stream(
        "POST",
        f"/v1/sessions/{shared_session}/execute",
        json={"code": code},
        headers={"Accept": "text/event-stream"},
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = sse_events(resp)
    texts = [(t, d["text"]) for t, n, d in events if n == "stdout"]
    first = next(t for t, text in texts if "first" in text)
    second = next(t for t, text in texts if "second" in text)
    assert second - first >= 1.0, "the first line must arrive well before the second"
    assert events[-1][1] == "done"
    assert events[-1][2]["status"] == "ok"
    assert events[-1][2]["stdout"] == "first\nsecond\n"


def test_ten_thousand_lines_arrive_in_order(api: httpx.Client, shared_session: str) -> None:
    result = run(api, shared_session, "for i in range(10000):\n    print(i, flush=True)")
    assert result["status"] == "ok"
    assert not result["truncated"]
    assert result["stdout"].splitlines() == [str(i) for i in range(10000)]
    nb = api.get(f"/v1/sessions/{shared_session}/notebook").json()
    cell = next(c for c in nb["cells"] if c["metadata"]["interp"]["execution_id"] == result["id"])
    text = "".join(o["text"] for o in cell["outputs"] if o["output_type"] == "stream")
    assert text.splitlines() == [str(i) for i in range(10000)]


def test_user_error_is_data_without_ansi(api: httpx.Client, shared_session: str) -> None:
    result = run(api, shared_session, "def f():\n    return 1/0\nf()")
    assert result["status"] == "error"
    assert result["error"]["ename"] == "ZeroDivisionError"
    assert result["error"]["evalue"] == "division by zero"
    tb = "\n".join(result["error"]["traceback"])
    assert "ZeroDivisionError" in tb and "\x1b[" not in tb


def test_input_fails_immediately(api: httpx.Client, shared_session: str) -> None:
    started = time.monotonic()
    result = run(api, shared_session, "input('name? ')", timeout_s=30)
    assert time.monotonic() - started < 10
    assert result["status"] == "error"
    assert "input" in (result["error"]["evalue"] + result["error"]["ename"]).lower()


def test_output_is_bounded_with_full_text_artifact(api: httpx.Client, shared_session: str) -> None:
    result = run(api, shared_session, "print('x' * 99 + '\\n', end='' ) \nprint('y' * 300_000)")
    assert result["status"] == "ok"
    assert result["truncated"] is True
    assert len(result["stdout"]) < 110_000
    assert "characters omitted" in result["stdout"]
    assert result["stdout"].startswith("x" * 99)
    url = result["artifacts"][0]["url"]
    full = api.get(url)
    assert full.status_code == 200
    assert full.text == "x" * 99 + "\n" + "y" * 300_000 + "\n"
    # The cut says where the rest is, in the result and in the notebook (it said only
    # "the artifact ...", and a notebook carries no list of artifacts).
    assert f"characters omitted; full text in the artifact {url}]" in result["stdout"]
    cell = api.get(f"/v1/sessions/{shared_session}/notebook").json()["cells"][-1]
    (printed,) = [o for o in cell["outputs"] if o.get("name") == "stdout"]
    assert f"characters omitted; full text in the artifact {url}]" in "".join(printed["text"])


def test_clear_output_and_display_updates_keep_final_state(
    api: httpx.Client, shared_session: str
) -> None:
    code = (
        "from IPython.display import clear_output, display\n"
        "for i in range(5):\n"
        "    clear_output(wait=True)\n"
        "    print('progress', i)\n"
        "h = display('step 0', display_id=True)\n"
        "for i in range(1, 4):\n"
        "    h.update(f'step {i}')\n"
    )
    result = run(api, shared_session, code)
    assert result["status"] == "ok"
    assert result["stdout"] == "progress 4\n"
    assert [o["data"]["text/plain"] for o in result["outputs"]] == ["'step 3'"]
    nb = api.get(f"/v1/sessions/{shared_session}/notebook").json()
    cell = next(c for c in nb["cells"] if c["metadata"]["interp"]["execution_id"] == result["id"])
    assert [o["output_type"] for o in cell["outputs"]] == ["stream", "display_data"]
    assert cell["outputs"][1]["data"]["text/plain"] == "'step 3'"


def test_timeout_interrupts_and_keeps_state(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "kept = 7")
    started = time.monotonic()
    result = run(api, sid, "import time\ntime.sleep(30)", timeout_s=1)
    assert time.monotonic() - started < 10
    assert result["status"] == "timeout"
    assert result["state_lost"] is False
    assert result["error"]["ename"] == "ExecutionTimeout"
    assert run(api, sid, "kept")["outputs"][0]["data"]["text/plain"] == "7"


def test_timeout_restarts_a_kernel_that_ignores_sigint(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "kept = 7")
    started = time.monotonic()
    result = run(api, sid, "import itertools\nsum(itertools.repeat(1, 10**13))", timeout_s=1)
    assert time.monotonic() - started < 30
    assert result["status"] == "timeout"
    assert result["state_lost"] is True
    after = run(api, sid, "1 + 1")
    assert after["status"] == "ok" and after["outputs"][0]["data"]["text/plain"] == "2"
    assert run(api, sid, "kept")["error"]["ename"] == "NameError"


@pytest.mark.parametrize(
    "code",
    ["import os\nos._exit(1)", "import ctypes\nctypes.string_at(0)"],
    ids=["os_exit", "segfault"],
)
def test_kernel_death_is_reported_and_recovered(
    api: httpx.Client, new_session: Callable[..., str], code: str
) -> None:
    sid = new_session()
    run(api, sid, "kept = 1")
    started = time.monotonic()
    result = run(api, sid, code, timeout_s=60)
    assert time.monotonic() - started < 20
    assert result["status"] == "kernel_died"
    assert result["state_lost"] is True
    assert result["reason"]
    after = run(api, sid, "2 * 21")
    assert after["status"] == "ok" and after["outputs"][0]["data"]["text/plain"] == "42"
    session = api.get(f"/v1/sessions/{sid}").json()
    assert session["status"] == "idle"


def test_queue_is_fifo_bounded_and_answers_each_request(
    server: Server, new_session: Callable[..., str]
) -> None:
    sid = new_session()

    async def scenario() -> tuple[list[dict[str, Any]], int, httpx.Response]:
        headers = {"Authorization": f"Bearer {server.api_key}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as client:
            url = f"/v1/sessions/{sid}/execute"

            async def submit(code: str) -> httpx.Response:
                # A streamed execute answers with its headers once the execution is queued,
                # so each submission is known to be in the queue before the next is sent.
                request = client.build_request(
                    "POST", url, json={"code": code}, headers={"Accept": "text/event-stream"}
                )
                return await client.send(request, stream=True)

            async def done(resp: httpx.Response) -> dict[str, Any]:
                body = (await resp.aread()).decode()
                await resp.aclose()
                data = body.split("event: done\ndata: ", 1)[1].split("\n", 1)[0]
                result: dict[str, Any] = json.loads(data)
                return result

            first = await submit("import time\ntime.sleep(2)\norder = []")
            # The first one runs (it left the queue) before the queue is filled.
            deadline = time.monotonic() + 30
            while (await client.get(f"/v1/sessions/{sid}")).json()["status"] != "busy":
                assert time.monotonic() < deadline, "the first execution never started"
                await asyncio.sleep(0.02)
            queued = [await submit(f"order.append({i}); {i}") for i in range(4)]  # queue holds 4
            over = await client.post(url, json={"code": "'too many'"})
            results = [await done(first)] + [await done(r) for r in queued]
            return results, over.status_code, over

    results, over_status, over = asyncio.run(scenario())  # type: ignore[misc]
    assert over_status == 429
    assert over.json()["error"]["type"] == "session_busy"
    assert "Retry-After" in over.headers
    assert [r["status"] for r in results] == ["ok"] * 5
    counts = [r["execution_count"] for r in results]
    assert counts == sorted(counts) and len(set(counts)) == 5
    with server.client() as client:
        assert run(client, sid, "order")["outputs"][0]["data"]["text/plain"] == "[0, 1, 2, 3]"


def test_client_disconnect_does_not_block_the_session(
    server: Server, api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    code = "import time\nprint('started', flush=True)\ntime.sleep(2)\nprint('finished')\n'done'"
    with api.stream(
        "POST",
        f"/v1/sessions/{sid}/execute",
        json={"code": code},
        headers={"Accept": "text/event-stream"},
    ) as resp:
        execution_id = resp.headers["X-Execution-Id"]
        for line in resp.iter_lines():
            if "started" in line:
                break  # hang up mid-stream
    deadline = time.monotonic() + 30
    while True:
        ex = api.get(f"/v1/sessions/{sid}/executions/{execution_id}").json()
        if ex["status"] not in ("queued", "running"):
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert ex["status"] == "ok"
    assert ex["stdout"] == "started\nfinished\n"
    assert run(api, sid, "1")["status"] == "ok"


def test_interrupt_endpoint(
    api: httpx.Client, new_session: Callable[..., str], server: Server
) -> None:
    sid = new_session()
    run(api, sid, "kept = 3")

    async def scenario() -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {server.api_key}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as client:
            task = asyncio.create_task(
                client.post(
                    f"/v1/sessions/{sid}/execute", json={"code": "import time\ntime.sleep(30)"}
                )
            )
            # Interrupt once the execution runs (the session says busy).
            deadline = time.monotonic() + 30
            while (await client.get(f"/v1/sessions/{sid}")).json()["status"] != "busy":
                assert time.monotonic() < deadline, "the execution never started"
                await asyncio.sleep(0.02)
            resp = await client.post(f"/v1/sessions/{sid}/interrupt")
            assert resp.status_code == 200
            result: dict[str, Any] = (await task).json()
            return result

    result = asyncio.run(scenario())
    assert result["status"] == "interrupted"
    assert result["error"]["ename"] == "KeyboardInterrupt"
    assert run(api, sid, "kept")["outputs"][0]["data"]["text/plain"] == "3"


def test_an_interrupt_the_code_ignores_is_said_on_its_stderr(
    api: httpx.Client, new_session: Callable[..., str], server: Server
) -> None:
    """Code that ignores SIGINT goes on after an interrupt; nothing said so until its
    timeout ended it. Now its stderr does, a few seconds after the interrupt, once."""
    sid = new_session()
    code = (
        "import os, signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "open('started', 'w').close()\n"
        "while not os.path.exists('go'):\n    time.sleep(0.02)\nprint('done')"
    )
    box: dict[str, Any] = {}

    def execute() -> None:
        with (
            server.client() as own,
            own.stream(
                "POST", f"/v1/sessions/{sid}/execute", json={"code": code, "timeout_s": 300}
            ) as resp,
        ):
            box["id"] = resp.headers["X-Execution-Id"]
            box["result"] = json.loads(resp.read())

    thread = threading.Thread(target=execute)
    thread.start()
    deadline = time.monotonic() + 30
    while api.get(f"/v1/sessions/{sid}/files/started").status_code != 200:
        assert time.monotonic() < deadline, "the cell never started"
        time.sleep(0.02)
    for _ in range(2):  # a second interrupt is not told again
        assert api.post(f"/v1/sessions/{sid}/interrupt").status_code == 200
    notice = (
        "\n[interp] This code is still running 3 s after an interrupt: it catches "
        "KeyboardInterrupt or ignores SIGINT. Interrupt it again, restart the session (its "
        "variables are lost), or let its timeout (300 s) end it.\n"
    )
    while notice not in api.get(f"/v1/sessions/{sid}/executions/{box['id']}").json()["stderr"]:
        assert time.monotonic() < deadline + 30, "no notice came"
        time.sleep(0.1)
    assert api.put(f"/v1/sessions/{sid}/files/go", content=b"").status_code == 201
    thread.join(60)
    result = box["result"]
    assert (result["status"], result["stdout"], result["stderr"]) == ("ok", "done\n", notice)
    cell = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"][-1]
    assert cell["outputs"][0] == {"output_type": "stream", "name": "stderr", "text": notice}


def test_restart_clears_state_keeps_notebook(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "gone = 1")
    resp = api.post(f"/v1/sessions/{sid}/restart")
    assert resp.status_code == 200 and resp.json()["status"] == "idle"
    assert run(api, sid, "gone")["error"]["ename"] == "NameError"
    nb = api.get(f"/v1/sessions/{sid}/notebook").json()
    assert [c["source"] for c in nb["cells"]] == [
        "gone = 1",
        "**Kernel restarted** on request (generation 2): variables, imports and loaded data "
        "from the cells above are gone; workspace files are kept.",
        "gone",
    ]


def test_exit_in_user_code_restarts_and_reports_state_lost(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "kept = 1")
    result = run(api, sid, "exit()", timeout_s=30)
    assert result["state_lost"] is True
    assert run(api, sid, "1 + 1")["status"] == "ok"


def test_background_output_after_the_cell_is_recorded_under_it(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    code = (
        "import threading, time\n"
        "def later():\n    time.sleep(0.5)\n    print('late', flush=True)\n"
        "threading.Thread(target=later).start()"
    )
    first = run(api, sid, code)
    assert first["stdout"] == ""
    deadline = time.monotonic() + 10
    while api.get(f"/v1/sessions/{sid}/executions/{first['id']}").json()["stdout"] != "late\n":
        assert time.monotonic() < deadline, "late output was not recorded under its cell"
        time.sleep(0.1)
    nb = api.get(f"/v1/sessions/{sid}/notebook").json()
    assert nb["cells"][0]["outputs"] == [
        {"output_type": "stream", "name": "stdout", "text": "late\n"}
    ]
    assert run(api, sid, "'next'")["stdout"] == ""


def test_interrupt_by_execution_id_hits_only_that_run(server: Server) -> None:
    """``?execution_id=``: a queued run is cancelled (it never runs), the running one is
    interrupted, a finished one is left alone; unknown and malformed ids are refused."""

    async def scenario() -> None:
        async with AsyncClient(server.url, api_key=server.api_key, timeout=60) as client:
            session = await client.create_session()
            ids: dict[str, str] = {}
            accepted = {"first": asyncio.Event(), "second": asyncio.Event()}
            loop_code = "import time\nwhile True:\n    time.sleep(0.05)"

            def on_start(name: str) -> Callable[[str], None]:
                def record(execution_id: str) -> None:
                    ids[name] = execution_id
                    accepted[name].set()

                return record

            async def consume(name: str, code: str) -> Execution:
                async for event in session.stream(code, on_start=on_start(name)):
                    if isinstance(event, DoneEvent):
                        return event.execution
                raise AssertionError("no result")

            async def running(execution_id: str) -> None:
                while True:
                    if (await session.execution(execution_id)).status == "running":
                        return
                    await asyncio.sleep(0.01)

            with anyio.fail_after(30):
                # In this order: the second run queues behind the first.
                first = asyncio.create_task(consume("first", loop_code))
                await accepted["first"].wait()
                second = asyncio.create_task(consume("second", "second_ran = True"))
                await accepted["second"].wait()
                await running(ids["first"])

            await session.interrupt(execution_id=ids["second"])
            cancelled = await asyncio.wait_for(second, 10)
            assert (cancelled.status, cancelled.reason) == ("cancelled", "cancelled")
            assert (await session.execution(ids["first"])).status == "running"

            await session.interrupt(execution_id=ids["first"])
            interrupted = await asyncio.wait_for(first, 30)
            assert interrupted.status == "interrupted"
            assert interrupted.error is not None
            assert interrupted.error.ename == "KeyboardInterrupt"

            await session.interrupt(execution_id=ids["first"])  # finished: nothing happens
            with pytest.raises(NotFoundError):
                await session.interrupt(execution_id="ex_unknown")
            with pytest.raises(BadRequestError):
                await session.interrupt(execution_id="not an id")
            after = await session.run("second_ran")
            assert after.error is not None and after.error.ename == "NameError"
            await session.close()

    asyncio.run(scenario())


def test_an_interrupt_landing_as_the_code_enters_a_blocking_call_ends_it(server: Server) -> None:
    """The kernel's interrupt fixes (interpreter_kernel.interrupts) through the API, so in
    the Docker kernel image too: only the kernel's main thread can take a SIGINT, and every
    interrupt ends a 600 s sleep. On Docker the broker sends ``interrupt_request`` and the
    timing is forced as in test_interrupts.py; the local backend's broker signals the
    process group itself, which the forcing cannot time (test_interrupts.py forces that
    case from inside the kernel), so there the interrupt ends the cell's wait."""

    async def scenario() -> None:
        async with AsyncClient(server.url, api_key=server.api_key, timeout=60) as client:
            session = await client.create_session()
            opened = await session.run(SIGINT_OPEN)
            assert opened.outputs[-1].data["text/plain"] == "([], False)"
            assert (await session.run(GAP)).status == "ok"
            for _ in range(8):
                done: Execution | None = None
                with anyio.fail_after(30):
                    async for event in session.stream(INTO_THE_GAP):
                        if isinstance(event, StdoutEvent) and "running" in event.text:
                            await session.interrupt()
                        elif isinstance(event, DoneEvent):
                            done = event.execution
                assert done is not None and done.status == "interrupted"
                assert done.error is not None and done.error.ename == "KeyboardInterrupt"
            await session.close()

    asyncio.run(scenario())


def test_json_answer_names_the_execution_before_its_result(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    """A JSON client that gives up still has the id (the header comes first) and can poll;
    by default the run goes on without it."""
    sid = new_session()
    body = {"code": "import time\ntime.sleep(2)\n'finished'"}
    with api.stream("POST", f"/v1/sessions/{sid}/execute", json=body) as resp:
        assert resp.status_code == 200
        eid = resp.headers["X-Execution-Id"]
        # The headers arrived while the code still runs: the client leaves here.
        assert api.get(f"/v1/sessions/{sid}/executions/{eid}").json()["status"] in {
            "queued",
            "running",
        }
    done = await_status(api, sid, eid, {"ok"})
    assert done["outputs"][-1]["data"]["text/plain"] == "'finished'"


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
def test_on_disconnect_interrupt_stops_the_run_of_a_client_that_left(
    api: httpx.Client, new_session: Callable[..., str], accept: str
) -> None:
    sid = new_session()
    run(api, sid, "kept = 7")
    body = {
        "code": "import time\nwhile True:\n    time.sleep(0.05)",
        "on_disconnect": "interrupt",
    }
    headers = {"Accept": accept}
    with api.stream("POST", f"/v1/sessions/{sid}/execute", json=body, headers=headers) as resp:
        eid = resp.headers["X-Execution-Id"]
        await_status(api, sid, eid, {"running"})
    # The client closed its connection mid-run: the service interrupts that run.
    left = await_status(api, sid, eid, {"interrupted", "ok", "error", "timeout"})
    assert left["status"] == "interrupted"
    assert run(api, sid, "kept")["outputs"][0]["data"]["text/plain"] == "7"


def test_if_busy_reject_answers_at_once_with_the_running_execution(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    with api.stream(
        "POST", f"/v1/sessions/{sid}/execute", json={"code": "import time\ntime.sleep(30)"}
    ) as resp:
        running_id = resp.headers["X-Execution-Id"]
        await_status(api, sid, running_id, {"running"})
        refused = api.post(
            f"/v1/sessions/{sid}/execute", json={"code": "1 + 1", "if_busy": "reject"}
        )
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["type"] == "session_running"
        assert error["execution_id"] == running_id and error["running_for_s"] >= 0
        assert running_id in error["message"]
        api.post(f"/v1/sessions/{sid}/interrupt", params={"execution_id": running_id})
    assert await_status(api, sid, running_id, {"interrupted"})["status"] == "interrupted"
    # Nothing was queued by the refused request.
    assert run(api, sid, "1 + 1", if_busy="reject")["outputs"][0]["data"]["text/plain"] == "2"


def test_an_interrupt_landing_before_the_cells_code_ends_it_as_interrupted(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    """The broker interrupts once the kernel has announced the cell (execute_input). The
    SIGINT can still land in IPython's callbacks before the code, which swallowed it: the
    cell then ran to ``ok`` (1 in 15 under load). Held there by a callback, it ends
    ``interrupted`` and its code never runs."""
    sid = new_session()
    run(api, sid, BEFORE_CODE_CALLBACK.format(event="pre_execute"))
    run(api, sid, "armed.append(1)")
    with api.stream(
        "POST",
        f"/v1/sessions/{sid}/execute",
        json={"code": "print('the code ran', flush=True); time.sleep(600)"},
    ) as resp:
        eid = resp.headers["X-Execution-Id"]
        deadline = time.monotonic() + 60
        while (
            "in the callback"
            not in api.get(f"/v1/sessions/{sid}/executions/{eid}").json()["stdout"]
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        interrupted = api.post(f"/v1/sessions/{sid}/interrupt", params={"execution_id": eid})
        assert interrupted.status_code == 200, interrupted.text
    ended = await_status(api, sid, eid, {"interrupted", "ok", "error"})
    assert ended["status"] == "interrupted", ended
    assert ended["stdout"] == "in the callback\n", ended
    assert run(api, sid, "6 * 7")["outputs"][0]["data"]["text/plain"] == "42"


def test_a_requested_restart_ends_the_running_cell_once(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    """The cell that ran ends at once as interrupted by the restart (state lost), and the
    kernel is replaced exactly once: the old kernel's end is not taken for a death."""
    sid = new_session()
    run(api, sid, "x = 1")
    before = api.get(f"/v1/sessions/{sid}").json()["generation"]
    with api.stream(
        "POST", f"/v1/sessions/{sid}/execute", json={"code": "import time\ntime.sleep(60)"}
    ) as resp:
        eid = resp.headers["X-Execution-Id"]
        await_status(api, sid, eid, {"running"})
        restarted = api.post(f"/v1/sessions/{sid}/restart")
        assert restarted.status_code == 200, restarted.text
        assert restarted.json()["generation"] == before + 1
    started = time.monotonic()
    ended = await_status(api, sid, eid, {"interrupted", "kernel_died", "ok", "timeout"})
    assert time.monotonic() - started < 15
    assert (ended["status"], ended["reason"], ended["state_lost"]) == (
        "interrupted",
        "restarted",
        True,
    )
    assert ended["error"]["ename"] == "KernelRestarted"
    assert run(api, sid, "x")["error"]["ename"] == "NameError"
    assert api.get(f"/v1/sessions/{sid}").json()["generation"] == before + 1


def test_requested_restarts_of_running_cells_past_the_budget_never_close_the_session(
    server: Server, api: httpx.Client, new_session: Callable[..., str]
) -> None:
    """Issue 14 item 2, past the automatic budget: each requested restart while a cell
    runs replaces the kernel exactly once, ends that cell interrupted (state lost), and is
    never counted, so more of them than ``restart_limit`` leave the session usable."""
    limit = server.thread.broker.settings.restart_limit
    sid = new_session()
    generation = api.get(f"/v1/sessions/{sid}").json()["generation"]
    for n in range(limit + 2):
        with api.stream(
            "POST", f"/v1/sessions/{sid}/execute", json={"code": "import time\ntime.sleep(30)"}
        ) as resp:
            eid = resp.headers["X-Execution-Id"]
            await_status(api, sid, eid, {"running"})
            restarted = api.post(f"/v1/sessions/{sid}/restart")
            assert restarted.status_code == 200, (n, restarted.text)
            assert restarted.json()["generation"] == generation + 1, n
        ended = await_status(
            api, sid, eid, {"interrupted", "kernel_died", "ok", "timeout", "error"}
        )
        assert (ended["status"], ended["reason"], ended["state_lost"]) == (
            "interrupted",
            "restarted",
            True,
        ), (n, ended)
        generation += 1
        info = api.get(f"/v1/sessions/{sid}").json()
        # Exactly one replacement: the old kernel's end was not taken for a death.
        assert (info["status"], info["generation"]) == ("idle", generation), (n, info)
    after = run(api, sid, "40 + 2")
    assert (after["status"], after["generation"]) == ("ok", generation), after
    assert after["outputs"][0]["data"]["text/plain"] == "42"


def test_a_requested_restart_cancels_the_queue_unless_asked_to_keep_it(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    """Cells queued behind a requested restart were written against the state it throws
    away: they are cancelled (state_lost, with a message), unless keep_queued. Requested
    restarts never count against the automatic-restart budget."""
    sid = new_session()
    sleep = {"code": "import time\ntime.sleep(60)"}
    for keep in (False, True):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(
                api.stream("POST", f"/v1/sessions/{sid}/execute", json=sleep)
            )
            running = first.headers["X-Execution-Id"]
            await_status(api, sid, running, {"running"})
            queued = [
                stack.enter_context(
                    api.stream("POST", f"/v1/sessions/{sid}/execute", json={"code": f"{n} * 2"})
                ).headers["X-Execution-Id"]
                for n in (1, 2)
            ]
            resp = api.post(f"/v1/sessions/{sid}/restart", json={"keep_queued": keep})
            assert resp.status_code == 200, resp.text
            for n, eid in zip((1, 2), queued, strict=True):
                ended = await_status(api, sid, eid, {"cancelled", "ok"})
                if keep:
                    assert ended["status"] == "ok"
                    assert ended["outputs"][0]["data"]["text/plain"] == str(n * 2)
                else:
                    assert (ended["status"], ended["reason"], ended["state_lost"]) == (
                        "cancelled",
                        "restarted",
                        True,
                    )
                    assert "restarted on request" in ended["error"]["evalue"]
    # More requested restarts than the automatic budget allows: the session lives on.
    for _ in range(7):
        assert api.post(f"/v1/sessions/{sid}/restart").status_code == 200
    assert run(api, sid, "40 + 2")["outputs"][0]["data"]["text/plain"] == "42"
