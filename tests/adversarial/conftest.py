"""The adversarial suite's shared fixture: a broker of its own, a canary, and a guard.

Every module gets one broker per backend (``adv``), started as a subprocess with
``spawn_serve`` so that its memory and descriptors are its own and can be read from
``/proc/<pid>/``. A canary session of ANOTHER key holds a value from the start.

After every test, :class:`Guard` (autouse) checks that the attack harmed nothing else:

* ``/healthz`` answers 200;
* the canary still holds its value and answered within 2 s every time it was probed,
  during the test (a background thread probes it about once a second) and after it;
* the broker's RSS and open descriptors stay within a bound of their module baseline;
* nothing is left behind by the sessions the test made and deleted: no container, no
  runtime directory, no mount under the data directory, no loop device on its image;
* the notebook of every session the test made is valid nbformat;
* every error answer (status >= 400) the test's clients received is JSON with an
  ``error`` object and names neither a traceback nor a host path.

A module chooses its backends with ``pytestmark = pytest.mark.parametrize("adv",
["docker"], indirect=True)``; by default a module runs on both.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest

from interpreter.ids import broker_id_for
from tests.conftest import (
    KEY,
    OTHER_KEY,
    REPO,
    require_docker,
    runtime_dir_of,
    spawn_serve,
    spawn_serve_announcing,
)

#: How far the broker may grow past its module baseline and stay "bounded".
RSS_SLACK_MB = 200
FD_SLACK = 64
#: The canary must answer within this, during and after every case.
CANARY_DEADLINE_S = 2.0
#: In the environment of every broker of this suite (inherited); no kernel may see it.
BROKER_SECRET = "adv-broker-secret-" + secrets.token_hex(4)
os.environ["INTERP_ADV_BROKER_SECRET"] = BROKER_SECRET


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class RssSampler:
    """Samples a process's ``VmRSS`` in a thread while the ``with`` block runs."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(rss_mb(self.pid))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    @property
    def peak(self) -> float:
        return max(self.samples)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target == prefix or target.startswith(prefix + "/"):
            found.append(target)
    return found


def loop_devices_on(path: Path) -> list[str]:
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(path.resolve()) in line]


@dataclass
class Broker:
    """One broker subprocess of this suite, its data directory and its keys."""

    backend: str
    data_dir: Path
    proc: subprocess.Popen[str]
    url: str
    errors: list[str] = field(default_factory=list)
    #: The E2B-compatible surface's URL, for a broker started with it (``e2b=True``).
    e2b_url: str = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def broker_id(self) -> str:
        return broker_id_for(self.data_dir)

    def client(self, key: str | None = KEY, timeout: float = 120) -> httpx.Client:
        """A client whose error answers are checked by the guard (JSON, no traceback or
        host path)."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=timeout,
            event_hooks={"response": [self._check_error]},
        )

    def _check_error(self, resp: httpx.Response) -> None:
        if resp.status_code < 400:
            return
        body = resp.read()
        where = f"{resp.request.method} {resp.request.url.path} -> {resp.status_code}"
        try:
            data = resp.json()
        except ValueError:
            self.errors.append(f"{where}: not JSON: {body[:200]!r}")
            return
        if not isinstance(data, dict) or not isinstance(data.get("error"), dict):
            self.errors.append(f"{where}: no error object: {body[:200]!r}")
        text = body.decode("utf-8", "replace")
        for leak in ("Traceback", str(self.data_dir), str(REPO), "/tmp/interp-adv"):
            if leak in text:
                self.errors.append(f"{where}: leaks {leak!r}: {text[:300]}")


def start_broker(backend: str, data_dir: Path, *extra: str, e2b: bool = False) -> Broker:
    args = [
        "--backend",
        backend,
        "--data-dir",
        str(data_dir),
        "--api-key",
        KEY,
        "--api-key",
        OTHER_KEY,
        "--pool-size",
        "0",
        "--default-memory-mb",
        "512",
        "--tmp-size-mb",
        "64",
        "--interrupt-grace-s",
        "2",
        "--default-disk-mb",
        "64",
        "--max-disk-mb",
        "256",
        *extra,
    ]
    if not e2b:
        proc, url = spawn_serve(*args)
        return Broker(backend=backend, data_dir=data_dir, proc=proc, url=url)
    proc, (url, e2b_url) = spawn_serve_announcing(
        ("listening on", "E2B-compatible surface on"), *args, "--e2b-port", "0"
    )
    return Broker(backend=backend, data_dir=data_dir, proc=proc, url=url, e2b_url=e2b_url)


def stop_broker(broker: Broker) -> None:
    if broker.proc.poll() is None:
        broker.proc.send_signal(signal.SIGTERM)
        try:
            broker.proc.wait(60)
        except subprocess.TimeoutExpired:
            broker.proc.kill()
            broker.proc.wait(10)


def remove_leftovers(broker: Broker) -> None:
    """After a module: remove whatever a failed case left (containers, mounts)."""
    if broker.backend == "docker":
        from interpreter.backends.docker.engine import list_broker_containers, remove_container

        for container in list_broker_containers(broker.broker_id):
            remove_container(container.id)
            if container.runtime_dir:  # outside the data directory (H-30)
                shutil.rmtree(container.runtime_dir, ignore_errors=True)
    for target in sorted(mounts_under(broker.data_dir), reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)


def new_data_dir() -> Path:
    # Short, so the ipc socket paths of docker kernels fit in sun_path.
    return Path(tempfile.mkdtemp(prefix="interp-adv-"))


@dataclass
class Canary:
    session_id: str
    value: str


@pytest.fixture(scope="module", params=["docker", "local"])
def adv(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """This module's broker (backend from the parameter; with the E2B surface when the
    module sets ``ADV_E2B = True``)."""
    backend: str = request.param
    if backend == "docker":
        require_docker()
    data_dir = new_data_dir()
    broker = start_broker(backend, data_dir, e2b=getattr(request.module, "ADV_E2B", False))
    try:
        yield broker
    finally:
        stop_broker(broker)
        remove_leftovers(broker)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def canary(adv: Broker) -> Iterator[Canary]:
    value = secrets.token_hex(8)
    with adv.client(OTHER_KEY) as client:
        resp = client.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        ran = client.post(f"/v1/sessions/{sid}/execute", json={"code": f"canary = {value!r}"})
        assert ran.json()["status"] == "ok", ran.text
    yield Canary(sid, value)
    with adv.client(OTHER_KEY) as client:
        client.delete(f"/v1/sessions/{sid}")


@dataclass
class Baseline:
    rss_mb: float
    fds: int


@pytest.fixture(scope="module")
def baseline(adv: Broker, canary: Canary) -> Baseline:
    return Baseline(rss_mb(adv.pid), open_fds(adv.pid))


def probe_canary(broker: Broker, canary: Canary) -> tuple[float, str]:
    """Ask /healthz, then the canary for its value; return (the slower answer's seconds,
    problem or '')."""
    try:
        with httpx.Client(
            base_url=broker.url, headers={"Authorization": f"Bearer {OTHER_KEY}"}, timeout=10
        ) as client:
            started = time.monotonic()
            health = client.get("/healthz")
            took = time.monotonic() - started
            started = time.monotonic()
            resp = client.post(f"/v1/sessions/{canary.session_id}/execute", json={"code": "canary"})
            took = max(took, time.monotonic() - started)
    except httpx.HTTPError as exc:
        return 10.0, f"canary unreachable: {exc!r}"
    if health.status_code != 200:
        return took, f"/healthz answered {health.status_code}"
    data = resp.json() if resp.status_code == 200 else {}
    got = (data.get("outputs") or [{}])[0].get("data", {}).get("text/plain")
    if got != repr(canary.value):
        return took, f"canary lost its state: {resp.status_code} {resp.text[:300]}"
    return took, ""


class Attack:
    """What a test does to the broker: its sessions (deleted and checked afterwards)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.sessions: list[tuple[str, str]] = []
        self.api = broker.client()

    def session(self, key: str = KEY, **body: Any) -> str:
        with self.broker.client(key) as client:
            resp = client.post("/v1/sessions", json=body)
            assert resp.status_code == 201, resp.text
            sid: str = resp.json()["id"]
        self.sessions.append((key, sid))
        return sid

    def run(self, sid: str, code: str, **body: Any) -> dict[str, Any]:
        resp = self.api.post(f"/v1/sessions/{sid}/execute", json={"code": code, **body})
        assert resp.status_code == 200, resp.text
        data: dict[str, Any] = resp.json()
        return data

    def text(self, sid: str, code: str, **body: Any) -> str:
        """The text/plain result of ``code`` (asserting it ran ok)."""
        result = self.run(sid, code, **body)
        assert result["status"] == "ok", result
        return str(result["outputs"][0]["data"]["text/plain"])


@pytest.fixture
def attack(
    adv: Broker, canary: Canary, baseline: Baseline, request: pytest.FixtureRequest
) -> Iterator[Attack]:
    """The guard: probes the canary while the test runs, then checks everything listed in
    this module's docstring."""
    adv.errors.clear()
    attack = Attack(adv)
    probes: list[tuple[float, str]] = []
    stop = threading.Event()

    def prober() -> None:
        while not stop.wait(1.0):
            probes.append(probe_canary(adv, canary))

    thread = threading.Thread(target=prober, daemon=True)
    thread.start()
    try:
        yield attack
    finally:
        stop.set()
        thread.join(30)
    problems = [p for _, p in probes if p]
    slow = [round(t, 2) for t, _ in probes if t > CANARY_DEADLINE_S]
    notebooks = []
    with adv.client() as api:
        for key, sid in attack.sessions:
            with adv.client(key) as owner:
                nb = owner.get(f"/v1/sessions/{sid}/notebook")
                owner.delete(f"/v1/sessions/{sid}")
            assert nb.status_code == 200, nb.text
            notebooks.append(nb.json())
        del api
    attack.api.close()
    for nb in notebooks:
        nbformat.validate(nbformat.from_dict(nb))
    took, problem = probe_canary(adv, canary)
    assert not problem, problem
    assert took <= CANARY_DEADLINE_S, f"canary took {took:.2f} s after the case"
    assert not problems, f"canary during the case: {problems[:3]}"
    assert not slow, f"canary slower than {CANARY_DEADLINE_S} s during the case: {slow}"
    assert not adv.errors, adv.errors
    assert_nothing_left(adv, [sid for _, sid in attack.sessions])
    rss, fds = rss_mb(adv.pid), open_fds(adv.pid)
    slowest = max([t for t, _ in probes] + [took])
    print(  # shown with -s: the numbers behind the bounds
        f"\n[guard] {request.node.name}: broker rss {rss:.0f} MiB (baseline "
        f"{baseline.rss_mb:.0f}), fds {fds} (baseline {baseline.fds}), canary slowest "
        f"{slowest:.2f} s over {len(probes) + 1} probes"
    )
    assert rss <= baseline.rss_mb + RSS_SLACK_MB, (rss, baseline)
    assert fds <= baseline.fds + FD_SLACK, (fds, baseline)


def assert_nothing_left(broker: Broker, deleted: list[str]) -> None:
    """No container, runtime directory, mount or loop device of a deleted session."""
    if not deleted:
        return
    deadline = time.monotonic() + 30
    while True:
        left = leftovers(broker, deleted)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # closing runs in the broker's own task: wait for it to finish
    assert not left, left


def leftovers(broker: Broker, deleted: list[str]) -> list[str]:
    left: list[str] = []
    if broker.backend == "docker":
        from interpreter.backends.docker.engine import list_broker_containers

        for container in list_broker_containers(broker.broker_id):
            if container.session_id in deleted:
                left.append(f"container {container.name}")
    for sid in deleted:
        session_dir = broker.data_dir / "sessions" / sid
        runtime = runtime_dir_of(broker.data_dir, sid)
        if runtime.exists():
            left.append(f"runtime dir of {sid}")
        left += [f"mount {m}" for m in mounts_under(session_dir)]
        if (session_dir / "workspace.img").exists():
            left.append(f"image of {sid}")
        left += loop_devices_on(session_dir)
    return left
