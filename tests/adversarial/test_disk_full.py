"""Disk: the data directory fills up while a cell runs (no floor to stop it first).

The broker here has a data directory on a small tmpfs of its own (root only) and no
free-space floor (``--min-free-mb 0``), so a cell can fill the disk between its admission
and its final record. The client must still be answered, the record kept and written once
space is freed, and the session must run code again then.
"""

from __future__ import annotations

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
