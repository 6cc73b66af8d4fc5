"""Shared fixtures: real brokers on free loopback ports, real kernels, real containers.

``server`` is parametrised over the backends, so every API test that uses it runs against
both the local and the Docker backend (one suite, not two copies). The Docker variant is
skipped only when no engine or image is available, and ``INTERP_REQUIRE_DOCKER=1`` (set by
CI) turns that skip into a failure; so it does for the tests that need disk quotas
(:func:`require_quotas`) or root to mount a filesystem.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import httpx
import pytest
from jupyter_client.manager import KernelManager

from interpreter import quota
from interpreter.server import ServerThread
from interpreter.settings import Settings

KM = TypeVar("KM", bound=KernelManager)

#: Where tests' own kernels put their unix sockets (short: AF_UNIX paths stop at 107 bytes).
_IPC_ROOT = Path(tempfile.mkdtemp(prefix="interp-ipc-"))
atexit.register(shutil.rmtree, _IPC_ROOT, True)


def over_ipc(km: KM) -> KM:
    """Give a test's own kernel unix sockets instead of TCP ports, as the service's local
    backend does. jupyter_client picks a TCP port by binding port 0 and closing it, and the
    kernel binds it a moment later; a client connecting meanwhile can be handed that very
    port as its own source port (a TCP self-connection), and the kernel then dies with
    "Address already in use" (2 kernels in 750 started beside a CI run)."""
    km.transport = "ipc"
    km.ip = str(Path(tempfile.mkdtemp(dir=_IPC_ROOT)) / "k")
    return km


KEY = "test-key-alpha"
OTHER_KEY = "test-key-bravo"
REPO = Path(__file__).resolve().parent.parent
#: The analyst stack the kernel image and the `kernel` extra promise (issue 13).
ANALYST = [
    "numpy",
    "pandas",
    "matplotlib",
    "seaborn",
    "plotly",
    "scipy",
    "scikit-learn",
    "statsmodels",
    "pyarrow",
    "openpyxl",
    "xlrd",
    "tqdm",
    "ipywidgets",
    "pillow",
    "sympy",
    "tabulate",
]

_docker_state: dict[str, Any] = {}


def docker_ready() -> tuple[bool, str]:
    """Whether the Docker backend can run here (engine answers and the image exists)."""
    if "ready" not in _docker_state:
        from interpreter.backends.docker.engine import docker_available
        from interpreter.image import image_status

        if not docker_available():
            _docker_state["ready"] = (False, "no Docker engine answers")
        elif not image_status("interp-kernel:latest").exists:
            _docker_state["ready"] = (False, "kernel image missing: run `interp images build`")
        else:
            _docker_state["ready"] = (True, "")
    result: tuple[bool, str] = _docker_state["ready"]
    return result


def require_docker() -> None:
    ok, why = docker_ready()
    if not ok:
        skip_or_fail(why, "Docker tests")


def require_quotas() -> None:
    """Disk quotas (loop-mounted filesystems: root, ``mkfs.ext4``, loop devices), which the
    "data directory full" and quota tests need. Like Docker, required in CI."""
    why = quota.unavailable_reason()
    if why is not None:
        skip_or_fail(f"no disk quotas: {why}", "Disk tests (loop mounts, quotas)")


def skip_or_fail(why: str, what: str) -> NoReturn:
    """Skip a test that cannot run here, or fail it under ``INTERP_REQUIRE_DOCKER=1`` (set
    by CI, where Docker, root and loop devices are there and nothing may be skipped)."""
    if os.environ.get("INTERP_REQUIRE_DOCKER") == "1":
        pytest.fail(f"{what} must run here but cannot: {why}")
    pytest.skip(why)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("server") == "docker":
            item.add_marker(pytest.mark.docker)
    # Files with a slow test go first, each kept whole (its module fixtures are set up
    # once): under pytest-xdist a long test taken up last keeps one process busy after
    # the others are done.
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


@dataclass
class Server:
    """A running broker: its URL, keys, backend and the thread that runs it."""

    url: str
    api_key: str
    other_key: str
    backend: str
    data_dir: Path
    thread: ServerThread
    sessions: list[str] = field(default_factory=list)

    def client(self, key: str | None = KEY, timeout: float = 120) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)


def test_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "port": 0,
        "api_keys": [KEY, OTHER_KEY],
        "max_upload_bytes": 1 << 20,
        "queue_size": 4,
        "interrupt_grace_s": 2.0,
        "pool_size": 1,
        "default_memory_mb": 512,
        "tmp_size_mb": 64,
        "keep_containers_on_shutdown": False,
    }
    values.update(overrides)
    return Settings(**values)


def start_server(backend: str, data_dir: Path, **overrides: Any) -> Server:
    settings = test_settings(data_dir, backend=backend, **overrides)
    thread = ServerThread(settings, backend=backend).start()
    return Server(
        url=thread.url,
        api_key=KEY,
        other_key=OTHER_KEY,
        backend=backend,
        data_dir=data_dir,
        thread=thread,
    )


@contextlib.contextmanager
def own_server(prefix: str, **overrides: Any) -> Iterator[Server]:
    """A local broker of its own with these settings, in a fresh data directory that is
    removed after it stops (for a test module's fixture)."""
    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    srv = start_server("local", data_dir, **overrides)
    try:
        yield srv
    finally:
        srv.thread.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session", params=["local", "docker"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A broker per backend, shared by the whole test session."""
    backend = request.param
    if backend == "docker":
        require_docker()
    data_dir = Path(tempfile.mkdtemp(prefix=f"interp-{backend}-"))
    srv = start_server(backend, data_dir)
    broker_id = srv.thread.broker.broker_id
    yield srv
    srv.thread.stop()
    if backend == "docker":
        from interpreter.backends.docker.engine import list_broker_containers

        leaked = list_broker_containers(broker_id)
        assert not leaked, f"containers left behind: {[c.name for c in leaked]}"
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def local_server() -> Iterator[Server]:
    """A local-backend broker, for tests of the surface above the backend (SDK, CLI)."""
    with own_server("interp-local-only-") as srv:
        yield srv


@pytest.fixture
def api(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture
def new_session(server: Server) -> Iterator[Callable[..., str]]:
    """Factory: create a session (deleted after the test) and return its id."""
    created: list[tuple[str, str]] = []

    def make(key: str = KEY, **body: Any) -> str:
        with server.client(key) as client:
            resp = client.post("/v1/sessions", json=body)
            assert resp.status_code == 201, resp.text
            sid: str = resp.json()["id"]
        created.append((key, sid))
        return sid

    yield make
    for key, sid in created:
        with server.client(key) as client:
            client.delete(f"/v1/sessions/{sid}")


@pytest.fixture(scope="module")
def shared_session(server: Server) -> Iterator[str]:
    """One session per module and backend, for tests that don't disturb its state."""
    with server.client() as client:
        resp = client.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid: str = resp.json()["id"]
    yield sid
    with server.client() as client:
        client.delete(f"/v1/sessions/{sid}")


def serve_argv(*args: str) -> list[str]:
    """The command line of ``interp serve ARGS`` from this checkout, on a free port."""
    return [sys.executable, "-m", "interpreter", "serve", "--port", "0", *args]


def spawn_serve(
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    wrapper: tuple[str, ...] = (),
    log: list[str] | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """Start ``interp serve ARGS`` in its own process; return it and the URL it announced.
    See :func:`spawn_serve_announcing` for the rest."""
    proc, urls = spawn_serve_announcing(
        ("listening on",), *args, env=env, preexec_fn=preexec_fn, wrapper=wrapper, log=log
    )
    return proc, urls[0]


def spawn_serve_announcing(
    announcements: tuple[str, ...],
    *args: str,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    wrapper: tuple[str, ...] = (),
    log: list[str] | None = None,
) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``interp serve ARGS`` (with ``env``, ``preexec_fn`` run in the child before it
    starts, and the command behind ``wrapper``, e.g. ``setpriv ...``); return it and the
    first URL of each announcement (in order: ``"listening on"``, ``"E2B-compatible surface
    on"``). Every line it prints, then and later, is appended to ``log`` when given."""
    proc = subprocess.Popen(
        [*wrapper, *serve_argv(*args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=env,
        preexec_fn=preexec_fn,
    )
    assert proc.stdout is not None
    seen = [] if log is None else log
    urls: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        match = re.search(re.escape(announcements[len(urls)]) + r" (http://[^\s,]+)", line)
        if match:
            urls.append(match.group(1))
            if len(urls) == len(announcements):
                # Keep draining its output so the server never blocks on a full pipe.
                threading.Thread(target=_drain, args=(proc, log), daemon=True).start()
                return proc, urls
    raise AssertionError(f"server did not start (exit {proc.wait()}):\n" + "".join(seen[-20:]))


def _drain(proc: subprocess.Popen[str], log: list[str] | None) -> None:
    """Read what a spawned server prints, so that it never blocks on a full pipe."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if log is not None:
            log.append(line)


def stop_serve(proc: subprocess.Popen[str], wait_s: float = 60) -> None:
    """SIGTERM a spawned ``interp serve`` and wait for it (SIGKILL after ``wait_s``)."""
    proc.terminate()
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def runtime_dir_of(data_dir: Path, sid: str) -> Path:
    """Where the session's kernel keeps its ipc sockets: recorded for a docker kernel (a
    random path outside the data directory, docs/security.md H-30), derived for a local one."""
    row = None
    # (A data directory with no store yet, or none of the session's, has it derived.)
    with (
        contextlib.suppress(sqlite3.Error),
        contextlib.closing(sqlite3.connect(data_dir / "state.db")) as db,
    ):
        row = db.execute("SELECT provisioner_json FROM sessions WHERE id = ?", (sid,)).fetchone()
    saved = json.loads(row[0]) if row and row[0] else {}
    recorded = (saved.get("docker") or {}).get("runtime_dir")
    return Path(recorded) if recorded else data_dir / "run" / sid[-12:]


def run(client: httpx.Client, sid: str, code: str, **body: Any) -> dict[str, Any]:
    """Execute and return the Execution JSON (asserting HTTP 200)."""
    resp = client.post(f"/v1/sessions/{sid}/execute", json={"code": code, **body})
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def await_status(
    client: httpx.Client, sid: str, eid: str, wanted: set[str], within_s: float = 60
) -> dict[str, Any]:
    """Poll an execution until its status is one of ``wanted``; returns its JSON."""
    deadline = time.monotonic() + within_s
    while True:
        execution: dict[str, Any] = client.get(f"/v1/sessions/{sid}/executions/{eid}").json()
        if execution["status"] in wanted:
            return execution
        assert time.monotonic() < deadline, execution
        time.sleep(0.05)


def settled(client: httpx.Client, sid: str, within_s: float = 60) -> dict[str, Any]:
    """The session JSON once a restarted broker has dealt with ``sid`` (reattached or
    closed: recovery runs while the broker serves, status ``starting`` until then)."""
    deadline = time.monotonic() + within_s
    while True:
        info: dict[str, Any] = client.get(f"/v1/sessions/{sid}").json()
        if info["status"] != "starting":
            return info
        assert time.monotonic() < deadline, f"session {sid} still being reattached"
        time.sleep(0.1)
