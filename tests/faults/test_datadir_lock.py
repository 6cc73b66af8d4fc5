"""Two brokers on one data directory: the second refuses to start; a crash frees it.

A second broker used to start, and its startup recovery took the first one's live
sessions for leftovers of a crash: it closed them in the shared ``state.db`` and
unmounted their workspaces while the first broker still served them. The data directory
is now locked for a broker's lifetime; read-only tools still work while it runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from tests.adversarial.conftest import mounts_under
from tests.conftest import REPO, run, serve_argv, spawn_serve, stop_serve


def _serve_again(data_dir: Path) -> tuple[int, str]:
    """Start a second broker on ``data_dir``; its exit code and output (it must not serve)."""
    proc = subprocess.Popen(
        serve_argv("--backend", "local", "--data-dir", str(data_dir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "listening on" in line:
            stop_serve(proc)
            raise AssertionError("a second broker serves the same data directory")
    return proc.wait(30), "".join(lines)


def test_a_second_broker_on_the_same_data_dir_refuses_to_start_and_harms_nothing() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="interp-lock-"))
    proc, url = spawn_serve("--backend", "local", "--data-dir", str(data_dir))
    try:
        with httpx.Client(base_url=url, timeout=60) as api:
            sid = api.post("/v1/sessions", json={}).json()["id"]
            assert run(api, sid, "x = 1")["status"] == "ok"
            code, out = _serve_again(data_dir)
            assert code == 2, out
            errors = [line for line in out.splitlines() if line.startswith("interp: error:")]
            assert len(errors) == 1 and "in use by another broker" in errors[0], out
            assert f"(pid {proc.pid})" in errors[0]
            # The first broker's session is untouched: open, its state and files kept.
            after = run(api, sid, "open('f.txt', 'w').write('after')\nprint(x)")
            assert after["stdout"] == "1\n", after
            assert api.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
            assert api.get(f"/v1/sessions/{sid}/files/f.txt").content == b"after"
            # Read-only tools work while it runs.
            verify = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "interpreter",
                    "audit",
                    "verify",
                    "--data-dir",
                    str(data_dir),
                ],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            assert verify.returncode == 0, verify.stdout + verify.stderr
        # A broker killed outright holds nothing: the next one starts.
        proc.kill()
        proc.wait(30)
        proc, url = spawn_serve("--backend", "local", "--data-dir", str(data_dir))
    finally:
        stop_serve(proc)
        for target in sorted(mounts_under(data_dir), reverse=True):  # a failed case's
            subprocess.run(["umount", "-l", target], capture_output=True)
        shutil.rmtree(data_dir, ignore_errors=True)
