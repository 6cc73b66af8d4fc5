"""A kernel reply past ``max_kernel_message_bytes`` (a cell raising an error of 30 MB).

ZMQ cuts the shell connection on such a message; at the cell's timeout the broker's
probe of the kernel sent on that socket and waited for a peer for ever, on the event
loop: ``/healthz``, every other session and SIGTERM hung (found by an outside security
tester). The cell must end, and the broker answer throughout.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.conftest import Server


def test_a_reply_too_large_to_take_ends_its_cell_and_freezes_nothing(
    local_server: Server,
) -> None:
    with local_server.client() as api:
        attacker = api.post("/v1/sessions", json={}).json()["id"]
        other = api.post("/v1/sessions", json={}).json()["id"]
        assert api.post(f"/v1/sessions/{other}/execute", json={"code": "kept = 42"}).is_success
        answer: dict[str, Any] = {}

        def attack() -> None:
            with local_server.client(timeout=120) as own:
                answer.update(
                    own.post(
                        f"/v1/sessions/{attacker}/execute",
                        json={"code": "raise ValueError('e' * 30_000_000)", "timeout_s": 5},
                    ).json()
                )

        runner = threading.Thread(target=attack)
        runner.start()
        slowest = 0.0
        while runner.is_alive():
            started = time.monotonic()
            assert api.get("/healthz", timeout=10).status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            runner.join(0.5)
        assert (answer["status"], answer["reason"]) == ("timeout", "timeout"), answer
        kept = api.post(f"/v1/sessions/{other}/execute", json={"code": "kept"}).json()
        assert kept["outputs"][0]["data"]["text/plain"] == "42"
        assert api.post(f"/v1/sessions/{attacker}/execute", json={"code": "1 + 1"}).is_success
        print(f"\nslowest /healthz while the cell ran: {slowest:.2f} s")
        for sid in (attacker, other):
            api.delete(f"/v1/sessions/{sid}")
