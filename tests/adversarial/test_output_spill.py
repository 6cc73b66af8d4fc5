"""Issue 12 item 3: stream text past the in-memory limit spills to the artifact, never lost.

A broker that keeps 1 MiB of a cell's text in memory (``max_output_hard_bytes``) and
spills up to 8 MiB more to disk (``max_output_spill_bytes``): a cell that prints past the
first gets all of it in its artifact, past the second the rest is dropped with a notice
that counts it; the broker's memory does not follow the amount printed; however the cell
ends (timeout, kernel death, session closed, broker stopped) no spill file stays behind.
Both backends.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adversarial.conftest import rss_mb
from tests.conftest import Server, require_docker, run, spawn_serve, start_server

pytestmark = pytest.mark.timeout(300)
HARD = 1 << 20
SPILL = 8 << 20
#: Lines of 100 characters, numbered: ``0000042 xxx...x\n``.
LINE = 100


def line(i: int) -> str:
    return f"{i:07d} {'x' * (LINE - 9)}\n"


def lines(start: int, stop: int) -> str:
    return "".join(line(i) for i in range(start, stop))


def expected_digest(count: int, size: int | None = None) -> str:
    """SHA-256 of the first ``size`` bytes (all by default) of ``count`` numbered lines."""
    digest = hashlib.sha256()
    left = count * LINE if size is None else size
    for start in range(0, count, 10_000):
        block = lines(start, min(start + 10_000, count)).encode()[:left]
        digest.update(block)
        left -= len(block)
    return digest.hexdigest()


def flood(count: int | None, *, until: str | None = None) -> str:
    """Kernel code printing ``count`` numbered lines (forever when None) in flushed blocks
    of 10,000, stopping early once the file ``until`` exists in the workspace (then, if
    ``until`` is ``die``, the kernel kills itself)."""
    stop = f"os.path.exists({until!r})" if until else "False"
    end = "os.kill(os.getpid(), signal.SIGKILL)" if until == "die" else "pass"
    limit = "float('inf')" if count is None else str(count)
    return (
        "import itertools, os, signal, sys\n"
        f"limit = {limit}\n"
        "for start in itertools.count(0, 10_000):\n"
        f"    if start >= limit or {stop}:\n"
        f"        {end}\n"
        "        break\n"
        "    stop = int(min(start + 10_000, limit))\n"
        f"    sys.stdout.write(''.join(f'{{i:07d}} {{\"x\" * {LINE - 9}}}\\n' "
        "for i in range(start, stop)))\n"
        "    sys.stdout.flush()\n"
    )


@pytest.fixture(scope="module", params=["local", "docker"])
def spilling(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A broker keeping 1 MiB of text in memory and spilling 8 MiB more."""
    if request.param == "docker":
        require_docker()
    data_dir = Path(tempfile.mkdtemp(prefix="interp-spill-"))
    srv = start_server(
        request.param,
        data_dir,
        max_output_hard_bytes=HARD,
        max_output_spill_bytes=SPILL,
        pool_size=0,
    )
    yield srv
    srv.thread.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def session(spilling: Server) -> Iterator[tuple[httpx.Client, str]]:
    with spilling.client(timeout=240) as api:
        resp = api.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        try:
            yield api, sid
        finally:
            api.delete(f"/v1/sessions/{sid}")


def artifacts_dir(srv: Server, sid: str) -> Path:
    return srv.data_dir / "sessions" / sid / "artifacts"


def temporaries(srv: Server, sid: str) -> list[str]:
    folder = artifacts_dir(srv, sid)
    return sorted(p.name for p in folder.glob(".*")) if folder.exists() else []


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def spilling_now(srv: Server, sid: str) -> bool:
    """A spill file of the running cell has text in it."""
    return any(p.stat().st_size > 0 for p in artifacts_dir(srv, sid).glob(".spill-*.tmp"))


def in_background(api: httpx.Client, sid: str, code: str, **body: Any) -> Future[httpx.Response]:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(api.post, f"/v1/sessions/{sid}/execute", json={"code": code, **body})
    pool.shutdown(wait=False)
    return future


def assert_numbered_prefix(text: bytes) -> int:
    """``text`` is the numbered lines from 0, maybe cut inside the last; returns how many
    whole lines."""
    count = text.count(b"\n")
    whole = lines(0, count).encode()
    assert text[: len(whole)] == whole
    assert line(count).encode().startswith(text[len(whole) :])
    return count


def test_output_past_the_memory_limit_reaches_the_artifact_whole(
    spilling: Server, session: tuple[httpx.Client, str]
) -> None:
    api, sid = session
    count = 60_000  # 6 MB: past the 1 MiB in memory, within the 8 MiB spill
    result = run(api, sid, flood(count))
    assert result["status"] == "ok" and result["truncated"], result["stderr"][-500:]
    (ref,) = result["artifacts"]
    assert ref["size"] == count * LINE and ref["id"] == expected_digest(count)
    body = api.get(ref["url"]).content
    assert len(body) == count * LINE
    assert body.startswith(line(0).encode()) and body.endswith(line(count - 1).encode())
    assert result["stdout"].startswith(line(0)) and len(result["stdout"]) < 110_000
    # Inline, the cut is in the middle of all that was printed: it ends with the last line.
    assert result["stdout"].endswith(line(count - 1))
    omitted = int(result["stdout"].split("[... ", 1)[1].split(" characters omitted")[0])
    assert omitted == count * LINE - len(result["stdout"].split("\n[... ")[0]) - len(
        result["stdout"].split(f"full text in the artifact {ref['url']}]\n", 1)[1]
    )
    assert result["stderr"].endswith(
        "[output limit reached: the text past the broker's in-memory limit was kept on disk; "
        f"all {count * LINE} characters of stdout are in the artifact {ref['url']}]\n"
    )
    assert temporaries(spilling, sid) == []
    # The execution as read back says the same.
    again = api.get(f"/v1/sessions/{sid}/executions/{result['id']}").json()
    assert again["artifacts"] == result["artifacts"] and again["stderr"] == result["stderr"]


def test_past_the_spill_limit_text_is_dropped_with_a_notice_that_counts_it(
    spilling: Server, session: tuple[httpx.Client, str]
) -> None:
    api, sid = session
    count = 120_000  # 12 MB: 1 MiB in memory, 8 MiB on disk, the rest dropped
    result = run(api, sid, flood(count))
    assert result["status"] == "ok" and result["truncated"]
    (ref,) = result["artifacts"]
    kept = HARD + SPILL
    assert ref["size"] == kept and ref["id"] == expected_digest(count, kept)
    body = api.get(ref["url"]).content
    assert assert_numbered_prefix(body) == kept // LINE
    # The last line printed was dropped from the artifact, but the inline text ends with it.
    assert result["stdout"].endswith(line(count - 1))
    assert result["stderr"].endswith(
        f"[output limit reached: {count * LINE - kept} more characters were produced and "
        "dropped (past max_output_spill_bytes, the text kept on disk per execution); the "
        f"first {kept} characters of stdout are in the artifact {ref['url']}]\n"
    )
    assert temporaries(spilling, sid) == []


def test_a_timeout_mid_flood_ends_with_its_artifact_and_no_spill_file(
    spilling: Server, session: tuple[httpx.Client, str]
) -> None:
    api, sid = session
    result = run(api, sid, flood(None), timeout_s=3)
    assert result["status"] == "timeout" and result["truncated"], result["status"]
    (ref,) = result["artifacts"]
    assert ref["size"] > HARD
    assert_numbered_prefix(api.get(ref["url"]).content)
    assert ref["url"] in result["stderr"]
    assert temporaries(spilling, sid) == []
    assert run(api, sid, "print('next')")["stdout"] == "next\n"


#: Kernel code printing the kernel's resident memory in MiB.
KERNEL_RSS = (
    "print(next(int(l.split()[1]) for l in open('/proc/self/status') "
    "if l.startswith('VmRSS:')) // 1024)"
)


def test_what_a_session_printed_does_not_stay_in_its_kernels_memory(
    session: tuple[httpx.Client, str],
) -> None:
    """A cell that printed 100 MB leaves its kernel no larger. IPython 9 kept every string
    a cell wrote for the kernel's lifetime, so a session's kernel grew by all it had
    printed, and an endless print loop had its container killed for memory in seconds."""
    api, sid = session
    assert run(api, sid, flood(50_000))["status"] == "ok"
    before = int(run(api, sid, KERNEL_RSS)["stdout"])
    result = run(api, sid, flood(1_000_000))
    assert result["status"] == "ok" and result["truncated"]
    after = int(run(api, sid, KERNEL_RSS)["stdout"])
    assert after - before < 40, (before, after)


def test_a_kernel_that_dies_mid_spill_ends_with_its_artifact_and_no_spill_file(
    spilling: Server, session: tuple[httpx.Client, str]
) -> None:
    api, sid = session
    running = in_background(api, sid, flood(None, until="die"))
    wait_for(lambda: spilling_now(spilling, sid), "the cell's text to spill")
    assert api.put(f"/v1/sessions/{sid}/files/die", content=b"").status_code == 201
    result = running.result(120).json()
    assert result["status"] == "kernel_died" and result["truncated"], result["status"]
    # stdout's artifact first; stderr may have one too (a notice about the cut link).
    ref = result["artifacts"][0]
    assert f"characters of stdout are in the artifact {ref['url']}" in result["stderr"]
    assert ref["size"] > HARD
    assert_numbered_prefix(api.get(ref["url"]).content)
    assert temporaries(spilling, sid) == []


def test_a_session_closed_mid_spill_leaves_no_spill_file(spilling: Server) -> None:
    with spilling.client(timeout=240) as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        running = in_background(api, sid, flood(None))
        wait_for(lambda: spilling_now(spilling, sid), "the cell's text to spill")
        assert api.delete(f"/v1/sessions/{sid}").status_code == 204
        assert running.result(120).json()["status"] == "interrupted"
        assert temporaries(spilling, sid) == []


def test_late_output_of_a_spilled_cell_keeps_its_artifact_and_writes_no_spill_file(
    spilling: Server, session: tuple[httpx.Client, str]
) -> None:
    api, sid = session
    code = (
        "import os, sys, threading\n"
        "def later():\n"
        "    while not os.path.exists('go'):\n"
        "        threading.Event().wait(0.05)\n"
        "    sys.stdout.write('late\\n' * 300_000)\n"
        "    sys.stdout.flush()\n"
        "    open('went', 'w').close()\n"
        "threading.Thread(target=later).start()\n" + flood(20_000)
    )
    result = run(api, sid, code)
    (ref,) = result["artifacts"]
    assert ref["id"] == expected_digest(20_000)
    assert api.put(f"/v1/sessions/{sid}/files/go", content=b"").status_code == 201
    wait_for(
        lambda: api.get(f"/v1/sessions/{sid}/files/went").status_code == 200,
        "the late output to be written",
    )
    # Kernel messages are in order: once this cell is done, the late text was routed.
    assert run(api, sid, "print('after')")["stdout"] == "after\n"
    again = api.get(f"/v1/sessions/{sid}/executions/{result['id']}").json()
    assert again["artifacts"] == [ref]
    # The spill's notice stays, and the late text (past the in-memory limit) is said dropped.
    assert result["stderr"][-300:] in again["stderr"]
    assert again["stderr"].endswith("was dropped]\n"), again["stderr"][-300:]
    assert temporaries(spilling, sid) == []


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_broker_stopped_mid_spill_leaves_no_spill_file(backend: str) -> None:
    if backend == "docker":
        require_docker()
    data_dir = Path(tempfile.mkdtemp(prefix="interp-spill-stop-"))
    srv = start_server(
        backend, data_dir, max_output_hard_bytes=HARD, max_output_spill_bytes=SPILL, pool_size=0
    )
    try:
        with srv.client(timeout=240) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            running = in_background(api, sid, flood(None))
            wait_for(lambda: spilling_now(srv, sid), "the cell's text to spill")
            srv.thread.stop()
            try:  # answered as the broker stopped, or cut off: either way, nothing left
                status = running.result(120).json()["status"]
            except httpx.HTTPError:
                status = "cut off"
            assert status in ("interrupted", "unknown", "cut off"), status
            assert temporaries(srv, sid) == []
    finally:
        srv.thread.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# ---------------------------------------------------------------- memory


@pytest.fixture(params=["local", "docker"])
def broker_process(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    """A broker in its own process (its RSS is its own), spilling up to 1 GiB."""
    if request.param == "docker":
        require_docker()
    data_dir = Path(tempfile.mkdtemp(prefix="interp-spill-rss-"))
    proc, url = spawn_serve(
        *("--backend", request.param, "--data-dir", str(data_dir), "--pool-size", "0"),
        *("--no-keep-containers-on-shutdown", "--max-output-hard-bytes", str(HARD)),
        *("--max-output-spill-bytes", str(1 << 30)),
    )
    try:
        yield proc.pid, url
    finally:
        proc.terminate()
        proc.wait(90)
        shutil.rmtree(data_dir, ignore_errors=True)


def test_broker_memory_does_not_grow_with_the_amount_printed(
    broker_process: tuple[int, str],
) -> None:
    pid, url = broker_process
    with httpx.Client(base_url=url, timeout=300) as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        assert run(api, sid, "print('warm')")["stdout"] == "warm\n"
        baseline = rss_mb(pid)
        peaks = {}
        for count in (320_000, 2_560_000):  # 32 MB, then 256 MB
            samples: list[float] = []
            stop = threading.Event()

            def sample(into: list[float] = samples, until: threading.Event = stop) -> None:
                while not until.wait(0.02):
                    into.append(rss_mb(pid))

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                result = run(api, sid, flood(count))
            finally:
                stop.set()
                sampler.join(5)
            (ref,) = result["artifacts"]
            assert ref["size"] == count * LINE and ref["id"] == expected_digest(count)
            peaks[count] = max(samples, default=baseline)
        api.delete(f"/v1/sessions/{sid}")
    small, big = peaks[320_000], peaks[2_560_000]
    print(f"\nbroker RSS: baseline {baseline:.0f} MB, peak {small:.0f} (32 MB), {big:.0f} (256 MB)")
    # What one flood costs: the text in memory, the spill buffer, a few kernel messages.
    assert big - baseline < 150, (baseline, small, big)
    # Eight times the text is not eight times the memory.
    assert big - small < 50, (baseline, small, big)


def test_a_session_spills_at_most_its_share_of_the_data_disk(tmp_path: Path) -> None:
    """Each cell could spill max_output_spill_bytes (1 GiB by default), cell after cell,
    until the shared data disk reached its floor and every key got 507. A session now
    spills at most max_session_spill_bytes in all; past it, text is dropped with a notice."""
    srv = start_server(
        "local",
        tmp_path / "data",
        max_output_hard_bytes=HARD,
        max_output_spill_bytes=SPILL,
        max_session_spill_bytes=SPILL + (4 << 20),
        pool_size=0,
    )
    try:
        with srv.client(timeout=240) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            count = 120_000  # 12 MB a cell: 1 MiB in memory, the rest spilled or dropped
            first = run(api, sid, flood(count))
            assert [a["size"] for a in first["artifacts"]] == [HARD + SPILL]
            second = run(api, sid, flood(count))
            assert [a["size"] for a in second["artifacts"]] == [HARD + (4 << 20)]
            assert (
                "(past max_session_spill_bytes, the text kept on disk per session)"
                in (second["stderr"])
            )
            third = run(api, sid, flood(count))
            assert [a["size"] for a in third["artifacts"]] == [HARD]
            assert "past max_session_spill_bytes" in third["stderr"]
            assert temporaries(srv, sid) == []
    finally:
        srv.thread.stop()
