"""The SDK and the function-calling tools against a real broker (local backend): an
artifact reference that is not the service's is refused before any request, so the API key
stays home; a file path cannot climb out of its session's workspace; an empty path is a
clear error; code with a lone surrogate gets the service's own 422."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from interpreter.client import (
    AsyncClient,
    BadRequestError,
    Client,
    InvalidArgumentError,
    Session,
    StdoutEvent,
)
from interpreter.models import ArtifactRef
from interpreter.tools import TextPart, ToolExecutor, ToolResult
from tests.conftest import Server
from tests.integration.listener import listener

#: Over the 100 KB output budget: stdout is cut and kept whole as an artifact.
LONG_PRINT = "print('y' * 200_000)"


@pytest.fixture(scope="module")
def client(local_server: Server) -> Iterator[Client]:
    with Client(local_server.url, api_key=local_server.api_key, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def two(client: Client) -> Iterator[tuple[Session, Session]]:
    """Two sessions of one key; the first holds ``secret.txt``."""
    with client.create_session() as first, client.create_session() as second:
        first.upload("secret.txt", b"top secret")
        yield first, second


@pytest.fixture(scope="module")
def stdout_artifact(two: tuple[Session, Session]) -> ArtifactRef:
    result = two[0].run(LONG_PRINT)
    (ref,) = result.execution.artifacts
    return ref


def test_artifact_urls_elsewhere_are_refused_and_nothing_is_sent(
    local_server: Server, two: tuple[Session, Session], stdout_artifact: ArtifactRef
) -> None:
    session = two[0]
    with listener() as elsewhere:
        foreign = f"{elsewhere.url}/steal"
        elsewhere_ref = stdout_artifact.model_copy(update={"url": elsewhere.url + "/x"})
        for read in (
            lambda: session.read_artifact(foreign),
            lambda: session.read_artifact(elsewhere.url + stdout_artifact.url),
            lambda: session.artifact(foreign),
            lambda: session.artifact(elsewhere_ref),
        ):
            with pytest.raises(InvalidArgumentError, match="not an artifact of this service"):
                read()

        async def read_async() -> None:
            async with AsyncClient(local_server.url, api_key=local_server.api_key) as aclient:
                asession = await aclient.get_session(session.id)
                with pytest.raises(InvalidArgumentError):
                    await asession.read_artifact(foreign)
                with pytest.raises(InvalidArgumentError):
                    await asession.artifact(foreign)

        anyio.run(read_async)
        # Not another session resource either: only artifacts.
        with pytest.raises(InvalidArgumentError):
            session.read_artifact(f"/v1/sessions/{two[1].id}/notebook")
        assert elsewhere.requests == []
    # The service's own references work: path, absolute URL on it, id.
    assert session.read_artifact(stdout_artifact.url, 0, 3) == b"yyy"
    assert session.read_artifact(local_server.url + stdout_artifact.url, 0, 2) == b"yy"
    assert session.read_artifact(stdout_artifact.id, 0, 1) == b"y"


def test_file_paths_cannot_reach_another_session(two: tuple[Session, Session]) -> None:
    first, second = two
    escapes = [
        f"../../{first.id}/files/secret.txt",
        f"../../{first.id}/notebook",
        f"./../../{first.id}/files/secret.txt",
        "../../etc/passwd",
        "sub/../../secret.txt",
    ]
    for path in escapes:
        with pytest.raises(BadRequestError) as refused:
            second.download(path)
        assert refused.value.status == 400 and refused.value.code == "path_not_allowed"
        assert "'..'" in refused.value.message
    with pytest.raises(BadRequestError, match=r"'\.\.'"):
        second.upload(f"../../{first.id}/files/secret.txt", b"overwritten")
    with pytest.raises(BadRequestError, match=r"'\.\.'"):
        second.delete_file(f"../../{first.id}/files/secret.txt")
    with pytest.raises(BadRequestError, match=r"'\.\.'"):
        second.list_files(f"../../{first.id}/files")
    assert first.download("secret.txt") == b"top secret"


@pytest.mark.parametrize("path", ["", "/"])
def test_an_empty_file_path_is_a_clear_sdk_error(two: tuple[Session, Session], path: str) -> None:
    session = two[1]
    with pytest.raises(InvalidArgumentError, match="a file path is required"):
        session.upload(path, b"x")
    with pytest.raises(InvalidArgumentError, match="a file path is required"):
        session.download(path)


def test_a_lone_surrogate_in_code_gets_the_services_422(
    local_server: Server, two: tuple[Session, Session]
) -> None:
    session = two[1]
    with pytest.raises(BadRequestError) as refused:
        session.run("x = '\ud800'")
    assert refused.value.status == 422 and "code" in refused.value.message
    with pytest.raises(BadRequestError) as streamed:
        list(session.stream("x = '\ud800'"))
    assert streamed.value.status == 422

    async def run_async() -> None:
        async with AsyncClient(local_server.url, api_key=local_server.api_key) as aclient:
            asession = await aclient.get_session(session.id)
            with pytest.raises(BadRequestError) as arefused:
                await asession.run("x = '\ud800'")
            assert arefused.value.status == 422
            # Non-ASCII text still travels as UTF-8 and runs.
            events = [e async for e in asession.stream("print('é' + '\\ud83d\\ude00')")]
            text = "".join(e.text for e in events if isinstance(e, StdoutEvent))
            assert text == "é\U0001f600\n"

    anyio.run(run_async)
    assert session.run("'日本'").text == "'日本'"


# --------------------------------------------------------------------------- tools


def _text(result: ToolResult) -> str:
    return "\n".join(p.text for p in result.parts if isinstance(p, TextPart))


def test_tools_refuse_foreign_artifacts_escapes_and_empty_paths(
    client: Client, two: tuple[Session, Session], stdout_artifact: ArtifactRef
) -> None:
    first, second = two
    executor = ToolExecutor(client, session_id=second.id)
    with listener() as elsewhere:
        result = executor.execute(
            {"name": "read_artifact", "arguments": {"artifact": elsewhere.url + "/steal"}}
        )
        assert result.is_error and "not an artifact of this service" in _text(result)
        assert elsewhere.requests == []
    for path in ("", "/"):
        result = executor.execute(
            {"name": "upload_file", "arguments": {"path": path, "content": "x"}}
        )
        assert result.is_error and "a file path is required" in _text(result)
    escape = f"../../{first.id}/files/secret.txt"
    result = executor.execute({"name": "read_file", "arguments": {"path": escape}})
    assert result.is_error and "path_not_allowed" in _text(result)
    result = executor.execute(
        {"name": "upload_file", "arguments": {"path": escape, "content": "overwritten"}}
    )
    assert result.is_error and "path_not_allowed" in _text(result)
    assert first.download("secret.txt") == b"top secret"
    result = executor.execute({"name": "run_code", "arguments": {"code": "x = '\ud800'"}})
    assert result.is_error and "validation_error" in _text(result)
    # Its own artifact, by path, is read as before.
    result = executor.execute(
        {"name": "read_artifact", "arguments": {"artifact": stdout_artifact.url, "length": 4}}
    )
    assert not result.is_error and _text(result).endswith("\nyyyy")


def test_a_connection_limited_to_its_sessions_cannot_read_others_artifacts(
    client: Client, two: tuple[Session, Session], stdout_artifact: ArtifactRef
) -> None:
    """``own_sessions_only`` (the MCP HTTP server, one per client): a session named in an
    artifact path is checked like a ``session_id`` argument."""
    executor = ToolExecutor(client, own_sessions_only=True)
    try:
        result = executor.execute(
            {"name": "read_artifact", "arguments": {"artifact": stdout_artifact.url}}
        )
        assert result.is_error and "use a session created in this connection" in _text(result)
        result = executor.execute(
            {
                "name": "read_artifact",
                "arguments": {"artifact": client.base_url + stdout_artifact.url},
            }
        )
        assert result.is_error and "use a session created in this connection" in _text(result)
        assert executor.created == []  # refused before a session was made for it
        ran = executor.execute({"name": "run_code", "arguments": {"code": LONG_PRINT}})
        (own,) = ran.structured["artifact_ids"] if ran.structured else []
        mine = f"/v1/sessions/{executor.session_id}/artifacts/{own}"
        result = executor.execute(
            {"name": "read_artifact", "arguments": {"artifact": mine, "length": 2}}
        )
        assert not result.is_error and _text(result).endswith("\nyy")
    finally:
        executor.close()
