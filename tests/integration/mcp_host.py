"""What the MCP tests share: ``interp mcp`` pointed at a test's service, over HTTP."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from benchmarks.gateway import free_port
from tests.conftest import REPO, Server


def mcp_env(server: Server) -> dict[str, str]:
    """The environment of an ``interp mcp`` that talks to ``server``."""
    return {**os.environ, "INTERP_URL": server.url, "INTERP_API_KEY": server.api_key}


@contextlib.contextmanager
def mcp_http(server: Server, log_path: Path, *extra: str) -> Iterator[str]:
    """``interp mcp --http`` against ``server`` (its stderr in ``log_path``); yields its
    URL once it answers, and stops it afterwards."""
    port = free_port()
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "interpreter", "mcp", "--http", str(port), *extra],
            env=mcp_env(server),
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the MCP HTTP server did not come up"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(20)
