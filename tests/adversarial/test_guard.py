"""The guard itself can fail: each of its checks is shown catching what it looks for.

No broker is needed: error bodies are answered at the message level (httpx's transport),
and leftovers are planted in a scratch data directory.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from interpreter import quota
from tests.adversarial.conftest import Broker, leftovers, mounts_under
from tests.conftest import require_quotas


def _broker(tmp_path: Path) -> Broker:
    return Broker(backend="local", data_dir=tmp_path, proc=None, url="http://test")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (500, b"Internal Server Error", "not JSON"),
        (400, b'{"detail": "x"}', "no error object"),
        (500, b'{"error": {"type": "x", "message": "Traceback (most recent call last)"}}', "leaks"),
        (404, None, "leaks"),  # a host path of the data directory
        (200, b"not json but fine", None),
        (404, b'{"error": {"type": "not_found", "message": "No such session."}}', None),
    ],
)
def test_error_bodies_are_checked(
    tmp_path: Path, status: int, body: bytes | None, problem: str | None
) -> None:
    broker = _broker(tmp_path)
    if body is None:
        body = b'{"error": {"type": "x", "message": "' + str(tmp_path).encode() + b'/state.db"}}'
    answer = body

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=answer)

    client = httpx.Client(
        transport=httpx.MockTransport(handler),
        base_url="http://test",
        event_hooks={"response": [broker._check_error]},
    )
    client.get("/v1/anything")
    if problem is None:
        assert broker.errors == []
    else:
        assert len(broker.errors) == 1 and problem in broker.errors[0]


def test_leftover_directories_images_and_mounts_are_found(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    sid = "s_" + "a" * 24
    assert leftovers(broker, [sid]) == []
    (tmp_path / "run" / sid[-12:]).mkdir(parents=True)
    session_dir = tmp_path / "sessions" / sid
    (session_dir / "workspace").mkdir(parents=True)
    (session_dir / "workspace.img").touch()
    found = leftovers(broker, [sid])
    assert any("runtime dir" in f for f in found) and any("image" in f for f in found)


def test_a_leftover_quota_mount_is_found(tmp_path: Path) -> None:
    require_quotas()  # skipped without loop mounts; failed in CI
    broker = _broker(tmp_path)
    sid = "s_" + "b" * 24
    session_dir = tmp_path / "sessions" / sid
    quota.attach(session_dir, session_dir / "workspace", 8)
    try:
        assert mounts_under(session_dir) == [str(session_dir / "workspace")]
        assert any(f.startswith("mount ") for f in leftovers(broker, [sid]))
    finally:
        quota.detach(session_dir, session_dir / "workspace")
    assert mounts_under(session_dir) == []
    assert (
        subprocess.run(
            ["losetup", "-j", str(session_dir / "workspace.img")], capture_output=True, text=True
        ).stdout
        == ""
    )
