"""A workspace's files across its session's end: never a success for a file that is not kept.

The broker here (local backend, every workspace a 64 MiB quota filesystem, a cull every
second, the E2B surface on) is this module's own. The guard (tests/adversarial/conftest.py)
checks after every case that no mount, loop device or image of a deleted session is left.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from e2b_code_interpreter import Sandbox

from tests.adversarial.conftest import (
    KEY,
    Attack,
    Broker,
    mounts_under,
    new_data_dir,
    remove_leftovers,
    start_broker,
    stop_broker,
)
from tests.conftest import require_quotas

#: Deeper than Python's recursion limit (1000), which the old recursive copy hit.
DEEP = 1100
MAKE_DEEP = (
    "import os\nbase = os.getcwd()\nfor top in ('d', 'e'):\n    os.chdir(base)\n"
    f"    for _ in range({DEEP}):\n        os.mkdir(top)\n        os.chdir(top)\n"
    "    open('leaf.txt', 'w').write('deep')\nos.chdir(base)\nopen('top.txt', 'w').write('top')"
)


@pytest.fixture(scope="module")
def adv() -> Iterator[Broker]:
    """A local broker with disk quotas, a cull every second and the E2B surface."""
    require_quotas()
    data_dir = new_data_dir()
    broker = start_broker("local", data_dir, "--cull-interval-s", "1", e2b=True)
    try:
        yield broker
    finally:
        stop_broker(broker)
        remove_leftovers(broker)
        shutil.rmtree(data_dir, ignore_errors=True)


def names(api: httpx.Client, sid: str, path: str = "") -> list[str]:
    resp = api.get(f"/v1/sessions/{sid}/files", params={"path": path})
    assert resp.status_code == 200, resp.text
    return [e["name"] for e in resp.json()["entries"]]


def wait_for(condition: object, what: str, within_s: float = 30) -> None:
    deadline = time.monotonic() + within_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class SlowUpload:
    """A ``PUT`` whose body arrives in two halves, on a raw socket."""

    def __init__(self, broker: Broker, sid: str, name: str, size: int) -> None:
        url = urlsplit(broker.url)
        self.sock = socket.create_connection((url.hostname, url.port), timeout=30)
        self.half = b"u" * (size // 2)
        head = (
            f"PUT /v1/sessions/{sid}/files/{name} HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {KEY}\r\nContent-Length: {2 * len(self.half)}\r\n\r\n"
        )
        self.sock.sendall(head.encode() + self.half)

    def finish(self) -> tuple[int, str]:
        """Send the second half; the answer's status and body."""
        self.sock.sendall(self.half)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < self._length(data):
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            data += chunk
        self.sock.close()
        head, body = data.split(b"\r\n\r\n", 1)
        return int(head.split()[1]), body.decode()

    @staticmethod
    def _length(data: bytes) -> int:
        for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                return int(line.split(b":")[1])
        return 0


def upload_arrived(broker: Broker, sid: str) -> bool:
    """The upload's first half is in its temporary file (on disk: listings leave out the
    files of uploads still arriving)."""
    workspace = broker.data_dir / "sessions" / sid / "workspace"
    return any(workspace.glob(".upload-*.tmp"))


def test_deleting_a_session_during_an_upload_refuses_the_upload(
    adv: Broker, attack: Attack
) -> None:
    sid = attack.session()
    files = f"/v1/sessions/{sid}/files"
    assert attack.api.put(f"{files}/keep.txt", content=b"keep me").status_code == 201
    upload = SlowUpload(adv, sid, "inflight.bin", 200_000)
    wait_for(lambda: upload_arrived(adv, sid), "the upload to start")
    assert attack.api.delete(f"/v1/sessions/{sid}").status_code == 204
    status, body = upload.finish()
    assert status == 409, body
    assert '"session_closed"' in body and "not kept" in body
    # The kept workspace holds what was there, and nothing of the refused upload.
    assert names(attack.api, sid) == ["keep.txt"]
    assert attack.api.get(f"{files}/keep.txt").content == b"keep me"


def test_an_upload_in_flight_keeps_the_session_from_the_idle_cull(
    adv: Broker, attack: Attack
) -> None:
    sid = attack.session(idle_timeout_s=1)
    upload = SlowUpload(adv, sid, "slow.bin", 100_000)
    wait_for(lambda: upload_arrived(adv, sid), "the upload to start")
    # A session idle since after the upload began is culled: the cull has passed `sid` by.
    control = attack.session(idle_timeout_s=1)

    def closed(session_id: str) -> bool:
        return bool(attack.api.get(f"/v1/sessions/{session_id}").json()["status"] == "closed")

    wait_for(lambda: closed(control), "the control session to be culled")
    assert not closed(sid)
    status, body = upload.finish()
    assert status == 201, body
    assert attack.api.get(f"/v1/sessions/{sid}/files/slow.bin").content == b"u" * 100_000


def test_a_closed_sessions_workspace_is_read_only(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    files = f"/v1/sessions/{sid}/files"
    assert attack.api.put(f"{files}/a.txt", content=b"kept").status_code == 201
    assert attack.api.delete(f"/v1/sessions/{sid}").status_code == 204
    for resp in (
        attack.api.put(f"{files}/new.txt", content=b"x" * 100_000),
        attack.api.put(f"{files}/dir/new.txt", content=b"x"),
        attack.api.delete(f"{files}/a.txt"),
    ):
        assert resp.status_code == 409, resp.text
        error = resp.json()["error"]
        assert error["type"] == "session_closed"
        assert "read-only" in error["message"] and "downloading" in error["message"]
    assert names(attack.api, sid) == ["a.txt"]
    assert attack.api.get(f"{files}/a.txt").content == b"kept"


def test_names_that_are_not_utf8_are_listed_and_reachable(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    attack.run(
        sid,
        "import os\nopen(b'report\\xe9.csv', 'wb').write(b'r')\nos.mkdir(b'sub\\xff')\n"
        "open(b'sub\\xff/in.txt', 'wb').write(b'i')\nopen('good.txt', 'w').write('g')",
    )
    files = f"/v1/sessions/{sid}/files"
    assert names(attack.api, sid) == ["sub\ufffd", "good.txt", "report\ufffd.csv"]
    assert names(attack.api, sid, "sub\ufffd") == ["in.txt"]
    assert attack.api.get(f"{files}/report\ufffd.csv").content == b"r"
    assert attack.api.get(f"{files}/sub\ufffd/in.txt").content == b"i"
    assert attack.api.delete(f"{files}/report\ufffd.csv").status_code == 204
    assert attack.text(sid, "sorted(os.listdir(b'.'))") == "[b'good.txt', b'sub\\xff']"


def test_a_workspace_deeper_than_the_copy_limit(adv: Broker, attack: Attack) -> None:
    sid = attack.session()
    assert attack.run(sid, MAKE_DEEP)["status"] == "ok"

    def live() -> list[str]:
        sessions = attack.api.get("/v1/sessions").json()["sessions"]
        return sorted(s["id"] for s in sessions if s["status"] != "closed")

    before = live()
    fork = attack.api.post("/v1/sessions", json={"from_session": sid})
    assert fork.status_code == 409, fork.text
    error = fork.json()["error"]
    assert error["type"] == "workspace_too_deep"
    assert "levels deep" in error["message"] and "new session was closed" in error["message"]
    assert live() == before  # the new session, whose id the client never got, is closed
    # A deep directory is deleted through the API like any other.
    assert attack.api.delete(f"/v1/sessions/{sid}/files/e").status_code == 204
    assert names(attack.api, sid) == ["d", "top.txt"]
    # Closing copies the files out of the quota filesystem and releases it (the guard
    # checks the mount, loop device and image are gone); what is not too deep is kept.
    assert attack.api.delete(f"/v1/sessions/{sid}").status_code == 204
    assert attack.api.get(f"/v1/sessions/{sid}/files/top.txt").content == b"top"
    assert "d" in names(attack.api, sid, "d/" * 100)


def multipart(*parts: tuple[str, bytes]) -> bytes:
    body = b""
    for name, data in parts:
        body += (
            (
                f'--BB\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n\r\n'
            ).encode()
            + data
            + b"\r\n"
        )
    return body + b"--BB--\r\n"


@pytest.mark.parametrize(
    "parts",
    [[("w/r", b"2"), ("w", b"1")], [("q", b"1"), ("q/r", b"2")], [("z", b"1"), ("x", b"2")]],
    ids=["file-then-parent", "parent-then-file", "existing-directory"],
)
def test_a_refused_multipart_upload_writes_nothing(
    adv: Broker, attack: Attack, parts: list[tuple[str, bytes]]
) -> None:
    sandbox = Sandbox.create(api_key=KEY, api_url=adv.e2b_url, sandbox_url=adv.e2b_url)
    sid = sandbox.sandbox_id
    attack.sessions.append((KEY, sid))
    assert attack.api.put(f"/v1/sessions/{sid}/files/x/y", content=b"y").status_code == 201
    with httpx.Client(base_url=adv.e2b_url, timeout=60) as e2b:
        resp = e2b.post(
            "/files",
            content=multipart(*parts),
            headers={
                "Content-Type": "multipart/form-data; boundary=BB",
                "X-API-Key": KEY,
                "E2b-Sandbox-Id": sid,
            },
        )
    assert resp.status_code == 400, resp.text
    assert "Nothing was written" in resp.json()["message"]
    assert names(attack.api, sid) == ["x"]
    assert names(attack.api, sid, "x") == ["y"]


def test_a_shutdown_during_an_upload_keeps_no_temporary_file() -> None:
    """SIGTERM with an upload arriving: the upload is dropped, and the session's files,
    copied out of its quota at the shutdown, hold no half-written temporary file."""
    require_quotas()
    data_dir = new_data_dir()
    broker = start_broker("local", data_dir)
    try:
        with broker.client() as api:
            resp = api.post("/v1/sessions", json={})
            assert resp.status_code == 201, resp.text
            sid = resp.json()["id"]
            upload = SlowUpload(broker, sid, "inflight.bin", 200_000)
            wait_for(lambda: upload_arrived(broker, sid), "the upload to start")
        stop_broker(broker)
        upload.sock.close()
        workspace = data_dir / "sessions" / sid / "workspace"
        assert not mounts_under(data_dir)
        assert sorted(p.name for p in workspace.iterdir()) == []
    finally:
        stop_broker(broker)
        remove_leftovers(broker)
        shutil.rmtree(data_dir, ignore_errors=True)
