"""The unmodified E2B Code Interpreter SDK (from PyPI) against a real broker and real kernels.

URL mode (``api_url`` and ``sandbox_url``, as ``E2B_API_URL``/``E2B_SANDBOX_URL`` set them)
runs on both backends on free ports; debug mode (``E2B_DEBUG``) needs E2B's fixed ports
49999 and 49983 and runs once, on the local backend.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2b import (
    AuthenticationException,
    FileNotFoundException,
    FileType,
    InvalidArgumentException,
    SandboxException,
    SandboxNotFoundException,
    SandboxNotRunningException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)
from e2b.sandbox.filesystem.filesystem import WriteEntry
from e2b_code_interpreter import AsyncSandbox, Sandbox
from e2b_code_interpreter.charts import ChartType

from interpreter.server import ServerThread
from tests.conftest import KEY, OTHER_KEY, require_docker
from tests.conftest import test_settings as settings_for

pytestmark = pytest.mark.timeout(300)
JSON = {"Content-Type": "application/json"}


class E2BServer:
    def __init__(self, thread: ServerThread, data_dir: Path) -> None:
        self.thread = thread
        self.data_dir = data_dir
        self.url = thread.url
        self.e2b_url = thread.e2b_urls[0]

    def sandbox(self, key: str = KEY, **opts: Any) -> Sandbox:
        return Sandbox.create(api_key=key, api_url=self.e2b_url, sandbox_url=self.e2b_url, **opts)

    def v1(self, key: str = KEY) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )


@pytest.fixture(scope="module", params=["local", "docker"])
def e2b(request: pytest.FixtureRequest) -> Iterator[E2BServer]:
    backend = request.param
    if backend == "docker":
        require_docker()
    data_dir = Path(tempfile.mkdtemp(prefix=f"interp-e2b-{backend}-"))
    settings = settings_for(data_dir, backend=backend, e2b_port=0, interrupt_grace_s=2.0)
    thread = ServerThread(settings, backend=backend).start()
    yield E2BServer(thread, data_dir)
    thread.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def sbx(e2b: E2BServer) -> Iterator[Sandbox]:
    sandbox = e2b.sandbox()
    yield sandbox
    sandbox.kill()


def cells(e2b: E2BServer, session_id: str) -> list[dict[str, Any]]:
    with e2b.v1() as v1:
        resp = v1.get(f"/v1/sessions/{session_id}/notebook")
        assert resp.status_code == 200, resp.text
        found: list[dict[str, Any]] = resp.json()["cells"]
        return found


def test_state_is_kept_and_output_streams_while_code_runs(e2b: E2BServer, sbx: Sandbox) -> None:
    sbx.run_code("x = 41")
    # The code waits until the stdout callback has written a file: it only finishes if
    # the first line reached the client while the code was still running.
    code = (
        "import os, time\n"
        "print('first', flush=True)\n"
        "deadline = time.monotonic() + 30\n"
        "while not os.path.exists('go') and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('streamed' if os.path.exists('go') else 'not streamed')\n"
        "x + 1"
    )
    seen: list[str] = []

    def on_stdout(msg: Any) -> None:
        seen.append(msg.line)
        if msg.line.startswith("first"):
            sbx.files.write("/home/user/go", "1")

    execution = sbx.run_code(code, on_stdout=on_stdout)
    assert seen == ["first\n", "streamed\n"]
    assert execution.logs.stdout == ["first\n", "streamed\n"]
    assert execution.text == "42"
    assert execution.results[0].is_main_result
    assert execution.error is None
    assert isinstance(execution.execution_count, int)


def test_stderr_results_and_errors_reach_their_callbacks(sbx: Sandbox) -> None:
    got: dict[str, list[Any]] = {"stderr": [], "result": [], "error": []}
    execution = sbx.run_code(
        "import sys\nsys.stderr.write('warn\\n')\ndisplay('shown')\nraise ValueError('bad input')",
        on_stderr=got["stderr"].append,
        on_result=got["result"].append,
        on_error=got["error"].append,
    )
    assert [m.line for m in got["stderr"]] == ["warn\n"]
    assert [r.text for r in got["result"]] == ["'shown'"]
    assert not got["result"][0].is_main_result
    error = execution.error
    assert error is not None and got["error"] == [error]
    assert (error.name, error.value) == ("ValueError", "bad input")
    assert "raise ValueError('bad input')" in error.traceback
    assert "\x1b[" not in error.traceback


def test_matplotlib_figure_gives_png_text_and_chart(sbx: Sandbox) -> None:
    execution = sbx.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [4, 5, 6], label='s')\n"
        "plt.title('growth'); plt.xlabel('day'); plt.ylabel('n')\n"
        "plt.show()"
    )
    [result] = execution.results
    assert base64.b64decode(result.png).startswith(b"\x89PNG\r\n\x1a\n")
    assert result.text.startswith("<Figure size")
    chart = result.chart
    assert chart is not None and chart.type == ChartType.LINE
    assert (chart.title, chart.x_label, chart.y_label) == ("growth", "day", "n")
    assert [(e.label, e.points) for e in chart.elements] == [("s", [(1, 4), (2, 5), (3, 6)])]


def test_a_box_plot_gives_a_box_and_whisker_chart(sbx: Sandbox) -> None:
    execution = sbx.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.boxplot([[1, 2, 3, 4, 10], [2, 3, 4, 5, 6]], labels=['a', 'b'])\n"
        "plt.ylabel('load (kg)')\n"
        "plt.show()"
    )
    [result] = execution.results
    chart = result.chart
    assert chart is not None and chart.type == ChartType.BOX_AND_WHISKER
    assert (chart.y_label, chart.y_unit) == ("load (kg)", "kg")
    got = [
        (e.label, e.min, e.first_quartile, e.median, e.third_quartile, e.max, e.outliers)
        for e in chart.elements
    ]
    assert got == [("a", 1, 2, 3, 4, 4, [10]), ("b", 2, 3, 4, 5, 6, [])]


def test_dataframe_gives_html_and_data(sbx: Sandbox) -> None:
    execution = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
    [result] = execution.results
    assert result.is_main_result
    assert "<table" in result.html
    assert result.data == {"a": [1, 2], "b": ["x", "y"]}  # each column's values
    assert "a" in result.text


def test_envs_apply_to_that_run_only(sbx: Sandbox) -> None:
    # A string result reads as its text, without its repr's quotes (as on E2B).
    assert sbx.run_code("import os\nos.environ.get('E2B_T')", envs={"E2B_T": "v1"}).text == "v1"
    assert sbx.run_code("repr(os.environ.get('E2B_T'))").text == "None"
    with pytest.raises(SandboxException, match="'PATH' is reserved"):
        sbx.run_code("1", envs={"PATH": "/nowhere"})
    with pytest.raises(SandboxException, match="invalid variable name"):
        sbx.run_code("1", envs={"1BAD": "x"})


def test_contexts_have_their_own_state_and_restart(sbx: Sandbox) -> None:
    sbx.run_code("shared = 'default'")
    context = sbx.create_code_context()
    assert context.language == "python"
    assert sbx.run_code("'shared' in dir()", context=context).text == "False"
    sbx.run_code("own = 1", context=context)
    assert sbx.run_code("own", context=context).text == "1"
    assert context.id in [c.id for c in sbx.list_code_contexts()]
    sbx.restart_code_context(context)
    assert sbx.run_code("'own' in dir()", context=context).text == "False"
    assert sbx.run_code("shared").text == "default"
    sbx.remove_code_context(context)
    assert context.id not in [c.id for c in sbx.list_code_contexts()]


def test_files_write_read_and_stay_in_the_workspace(e2b: E2BServer, sbx: Sandbox) -> None:
    info = sbx.files.write("/home/user/data/in.csv", "a,b\n1,2\n")
    assert (info.name, info.path) == ("in.csv", "/home/user/data/in.csv")
    assert sbx.run_code("open('data/in.csv').read()").text == "a,b\n1,2\n"
    if e2b.thread.settings.backend == "docker":
        # The path the files API gives back is one the code can open (and write) too.
        assert sbx.run_code("open('/home/user/data/in.csv').read()").text == "a,b\n1,2\n"
        sbx.run_code("open('/home/user/made.txt', 'w').write('m')")
        assert sbx.files.read("/home/user/made.txt") == "m"
    sbx.run_code("open('out.bin', 'wb').write(bytes(range(256)))")
    assert bytes(sbx.files.read("out.bin", format="bytes")) == bytes(range(256))
    assert sbx.files.read("/home/user/data/in.csv") == "a,b\n1,2\n"
    with pytest.raises(InvalidArgumentException, match="outside /home/user"):
        sbx.files.write("/etc/passwd", "x")
    with pytest.raises(InvalidArgumentException):
        sbx.files.write("/home/user/../../etc/x", "x")


def test_relative_paths_are_taken_from_home_and_cleaned_as_envd_does(sbx: Sandbox) -> None:
    # Before, only absolute paths were cleaned: "./x", "a//b", "a/../b", "." and "~" were
    # refused or not found, where E2B takes them from the home directory.
    sbx.files.write("./rel/dot.txt", "d")
    sbx.files.write("rel//double.txt", "2")
    assert sbx.files.read("rel/../rel/dot.txt") == "d"
    assert sbx.files.read("~/rel/double.txt") == "2"
    assert sbx.files.exists("./rel/dot.txt")
    assert "rel" in [e.name for e in sbx.files.list(".")]
    assert "rel" in [e.name for e in sbx.files.list("~")]
    assert sbx.run_code("open('rel/double.txt').read()").text == "2"
    with pytest.raises(InvalidArgumentException, match="outside /home/user"):
        sbx.files.write("../escaped.txt", "x")
    with pytest.raises(InvalidArgumentException, match="outside /home/user"):
        sbx.files.read("rel/../../etc/passwd")


def test_files_of_every_upload_form_arrive_whole(sbx: Sandbox, tmp_path: Path) -> None:
    # Several files in one multipart body, each part named by its path.
    infos = sbx.files.write_files(
        [
            WriteEntry(path="/home/user/multi/a.csv", data="x,y\n1,2\n"),
            WriteEntry(path="multi/b.bin", data=bytes(range(256)) * 4),
            WriteEntry(path="multi/café.txt", data="crème"),
        ]
    )
    assert [i.path for i in infos] == [
        "/home/user/multi/a.csv",
        "/home/user/multi/b.bin",
        "/home/user/multi/café.txt",
    ]
    assert sbx.run_code("open('multi/a.csv').read()").text == "x,y\n1,2\n"
    assert bytes(sbx.files.read("multi/b.bin", format="bytes")) == bytes(range(256)) * 4
    assert sbx.files.read("multi/café.txt") == "crème"
    # A file object streams as an octet-stream body; with gzip=True compressed.
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(1 << 16) * 12)  # under the tests' 1 MiB limit
    with source.open("rb") as fh:
        assert sbx.files.write("streamed.bin", fh).path == "/home/user/streamed.bin"
    assert sbx.files.write("packed.csv", "n\n" + "7\n" * 200_000, gzip=True).name == "packed.csv"
    digest = (
        "import hashlib\n"
        "(hashlib.sha256(open('streamed.bin','rb').read()).hexdigest(), "
        "len(open('packed.csv').read().split()))"
    )
    expected = (hashlib.sha256(source.read_bytes()).hexdigest(), 200_001)
    assert sbx.run_code(digest).text == repr(expected)


def test_broken_uploads_are_refused_and_leave_nothing(e2b: E2BServer, sbx: Sandbox) -> None:
    envd = httpx.Client(
        base_url=e2b.e2b_url, headers={"X-API-Key": KEY, "E2b-Sandbox-Id": sbx.sandbox_id}
    )
    boundary = "XyZ"
    head = f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{{}}"\r\n\r\n'
    multipart = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
    with envd:
        # Two parts for the one ?path=: refused before anything is visible.
        twice = head.format("a") + "1\r\n" + head.format("b") + f"2\r\n--{boundary}--\r\n"
        resp = envd.post("/files", params={"path": "twice.txt"}, content=twice, headers=multipart)
        assert resp.status_code == 400 and "Several file parts" in resp.json()["message"]
        # A body without its closing boundary.
        cut = head.format("cut.txt") + "partial"
        resp = envd.post("/files", content=cut, headers=multipart)
        assert resp.status_code == 400 and "closing boundary" in resp.json()["message"]
        # An encoding we do not undo, and gzip that is not gzip.
        raw = {"Content-Type": "application/octet-stream"}
        resp = envd.post(
            "/files",
            params={"path": "e.txt"},
            content=b"x",
            headers={**raw, "Content-Encoding": "br"},
        )
        assert resp.status_code == 415 and resp.json()["type"] == "unsupported_encoding"
        resp = envd.post(
            "/files",
            params={"path": "g.txt"},
            content=b"not gzip",
            headers={**raw, "Content-Encoding": "gzip"},
        )
        assert resp.status_code == 400 and "not valid gzip" in resp.json()["message"]
        # A small gzip body that expands past the upload limit stops at the limit.
        bomb = gzip.compress(b"\0" * (16 << 20))
        resp = envd.post(
            "/files",
            params={"path": "bomb.bin"},
            content=bomb,
            headers={**raw, "Content-Encoding": "gzip"},
        )
        assert resp.status_code == 413 and resp.json()["type"] == "payload_too_large"
        resp = envd.post("/files", content=b"no path", headers=raw)
        assert resp.status_code == 400 and "needs ?path=" in resp.json()["message"]
        # A path ending in '/' names a directory: it made a file of the directory's name.
        resp = envd.post("/files", params={"path": "report/"}, content=b"x", headers=raw)
        assert resp.status_code == 400, resp.text
        assert "give the file's name, e.g. 'report/out.csv'" in resp.json()["message"]
        slash = head.format("/home/user/rep/") + f"x\r\n--{boundary}--\r\n"
        resp = envd.post("/files", content=slash, headers=multipart)
        assert resp.status_code == 400 and "'/home/user/rep/' ends in '/'" in resp.text
    listing = sbx.run_code(
        "import os\nsorted(n for _, _, fs in os.walk('.') for n in fs "
        "if n in ('twice.txt', 'a', 'b', 'cut.txt', 'e.txt', 'g.txt', 'bomb.bin', 'report', "
        "'rep') or n.startswith('.upload-'))"
    )
    assert listing.text == "[]"


def test_other_languages_are_refused_by_name(sbx: Sandbox) -> None:
    with pytest.raises(SandboxException, match="Python only"):
        sbx.run_code("console.log(1)", language="javascript")
    with pytest.raises(SandboxException, match="Python only"):
        sbx.create_code_context(language="r")


def test_a_client_that_goes_away_interrupts_its_run(e2b: E2BServer, sbx: Sandbox) -> None:
    sbx.run_code("progress = 0")
    began = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        sbx.run_code("import time\nfor progress in range(10**6):\n    time.sleep(0.1)", timeout=2)
    assert sbx.run_code("1 + 1").text == "2"
    assert time.monotonic() - began < 15
    stopped = int(sbx.run_code("progress").text)
    assert 0 < stopped < 150  # interrupted soon after the client left, state kept
    [cell] = [c for c in cells(e2b, sbx.sandbox_id) if "10**6" in "".join(c["source"])]
    assert cell["metadata"]["interp"]["status"] == "interrupted"


def test_the_services_timeout_is_said_as_such_not_as_a_bare_keyboard_interrupt(
    tmp_path: Path,
) -> None:
    """A run past the service's timeout ended with E2B's error ``KeyboardInterrupt`` and an
    empty value: indistinguishable from an interrupt, the limit nowhere named."""
    settings = settings_for(tmp_path, backend="local", e2b_port=0, default_timeout_s=1.0)
    thread = ServerThread(settings, backend="local").start()
    try:
        sandbox = E2BServer(thread, tmp_path).sandbox()
        execution = sandbox.run_code("import time\ntime.sleep(30)")
        assert execution.error is not None
        assert (execution.error.name, execution.error.value) == (
            "ExecutionTimeout",
            "Execution exceeded timeout_s=1; the kernel was interrupted: state kept.",
        )
        assert sandbox.run_code("6 * 7").text == "42"
        sandbox.kill()
    finally:
        thread.stop()


def test_code_running_in_a_context_keeps_its_sandbox_alive(tmp_path: Path) -> None:
    """A sandbox's idle timeout is its default context's: runs in another context did not
    count, and the sandbox (the context with it) was ended mid-work."""
    settings = settings_for(tmp_path, backend="local", e2b_port=0, cull_interval_s=0.2)
    thread = ServerThread(settings, backend="local").start()
    try:
        sandbox = E2BServer(thread, tmp_path).sandbox(timeout=2)
        sandbox.run_code("kept = 'default'")
        context = sandbox.create_code_context()
        for step in range(6):  # 3 s and more of work, none of it in the default context
            out = sandbox.run_code(f"import time; time.sleep(0.5); {step}", context=context)
            assert out.text == str(step), out
        assert sandbox.run_code("kept").text == "default"
        sandbox.kill()
    finally:
        thread.stop()


def test_every_execution_is_recorded_with_its_origin(e2b: E2BServer, sbx: Sandbox) -> None:
    sbx.run_code("recorded = 'yes'")
    [cell] = [c for c in cells(e2b, sbx.sandbox_id) if "".join(c["source"]) == "recorded = 'yes'"]
    meta = cell["metadata"]["interp"]
    assert meta["origin"] == "e2b" and meta["status"] == "ok"
    with e2b.v1() as v1:
        resp = v1.get(f"/v1/sessions/{sbx.sandbox_id}/executions/{meta['execution_id']}")
        assert resp.status_code == 200 and resp.json()["status"] == "ok"
        metrics = v1.get("/metrics").text
    assert 'interp_http_requests_total{method="POST",route="e2b:/execute"' in metrics


def test_bad_input_gets_precise_errors_in_e2b_shape(e2b: E2BServer, sbx: Sandbox) -> None:
    headers = {"X-Access-Token": sbx._envd_access_token, "E2b-Sandbox-Id": sbx.sandbox_id}
    with httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=30) as raw:
        nul = raw.post("/execute", json={"code": "print(1)\x00"})
        assert nul.status_code == 422 and "NUL" in nul.json()["message"]
        assert nul.json()["code"] == 422
        big = raw.post("/execute", content=b"x" * (2 << 20))
        assert big.status_code == 413
        bad = raw.post("/execute", content=b"{not json")
        assert bad.status_code == 422 and "Malformed JSON" in bad.json()["message"]
        unknown = raw.post("/execute", json={"code": "1", "context_id": "nope"})
        assert unknown.status_code == 404
        assert raw.get("/nowhere").json()["code"] == 404


def test_a_sandbox_whose_metadata_is_not_unicode_is_refused_and_nothing_made(
    e2b: E2BServer,
) -> None:
    """A lone surrogate in metadata or envVars (JSON escapes) is a 4xx naming the field, and
    no session is made; before, the create answered 500."""
    headers = {"X-API-Key": KEY, **JSON}
    with e2b.v1() as v1:
        before = {s["id"] for s in v1.get("/v1/sessions").json()["sessions"]}
    with httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=30) as raw:
        for field in ("metadata", "envVars"):
            body = '{"templateID": "code-interpreter-v1", "' + field + '": {"k": "\\ud800"}}'
            resp = raw.post("/sandboxes", content=body)
            assert 400 <= resp.status_code < 500, resp.text
            assert "Unicode" in resp.json()["message"]
    with e2b.v1() as v1:
        listed = v1.get("/v1/sessions")
        assert listed.status_code == 200
        assert {s["id"] for s in listed.json()["sessions"]} == before


def test_raw_stream_is_ndjson_with_keepalives_and_ends_last(e2b: E2BServer, sbx: Sandbox) -> None:
    headers = {"X-Access-Token": sbx._envd_access_token, "E2b-Sandbox-Id": sbx.sandbox_id}
    body = {"code": "import time\nprint('a', flush=True)\ntime.sleep(5)\n7"}
    with httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=30) as raw:
        resp = raw.post("/execute", json=body)
    assert resp.headers["content-type"].startswith("application/x-ndjson")
    items = [json.loads(line) for line in resp.text.splitlines()]
    types = [item["type"] for item in items]
    assert types[0] == "stdout" and isinstance(items[0]["timestamp"], int)
    assert "keepalive" in types  # 5 s of silence: at least one
    assert types[-1] == "end_of_execution"
    [result] = [item for item in items if item["type"] == "result"]
    assert result["text"] == "7" and result["is_main_result"] is True
    assert [i["execution_count"] for i in items if i["type"] == "number_of_executions"]


def test_the_stream_is_ascii_so_no_character_is_split_between_chunks(
    e2b: E2BServer, sbx: Sandbox
) -> None:
    # Before, lines were raw UTF-8: E2B's JS SDK decodes each network chunk on its own, so
    # a character split between two chunks reached its callbacks as U+FFFD.
    code = (
        "import sys\nprint('\u00e9\u65e5\U0001f600' * 3)\nsys.stderr.write('\u00fc\\n')\n"
        "display('\u03a9')\nraise ValueError('\u00df')"
    )
    headers = {"X-Access-Token": sbx._envd_access_token, "E2b-Sandbox-Id": sbx.sandbox_id}
    with httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=30) as raw:
        resp = raw.post("/execute", json={"code": code})
    assert resp.status_code == 200 and resp.content.isascii()
    items = [json.loads(line) for line in resp.text.splitlines()]
    assert [i["text"] for i in items if i["type"] == "stdout"] == [
        "\u00e9\u65e5\U0001f600" * 3 + "\n"
    ]
    execution = sbx.run_code(code)
    assert execution.logs.stdout == ["\u00e9\u65e5\U0001f600" * 3 + "\n"]
    assert execution.logs.stderr == ["\u00fc\n"]
    assert [r.text for r in execution.results] == ["'\u03a9'"]
    assert execution.error is not None and execution.error.value == "\u00df"


def test_output_past_the_in_memory_limit_ends_with_its_tail_and_the_notice(sbx: Sandbox) -> None:
    # Before, the stream stopped at max_output_hard_bytes (4 MiB: the rest spills to disk
    # and stops streaming): no notice, and the END printed last never arrived.
    code = (
        "import sys\nfor i in range(5):\n"
        "    sys.stdout.write(str(i) + ':' + 'x' * 1_000_000 + '\\n')\nprint('END')"
    )
    printed = 5 * (2 + 1_000_000 + 1) + len("END\n")
    stderr: list[Any] = []
    execution = sbx.run_code(code, on_stderr=stderr.append)
    out = "".join(execution.logs.stdout)
    assert out.endswith("x\nEND\n")
    mark = re.search(r"\n\[\.\.\. (\d+) characters omitted; full text in the artifact /v1/", out)
    assert mark is not None
    # What streamed, what the mark says was left out, and the tail: every character.
    assert mark.start() + int(mark.group(1)) + len(out[mark.end() :].split("\n", 1)[1]) == printed
    notice = "".join(m.line for m in stderr)
    assert notice.startswith("\n[output limit reached:")
    assert f"all {printed} characters of stdout are in the artifact /v1/sessions/" in notice


def test_a_sandbox_killed_mid_run_raises_as_on_e2b(e2b: E2BServer) -> None:
    # Before, run_code returned, with an error named SessionClosed; a run queued behind it
    # ended as if it had run, with nothing.
    sandbox = e2b.sandbox()
    headers = {"X-Access-Token": sandbox._envd_access_token, "E2b-Sandbox-Id": sandbox.sandbox_id}

    def queue_one_then_kill(_: Any) -> None:
        with (
            httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=60) as raw,
            raw.stream("POST", "/execute", json={"code": "'never runs'"}) as queued,
        ):
            assert queued.status_code == 200  # the status line comes once it is queued
            sandbox.kill()
            # Cut, as for the running one: no end_of_execution, no last chunk.
            with pytest.raises(httpx.RemoteProtocolError):
                queued.read()

    with pytest.raises(TimeoutException, match="killed while the request was in progress"):
        sandbox.run_code(
            "import time\nprint('started', flush=True)\ntime.sleep(600)",
            on_stdout=queue_one_then_kill,
        )


def test_error_answers_say_why_in_their_status_line(e2b: E2BServer, sbx: Sandbox) -> None:
    # E2B's JS SDK shows only "<status> <reason phrase>" of such errors: before, "400 Bad
    # Request", never why.
    headers = {"X-Access-Token": sbx._envd_access_token, "E2b-Sandbox-Id": sbx.sandbox_id}
    with httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=30) as raw:
        language = raw.post("/execute", json={"code": "1", "language": "js"})
        assert language.status_code == 400
        assert language.reason_phrase == language.json()["message"]
        assert "Python only" in language.reason_phrase
        reserved = raw.post("/execute", json={"code": "1", "env_vars": {"PATH": "/x"}})
        assert reserved.status_code == 422 and "'PATH' is reserved" in reserved.reason_phrase


def test_envs_cannot_name_code_that_later_code_runs(e2b: E2BServer, sbx: Sandbox) -> None:
    """A sandbox's envs and a run's envs could set PYTHONBREAKPOINT=os.system, after which
    breakpoint("id") ran a command (found by an outside security tester): refused, saying
    why, as /v1 refuses it."""
    with pytest.raises(SandboxException, match="'PYTHONBREAKPOINT' is reserved: breakpoint"):
        e2b.sandbox(envs={"PYTHONBREAKPOINT": "os.system"})
    headers = {"X-Access-Token": sbx._envd_access_token, "E2b-Sandbox-Id": sbx.sandbox_id}
    with httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=30) as raw:
        for name, value in (("PYTHONBREAKPOINT", "os.system"), ("BROWSER", "sh -c id %s")):
            run = raw.post(
                "/execute",
                json={"code": 'breakpoint("echo ran")', "env_vars": {name: value}},
            )
            assert run.status_code == 422 and f"'{name}' is reserved: " in run.reason_phrase
    assert sbx.run_code("import os; os.environ.get('PYTHONBREAKPOINT')").text is None
    assert sbx.run_code("1", envs={"RUN_LABEL": "x"}).text == "1"


def test_signed_file_urls_are_refused_saying_so(e2b: E2BServer) -> None:
    sandbox = e2b.sandbox(secure=True)
    sandbox.files.write("signed.txt", "s")
    resp = httpx.get(sandbox.download_url("signed.txt"), timeout=30)
    assert resp.status_code == 401
    assert "Signed file URLs" in resp.json()["message"]
    sandbox.kill()


def test_no_key_refuses_a_non_loopback_e2b_port(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, api_keys=[], host="0.0.0.0", e2b_port=0)
    with pytest.raises(SystemExit, match="without an API key"):
        ServerThread(settings, backend="local").start()


def test_keys_separate_sandboxes(e2b: E2BServer, sbx: Sandbox) -> None:
    with pytest.raises(AuthenticationException):
        e2b.sandbox(key="not-a-key")
    other = httpx.Client(base_url=e2b.e2b_url, headers={"X-API-Key": OTHER_KEY}, timeout=30)
    with other:
        assert other.get(f"/sandboxes/{sbx.sandbox_id}").status_code == 404
        assert other.delete(f"/sandboxes/{sbx.sandbox_id}").status_code == 404
        run = other.post("/execute", json={"code": "1"}, headers={"E2b-Sandbox-Id": sbx.sandbox_id})
        # As E2B's proxy answers for a sandbox it cannot reach: never a "not found" 404.
        assert run.status_code == 502 and "was not found" in run.json()["message"]
    anonymous = httpx.post(
        f"{e2b.e2b_url}/execute", json={"code": "1"}, headers={"E2b-Sandbox-Id": sbx.sandbox_id}
    )
    assert anonymous.status_code == 401


def test_an_access_token_reaches_its_own_sandbox_only(e2b: E2BServer) -> None:
    """Before, one sandbox's envdAccessToken stood for the whole API key: it wrote files
    into, ran code in and killed the key's other sandboxes, created and listed sandboxes,
    and went on doing so after its own sandbox was killed (found by an outside security
    tester)."""
    mine, other = e2b.sandbox(), e2b.sandbox()
    other.files.write("kept.txt", "other's")
    token = {"X-Access-Token": mine._envd_access_token}
    traffic = {"E2B-Traffic-Access-Token": mine._envd_access_token}
    at_other = {"E2b-Sandbox-Id": other.sandbox_id}

    def refused(resp: httpx.Response, says: str) -> None:
        assert resp.status_code == 401, resp.text
        assert resp.json()["code"] == 401 and says in resp.json()["message"]

    def tried_everything(raw: httpx.Client, headers: dict[str, str]) -> None:
        for name, resp in {
            "write": raw.post(
                "/files",
                params={"path": "kept.txt"},
                content=b"overwritten",
                headers={**headers, **at_other, "Content-Type": "application/octet-stream"},
            ),
            "read": raw.get("/files", params={"path": "kept.txt"}, headers={**headers, **at_other}),
            "run": raw.post("/execute", json={"code": "1"}, headers={**headers, **at_other}),
            "stat": raw.post(
                "/filesystem.Filesystem/Stat",
                json={"path": "kept.txt"},
                headers={**headers, **at_other},
            ),
            "contexts": raw.post("/contexts", json={}, headers={**headers, **at_other}),
            "health": raw.get("/health", headers={**headers, **at_other}),
        }.items():
            assert resp.status_code == 401, (name, resp.text)
            assert f"not '{other.sandbox_id}'" in resp.json()["message"], name
        for resp in (
            raw.post("/sandboxes", json={}, headers=headers),
            raw.post("/v2/sandboxes", json={}, headers=headers),
            raw.get("/v2/sandboxes", headers=headers),
            raw.get(f"/sandboxes/{other.sandbox_id}", headers=headers),
            raw.post(
                f"/sandboxes/{other.sandbox_id}/timeout", json={"timeout": 9}, headers=headers
            ),
            raw.post(f"/sandboxes/{other.sandbox_id}/connect", json={}, headers=headers),
            raw.post(f"/sandboxes/{other.sandbox_id}/pause", headers=headers),
            raw.delete(f"/sandboxes/{other.sandbox_id}", headers=headers),
            raw.delete(f"/sandboxes/{mine.sandbox_id}", headers=headers),
        ):
            refused(resp, "need the API key")

    with e2b.v1() as v1:
        sessions_before = {s["id"] for s in v1.get("/v1/sessions").json()["sessions"]}
    with httpx.Client(base_url=e2b.e2b_url, timeout=30) as raw:
        for headers in (token, traffic):
            tried_everything(raw, headers)
        # Its own sandbox, as the SDK calls it: served.
        own = {**token, "E2b-Sandbox-Id": mine.sandbox_id}
        assert raw.post("/execute", json={"code": "1"}, headers=own).status_code == 200
        mine.kill()
        # Killed: its own routes say it is not running (the SDK's contract), the rest 401.
        gone = raw.get("/files", params={"path": "kept.txt"}, headers=own)
        assert gone.status_code == 502 and "was not found" in gone.json()["message"]
        tried_everything(raw, token)
    assert other.files.read("kept.txt") == "other's" and other.is_running()
    assert other.run_code("1 + 1").text == "2"
    with e2b.v1() as v1:
        assert {s["id"] for s in v1.get("/v1/sessions").json()["sessions"]} == sessions_before
    other.kill()


def test_create_timeout_info_and_kill(e2b: E2BServer) -> None:
    with pytest.raises(SandboxException, match="'PATH' is reserved"):
        e2b.sandbox(envs={"PATH": "/x"})
    sandbox = e2b.sandbox(timeout=120, envs={"AT_CREATE": "yes"}, metadata={"team": "t1"})
    assert sandbox.run_code("import os; os.environ['AT_CREATE']").text == "yes"
    info = sandbox.get_info()
    assert info.metadata == {"team": "t1"} and info.sandbox_id == sandbox.sandbox_id
    sandbox.set_timeout(900)
    with e2b.v1() as v1:
        session = v1.get(f"/v1/sessions/{sandbox.sandbox_id}").json()
    assert session["idle_timeout_s"] == 900 and session["metadata"]["origin"] == "e2b"
    assert sandbox.is_running()
    sandbox.kill()
    assert not sandbox.is_running()
    with e2b.v1() as v1:
        assert v1.get(f"/v1/sessions/{sandbox.sandbox_id}").json()["status"] == "closed"
    with pytest.raises(SandboxException):
        sandbox.run_code("1")


def test_the_async_sdk_works_the_same(e2b: E2BServer) -> None:
    async def main() -> tuple[list[str], str | None, str]:
        sandbox = await AsyncSandbox.create(
            api_key=KEY, api_url=e2b.e2b_url, sandbox_url=e2b.e2b_url
        )
        seen: list[str] = []

        async def on_stdout(msg: Any) -> None:
            seen.append(msg.line)

        execution = await sandbox.run_code("print('async')\n6 * 7", on_stdout=on_stdout)
        await sandbox.files.write("a.txt", "from async")
        text = await sandbox.files.read("/home/user/a.txt")
        assert await sandbox.files.exists("a.txt")
        await sandbox.kill()
        return seen, execution.text, text

    assert asyncio.run(main()) == (["async\n"], "42", "from async")


def test_filesystem_calls_act_on_the_workspace(sbx: Sandbox) -> None:
    # Before, Stat answered a plain 404 that the SDK read as "not found": exists() was
    # False for a file just written, and remove/rename/make_dir raised FileNotFound.
    sbx.files.write("fsops/f.txt", "x")
    assert sbx.files.exists("fsops/f.txt") and sbx.files.exists("/home/user/fsops")
    assert not sbx.files.exists("fsops/missing.txt")
    assert sbx.files.exists("fsops/f.txt", user="root")  # envd's user header is no key
    info = sbx.files.get_info("/home/user/fsops/f.txt")
    assert (info.name, info.type, info.path, info.size) == (
        "f.txt",
        FileType.FILE,
        "/home/user/fsops/f.txt",
        1,
    )
    assert info.modified_time.year >= 2024
    assert sbx.files.make_dir("fsops/new/deep") is True
    assert sbx.files.make_dir("fsops/new/deep") is False  # already there
    assert sbx.files.get_info("fsops/new").type == FileType.DIR
    moved = sbx.files.rename("fsops/f.txt", "/home/user/fsops/new/g.txt")
    assert (moved.path, moved.type) == ("/home/user/fsops/new/g.txt", FileType.FILE)
    assert not sbx.files.exists("fsops/f.txt")
    assert sbx.files.read("fsops/new/g.txt") == "x"
    assert [(e.name, e.type) for e in sbx.files.list("fsops")] == [("new", FileType.DIR)]
    deep = sorted(e.path for e in sbx.files.list("/home/user/fsops", depth=3))
    assert deep == [f"/home/user/fsops/{p}" for p in ("new", "new/deep", "new/g.txt")]
    assert "fsops" in [e.name for e in sbx.files.list("/home/user")]
    # The kernel sees the same files.
    assert sbx.run_code("import os\nsorted(os.listdir('fsops/new'))").text == "['deep', 'g.txt']"
    sbx.files.remove("fsops/new")
    assert not sbx.files.exists("fsops/new")
    assert sbx.run_code("os.path.exists('fsops/new')").text == "False"
    # Errors as for /files: missing is FileNotFound, outside the workspace is refused.
    with pytest.raises(FileNotFoundException):
        sbx.files.remove("fsops/new")
    with pytest.raises(FileNotFoundException):
        sbx.files.rename("fsops/none", "fsops/other")
    sbx.files.write("fsops/file", "y")
    with pytest.raises(InvalidArgumentException, match="not a directory"):
        sbx.files.make_dir("fsops/file")
    for outside in (
        lambda: sbx.files.exists("/etc/passwd"),
        lambda: sbx.files.rename("fsops/file", "/tmp/escaped"),
        lambda: sbx.files.rename("fsops/file", "../escaped"),
        lambda: sbx.files.make_dir("/home/user/../../tmp/d"),
        lambda: sbx.files.remove("/home/user"),
        lambda: sbx.files.list("/"),
    ):
        with pytest.raises(InvalidArgumentException):
            outside()
    assert sbx.files.read("fsops/file") == "y"


def test_unserved_rpc_methods_answer_unimplemented(e2b: E2BServer, sbx: Sandbox) -> None:
    # Before, they answered 404, read by the SDK as a missing file or process.
    with pytest.raises(SandboxException, match=r"process\.Process/Start is not supported"):
        sbx.commands.run("ls")
    with pytest.raises(SandboxException, match="not supported by this service"):
        sbx.files.watch_dir("/home/user")
    headers = {"X-Access-Token": sbx._envd_access_token, "E2b-Sandbox-Id": sbx.sandbox_id}
    with httpx.Client(base_url=e2b.e2b_url, headers=headers, timeout=30) as raw:
        # A server-streaming call gets its error at the stream's end, where Connect
        # clients read it (before: a 501, which the JS SDK showed as "HTTP 501" only).
        start = raw.post(
            "/process.Process/Start",
            content=b"\x00\x00\x00\x00\x02{}",
            headers={"Content-Type": "application/connect+json"},
        )
        assert start.status_code == 200
        assert start.headers["content-type"] == "application/connect+json"
        assert start.content[0] == 0b10  # the end-of-stream envelope, and only it
        assert int.from_bytes(start.content[1:5], "big") == len(start.content) - 5
        error = json.loads(start.content[5:])["error"]
        assert error["code"] == "unimplemented"
        assert "process.Process/Start is not supported" in error["message"]
        resp = raw.post("/process.Process/List", json={})
        assert resp.status_code == 501
        assert resp.json()["code"] == "unimplemented"
        assert "process.Process/List is not supported" in resp.json()["message"]
        bad = raw.post("/filesystem.Filesystem/Stat", content=b"{", headers=JSON)
        assert bad.status_code == 400 and bad.json()["code"] == "invalid_argument"
        binary = raw.post(
            "/filesystem.Filesystem/Stat",
            content=b"",
            headers={"Content-Type": "application/proto"},
        )
        assert binary.status_code == 400 and "JSON codec" in binary.json()["message"]
    anonymous = httpx.post(f"{e2b.e2b_url}/filesystem.Filesystem/Stat", json={"path": "x"})
    assert anonymous.status_code == 401 and anonymous.json()["code"] == "unauthenticated"


def test_connect_and_list_reach_the_keys_running_sandboxes(e2b: E2BServer) -> None:
    # Before, connect answered 404 ("Paused sandbox ... not found") and list 405.
    opts = {"api_url": e2b.e2b_url, "sandbox_url": e2b.e2b_url}
    sandbox = e2b.sandbox(timeout=60, metadata={"job": "listed"})
    sandbox.run_code("kept = 'state'")
    again = Sandbox.connect(sandbox.sandbox_id, timeout=600, api_key=KEY, **opts)
    assert again.run_code("kept").text == "state"
    with e2b.v1() as v1:
        assert v1.get(f"/v1/sessions/{sandbox.sandbox_id}").json()["idle_timeout_s"] == 600
    listed = Sandbox.list(api_key=KEY, **opts).next_items()
    [mine] = [s for s in listed if s.sandbox_id == sandbox.sandbox_id]
    assert (mine.metadata, mine.state) == ({"job": "listed"}, SandboxState.RUNNING)
    query = SandboxQuery(metadata={"job": "listed"})
    assert [s.sandbox_id for s in Sandbox.list(query=query, api_key=KEY, **opts).next_items()] == [
        sandbox.sandbox_id
    ]
    paused = SandboxQuery(state=[SandboxState.PAUSED])
    assert Sandbox.list(query=paused, api_key=KEY, **opts).next_items() == []
    others = Sandbox.list(api_key=OTHER_KEY, **opts).next_items()
    assert sandbox.sandbox_id not in [s.sandbox_id for s in others]
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id, api_key=OTHER_KEY, **opts)
    # Actions with no equivalent here say so, rather than "not found".
    with pytest.raises(SandboxException, match="not supported by this service"):
        sandbox.pause()
    sandbox.kill()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id, api_key=KEY, **opts)
    listed = Sandbox.list(api_key=KEY, **opts).next_items()
    assert sandbox.sandbox_id not in [s.sandbox_id for s in listed]


def test_every_call_for_a_gone_sandbox_says_it_is_not_running(e2b: E2BServer) -> None:
    # Before, a sandbox whose session had ended (idle timeout, or closed through /v1)
    # still read and listed files, answered exists() with False and started a new code
    # context; a killed one answered 404, which the SDK raised as FileNotFound.
    killed, ended = e2b.sandbox(), e2b.sandbox()
    for sandbox in (killed, ended):
        sandbox.files.write("kept.txt", "k")
    killed.kill()
    with e2b.v1() as v1:
        assert v1.delete(f"/v1/sessions/{ended.sandbox_id}").status_code == 204
        live_before = len(v1.get("/v1/sessions").json()["sessions"])
    for sandbox in (killed, ended):
        assert not sandbox.is_running()
        files = sandbox.files
        for method, args in (
            (files.read, ("kept.txt",)),
            (files.write, ("new.txt", "n")),
            (files.exists, ("kept.txt",)),
            (files.list, (".",)),
        ):
            with pytest.raises(SandboxNotRunningException, match="was not found"):
                method(*args)
        # run_code: E2B's Code Interpreter SDK raises a 502 as a timeout of the sandbox.
        with pytest.raises(TimeoutException, match="was not found"):
            sandbox.run_code("1")
        with pytest.raises(TimeoutException, match="was not found"):
            sandbox.create_code_context()
    with e2b.v1() as v1:
        assert len(v1.get("/v1/sessions").json()["sessions"]) == live_before  # none started


def test_designed_5xx_answers_are_not_logged_as_errors(
    e2b: E2BServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Before, is_running() after kill() (health 502, by design) wrote an ERROR line.
    caplog.set_level(logging.INFO, logger="interpreter.access")
    sandbox = e2b.sandbox()
    sandbox.kill()
    assert not sandbox.is_running()
    with pytest.raises(SandboxException):
        sandbox.commands.list()  # a unary call: 501 (a streaming one's error is in its body)
    with pytest.raises(SandboxNotRunningException):  # not "False": the sandbox is gone
        sandbox.files.exists("anything")
    deadline = time.monotonic() + 10
    routes = {"e2b:/health": 502, "e2b:/{service}/{method}": 501}
    lines: list[logging.LogRecord] = []
    while time.monotonic() < deadline and {r.route for r in lines} != set(routes):
        lines = [
            r
            for r in caplog.records
            if r.name == "interpreter.access" and routes.get(getattr(r, "route", "")) == r.status
        ]
        time.sleep(0.05)
    assert {r.route for r in lines} == set(routes)
    assert {r.levelname for r in lines} == {"INFO"}


# ------------------------------------------------------------------------- debug mode


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As the server binds (tornado sets SO_REUSEADDR): a TIME_WAIT is no obstacle.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_debug_mode_clients_get_a_default_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = [p for p in (49999, 49983) if not _port_free(p)]
    if taken:
        pytest.fail(f"debug mode needs E2B's fixed ports; taken here: {taken}")
    data_dir = Path(tempfile.mkdtemp(prefix="interp-e2b-debug-"))
    settings = settings_for(
        data_dir, backend="local", api_keys=[], e2b_port=49999, e2b_envd_port=49983
    )
    monkeypatch.setenv("E2B_DEBUG", "true")
    try:
        with ServerThread(settings, backend="local") as thread:
            sandbox = Sandbox.create()
            assert sandbox.sandbox_id == "debug_sandbox_id"
            sandbox.run_code("kept = 7")
            again = Sandbox.create()  # a second client: the same default session
            assert again.run_code("kept * 6").text == "42"
            again.files.write("note.txt", "from debug")
            assert sandbox.files.read("/home/user/note.txt") == "from debug"
            assert sandbox.run_code("open('note.txt').read()").text == "from debug"
            sandbox.kill()  # debug mode: the SDK sends nothing, the session stays
            with httpx.Client(base_url=thread.url) as v1:
                sessions = v1.get("/v1/sessions").json()["sessions"]
                assert [s["metadata"]["origin"] for s in sessions] == ["e2b"]
                nb = v1.get(f"/v1/sessions/{sessions[0]['id']}/notebook").json()
                # Ended on the service's side (as a cull would): the next run is told.
                old = sessions[0]["id"]
                assert v1.delete(f"/v1/sessions/{old}").status_code == 204
            assert {c["metadata"]["interp"]["origin"] for c in nb["cells"]} == {"e2b"}
            told: list[str] = []
            fresh = sandbox.run_code("'kept' in globals()", on_stderr=lambda m: told.append(m.line))
            assert fresh.text == "False"
            assert told == [
                f"[interp] The default sandbox of debug mode ({old}) ended (deleted); this code "
                "runs in a fresh one: the variables and files of the old one are gone (its "
                f"notebook stays readable at /v1/sessions/{old}/notebook).\n"
            ]
            assert fresh.logs.stderr == told
            assert sandbox.run_code("1").logs.stderr == []  # told once
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
