"""Issue 12 item 3: one kernel message over the broker's limit is dropped with a notice,
and the session's output keeps working for the next cell (both backends)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Server, require_docker, run, start_server

pytestmark = pytest.mark.timeout(300)
LIMIT = 2 << 20


@pytest.fixture(scope="module", params=["local", "docker"])
def small_messages(request: pytest.FixtureRequest) -> Iterator[Server]:
    """A broker that takes kernel messages of at most 2 MiB."""
    if request.param == "docker":
        require_docker()
    data_dir = Path(tempfile.mkdtemp(prefix="interp-msgsize-"))
    srv = start_server(request.param, data_dir, max_kernel_message_bytes=LIMIT, pool_size=0)
    yield srv
    srv.thread.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.parametrize(
    "code",
    [
        'display({"image/png": "A" * (6 << 20), "text/plain": "big"}, raw=True); print("done")',
        'import sys; sys.stdout.write("y" * (6 << 20)); sys.stdout.flush(); print("done")',
    ],
    ids=["display", "one-write"],
)
def test_a_message_over_the_limit_is_dropped_with_a_notice_and_output_recovers(
    small_messages: Server, code: str
) -> None:
    with small_messages.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        try:
            assert run(api, sid, "x = 1; print('before')")["stdout"] == "before\n"
            result = run(api, sid, code)
            assert result["status"] == "ok", result
            assert result["truncated"] is True
            assert "output dropped" in result["stderr"]
            assert str(LIMIT) in result["stderr"]
            # The next cells' output arrives, and the state is kept.
            for i in range(3):
                after = run(api, sid, f"print(x + {i})")
                assert after["stdout"] == f"{1 + i}\n", after
            notebook = api.get(f"/v1/sessions/{sid}/notebook")
            assert notebook.status_code == 200
            assert "output dropped" in notebook.text
        finally:
            api.delete(f"/v1/sessions/{sid}")
