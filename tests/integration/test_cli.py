"""The client-side ``interp`` commands as a person runs them: real processes, real broker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interpreter.cli_client import format_table
from interpreter.client import Client, Session
from interpreter.datadir_lock import DataDirLock
from tests.conftest import REPO, Server, require_docker, spawn_serve


def cli_env(server: Server | None) -> dict[str, str]:
    """The environment of an ``interp`` process: ours without INTERP_* settings, pointed
    at ``server`` when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERP_")}
    if server is not None:
        env.update({"INTERP_URL": server.url, "INTERP_API_KEY": server.api_key})
    return env


def one_cell_notebook(source: str, outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A v4.5 notebook of one recorded code cell."""
    cell = {
        "cell_type": "code",
        "id": "c0",
        "execution_count": 1,
        "metadata": {},
        "source": source,
        "outputs": outputs or [],
    }
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}


def interp(
    server: Server | None,
    *args: str,
    stdin: str | None = None,
    timeout: float = 120,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = cli_env(server)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "interpreter", *args],
        input=stdin,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def kept_session(local_server: Server) -> Iterator[Session]:
    with (
        Client(local_server.url, api_key=local_server.api_key) as client,
        client.create_session() as session,
    ):
        yield session


def test_run_code_streams_output_and_exit_status(local_server: Server) -> None:
    ok = interp(local_server, "run", "-c", "print('hello from a kernel')\n6 * 7")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "hello from a kernel\n42\n"
    assert "starting a session" in ok.stderr and "done (ok)" in ok.stderr
    failed = interp(local_server, "run", "-q", "-c", "x = 1\nraise RuntimeError('broken')")
    assert failed.returncode == 1
    assert "RuntimeError: broken" in failed.stderr
    assert "starting a session" not in failed.stderr  # --quiet


def test_run_file_in_an_existing_session_keeps_state(
    local_server: Server, kept_session: Session, tmp_path: Path
) -> None:
    script = tmp_path / "analysis.py"
    script.write_text(
        "import matplotlib.pyplot as plt\nvalue = 99\n"
        "plt.plot([1, 2]); plt.show()\nprint('value set')\n"
    )
    images = tmp_path / "images"
    first = interp(
        local_server, "run", str(script), "--session", kept_session.id, "--images", str(images)
    )
    assert first.returncode == 0, first.stderr
    assert "value set" in first.stdout
    saved = list(images.glob("*.png"))
    assert len(saved) == 1 and f"saved to {saved[0]}" in first.stdout
    second = interp(local_server, "run", "-", "--session", kept_session.id, stdin="value + 1")
    assert second.stdout == "100\n"
    assert kept_session.refresh().status == "idle"  # an existing session is not deleted


def test_run_keep_prints_the_new_session(local_server: Server) -> None:
    result = interp(local_server, "run", "-q", "--keep", "-c", "kept = True")
    assert result.returncode == 0
    session_id = result.stderr.strip().split("session: ")[-1]
    with Client(local_server.url, api_key=local_server.api_key) as client:
        session = client.get_session(session_id)
        assert session.run("kept").text == "True"
        session.close()


def test_quiet_before_the_command_is_the_commands_own(local_server: Server) -> None:
    # `interp -q run` was refused ("unrecognized arguments: -q"), unlike --url before it.
    loud = interp(local_server, "run", "-c", "6 * 7")
    quiet = interp(local_server, "-q", "run", "-c", "6 * 7")
    assert loud.returncode == quiet.returncode == 0, (loud.stderr, quiet.stderr)
    assert loud.stdout == quiet.stdout == "42\n"
    assert "session" in loud.stderr and quiet.stderr == "", quiet.stderr
    refused = interp(None, "-q", "openapi")
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1] == (
        "interp: error: -q before the command is for the client commands (run, sessions, "
        "notebook, ...); 'interp openapi' takes none."
    )


def test_timeout_is_a_failure(local_server: Server) -> None:
    result = interp(
        local_server, "run", "-q", "--timeout", "1", "-c", "import time\ntime.sleep(20)"
    )
    assert result.returncode == 1
    assert "status timeout" in result.stderr


def test_service_errors_exit_2(local_server: Server) -> None:
    bad_key = interp(local_server, "sessions", env_extra={"INTERP_API_KEY": "nope"})
    assert bad_key.returncode == 2 and "unauthorized" in bad_key.stderr
    missing = interp(local_server, "run", "-c", "1", "--session", "no-such-session")
    assert missing.returncode == 2 and "session_not_found" in missing.stderr
    nowhere = interp(None, "sessions", "--url", "http://127.0.0.1:9")
    assert nowhere.returncode == 2 and "cannot talk to" in nowhere.stderr


def test_sessions_table_and_json(local_server: Server, kept_session: Session) -> None:
    table = interp(local_server, "sessions")
    assert table.returncode == 0
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["ID", "STATUS", "BACKEND", "EXECS", "CREATED", "LAST", "ACTIVE"]
    assert any(row.startswith(kept_session.id) and " idle " in row for row in rows)
    listed = json.loads(interp(local_server, "sessions", "--json").stdout)
    assert kept_session.id in [s["id"] for s in listed]
    closed = json.loads(interp(local_server, "sessions", "--json", "--state", "closed").stdout)
    assert kept_session.id not in [s["id"] for s in closed]
    assert all(s["status"] == "closed" for s in closed)


def test_notebook_and_html_export(
    local_server: Server, kept_session: Session, tmp_path: Path
) -> None:
    kept_session.run("import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5]); plt.show()")
    out = tmp_path / "session.ipynb"
    result = interp(local_server, "notebook", kept_session.id, "-o", str(out))
    assert result.returncode == 0 and "wrote" in result.stderr
    nb = json.loads(out.read_text())
    assert nb["nbformat"] == 4 and nb["cells"]
    to_stdout = interp(local_server, "notebook", kept_session.id, "-q")
    assert json.loads(to_stdout.stdout) == nb
    page = tmp_path / "session.html"
    html = interp(local_server, "html", kept_session.id, "-o", str(page))
    assert html.returncode == 0, html.stderr
    text = page.read_text()
    assert "<html" in text and "data:image/png;base64," in text
    assert "rendering" in html.stderr
    # The exported file renders without a service (it was a 404 naming the path as a
    # session id).
    offline = interp(None, "html", str(out), "-o", str(tmp_path / "file.html"))
    assert offline.returncode == 0, offline.stderr
    assert "data:image/png;base64," in (tmp_path / "file.html").read_text()
    not_one = tmp_path / "not.ipynb"
    not_one.write_text("[1]")
    refused = interp(None, "html", str(not_one))
    assert refused.returncode == 2
    assert refused.stderr == f"interp: {not_one} is not an nbformat v4 notebook\n"
    # A missing file is said to be one (it was asked of the service as a session id).
    missing = interp(local_server, "html", str(tmp_path / "missing.ipynb"))
    assert missing.returncode == 2
    assert missing.stderr == f"interp: no notebook file {tmp_path / 'missing.ipynb'}\n"


def test_replay_command(local_server: Server, tmp_path: Path) -> None:
    with (
        Client(local_server.url, api_key=local_server.api_key) as client,
        client.create_session() as session,
    ):
        session.run("numbers = [3, 1, 2]\nprint(sorted(numbers))")
        session.run("sum(numbers)")
        nb = session.notebook()
    good = tmp_path / "good.ipynb"
    good.write_text(json.dumps(nb))
    result = interp(local_server, "replay", str(good))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 match, 0 mismatch" in result.stdout and "ALL MATCH" in result.stdout
    nb["cells"][1]["outputs"][0]["data"]["text/plain"] = "7"
    bad = tmp_path / "bad.ipynb"
    bad.write_text(json.dumps(nb))
    report = interp(local_server, "replay", str(bad), "--json")
    assert report.returncode == 1
    data = json.loads(report.stdout)
    assert [c["status"] for c in data["cells"]] == ["match", "mismatch"]
    assert "recorded '7', replayed '6'" in data["cells"][1]["differences"][0]


def test_rebuild_command_brings_a_notebooks_state_back_in_a_kept_session(
    local_server: Server, tmp_path: Path
) -> None:
    """``interp rebuild`` as a person picks up an analysis: the notebook and the directory
    of the files it reads give a new session (kept, its id printed) with the names back;
    a cell that now ends otherwise than recorded is exit 1 with the session kept; a file
    that is no notebook is one line and exit 2, with no session left behind."""
    inputs = tmp_path / "inputs"
    (inputs / "data").mkdir(parents=True)
    (inputs / "data" / "n.txt").write_text("7")
    with Client(local_server.url, api_key=local_server.api_key) as client:
        with client.create_session() as session:
            session.upload("data/n.txt", b"7")
            session.run("n = int(open('data/n.txt').read())")
            session.run("squares = [i * i for i in range(n)]")
            nb = session.notebook()
        path = tmp_path / "analysis.ipynb"
        path.write_text(json.dumps(nb))

        result = interp(local_server, "rebuild", str(path), "--files", str(inputs))
        assert result.returncode == 0, result.stdout + result.stderr
        summary, kept = result.stdout.splitlines()
        assert summary == (f"Rebuilt from {path}: 2 of 2 cells re-ran; none failed.")
        assert kept.startswith("session: s_")
        assert "uploaded 1 files from" in result.stderr
        rebuilt = client.get_session(kept.removeprefix("session: "))
        try:
            assert rebuilt.run("sum(squares)").text == "91"
            # Again in the same session, on top of its state, as JSON; a file now gone
            # makes the first cell fail where it had succeeded: exit 1, the session kept.
            rebuilt.delete_file("data/n.txt")
            again = interp(local_server, "rebuild", str(path), "--session", rebuilt.id, "--json")
            assert again.returncode == 1, again.stdout + again.stderr
            report = json.loads(again.stdout)["rebuild"]
            assert report["failed"] == [0] and report["cells_ran"] == 2
            assert client.get_session(rebuilt.id).info.status == "idle"
        finally:
            rebuilt.close()

        before = {s.id for s in client.list_sessions()}
        (tmp_path / "not.ipynb").write_text('{"cells": []}')
        refused = interp(local_server, "rebuild", str(tmp_path / "not.ipynb"))
        assert refused.returncode == 2 and refused.stdout == ""
        (line,) = refused.stderr.splitlines()
        assert line.startswith(f"interp: {tmp_path / 'not.ipynb'} is not a valid nbformat v4")
        no_dir = interp(local_server, "rebuild", str(path), "--files", str(tmp_path / "none"))
        assert no_dir.returncode == 2 and "not a directory" in no_dir.stderr
        unknown = interp(local_server, "rebuild", str(path), "--session", "s_unknown")
        assert unknown.returncode == 2 and "s_unknown" in unknown.stderr, unknown.stderr
        assert {s.id for s in client.list_sessions()} == before


#: Files that are not nbformat v4 notebooks, and the reason each is refused.
NOT_NOTEBOOKS = [
    ('{"not": "a notebook"}', 'it has no "nbformat" version: not a Jupyter notebook'),
    (
        '{"nbformat": 3, "worksheets": [{"cells": [{"cell_type": "code", "input": "print(1)",'
        ' "outputs": []}]}]}',
        "it is nbformat version 3; convert it to version 4 first",
    ),
    ("[1, 2]", "it is a JSON array, not an object"),
    ('{"cells": "x"}', 'it has no "nbformat" version'),
    ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": "x"}', '"cells" is not a list'),
    # An R notebook was replayed as Python, its first cell a NameError.
    (
        '{"nbformat": 4, "nbformat_minor": 5, "cells": [], "metadata": {"kernelspec":'
        ' {"name": "ir", "display_name": "R", "language": "R"}}}',
        "it is a notebook of the 'R' language (its metadata says so)",
    ),
]


@pytest.mark.parametrize(("text", "reason"), NOT_NOTEBOOKS)
def test_replay_refuses_what_is_not_a_v4_notebook_in_one_line(
    local_server: Server, tmp_path: Path, text: str, reason: str
) -> None:
    """Such files replayed as "0 code cells ... ALL MATCH" (exit 0) or ended in a
    traceback; now one line says why, the exit is 2, and no session is started. The
    server's from_notebook refuses the same files for the same reason."""
    path = tmp_path / "not.ipynb"
    path.write_text(text)
    with Client(local_server.url, api_key=local_server.api_key) as client:
        before = {s.id for s in client.list_sessions()}
        result = interp(local_server, "replay", str(path))
        assert {s.id for s in client.list_sessions()} == before
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"interp: {path} is not a valid nbformat v4 notebook: ")
    assert reason in line
    if text.startswith("{"):
        with local_server.client() as api:
            resp = api.post("/v1/sessions", json={"from_notebook": json.loads(text)})
        assert resp.status_code == 422, resp.text
        assert reason in resp.json()["error"]["message"]


def test_replay_skips_a_cell_the_notebook_never_executed(
    local_server: Server, tmp_path: Path
) -> None:
    """A cell added (or cleared) by hand has nothing to compare with: it was a mismatch
    ("0 rich outputs recorded, 1 replayed"), exit 1."""
    nb = one_cell_notebook("'added by hand'")
    nb["cells"][0]["execution_count"] = None
    path = tmp_path / "unexecuted.ipynb"
    path.write_text(json.dumps(nb))
    result = interp(local_server, "replay", str(path), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    (cell,) = json.loads(result.stdout)["cells"]
    assert cell["status"] == "skipped" and "never executed" in cell["note"]


def test_replay_with_an_embedded_service(tmp_path: Path) -> None:
    stdout = {"output_type": "stream", "name": "stdout", "text": "4\n"}
    nb = one_cell_notebook("print(2 + 2)", [stdout])
    path = tmp_path / "tiny.ipynb"
    path.write_text(json.dumps(nb))
    result = interp(
        None,
        "replay",
        str(path),
        env_extra={"INTERP_DATA_DIR": str(tmp_path / "data"), "INTERP_BACKEND": "local"},
    )
    assert result.returncode == 0, result.stderr
    assert "embedded service" in result.stderr and "ALL MATCH" in result.stdout


@pytest.mark.parametrize("command", [["replay", "tiny.ipynb"], ["mcp"]])
def test_an_embedded_service_on_a_data_dir_in_use_says_so_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    """``interp replay`` / ``interp mcp`` with INTERP_DATA_DIR a broker holds: exit 2 and
    the one line ``interp serve`` prints (it used to be a DataDirInUse traceback, exit 1)."""
    (tmp_path / "tiny.ipynb").write_text(
        json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []})
    )
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    held = DataDirLock.acquire(data_dir)  # what a broker on it holds for its lifetime
    try:
        args = [str(tmp_path / a) if a.endswith(".ipynb") else a for a in command]
        result = interp(
            None,
            *args,
            stdin="",
            env_extra={"INTERP_DATA_DIR": str(data_dir), "INTERP_BACKEND": "local"},
        )
    finally:
        held.release()
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"interp: error: the data directory {data_dir} is in use by another broker "
        f"(pid {os.getpid()}); stop it first, or give this one its own --data-dir"
    )


@pytest.mark.parametrize(("fmt", "key"), [("openai", "function"), ("anthropic", "input_schema")])
def test_tools_command(fmt: str, key: str) -> None:
    result = interp(None, "tools", "--format", fmt)
    assert result.returncode == 0
    tools = json.loads(result.stdout)
    assert len(tools) == 11 and all(key in t for t in tools)
    [run_code] = [
        t for t in tools if t.get("name", t.get("function", {}).get("name")) == "run_code"
    ]
    assert "Packages:" not in json.dumps(run_code)  # no service: no package list


def test_tools_command_names_the_kernels_packages(local_server: Server) -> None:
    result = interp(local_server, "tools", "--format", "anthropic")
    assert result.returncode == 0, result.stderr
    [run_code] = [t for t in json.loads(result.stdout) if t["name"] == "run_code"]
    with Client(local_server.url, api_key=local_server.api_key) as client:
        packages = client.info().packages
    sentence = f"Packages: numpy {packages['numpy']}, pandas {packages['pandas']}, "
    assert sentence in run_code["description"]


def test_format_table() -> None:
    assert format_table([["a", "bbb"]], ["X", "Y"]) == "X  Y\na  bbb"


def test_ctrl_c_interrupts_the_code_and_exits_130(local_server: Server) -> None:
    env = cli_env(local_server)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "interpreter",
            "run",
            "-c",
            "print('go', flush=True)\nimport time\ntime.sleep(60)",
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "go\n"  # the code is running
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "interrupting" in err


def test_sigterm_interrupts_the_code_deletes_the_session_and_exits_143(
    local_server: Server,
) -> None:
    """SIGTERM (kill, a supervisor, a timeout) left the session and its running code
    alive; it now does what Ctrl-C does."""
    env = cli_env(local_server)
    proc = subprocess.Popen(
        [sys.executable, "-m", "interpreter", "run", "-c",
         "print('go', flush=True)\nimport time\ntime.sleep(60)"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == "go\n"  # the code is running
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "interrupting" in err and "Traceback" not in err
    sid = next(line.split()[-2] for line in err.splitlines() if line.endswith(" ready"))
    with local_server.client() as api:
        info = api.get(f"/v1/sessions/{sid}").json()
        assert (info["status"], info["closed_reason"]) == ("closed", "deleted"), info
        (cell,) = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
        assert cell["metadata"]["interp"]["status"] == "interrupted", cell


def test_serve_on_a_busy_port_or_a_file_as_data_dir_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    # Both ended in tracebacks with exit 1 (OSError EADDRINUSE from bind_sockets,
    # FileExistsError from the data directory).
    (tmp_path / "afile").touch()
    file_as_dir = interp(None, "serve", "--backend", "local", "--data-dir", str(tmp_path / "afile"))
    assert file_as_dir.returncode == 2 and "Traceback" not in file_as_dir.stderr
    assert file_as_dir.stderr.splitlines()[-1] == (
        f"interp: error: the data directory {tmp_path / 'afile'} (--data-dir or "
        "INTERP_DATA_DIR) is not a directory: give a directory, or a path to create."
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ("--backend", "local", "--data-dir", str(tmp_path / "data"), "--pool-size", "0")
        taken = interp(None, "serve", *args, "--port", str(port))
    assert taken.returncode == 2 and "Traceback" not in taken.stderr, taken.stderr
    assert taken.stderr.splitlines()[-1] == (
        f"interp: error: cannot serve the API on 127.0.0.1:{port}: Address already in use; "
        "stop what listens there, or choose another port."
    )


def test_mcp_http_on_a_busy_port_is_one_line_and_exit_2(local_server: Server) -> None:
    """It said it served MCP there, then ended with uvicorn's raw bind error and exit
    status 3 (found by an outside operations tester)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = interp(local_server, "mcp", "--http", str(port))
    assert taken.returncode == 2, taken.stderr
    assert "MCP (streamable HTTP) on" not in taken.stderr, taken.stderr
    assert taken.stderr.splitlines()[-1] == (
        f"interp: error: cannot serve MCP on 127.0.0.1:{port}: Address already in use; "
        "stop what listens there, or choose another port (--http PORT)."
    )


def test_local_mistakes_are_one_line_never_a_traceback(
    local_server: Server, kept_session: Session, tmp_path: Path
) -> None:
    # Before, each of these ended in a Python traceback.
    nowhere = tmp_path / "missing-dir" / "x.ipynb"
    written = interp(local_server, "notebook", kept_session.id, "-o", str(nowhere))
    assert written.returncode == 2 and "Traceback" not in written.stderr, written.stderr
    assert f"interp: {nowhere}: No such file or directory" in written.stderr
    into_dir = interp(local_server, "html", kept_session.id, "-o", str(tmp_path))
    assert into_dir.returncode == 2 and "Traceback" not in into_dir.stderr, into_dir.stderr
    latin1 = tmp_path / "latin1.py"
    latin1.write_bytes("print('é')\n".encode("latin-1"))
    code = interp(local_server, "run", str(latin1))
    assert code.returncode == 2 and "Traceback" not in code.stderr, code.stderr
    assert "is not UTF-8 text" in code.stderr
    for key in ("clé", "key\u2019"):  # a typographic quote pasted with the key
        typo = interp(local_server, "sessions", env_extra={"INTERP_API_KEY": key})
        assert typo.returncode == 2 and "Traceback" not in typo.stderr, typo.stderr
        assert "$INTERP_API_KEY is not an API key" in typo.stderr


def test_a_reader_that_goes_away_ends_the_output_quietly(local_server: Server) -> None:
    env = cli_env(local_server)
    # `interp tools | true`: the reader is gone before the first line is written.
    shell = f"{sys.executable} -m interpreter tools | true"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", shell],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode in (0, 141), done.stderr


def test_a_run_whose_reader_goes_away_leaves_no_session(local_server: Server) -> None:
    """``interp run ... 2>&1 | head -1``: the reader left after the first progress line,
    the next one ended the command, and the session it had created stayed open."""
    env = cli_env(local_server)
    with local_server.client() as api:
        before = {
            s["id"] for s in api.get("/v1/sessions", params={"state": "open"}).json()["sessions"]
        }
        shell = f"{sys.executable} -m interpreter run -c 'print(1)' 2>&1 | head -1"
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", shell],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.stdout.startswith("["), done.stdout  # the first progress line
        opened = api.get("/v1/sessions", params={"state": "open"}).json()["sessions"]
        assert {s["id"] for s in opened} <= before, opened


def test_sigterm_ends_a_replay_and_deletes_its_session(
    local_server: Server, tmp_path: Path
) -> None:
    # Before, SIGTERM killed `interp replay` at once: its session went on running the cell.
    nb = one_cell_notebook("import time\ntime.sleep(60)")
    path = tmp_path / "slow.ipynb"
    path.write_text(json.dumps(nb))
    env = cli_env(local_server)
    with local_server.client() as api:
        before = {s["id"] for s in api.get("/v1/sessions").json()["sessions"]}
        proc = subprocess.Popen(
            [sys.executable, "-m", "interpreter", "replay", str(path)],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        busy: list[str] = []
        for _ in range(600):  # until the replay's cell runs (at most 60 s)
            sessions = api.get("/v1/sessions").json()["sessions"]
            busy = [s["id"] for s in sessions if s["id"] not in before and s["status"] == "busy"]
            if busy:
                break
            time.sleep(0.1)
        assert busy, "the replay's session never ran its cell"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "Traceback" not in err and "its session was deleted" in err
        info = api.get(f"/v1/sessions/{busy[0]}").json()
        assert (info["status"], info["closed_reason"]) == ("closed", "deleted"), info


@pytest.mark.parametrize(
    ("env", "args", "said"),
    [
        ({"INTERP_MAX_RETRIES": "abc"}, ("sessions",), "$INTERP_MAX_RETRIES must be a whole"),
        ({"INTERP_MAX_RETRIES": "-3"}, ("run", "-c", "1"), "$INTERP_MAX_RETRIES must be a whole"),
        ({"INTERP_URL": "::not a url"}, ("sessions",), "$INTERP_URL is not a URL"),
        ({"INTERP_URL": "http://[::1"}, ("sessions",), "$INTERP_URL is not a URL"),
        ({"INTERP_URL": "ftp://x"}, ("sessions",), "must be the service's http:// or https://"),
        ({}, ("mcp", "--url", "::bad"), "--url is not a URL"),
    ],
)
def test_bad_client_settings_are_one_line_not_a_traceback(
    env: dict[str, str], args: tuple[str, ...], said: str
) -> None:
    """An operations tester's finding: these printed a Python traceback (ValueError,
    httpx.InvalidURL, an exception group from the MCP server's task group)."""
    done = interp(None, *args, env_extra=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.docker
def test_serve_with_a_runtime_or_image_the_engine_lacks_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    # Both started, and then every session that met them failed at its creation (found by
    # an outside operations tester).
    require_docker()
    args = ("serve", "--backend", "docker", "--pool-size", "0", "--port", "0")
    runtime = interp(
        None, *args, "--data-dir", str(tmp_path / "a"), "--docker-runtime", "no-such-runtime"
    )
    assert runtime.returncode == 2 and "Traceback" not in runtime.stderr, runtime.stderr
    last = runtime.stderr.splitlines()[-1]
    assert last.startswith(
        "interp: error: docker_runtime 'no-such-runtime' is not a runtime of this Docker "
        "engine (it has: "
    ), last
    assert "runc" in last and "leave --docker-runtime out" in last, last
    image = interp(
        None, *args, "--data-dir", str(tmp_path / "b"), "--docker-images", "no-such-image:1"
    )
    assert image.returncode == 2 and "Traceback" not in image.stderr, image.stderr
    assert image.stderr.splitlines()[-1] == (
        "interp: error: docker_images: 'no-such-image:1' is not on this Docker engine, so "
        "every session asking for it would fail. Build or pull it (docker pull NAME), or "
        "take it out of --docker-images / INTERP_DOCKER_IMAGES."
    )


def test_serve_on_a_disk_already_below_its_floor_says_so_at_the_start(tmp_path: Path) -> None:
    # On the local backend nothing was said: the service started and answered 507 to
    # every session (found by an outside operations tester).
    data = tmp_path / "data"
    data.mkdir()
    st = os.statvfs(data)
    floor = ((st.f_bavail * st.f_frsize) >> 20) + 4096
    log: list[str] = []
    proc, url = spawn_serve(
        "--backend", "local", "--data-dir", str(data), "--pool-size", "0", "--port", "0",
        "--min-free-mb", str(floor), log=log,
    )  # fmt: skip
    try:
        warned = [line for line in log if f"below --min-free-mb {floor}" in line]
        assert len(warned) == 1, log
        assert "507 storage_full" in warned[0] and "lower --min-free-mb" in warned[0]
        with httpx.Client(base_url=url) as api:
            refused = api.post("/v1/sessions", json={})
        assert refused.status_code == 507, refused.text
    finally:
        proc.terminate()
        proc.wait(60)
