"""A real kernel's messages reach the broker through its own session (issue 10).

The broker's client reads with :class:`~interpreter.wire.BrokerSession`, starts neither a
heartbeat thread nor a stdin socket (at start, restart and close), and still records each
cell's timing as ISO 8601 text in UTC (``...Z``).
"""

from __future__ import annotations

import re
from typing import Any

from interpreter.wire import BrokerSession
from tests.conftest import Server, run

CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")
TIMING_KEYS = {
    "iopub.status.busy",
    "iopub.execute_input",
    "shell.execute_reply.started",
    "shell.execute_reply",
    "iopub.status.idle",
}


def assert_lean(kc: Any) -> None:
    assert isinstance(kc.session, BrokerSession)
    assert kc._hb_channel is None and kc._stdin_channel is None
    assert kc.shell_channel.is_alive() and kc.iopub_channel.is_alive()


def test_the_broker_reads_a_real_kernel_through_its_own_session(local_server: Server) -> None:
    broker = local_server.thread.broker
    with local_server.client() as api:
        resp = api.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        try:
            kernel = broker.live[sid].kernel
            assert_lean(kernel.kc)
            out = run(api, sid, "print('hi')\n40 + 2")
            assert out["status"] == "ok" and out["stdout"] == "hi\n", out
            first = kernel.kc
            resp = api.post(f"/v1/sessions/{sid}/restart", json={})
            assert resp.status_code == 200, resp.text
            assert kernel.kc is not first
            assert_lean(kernel.kc)
            # The old client was stopped without creating the channels it never had.
            assert first._hb_channel is None and first._stdin_channel is None
            assert not first.shell_channel.is_alive()
            assert run(api, sid, "1")["status"] == "ok"
            nb = api.get(f"/v1/sessions/{sid}/notebook").json()
            cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
            assert len(cells) == 2
            for cell in cells:
                timing = cell["metadata"]["execution"]
                assert set(timing) == TIMING_KEYS, timing
                assert all(CANONICAL.fullmatch(text) for text in timing.values()), timing
        finally:
            last = broker.live[sid].kernel.kc
            assert api.delete(f"/v1/sessions/{sid}").status_code in (200, 204)
    assert last._hb_channel is None and last._stdin_channel is None
