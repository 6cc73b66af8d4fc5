"""The Python SDK against a real broker with real kernels."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from interpreter.client import (
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    ConflictError,
    ConnectionFailed,
    DoneEvent,
    ErrorEvent,
    ExecutionError,
    NotFoundError,
    OutputEvent,
    Session,
    StdoutEvent,
)
from tests.conftest import REPO, Server

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def client(local_server: Server) -> Iterator[Client]:
    with Client(local_server.url, api_key=local_server.api_key) as c:
        yield c


@pytest.fixture(scope="module")
def session(client: Client) -> Iterator[Session]:
    with client.create_session(metadata={"suite": "sdk"}) as s:
        yield s


def test_readme_example_works_as_written(local_server: Server) -> None:
    # The README's five lines, with the URL and key of the test server.
    from interpreter.client import Client

    with Client(local_server.url, api_key=local_server.api_key) as client:
        with client.create_session() as session:
            session.run("import statistics")
            print(session.run("statistics.mean([1, 2, 3, 4])").text)
            assert session.run("statistics.mean([1, 2, 3, 4])").text == "2.5"
        assert session.refresh().status == "closed"  # deleted on leaving the block


def test_state_survives_between_runs(session: Session) -> None:
    first = session.run("counter = 40\nprint('set')")
    assert first.ok and first.stdout == "set\n" and first.text is None
    second = session.run("counter + 2")
    assert second.text == "42"
    assert second.execution_count == (first.execution_count or 0) + 1
    assert session.info.metadata == {"suite": "sdk"}


def test_user_error_is_data_and_raise_on_error_raises(session: Session) -> None:
    session.run("kept = 40", raise_on_error=True)
    result = session.run("{}['missing']")
    assert result.status == "error" and result.error is not None
    assert result.error.ename == "KeyError"
    assert "missing" in result.error.evalue
    assert not any("\x1b[" in line for line in result.error.traceback)
    with pytest.raises(ExecutionError) as info:
        session.run("raise ValueError('nope')", raise_on_error=True)
    assert info.value.ename == "ValueError" and info.value.evalue == "nope"
    assert session.run("kept").text == "40"  # state from before the error is kept


def test_stream_delivers_output_before_the_end(session: Session) -> None:
    code = (
        "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.3)\n"
        "from IPython.display import display\ndisplay({'a': 1}, raw=False)\n1/0"
    )
    arrivals: list[tuple[float, object]] = []
    for event in session.stream(code):
        arrivals.append((time.monotonic(), event))
    events = [e for _, e in arrivals]
    stdout = [e for e in events if isinstance(e, StdoutEvent)]
    assert "".join(e.text for e in stdout) == "0\n1\n2\n"
    assert any(isinstance(e, OutputEvent) for e in events)
    assert any(isinstance(e, ErrorEvent) and e.error.ename == "ZeroDivisionError" for e in events)
    done = events[-1]
    assert isinstance(done, DoneEvent) and done.result.status == "error"
    # The first line arrived well before the run ended: it was streamed, not buffered.
    assert arrivals[-1][0] - arrivals[0][0] > 0.4


def test_plot_artifact_and_dataframe_summary(session: Session, tmp_path: Path) -> None:
    result = session.run(
        "import matplotlib.pyplot as plt\nimport pandas as pd\n"
        "fig, ax = plt.subplots()\nax.plot([1, 4, 9])\nax.set_title('squares')\nplt.show()\n"
        "pd.DataFrame({'n': [1, 2, 3], 'sq': [1.0, 4.0, None]})",
        raise_on_error=True,
    )
    assert len(result.images) == 1
    image = result.images[0]
    assert image.mime == "image/png"
    data = image.read()
    assert data.startswith(PNG_MAGIC) and len(data) == image.size
    saved = image.save(tmp_path)
    assert saved.read_bytes() == data
    summary = result.dataframes[0]
    assert summary["shape"] == [3, 2]
    assert [c["dtype"] for c in summary["columns"]] == ["int64", "float64"]
    assert result.text is not None and "sq" in result.text


def test_timeout_is_reported(session: Session) -> None:
    result = session.run("import time\ntime.sleep(30)", timeout_s=1)
    assert result.status == "timeout"
    assert session.run("1 + 1").text == "2"  # the session works afterwards


def test_interrupt_stops_running_code(client: Client) -> None:
    with client.create_session() as session:
        events: queue.Queue[object] = queue.Queue()

        def consume() -> None:
            for event in session.stream(
                "print('started', flush=True)\nimport time\ntime.sleep(60)"
            ):
                events.put(event)

        runner = threading.Thread(target=consume)
        runner.start()
        # Interrupt once the code is really running (it said so), not merely queued.
        first = events.get(timeout=30)
        assert first == StdoutEvent("started\n")
        started = time.monotonic()
        session.interrupt()
        runner.join(30)
        assert not runner.is_alive()
        done = events.get_nowait()
        assert isinstance(done, ErrorEvent | DoneEvent)
        while not isinstance(done, DoneEvent):
            done = events.get_nowait()
        assert done.execution.status == "interrupted"
        assert time.monotonic() - started < 20
        assert session.run("'alive'").text == "'alive'"


def test_files_roundtrip(session: Session, tmp_path: Path) -> None:
    session.upload("data/numbers.csv", "n\n1\n2\n3\n")
    local = tmp_path / "blob.bin"
    local.write_bytes(bytes(range(256)))
    assert session.upload_file(local, "data/blob.bin") == "data/blob.bin"
    total = session.run("import pandas as pd\nint(pd.read_csv('data/numbers.csv').n.sum())")
    assert total.text == "6"
    session.run("open('out.txt', 'w').write('written by the kernel')", raise_on_error=True)
    assert session.download("out.txt") == b"written by the kernel"
    assert session.download("data/blob.bin", dest=tmp_path / "copy.bin") == bytes(range(256))
    names = {e.name for e in session.list("data").entries}
    assert names == {"numbers.csv", "blob.bin"}
    session.delete_file("data/blob.bin")
    with pytest.raises(NotFoundError):
        session.download("data/blob.bin")


def test_notebook_records_the_cells(session: Session) -> None:
    session.run("recorded = 'in the notebook'", raise_on_error=True)
    nb = session.notebook()
    assert nb["nbformat"] == 4
    sources = [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in nb["cells"]
    ]
    assert "recorded = 'in the notebook'" in sources


def test_restart_recover_and_fork(client: Client) -> None:
    with client.create_session() as session:
        session.run("base = 10", raise_on_error=True)
        session.run("1/0")
        session.upload("keep.txt", "kept")
        info = session.restart()
        assert session.run("'base' in dir()").text == "False"
        session.run("base = 10; extra = base * 2", raise_on_error=True)
        info = session.restart(recover=True)
        assert info.rebuild is not None and info.rebuild.cells_ran >= 1
        assert session.run("extra").text == "20"
        with session.fork() as fork:
            assert fork.id != session.id
            assert fork.info.rebuild is not None
            assert fork.run("extra + base").text == "30"
            assert fork.download("keep.txt") == b"kept"


def test_rebuild_from_a_notebook_file_after_uploading_its_input(
    client: Client, tmp_path: Path
) -> None:
    # What a user has on disk: an analysis notebook, and the CSV it reads.
    (tmp_path / "sales.csv").write_text("region,amount\nnorth,10\nsouth,5\nnorth,7\n")
    analysis = new_notebook(
        cells=[
            new_markdown_cell("# Sales"),
            new_code_cell("import pandas as pd\nsales = pd.read_csv('sales.csv')"),
            new_code_cell("total = int(sales['amount'].sum())"),
        ]
    )
    nbformat.write(analysis, str(tmp_path / "analysis.ipynb"))

    with client.create_session() as session:
        session.upload_file(tmp_path / "sales.csv")
        notebook = json.loads((tmp_path / "analysis.ipynb").read_text())
        info = session.rebuild(notebook)
        assert info is session.info and info.id == session.id
        assert info.rebuild is not None
        assert (info.rebuild.cells_ran, info.rebuild.failed) == (2, [])
        assert info.rebuild.summary().endswith("none failed.")
        assert session.run("total").text == "22"
        # Not a notebook: refused before anything runs; the session goes on.
        with pytest.raises(BadRequestError) as bad:
            session.rebuild({"cells": []})
        assert bad.value.status == 422
        assert bad.value.message.startswith("notebook is not a valid nbformat v4 notebook")
        # A second rebuild is allowed; its report replaces the first.
        again = session.rebuild(notebook)
        assert again.rebuild is not None and again.rebuild.failed == []
        assert session.run("total").text == "22"
    with pytest.raises(ConflictError) as closed:  # deleted on leaving the block
        session.rebuild(notebook)
    assert closed.value.code == "session_closed"


def test_service_errors_raise_the_right_exceptions(local_server: Server, session: Session) -> None:
    with Client(local_server.url, api_key="wrong-key") as bad, pytest.raises(AuthenticationError):
        bad.list_sessions()
    with (
        Client(local_server.url, api_key=local_server.other_key) as other,
        pytest.raises(NotFoundError),
    ):
        other.get_session(session.id)
    with pytest.raises(BadRequestError) as info:
        session.run("1", timeout_s=-1)
    assert info.value.status == 422
    with Client("http://127.0.0.1:9", timeout=2) as nowhere, pytest.raises(ConnectionFailed):
        nowhere.list_sessions()


async def test_async_client_same_surface(local_server: Server, tmp_path: Path) -> None:
    async with AsyncClient(local_server.url, api_key=local_server.api_key) as client:
        async with client.create_session() as session:
            await session.run("import matplotlib.pyplot as plt\nplt.plot([2, 1]); plt.show()")
            result = await session.run("6 * 7")
            assert result.text == "42"
            events = [e async for e in session.stream("print('streamed')")]
            assert isinstance(events[0], StdoutEvent) and events[0].text == "streamed\n"
            assert isinstance(events[-1], DoneEvent) and events[-1].result.ok
            await session.upload("a.txt", b"x")
            assert await session.download("a.txt") == b"x"
            nb = await session.notebook()
            assert len(nb["cells"]) == 3
            plot = await session.execution((await session.run("plt.plot([1]); plt.show()")).id)
            assert (await plot.images[0].read()).startswith(PNG_MAGIC)
            ids = [s.id for s in await client.list_sessions()]
            assert session.id in ids
        assert (await client.get_session(session.id)).info.status == "closed"


def test_both_backends_run_code(server: Server) -> None:
    with Client(server.url, api_key=server.api_key) as client, client.create_session() as s:
        result = s.run("import sys\nprint(sys.version_info[0])\n2 ** 10")
        assert (result.stdout, result.text) == ("3\n", "1024")
        assert s.info.backend == server.backend


def test_agent_loop_example_self_corrects(local_server: Server) -> None:
    """examples/agent_loop.py runs as written: the first code fails, the fix succeeds."""
    env = dict(os.environ, INTERP_URL=local_server.url, INTERP_API_KEY=local_server.api_key)
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent_loop.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    first_error = out.index("KeyError: 'Column not found: revenue'")
    fixed = out.index("tool result + 1 image(s):")
    assert first_error < fixed
    assert (
        "final answer: The north region sold more: 405 (north) vs 285 (south), "
        "a difference of 120." in out
    )


def test_idempotency_keys_and_generation_fences(client: Client) -> None:
    from interpreter.client import ConflictError

    first = client.create_session(idempotency_key="sdk-create-1", metadata={"t": "idem"})
    try:
        again = client.create_session(idempotency_key="sdk-create-1", metadata={"t": "idem"})
        assert again.id == first.id
        first.run("n = 0")
        one = first.run("n += 1; n", idempotency_key="sdk-run-1")
        two = first.run("n += 1; n", idempotency_key="sdk-run-1")
        assert one.execution.id == two.execution.id
        streamed = list(first.stream("n += 1; n", idempotency_key="sdk-run-1"))
        assert isinstance(streamed[-1], DoneEvent)
        assert streamed[-1].execution.id == one.execution.id
        assert first.run("n").text == "1"

        generation = first.refresh().generation
        assert first.restart(generation=generation).generation == generation + 1
        with pytest.raises(ConflictError) as stale:
            first.interrupt(generation=generation)
        assert stale.value.code == "generation_mismatch"
        with pytest.raises(BadRequestError) as reused:
            first.run("n", idempotency_key="sdk-run-1")
        assert reused.value.code == "idempotency_key_reused"
    finally:
        first.close()
