"""Disk: the data directory fills up while a cell runs (no floor to stop it first).

The broker here has a data directory on a small tmpfs of its own (root only) and no
free-space floor (``--min-free-mb 0``), so a cell can fill the disk between its admission
and its final record. The client must still be answered, the record kept and written once
space is freed, and the session must run code again then.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.adversarial.conftest import Broker, mounts_under, start_broker, stop_broker
from tests.conftest import REPO, skip_or_fail

#: Writes into the workspace until the data disk is full, then says so.
FILL = (
    "import errno, os\n"
    "try:\n"
    "    with open('fill.bin', 'wb') as f:\n"
    "        while True:\n"
    "            f.write(b'x' * (1 << 20))\n"
    "            f.flush()\n"
    "            os.fsync(f.fileno())\n"
    "except OSError as e:\n"
    "    print('filled', errno.errorcode[e.errno])\n"
)


@pytest.fixture
def tiny_disk() -> Iterator[Path]:
    """A data directory on a 24 MiB tmpfs of its own."""
    if os.geteuid() != 0:
        skip_or_fail("needs root to mount a small filesystem", "Disk tests")
    root = Path(tempfile.mkdtemp(prefix="interp-adv-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(root)], check=True)
    try:
        yield root / "data"
    finally:
        for target in sorted(mounts_under(root), reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _sse_done(api: httpx.Client, sid: str, code: str) -> dict[str, Any]:
    with api.stream(
        "POST",
        f"/v1/sessions/{sid}/execute",
        json={"code": code},
        headers={"Accept": "text/event-stream"},
        timeout=60,
    ) as resp:
        assert resp.status_code == 200
        name = None
        for line in resp.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name == "done":
                done: dict[str, Any] = json.loads(line[6:])
                return done
    raise AssertionError("the stream ended without a done event")


def _told_it_ran_but_is_unrecorded(told: dict[str, Any]) -> None:
    assert (told["status"], told["reason"]) == ("error", "storage_full"), told
    assert told["stdout"] == "filled ENOSPC\n"
    assert told["error"]["ename"] == "StorageFull"
    assert "Do not run it again" in told["error"]["evalue"]


def test_a_record_that_does_not_fit_is_answered_kept_and_written_once_space_is_freed(
    tiny_disk: Path,
) -> None:
    broker: Broker = start_broker(
        "local", tiny_disk, "--min-free-mb", "0", "--default-disk-mb", "0"
    )
    try:
        with broker.client(timeout=60) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            assert api.post(f"/v1/sessions/{sid}/execute", json={"code": "x = 1"}).is_success
            fill = tiny_disk / "sessions" / sid / "workspace" / "fill.bin"
            # JSON: the headers are out before the result, so the answer is the body.
            first = api.post(f"/v1/sessions/{sid}/execute", json={"code": FILL})
            _told_it_ran_but_is_unrecorded(first.json())
            refused = api.post(f"/v1/sessions/{sid}/execute", json={"code": "x += 1"})
            assert refused.status_code == 507, refused.text
            fill.unlink()
            # The same over SSE: its `done` event says it.
            second = _sse_done(api, sid, FILL)
            _told_it_ran_but_is_unrecorded(second)
            fill.unlink()
            # Space is back: the waiting records are written and the session runs code.
            after = api.post(f"/v1/sessions/{sid}/execute", json={"code": "print(x)"}).json()
            assert (after["status"], after["stdout"]) == ("ok", "1\n"), after
            for told in (first.json(), second):
                got = api.get(f"/v1/sessions/{sid}/executions/{told['id']}").json()
                assert (got["status"], got["stdout"]) == ("ok", "filled ENOSPC\n"), got
        assert broker.errors == []
        stop_broker(broker)
        with sqlite3.connect(tiny_disk / "state.db") as db:
            statuses = [row[0] for row in db.execute("SELECT status FROM executions ORDER BY seq")]
        assert statuses == ["ok"] * 4
        verify = subprocess.run(
            [sys.executable, "-m", "interpreter", "audit", "verify", "--data-dir", str(tiny_disk)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        stop_broker(broker)


def _fill(path: Path) -> None:
    """Write ``path`` until its filesystem has not one byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"x" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def test_code_that_cannot_be_put_on_record_while_it_waits_is_refused_and_never_runs(
    tiny_disk: Path,
) -> None:
    """A cell queued behind a running one is written down as queued before its id is
    handed out; when that write meets a full disk the client gets 507 storage_full (not
    a 500), and the cell never runs: nothing that is not on record runs."""
    broker: Broker = start_broker(
        "local", tiny_disk, "--min-free-mb", "0", "--default-disk-mb", "0"
    )
    try:
        with broker.client(timeout=60) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            execute = f"/v1/sessions/{sid}/execute"
            # Holds the session until the test has sent the next cell and freed the disk.
            holder = (
                "import os, time\n"
                "print('holding', flush=True)\n"
                "for _ in range(1200):\n"
                "    if os.path.exists('release'):\n"
                "        break\n"
                "    time.sleep(0.05)\n"
                "print('done')\n"
            )
            # Larger than any room the store's log has left: its write needs new space.
            waiting = "ran_while_unrecorded = True\n" + "#" * 300_000 + "\n"
            filler = tiny_disk / "filler.bin"
            with api.stream(
                "POST", execute, json={"code": holder}, headers={"Accept": "text/event-stream"}
            ) as resp:
                lines = resp.iter_lines()
                assert any("holding" in line for line in lines)
                _fill(filler)
                refused = api.post(execute, json={"code": waiting})
                assert refused.status_code == 507, refused.text
                error = refused.json()["error"]
                assert error["type"] == "storage_full", error
                assert "will not run" in error["message"], error
                filler.unlink()
                (tiny_disk / "sessions" / sid / "workspace" / "release").touch()
                done = next(line for line in lines if line == "event: done")
                assert done
                told = json.loads(next(lines)[len("data: ") :])
            assert (told["status"], told["stdout"]) == ("ok", "holding\ndone\n"), told
            after = api.post(execute, json={"code": "print('ran_while_unrecorded' in dir())"})
            assert (after.json()["status"], after.json()["stdout"]) == ("ok", "False\n")
        assert broker.errors == []
        stop_broker(broker)
        with sqlite3.connect(tiny_disk / "state.db") as db:
            rows = list(db.execute("SELECT status, code FROM executions ORDER BY seq"))
        assert [status for status, _ in rows] == ["ok", "ok"]
        assert waiting not in [code for _, code in rows]
    finally:
        stop_broker(broker)


def test_a_delete_on_a_full_data_disk_says_so_and_works_once_space_is_freed(
    tiny_disk: Path,
) -> None:
    """Its close could not be written (SQLite: "database or disk is full"): the DELETE
    answered 500 internal_error, and again when repeated (an outside operations tester).
    It is 507 storage_full, saying what to do; the session is untouched and the DELETE
    works once space is freed."""
    broker: Broker = start_broker(
        "local", tiny_disk, "--min-free-mb", "0", "--default-disk-mb", "0"
    )
    filler = tiny_disk.parent / "filler"
    try:
        with broker.client(timeout=60) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            assert api.post(f"/v1/sessions/{sid}/execute", json={"code": "x = 1"}).is_success
            _fill(filler)
            for _ in range(2):
                refused = api.delete(f"/v1/sessions/{sid}")
                assert refused.status_code == 507, refused.text
                error = refused.json()["error"]
                assert error["type"] == "storage_full" and "Retry once space" in error["message"]
                assert refused.headers["Retry-After"] == "30"
            assert api.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
            filler.unlink()
            assert (
                api.post(f"/v1/sessions/{sid}/execute", json={"code": "x"}).json()["stdout"] == ""
            )
            assert api.delete(f"/v1/sessions/{sid}").status_code == 204
            closed = api.get(f"/v1/sessions/{sid}").json()
            assert (closed["status"], closed["closed_reason"]) == ("closed", "deleted")
    finally:
        filler.unlink(missing_ok=True)
        stop_broker(broker)


def test_starting_on_a_full_data_disk_is_one_line_that_says_so(tiny_disk: Path) -> None:
    """A broker started on a full disk printed a traceback (SQLite's "database or disk is
    full" in its recovery), or, for a new data directory, that state.db "cannot be read as
    the service's record: restore it from a backup". One line now, exit status 2, for a
    new data directory and for one with a session in it."""
    broker = start_broker("local", tiny_disk, "--min-free-mb", "0", "--default-disk-mb", "0")
    try:
        with broker.client(timeout=60) as api:
            assert api.post("/v1/sessions", json={}).status_code == 201
    finally:
        stop_broker(broker)
    filler = tiny_disk.parent / "filler"
    _fill(filler)
    try:
        for data_dir in (tiny_disk, tiny_disk.parent / "new"):
            started = subprocess.run(
                [
                    *(sys.executable, "-m", "interpreter", "serve", "--backend", "local"),
                    *("--port", "0", "--data-dir", str(data_dir), "--min-free-mb", "0"),
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=60,
                env={k: v for k, v in os.environ.items() if not k.startswith("INTERP_")},
            )
            assert started.returncode == 2, started.stderr
            said = [line for line in started.stderr.splitlines() if "LOCAL backend" not in line]
            assert said == [
                f"interp: error: The disk of the data directory {data_dir} is full: the "
                "service's record cannot be written. Free space on it (or choose another "
                "--data-dir), then start again; nothing in the record was changed."
            ], started.stderr
    finally:
        filler.unlink()


#: Fills the data disk, then prints past the output budget and goes on to its end.
FILL_THEN_PRINT = FILL + "print('x' * 200000)\nb = 2\nprint('end')\n"


def test_a_cell_whose_full_text_does_not_fit_is_told_as_run_with_its_output(
    tiny_disk: Path,
) -> None:
    """The data disk filled while a cell printed past the output budget: its full-text
    artifact did not fit, which ended the cell as the broker's error: the answer and the
    record had no stdout and said "Free space and run it again" of code that had run to
    its end, while the notebook cell had the stdout and named a full-text artifact that
    did not exist (found by an outside operations tester). The cell now ends as it ran,
    cut, its notice saying that no artifact holds the full text, alike in the answer, the
    record and the notebook; the answer says it ran and must not run again."""
    broker: Broker = start_broker(
        "local", tiny_disk, "--min-free-mb", "0", "--default-disk-mb", "0"
    )
    try:
        with broker.client(timeout=60) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            fill = tiny_disk / "sessions" / sid / "workspace" / "fill.bin"
            told = api.post(f"/v1/sessions/{sid}/execute", json={"code": FILL_THEN_PRINT}).json()
            assert (told["status"], told["reason"]) == ("error", "storage_full"), told
            assert "This code ran" in told["error"]["evalue"]
            assert "Do not run it again" in told["error"]["evalue"]
            stdout = told["stdout"]
            assert stdout.startswith("filled ENOSPC\nxxx") and stdout.endswith("xxx\nend\n")
            assert "no artifact holds the full text: the service's data disk was full" in stdout
            assert "full text in the artifact" not in stdout
            assert told["truncated"] and told["artifacts"] == []
            fill.unlink()
            after = api.post(f"/v1/sessions/{sid}/execute", json={"code": "print(b)"}).json()
            assert (after["status"], after["stdout"]) == ("ok", "2\n"), after
            got = api.get(f"/v1/sessions/{sid}/executions/{told['id']}").json()
            assert (got["status"], got["stdout"], got["artifacts"]) == ("ok", stdout, []), got
            nb = api.get(f"/v1/sessions/{sid}/notebook").json()
            (cell,) = [
                c
                for c in nb["cells"]
                if c["metadata"].get("interp", {}).get("execution_id") == told["id"]
            ]
            text = "".join(o["text"] for o in cell["outputs"] if o.get("name") == "stdout")
            assert text == stdout
        assert broker.errors == []
        stop_broker(broker)
        verify = subprocess.run(
            [sys.executable, "-m", "interpreter", "audit", "verify", "--data-dir", str(tiny_disk)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
    finally:
        stop_broker(broker)
