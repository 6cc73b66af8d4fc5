"""What the SDK puts in a URL, and what it refuses before sending anything: artifact
references on other hosts (the API key would go there), ``.``/``..`` path segments (httpx
would resolve them away), empty file paths, and request bodies UTF-8 cannot encode."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest

from interpreter.client import (
    AsyncClient,
    Client,
    ClientError,
    InvalidArgumentError,
)
from interpreter.client import protocol as proto
from interpreter.models import ArtifactRef

BASE = "http://svc.test:8700"
SID = "s_abc-DEF_123"
AID = "a" * 64
ARTIFACT_PATH = f"/v1/sessions/{SID}/artifacts/{AID}"
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC).isoformat()


# ------------------------------------------------------------------- artifact refs


@pytest.mark.parametrize(
    ("ref", "base", "expected"),
    [
        (AID, BASE, (None, AID)),
        (ARTIFACT_PATH, BASE, (SID, AID)),
        (BASE + ARTIFACT_PATH, BASE, (SID, AID)),
        ("HTTP://SVC.test:8700" + ARTIFACT_PATH, BASE, (SID, AID)),
        ("http://svc.test" + ARTIFACT_PATH, "http://svc.test:80", (SID, AID)),
        ("https://svc.test:443" + ARTIFACT_PATH, "https://svc.test", (SID, AID)),
        ("http://svc.test/prefix" + ARTIFACT_PATH, "http://svc.test/prefix", (SID, AID)),
    ],
)
def test_artifact_refs_of_the_service_are_accepted(
    ref: str, base: str, expected: tuple[str | None, str]
) -> None:
    assert proto.parse_artifact_ref(ref, base) == expected


@pytest.mark.parametrize(
    "ref",
    [
        "http://127.0.0.1:8765/steal",
        "http://127.0.0.1:8765" + ARTIFACT_PATH,  # another host
        "http://svc.test:8701" + ARTIFACT_PATH,  # another port
        "https://svc.test:8700" + ARTIFACT_PATH,  # another scheme
        "http://user:pw@svc.test:8700" + ARTIFACT_PATH,
        "http://svc.test:8700.evil.test" + ARTIFACT_PATH,
        BASE + ARTIFACT_PATH + "?x=1",
        BASE + ARTIFACT_PATH + "#frag",
        "//127.0.0.1:8765" + ARTIFACT_PATH,
        "/v1/sessions/" + SID + "/notebook",
        "/v1/sessions/" + SID + "/files/secret.txt",
        ARTIFACT_PATH + "/../../notebook",
        "/v1/sessions/../artifacts/" + AID,
        f"/v1/sessions/{SID}/artifacts/..",
        "v1/sessions/" + SID + "/artifacts/" + AID,
        "..",
        ".",
        "",
        "a b",
    ],
)
def test_other_urls_and_odd_ids_are_refused(ref: str) -> None:
    with pytest.raises(InvalidArgumentError, match="not an artifact of this service"):
        proto.parse_artifact_ref(ref, BASE)


def test_the_refusal_is_in_the_sdk_tree_and_a_value_error() -> None:
    assert issubclass(InvalidArgumentError, ClientError)
    assert issubclass(InvalidArgumentError, ValueError)


def test_artifact_calls_take_only_the_artifact_path() -> None:
    assert proto.artifact(ARTIFACT_PATH).url == ARTIFACT_PATH
    assert proto.artifact_range(ARTIFACT_PATH, 5, 10).url == ARTIFACT_PATH
    for url in ("http://127.0.0.1:8765/steal", BASE + ARTIFACT_PATH, f"/v1/sessions/{SID}"):
        with pytest.raises(InvalidArgumentError):
            proto.artifact(url)
        with pytest.raises(InvalidArgumentError):
            proto.artifact_range(url)
    with pytest.raises(InvalidArgumentError):
        proto.artifact_range(ARTIFACT_PATH, -1)


class Recorder:
    """A service that only knows session creation; it logs every request it gets."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.method == "POST" and request.url.path == "/v1/sessions":
            return httpx.Response(
                201,
                json={
                    "id": SID,
                    "status": "idle",
                    "backend": "local",
                    "created_at": NOW,
                    "last_activity_at": NOW,
                    "execution_count": 0,
                    "metadata": {},
                },
            )
        if request.url.path == ARTIFACT_PATH:
            return httpx.Response(200, content=b"0123456789")
        return httpx.Response(404, json={"error": {"type": "not_found", "message": "no"}})


FOREIGN = "http://127.0.0.1:8765/steal"


def test_session_refuses_a_foreign_artifact_url_before_any_request() -> None:
    service = Recorder()
    with Client(BASE, api_key="k", transport=httpx.MockTransport(service)) as client:
        session = client.create_session()
        sent = len(service.requests)
        foreign_ref = ArtifactRef(id=AID, mime="text/plain", size=1, url=FOREIGN)
        for read in (
            lambda: session.read_artifact(FOREIGN),
            lambda: session.read_artifact(foreign_ref),
            lambda: session.artifact(FOREIGN),
            lambda: session.artifact(foreign_ref),
        ):
            with pytest.raises(InvalidArgumentError, match="Nothing was sent"):
                read()
        assert len(service.requests) == sent
        # The service's own URL, absolute, is read by its path.
        assert session.read_artifact(BASE + ARTIFACT_PATH, 0, 3) == b"012"
        assert session.artifact(AID) == b"0123456789"
    assert [r.url.path for r in service.requests[sent:]] == [ARTIFACT_PATH] * 2
    assert {r.url.host for r in service.requests} == {"svc.test"}


def test_async_session_refuses_a_foreign_artifact_url_before_any_request() -> None:
    service = Recorder()

    async def main() -> None:
        transport = httpx.MockTransport(service)
        async with AsyncClient(BASE, api_key="k", transport=transport) as client:
            session = await client.create_session()
            with pytest.raises(InvalidArgumentError):
                await session.read_artifact(FOREIGN)
            with pytest.raises(InvalidArgumentError):
                await session.artifact(FOREIGN)
            assert await session.read_artifact(BASE + ARTIFACT_PATH, 2, 2) == b"23"

    anyio.run(main)
    assert [r.url.path for r in service.requests] == ["/v1/sessions", ARTIFACT_PATH]


# ---------------------------------------------------------------------- file paths


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("data.csv", "data.csv"),
        ("a dir/x?y#z.txt", "a%20dir/x%3Fy%23z.txt"),
        ("../../other/files/secret.txt", "%2E%2E/%2E%2E/other/files/secret.txt"),
        ("a/./b", "a/%2E/b"),
        ("a/..", "a/%2E%2E"),
        ("...", "..."),
        (".hidden", ".hidden"),
    ],
)
def test_dot_segments_of_file_paths_are_encoded_not_resolved(path: str, raw: str) -> None:
    url = proto.file_url(SID, path)
    assert url == f"/v1/sessions/{SID}/files/{raw}"
    # httpx keeps them as they are, so the service sees them and answers 400.
    with httpx.Client(base_url=BASE) as http:
        assert http.build_request("GET", url).url.raw_path.decode() == url
    for call in (
        proto.download(SID, path),
        proto.upload(SID, path, b""),
        proto.delete_file(SID, path),
    ):
        assert call.url == url


@pytest.mark.parametrize("path", ["/data.csv", "/tmp/sales.csv", "//x"])
def test_an_absolute_file_path_is_refused_before_sending(path: str) -> None:
    # Before, a leading "/" was dropped: an upload to /tmp/sales.csv landed in the
    # workspace's tmp/, where pd.read_csv('/tmp/sales.csv') does not look.
    for make in (proto.download, proto.delete_file, proto.upload):
        with pytest.raises(InvalidArgumentError, match="is an absolute path"):
            make(SID, path, *([b""] if make is proto.upload else []))


def test_dot_segments_are_encoded_in_every_session_path() -> None:
    assert proto.session_url("..") == "/v1/sessions/%2E%2E"
    assert proto.get_execution(SID, "..").url == f"/v1/sessions/{SID}/executions/%2E%2E"


def test_list_files_puts_the_path_in_the_query() -> None:
    call = proto.list_files(SID, "../x&y=1#z")
    assert call.url == f"/v1/sessions/{SID}/files?path=../x%26y%3D1%23z"
    with httpx.Client(base_url=BASE) as http:
        assert http.build_request("GET", call.url).url.params["path"] == "../x&y=1#z"
    assert proto.list_files(SID).url == f"/v1/sessions/{SID}/files"
    page = proto.list_files(SID, "d", limit=10, after="f/a&b.csv")
    with httpx.Client(base_url=BASE) as http:
        params = http.build_request("GET", page.url).url.params
    assert dict(params) == {"path": "d", "limit": "10", "after": "f/a&b.csv"}


@pytest.mark.parametrize("path", ["", "/", "///"])
def test_an_empty_file_path_is_refused(path: str) -> None:
    for make in (proto.download, proto.delete_file):
        with pytest.raises(InvalidArgumentError, match="a file path is required"):
            make(SID, path)
    with pytest.raises(InvalidArgumentError, match=r"such as 'data\.csv'"):
        proto.upload(SID, path, b"x")


# -------------------------------------------------------------------------- bodies


def test_json_bodies_escape_what_utf8_cannot_encode() -> None:
    assert proto.encode_json({"code": "é"}) == '{"code":"é"}'.encode()
    body = proto.encode_json({"code": "x='\ud800'"})
    assert body == b'{"code":"x=\'\\ud800\'"}'
    assert json.loads(body) == {"code": "x='\ud800'"}
    with pytest.raises(InvalidArgumentError, match="JSON"):
        proto.encode_json({"timeout_s": float("nan")})


def test_a_lone_surrogate_in_code_reaches_the_service() -> None:
    seen: list[Any] = []

    def service(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert request.headers["content-type"] == "application/json"
        return httpx.Response(
            422, json={"error": {"type": "validation_error", "message": "code: bad"}}
        )

    with Client(BASE, api_key="k", transport=httpx.MockTransport(service)) as client:
        call = proto.execute(SID, "x='\ud800'")
        with pytest.raises(ClientError, match="code: bad"):
            client._call(call)
        with pytest.raises(ClientError, match="code: bad"), client._stream(call):
            pass
    assert seen == [{"code": "x='\ud800'"}] * 2


@pytest.mark.parametrize("key", [" ", "a\nb", "é", "x" * 256, ""])
def test_an_idempotency_key_the_service_would_refuse_is_refused_before_sending(key: str) -> None:
    # Before, " " and "a\nb" were reported as a connection failure ("Illegal header
    # value") and "é" escaped as a UnicodeEncodeError.
    with pytest.raises(InvalidArgumentError, match="1 to 255 visible ASCII"):
        proto.execute(SID, "1", idempotency_key=key)
    assert proto.execute(SID, "1", idempotency_key="run-1").headers == {"Idempotency-Key": "run-1"}


@pytest.mark.parametrize("key", ["clé", "key\u2019", "a\nb"])
def test_an_api_key_that_cannot_be_one_is_refused_at_once(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvalidArgumentError, match="api_key is not an API key"):
        Client(BASE, api_key=key)
    monkeypatch.setenv("INTERP_API_KEY", key)
    with pytest.raises(InvalidArgumentError, match=r"\$INTERP_API_KEY is not an API key"):
        Client(BASE)
