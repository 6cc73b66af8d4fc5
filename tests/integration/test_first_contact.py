"""A new user's first minutes, literally: the README's commands as written, from a fresh
copy of the repository, on a machine where no Docker engine answers.

``./scripts/serve`` runs with no flags and no ``INTERP_*`` variable in a copy of the
repository's files (it creates its own virtualenv there, as on a fresh clone); then every
command and code block of the README runs against it, and each ``# → `` comment is
checked against what the block printed. ``interp mcp`` and ``interp replay`` without a URL
run from a working directory they must not write to.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import nbformat
import pytest
from mcp import Client as MCPClient
from mcp import StdioServerParameters

from tests.conftest import REPO

README = REPO / "README.md"
#: The URL the README promises ``./scripts/serve`` listens on.
README_URL = "http://127.0.0.1:8700"
NO_ENGINE = "unix:///nonexistent/docker.sock"
#: Creating the copy's virtualenv (pip, from the package index or its cache) and starting.
SERVE_START_S = 600
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int

    @property
    def expectations(self) -> list[str]:
        """The fragments ``# → a ... b`` comments say the output contains."""
        fragments = []
        for match in re.finditer(r"# → (.*)$", self.code, re.M):
            fragments += [part.strip() for part in match.group(1).split("...") if part.strip()]
        return fragments


def readme_blocks() -> list[Block]:
    text = README.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        indent = len(match.group(1))
        code = "".join(line[indent:] for line in match.group(3).splitlines(keepends=True))
        line = text.count("\n", 0, match.start()) + 1
        blocks.append(Block(match.group(2), code, line))
    return blocks


def user_env(**extra: str) -> dict[str, str]:
    """A user's shell: none of the suite's variables, no virtualenv, no Docker engine."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("INTERP_", "PYTEST", "VIRTUAL_ENV", "DOCKER_"))
    }
    env["DOCKER_HOST"] = NO_ENGINE
    env.update(extra)
    return env


def fresh_copy(target: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@dataclass
class Served:
    root: Path
    proc: subprocess.Popen[str]
    lines: list[str]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8700)) == 0:
            pytest.fail("port 8700 is taken: the README's service cannot start (stop it first)")
    setup = readme_blocks()[0]
    commands = [line.split("#")[0].strip() for line in setup.code.splitlines()]
    assert commands == ["./scripts/serve", "./scripts/test"], "the README must open with these"
    root = fresh_copy(tmp_path_factory.mktemp("fresh") / "interp")
    proc = subprocess.Popen(
        ["sh", "-c", commands[0]],
        cwd=root,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    seen: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            seen.put(line)
        seen.put(None)

    threading.Thread(target=pump, daemon=True).start()
    try:
        while True:
            line = seen.get(timeout=SERVE_START_S)
            assert line is not None, "scripts/serve exited:\n" + "".join(lines[-30:])
            if "listening on" in line:
                assert line.strip().endswith(README_URL), line
                break
        yield Served(root, proc, lines)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as a user stops it
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise


def test_serve_as_the_readme_shows_runs_code_without_docker(served: Served) -> None:
    output = "".join(served.lines)
    assert "No Docker engine answers: using the LOCAL backend" in output
    assert "interp (local backend) listening on" in output
    with httpx.Client(base_url=README_URL, timeout=120) as http:
        created = http.post("/v1/sessions")
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        assert created.json()["backend"] == "local"
        http.post(f"/v1/sessions/{sid}/execute", json={"code": "x = 41"}).raise_for_status()
        result = http.post(f"/v1/sessions/{sid}/execute", json={"code": "x + 1"}).json()
        assert result["status"] == "ok"
        assert result["outputs"][-1]["data"]["text/plain"] == "42"
        http.delete(f"/v1/sessions/{sid}").raise_for_status()
    # State went where the README says: ./.data of the repository it was started from.
    assert (served.root / ".data" / "state.db").is_file()
    assert (served.root / ".data" / "sessions" / sid / "notebook.ipynb").is_file()


def _readme_examples() -> list[Block]:
    blocks = [b for b in readme_blocks()[1:] if b.language in ("sh", "python")]
    assert len(blocks) >= 3, "the README's examples went missing"
    return blocks


@pytest.mark.parametrize("block", _readme_examples(), ids=lambda b: f"README.md:{b.line}")
def test_readme_block_runs_as_written(served: Served, block: Block, tmp_path: Path) -> None:
    if block.language == "python":
        command = [str(served.root / ".venv" / "bin" / "python"), "-c", block.code]
    else:
        command = ["sh", "-e", "-c", block.code]
    out = subprocess.run(
        command,
        cwd=served.root,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, f"README.md:{block.line} failed:\n{out.stdout}\n{out.stderr}"
    for fragment in block.expectations:
        assert fragment in out.stdout, f"README.md:{block.line}: {fragment!r} not in output"
    if "session.ipynb" in block.code:
        nbformat.validate(nbformat.read(served.root / "session.ipynb", as_version=4))
    if "tools.json" in block.code:
        assert json.loads((served.root / "tools.json").read_text())


def _read_only_dir(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o555)  # root may still write: the tests below also check nothing was
    return path


def _all_files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*"))


def test_mcp_without_url_keeps_its_state_out_of_the_working_directory(tmp_path: Path) -> None:
    cwd = _read_only_dir(tmp_path / "cwd")
    state = tmp_path / "state"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "interpreter", "mcp"],
        env=user_env(XDG_STATE_HOME=str(state)),
        cwd=str(cwd),
    )

    async def main() -> str:
        with anyio.fail_after(180):
            async with MCPClient(params) as client:
                result = await client.call_tool("run_code", {"code": "6 * 7"})
                assert not result.is_error
                return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))

    assert "42" in anyio.run(main)
    assert _all_files(cwd) == []
    runs = list((state / "interp" / "embedded").iterdir())
    assert len(runs) == 1 and (runs[0] / "state.db").is_file()
    assert list((runs[0] / "sessions").glob("*/notebook.ipynb"))


def test_replay_without_url_says_where_and_how_it_runs(tmp_path: Path) -> None:
    cwd = _read_only_dir(tmp_path / "cwd")
    notebook = tmp_path / "nb.ipynb"
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(2 + 3)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="5\n")]
    nb.cells = [cell]
    nbformat.write(nb, notebook)
    out = subprocess.run(
        [sys.executable, "-m", "interpreter", "replay", str(notebook)],
        cwd=cwd,
        env=user_env(XDG_STATE_HOME=str(tmp_path / "state")),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    run_dir = next((tmp_path / "state" / "interp" / "embedded").iterdir())
    assert "embedded service (local backend) on http://127.0.0.1:" in out.stderr
    assert f"state in {run_dir}" in out.stderr
    assert "No Docker engine answers: using the LOCAL backend" in out.stderr
    assert _all_files(cwd) == []


def test_the_example_mcp_host_config_works_as_written(served: Served) -> None:
    """``examples/mcp_host_config.json`` as a host runs it: its command from the user's
    PATH (the virtualenv scripts/serve made), its arguments and environment unchanged,
    against the README's service."""
    config = json.loads((REPO / "examples" / "mcp_host_config.json").read_text())
    (entry,) = config["mcpServers"].values()
    assert entry["env"]["INTERP_URL"] == README_URL
    path = f"{served.root / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"
    params = StdioServerParameters(
        command=entry["command"],
        args=entry["args"],
        env=user_env(PATH=path, **entry["env"]),
        cwd=str(served.root),
    )

    async def main() -> str:
        with anyio.fail_after(120):
            async with MCPClient(params) as client:
                await client.call_tool("run_code", {"code": "word = 'host'"})
                result = await client.call_tool("run_code", {"code": "word * 2"})
                return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))

    assert "'hosthost'" in anyio.run(main)


def test_an_explicit_local_backend_warns_as_the_fallback_does(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "interpreter", "serve", "--backend", "local", "--port", "0"],
        cwd=tmp_path,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "listening on" in line:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    text = "".join(seen)
    assert "Using the LOCAL backend, which does NOT isolate kernels from this machine. " in text
    # The same words as the automatic fallback (test_serve_as_the_readme_shows...).
    assert text.count("Use it only for trusted code.") == 1
