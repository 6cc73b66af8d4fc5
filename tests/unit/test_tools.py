"""Tool definitions, tool-call parsing, and the executors against a stand-in service."""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import jsonschema
import pytest

from interpreter.client import AsyncClient, Client
from interpreter.client.render import chart_summary, clip, dataframe_summary, render_execution
from interpreter.models import Execution
from interpreter.tools import (
    TOOL_NAMES,
    TOOLS,
    AsyncToolExecutor,
    ImagePart,
    TextPart,
    ToolCall,
    ToolCallError,
    ToolExecutor,
    ToolResult,
    notebook_transcript,
    openai_messages,
    parse_tool_call,
    tool_definitions,
    validate_arguments,
)
from interpreter.tools import logic as tools_logic
from interpreter.tools.specs import TOOLS_BY_NAME

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC).isoformat()
REBUILD = {
    "source": "session:x",
    "cells_total": 4,
    "cells_ran": 2,
    "cells_skipped": 1,
    "failed": [4],
    "errors_again": [1],
    "not_rerun": [6],
    "cells": [
        {
            "index": 1,
            "execution_count": 2,
            "first_line": "1/0",
            "recorded_status": "error",
            "status": "error",
            "rerun_execution_id": "e_r1",
        },
        {
            "index": 4,
            "execution_count": 4,
            "first_line": "y = f()",
            "recorded_status": "ok",
            "status": "error",
            "rerun_execution_id": "e_r4",
            "error": "NameError: name 'f' is not defined",
        },
        {"index": 6, "execution_id": "e_6", "execution_count": 5, "recorded_status": "timeout"},
    ],
}


def _png(width: int = 1, height: int = 1) -> bytes:
    """A valid PNG of one grey pixel row per line (as small as a PNG gets)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    pixels = zlib.compress(b"".join(b"\0" + b"\x80" * width for _ in range(height)))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PNG = _png()
DF_SUMMARY = {
    "version": 1,
    "kind": "dataframe",
    "shape": [100, 3],
    "columns": [
        {"name": "a", "dtype": "int64", "nulls": 0},
        {"name": "b", "dtype": "float64", "nulls": 4},
        {"name": "c", "dtype": "object", "nulls": 0},
    ],
    "index": {"type": "RangeIndex", "dtype": "int64", "names": [None], "values": [0, 1]},
    "rows": [[1, 2.5, "x"], [2, None, "y"]],
    "truncated": True,
}
CHART = {
    "version": 1,
    "suptitle": None,
    "axes": [
        {
            "kind": "line",
            "title": "Sales",
            "xlabel": "month",
            "ylabel": "EUR",
            "series": [
                {
                    "type": "line",
                    "label": "2024",
                    "x": [1],
                    "y": [2],
                    "points": 12,
                    "truncated": False,
                }
            ],
        }
    ],
    "truncated": False,
}


class ToolService:
    """A stand-in API that runs a few known snippets."""

    def __init__(self) -> None:
        self.sessions: dict[str, str] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.log: list[str] = []
        self.queries: list[str] = []
        self.n = 0
        #: Artifact bytes by id (any other artifact is ``PNG``), and the outputs of the
        #: code ``pictures``.
        self.blobs: dict[str, bytes] = {}
        self.pictures: list[dict[str, Any]] = []

    def _session(self, sid: str) -> dict[str, Any]:
        return {
            "id": sid,
            "status": self.sessions[sid],
            "backend": "local",
            "created_at": NOW,
            "last_activity_at": NOW,
            "execution_count": 0,
            "rebuild": REBUILD if sid.endswith("r") else None,
        }

    def _execute(self, sid: str, code: str) -> dict[str, Any]:
        base: dict[str, Any] = {
            "id": "e",
            "session_id": sid,
            "status": "ok",
            "execution_count": 1,
            "duration_ms": 12.0,
        }
        if code == "df":
            return base | {
                "outputs": [
                    {
                        "type": "execute_result",
                        "data": {
                            "text/plain": "   a    b  c\n0  1  2.5  x",
                            "application/vnd.dataframe+json": DF_SUMMARY,
                        },
                    }
                ]
            }
        if code == "plot":
            refs = [
                {
                    "id": str(i) * 64,
                    "mime": "image/png",
                    "size": len(PNG),
                    "url": f"/v1/sessions/{sid}/artifacts/{str(i) * 64}",
                }
                for i in range(3)
            ]
            return base | {
                "outputs": [
                    {
                        "type": "display_data",
                        "artifacts": [ref],
                        "data": {
                            "text/plain": "<Figure size 640x480 with 1 Axes>",
                            "application/vnd.chart+json": CHART,
                        },
                    }
                    for ref in refs
                ]
            }
        if code == "pictures":
            return base | {"outputs": self.pictures}
        if code == "boom":
            return base | {
                "status": "error",
                "error": {
                    "ename": "ZeroDivisionError",
                    "evalue": "division by zero",
                    "traceback": [
                        "\x1b[31mTraceback\x1b[0m",
                        "ZeroDivisionError: division by zero",
                    ],
                },
            }
        return base | {"stdout": f"ran {code}\n"}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path, method = unquote(request.url.path), request.method
        self.log.append(f"{method} {path}")
        self.queries.append(request.url.query.decode())
        if path == "/v1/sessions" and method == "POST":
            self.n += 1
            body = json.loads(request.content or b"{}")
            sid = f"s{self.n}" + ("r" if "from_session" in body else "")
            self.sessions[sid] = "idle"
            return httpx.Response(201, json=self._session(sid))
        if path == "/v1/sessions":
            return httpx.Response(200, json={"sessions": [self._session(s) for s in self.sessions]})
        m = re.fullmatch(r"/v1/sessions/([^/]+)(?:/(.*))?", path)
        assert m
        sid, rest = m.group(1), m.group(2) or ""
        if rest == "" and method == "DELETE" and self.sessions.get(sid) == "closed":
            return httpx.Response(204)  # as the service: closing a closed session is a no-op
        if self.sessions.get(sid) != "idle":
            return httpx.Response(
                404,
                json={"error": {"type": "session_not_found", "message": f"No session {sid!r}."}},
            )
        if rest == "" and method == "DELETE":
            self.sessions[sid] = "closed"
            return httpx.Response(204)
        if rest == "execute":
            return httpx.Response(200, json=self._execute(sid, json.loads(request.content)["code"]))
        if rest == "restart":
            return httpx.Response(200, json=self._session(sid))
        if rest.startswith("artifacts/"):
            return httpx.Response(200, content=self.blobs.get(rest.split("/")[1], PNG))
        if rest == "notebook":
            return httpx.Response(
                200,
                json={
                    "cells": [
                        {"cell_type": "markdown", "source": "# Title", "metadata": {}},
                        {
                            "cell_type": "code",
                            "execution_count": 1,
                            "source": ["print(1)"],
                            "metadata": {"interp": {"status": "ok"}},
                            "outputs": [
                                {"output_type": "stream", "name": "stdout", "text": ["1\n"]},
                                {
                                    "output_type": "display_data",
                                    "metadata": {},
                                    "data": {"image/png": "aGVsbG8=", "text/plain": "<Figure>"},
                                },
                            ],
                        },
                        {
                            "cell_type": "code",
                            "execution_count": 2,
                            "source": "1/0",
                            "metadata": {"interp": {"status": "error"}},
                            "outputs": [
                                {
                                    "output_type": "error",
                                    "ename": "ZeroDivisionError",
                                    "evalue": "division by zero",
                                    "traceback": [],
                                }
                            ],
                        },
                    ],
                    "metadata": {},
                    "nbformat": 4,
                    "nbformat_minor": 5,
                },
            )
        if rest == "files":
            entries = [
                {"name": p, "path": p, "type": "file", "size": len(d), "modified_at": NOW}
                for (s, p), d in self.files.items()
                if s == sid
            ]
            limit = int(request.url.params.get("limit", len(entries) or 1))
            following = f"f/{entries[limit - 1]['name']}" if len(entries) > limit else None
            return httpx.Response(
                200, json={"path": "", "entries": entries[:limit], "next": following}
            )
        if rest.startswith("files/"):
            fpath = rest.removeprefix("files/")
            if method == "PUT":
                self.files[(sid, fpath)] = request.content
                return httpx.Response(201)
            if (sid, fpath) in self.files:
                return httpx.Response(200, content=self.files[(sid, fpath)])
            return httpx.Response(
                404, json={"error": {"type": "file_not_found", "message": f"No file {fpath!r}."}}
            )
        raise AssertionError(f"unexpected {method} {path}")


@pytest.fixture
def service() -> ToolService:
    return ToolService()


@pytest.fixture
def executor(service: ToolService) -> ToolExecutor:
    return ToolExecutor(Client("http://svc.test", transport=httpx.MockTransport(service)))


def run(executor: ToolExecutor, name: str, **args: Any) -> ToolResult:
    return executor.execute({"name": name, "arguments": args})


# -------------------------------------------------------------------------- definitions


def test_eleven_tools_with_valid_schemas_and_real_descriptions() -> None:
    assert set(TOOL_NAMES) == {
        "run_code",
        "create_session",
        "list_sessions",
        "close_session",
        "upload_file",
        "read_file",
        "read_artifact",
        "list_files",
        "restart",
        "rebuild_from_notebook",
        "get_notebook",
    }
    for spec in TOOLS:
        jsonschema.Draft202012Validator.check_schema(spec.parameters)
        assert spec.parameters["type"] == "object"
        assert spec.parameters["additionalProperties"] is False
        assert len(spec.description) > 80, spec.name
        for name, prop in spec.parameters["properties"].items():
            assert prop.get("description"), f"{spec.name}.{name} lacks a description"


def test_openai_and_anthropic_shapes() -> None:
    openai = tool_definitions("openai")
    assert openai[0]["type"] == "function"
    assert openai[0]["function"]["name"] == "run_code"
    assert openai[0]["function"]["parameters"]["required"] == ["code"]
    anthropic = tool_definitions("anthropic", names=["run_code", "read_file"])
    assert [t["name"] for t in anthropic] == ["run_code", "read_file"]
    assert set(anthropic[0]) == {"name", "description", "input_schema"}
    json.dumps(openai + anthropic)  # serialisable as is
    with pytest.raises(ValueError, match="unknown tool format"):
        tool_definitions("gemini")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "raw",
    [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "run_code", "arguments": '{"code": "1"}'},
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "run_code",
            "arguments": '{"code": "1"}',
        },
        {"type": "tool_use", "id": "c1", "name": "run_code", "input": {"code": "1"}},
        {"id": "c1", "name": "run_code", "arguments": {"code": "1"}},
    ],
)
def test_parse_tool_call_in_every_shape(raw: dict[str, Any]) -> None:
    assert parse_tool_call(raw) == ToolCall("run_code", {"code": "1"}, "c1")


def test_parse_tool_call_rejects_garbage() -> None:
    with pytest.raises(ToolCallError, match="no name"):
        parse_tool_call({"arguments": {}})
    with pytest.raises(ToolCallError, match="not valid JSON"):
        parse_tool_call({"name": "run_code", "arguments": "{code: 1"})
    with pytest.raises(ToolCallError, match="JSON object"):
        parse_tool_call({"name": "run_code", "arguments": "[1]"})
    assert parse_tool_call({"name": "list_sessions", "arguments": ""}).arguments == {}


def test_validate_arguments() -> None:
    spec = TOOLS[0]
    validate_arguments(spec, {"code": "x", "timeout_s": 5})
    with pytest.raises(ToolCallError, match="'max_chars' must be an integer"):
        validate_arguments(TOOLS_BY_NAME["read_file"], {"path": "a", "max_chars": "9"})
    for bad, msg in [
        ({}, "missing required"),
        ({"code": 1}, "must be a string"),
        ({"code": "x", "timeout_s": True}, "must be a number"),
        ({"code": "x", "timeout_s": 0}, "must be > 0"),
        ({"code": "x", "lang": "r"}, "unknown argument 'lang'"),
    ]:
        with pytest.raises(ToolCallError, match=msg):
            validate_arguments(spec, bad)


# ---------------------------------------------------------------------------- executor


def test_run_code_creates_one_session_and_reuses_it(
    executor: ToolExecutor, service: ToolService
) -> None:
    first = run(executor, "run_code", code="a = 1")
    second = run(executor, "run_code", code="print(a)")
    assert not first.is_error and "stdout:\nran a = 1" in first.text
    assert "ran print(a)" in second.text
    # Models often fill an optional string with "": it counts as omitted.
    third = run(executor, "run_code", code="print(a)", session_id="")
    assert not third.is_error and "ran print(a)" in third.text
    assert service.log.count("POST /v1/sessions") == 1
    assert executor.session_id == "s1"


def test_run_code_dataframe_summary_and_images(executor: ToolExecutor) -> None:
    df = run(executor, "run_code", code="df")
    assert "DataFrame: 100 rows x 3 columns" in df.text
    assert "b (float64, 4 null)" in df.text
    assert "   a    b  c" in df.text
    plot = executor.execute(
        {"type": "tool_use", "id": "t9", "name": "run_code", "input": {"code": "plot"}}
    )
    assert plot.call_id == "t9"
    assert [i.mime for i in plot.images] == ["image/png"] * 3
    assert plot.images[0].data == PNG
    expected = "plot 1: line titled 'Sales' (x='month', y='EUR')\n  series '2024': 12 points"
    assert expected in plot.text
    assert "<Figure size" not in plot.text
    capped = ToolExecutor(executor.client, max_images=1).execute(
        {"name": "run_code", "arguments": {"code": "plot"}}
    )
    assert len(capped.images) == 1
    # The others are named, with how to see them.
    assert "1 image attached, in order; not attached (read_artifact" in capped.text
    left = f"image 2 (image/png, {len(PNG)} bytes) /v1/sessions/{capped.structured['session_id']}"
    assert left in capped.text and "image 1 (" not in capped.text
    assert "at most 1 image is attached per result" in capped.text
    shown = run(executor, "read_artifact", artifact="/v1/sessions/s1/artifacts/" + "2" * 64)
    assert [(i.mime, i.data) for i in shown.images] == [("image/png", PNG)]


def test_code_error_is_a_successful_call_showing_the_traceback(executor: ToolExecutor) -> None:
    result = run(executor, "run_code", code="boom")
    assert not result.is_error
    assert "status: error" in result.text
    assert "error: ZeroDivisionError: division by zero" in result.text
    assert "\x1b" not in result.text


def test_bad_calls_and_refusals_are_error_results(executor: ToolExecutor) -> None:
    unknown = run(executor, "rm_rf")
    assert unknown.is_error and "unknown tool 'rm_rf'" in unknown.text
    invalid = run(executor, "run_code")
    assert invalid.is_error and "missing required argument 'code'" in invalid.text
    missing = run(executor, "run_code", code="x", session_id="nope")
    assert missing.is_error and "No session 'nope'. (session_not_found)" in missing.text
    garbage = executor.execute({"name": "run_code", "arguments": "{"})
    assert garbage.is_error


def test_culled_current_session_is_replaced_with_a_note(
    executor: ToolExecutor, service: ToolService
) -> None:
    run(executor, "run_code", code="a = 1")
    service.sessions["s1"] = "closed"
    again = run(executor, "run_code", code="a")
    assert not again.is_error
    assert "new session s2; earlier variables are gone" in again.text
    assert executor.session_id == "s2"


def test_files_tools(executor: ToolExecutor, service: ToolService) -> None:
    assert (
        "Wrote 4 bytes to d.csv" in run(executor, "upload_file", path="d.csv", content="a,b\n").text
    )
    png = base64.b64encode(PNG).decode()
    run(executor, "upload_file", path="p.png", content=png, encoding="base64")
    assert service.files[("s1", "p.png")] == PNG
    bad = run(executor, "upload_file", path="x", content="%%%", encoding="base64")
    assert bad.is_error and "base64" in bad.text
    assert run(executor, "read_file", path="d.csv").text == "a,b\n"
    image = run(executor, "read_file", path="p.png")
    assert image.images[0].data == PNG
    service.files[("s1", "blob")] = b"\xff\xfe\x00"
    assert "binary file of 3 bytes" in run(executor, "read_file", path="blob").text
    # A Latin-1 CSV is text in another encoding, not a binary file.
    service.files[("s1", "latin1.csv")] = "région,montant\nÎle,2\n".encode("latin-1")
    latin1 = run(executor, "read_file", path="latin1.csv").text
    assert "binary" not in latin1 and "latin1.csv: not valid UTF-8" in latin1
    assert "decoded as Windows-1252 (Latin-1)" in latin1
    assert latin1.endswith("\nrégion,montant\nÎle,2\n")
    service.files[("s1", "mixed.txt")] = "naïve ".encode() + b"\xff end"
    mixed = run(executor, "read_file", path="mixed.txt").text
    assert "invalid byte is at offset 7" in mixed and mixed.endswith("\nnaïve \ufffd end")
    service.files[("s1", "big.txt")] = b"x" * 5000
    assert "characters omitted" in run(executor, "read_file", path="big.txt", max_chars=100).text
    listing = run(executor, "list_files").text
    assert "d.csv" in listing and "4 bytes" in listing
    assert "more follow" not in listing
    assert run(executor, "read_file", path="zzz").is_error
    # Workspace paths are relative: an absolute one is refused, not read from elsewhere.
    sent = len(service.log)
    for name, args in [
        ("upload_file", {"path": "/tmp/x.csv", "content": "a"}),
        ("read_file", {"path": "/home/user/d.csv"}),
        ("rebuild_from_notebook", {"path": "/nb.ipynb"}),
    ]:
        refused = run(executor, name, **args)
        assert refused.is_error and "is an absolute path" in refused.text, refused.text
        assert "os.getcwd()" in refused.text
    assert len(service.log) == sent  # nothing was sent


def test_sessions_restart_notebook(executor: ToolExecutor, service: ToolService) -> None:
    assert "No open sessions" in run(executor, "list_sessions").text
    created = run(executor, "create_session").text
    assert "Created session s1" in created
    forked = run(executor, "create_session", from_session="s1").text
    # Cells are named as run_code named them (cell 2 is In [2]), with their first line of
    # code and the failed re-run's execution; the model learns that a recorded error raised
    # again is expected and what was not re-run. They were named by their index in the
    # notebook, which no tool shows: "cell 1 raised the error" for the model's cell 2.
    assert (
        "Rebuilt from session:x: 2 of 4 cells re-ran; In [2] `1/0` raised the error recorded "
        "for it again, as expected: what ran before the error is restored; the state is NOT "
        "fully restored (what the failed cells define, and what later cells built on it, may "
        "be missing): In [4] `y = f()` failed (execution e_r4): NameError: name 'f' is not "
        "defined; not re-run: In [5] (timeout), stopped before the end when recorded: names "
        "defined there may be missing." in forked
    )
    assert executor.session_id == "s2r"
    listing = run(executor, "list_sessions").text
    assert "s2r  idle" in listing and "(current)" in listing.splitlines()[1]
    assert (
        "restarted; variables and imports were cleared"
        in run(executor, "restart", session_id="s1").text
    )
    restarted = run(executor, "restart", recover=True).text
    assert "restarted and rebuilt: 2 of 4 cells re-ran" in restarted
    # Why it failed, not only that it did (found by an outside agent tester).
    assert "In [4] `y = f()` failed (execution e_r4): NameError" in restarted
    text = run(executor, "get_notebook").text
    assert "In [1] (ok):\nprint(1)" in text and "[image: image/png]" in text
    assert "[error] ZeroDivisionError" in text
    raw = json.loads(run(executor, "get_notebook", format="ipynb").text)
    # The image's entry goes and its text says so: a note under image/png was not base64,
    # so renderers showed a broken image (found by an outside agent tester).
    pictured = raw["cells"][1]["outputs"][1]["data"]
    assert "image/png" not in pictured
    assert pictured["text/plain"].startswith("[image/png left out of this copy, ")
    executor.close()
    assert service.sessions == {"s1": "closed", "s2r": "closed"}


def test_result_rendering_for_each_api() -> None:
    result = ToolResult([TextPart("hi"), ImagePart("image/png", PNG)], call_id="c7")
    block = result.to_anthropic()
    assert block["tool_use_id"] == "c7" and "is_error" not in block
    assert block["content"][1]["source"]["data"] == base64.b64encode(PNG).decode()
    messages = result.to_openai()
    assert messages[0] == {"role": "tool", "tool_call_id": "c7", "content": "hi"}
    assert messages[1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert ToolResult([TextPart("x")], is_error=True).to_anthropic()["is_error"] is True
    assert len(ToolResult([TextPart("x")]).to_openai()) == 1


def test_one_turns_parallel_calls_answer_with_every_tool_message_first() -> None:
    """Each result's to_openai() appended in turn put a user message (a plot's image)
    between the tool messages of one assistant turn, which Chat Completions refuses
    (found by an outside agent tester)."""
    plot = ToolResult([TextPart("a plot"), ImagePart("image/png", PNG)], call_id="call_1")
    text = ToolResult([TextPart("rows 5000")], call_id="call_2")
    chart = ToolResult([TextPart("b"), ImagePart("image/png", PNG)], call_id="call_3")
    messages = openai_messages([plot, text, chart])
    assert [(m["role"], m.get("tool_call_id")) for m in messages] == [
        ("tool", "call_1"),
        ("tool", "call_2"),
        ("tool", "call_3"),
        ("user", None),
    ]
    said = [p.get("text") for p in messages[-1]["content"]]
    assert said == [
        "Images returned by tool call call_1:",
        None,
        "Images returned by tool call call_3:",
        None,
    ]
    assert (
        openai_messages([text])
        == text.to_openai()
        == [{"role": "tool", "tool_call_id": "call_2", "content": "rows 5000"}]
    )


async def test_async_executor(service: ToolService) -> None:
    client = AsyncClient("http://svc.test", transport=httpx.MockTransport(service))
    executor = AsyncToolExecutor(client)
    result = await executor.execute({"name": "run_code", "arguments": {"code": "plot"}})
    assert len(result.images) == 3 and not result.is_error
    assert (await executor.execute({"name": "nope"})).is_error
    await executor.close()
    assert service.sessions == {"s1": "closed"}
    await client.close()


# --------------------------------------------------------------------------- rendering


def test_render_helpers() -> None:
    assert (
        dataframe_summary(
            {
                "kind": "series",
                "shape": [5],
                "columns": [{"name": "x", "dtype": "int64", "nulls": None}],
            }
        )
        == "Series: 5 rows\nname: x, dtype int64"
    )
    wide = dataframe_summary(DF_SUMMARY | {"shape": [100, 40]})
    # No text table follows: no note on rows (the JSON's first rows are not shown).
    assert "... 37 more" in wide and "rows)" not in wide
    assert chart_summary({"axes": []}) == "a figure"
    assert clip("abcdefghij", 6) == "abcd\n[... 4 characters omitted ...]\nij"
    quiet = render_execution(Execution(id="e", session_id="s", status="ok"))
    assert quiet == ["status: ok", "(no output)"]
    lost = render_execution(
        Execution(id="e", session_id="s", status="timeout", state_lost=True, reason="timeout")
    )
    assert "time limit" in lost[0] and "all variables" in lost[0]
    assert notebook_transcript({"cells": []}).startswith("The notebook is empty")


def test_a_service_error_names_the_tool_where_it_names_a_route() -> None:
    from interpreter.client import NotFoundError
    from interpreter.tools.executors import api_error_text

    exc = NotFoundError(
        "No session 's_x' (or it belongs to another key). List yours with GET /v1/sessions.",
        status=404,
        code="session_not_found",
    )
    assert api_error_text(exc) == (
        "No session 's_x' (or it belongs to another key). List yours with the list_sessions "
        "tool. (session_not_found)"
    )


def test_a_file_or_directory_mixed_up_is_said_in_the_tools_words(tmp_path: Path) -> None:
    """read_file on a directory and list_files on a file told the model to use "?path="
    and "files/<path>", which no tool takes (found by an outside agent tester)."""
    from interpreter.client import BadRequestError
    from interpreter.errors import BadRequest
    from interpreter.tools.executors import api_error_text
    from interpreter.workspace import Workspace

    (tmp_path / "ws").mkdir()
    ws = Workspace(tmp_path / "ws")
    (ws.root / "out").mkdir()
    (ws.root / "out" / "r.csv").write_text("a\n")
    said = []
    for attempt in (lambda: ws.open_read("out"), lambda: ws.listing("out/r.csv")):
        with pytest.raises(BadRequest) as refused:
            attempt()
        exc = BadRequestError(str(refused.value), status=400, code="bad_request")
        said.append(api_error_text(exc))
    assert said == [
        "'out' is a directory, not a file: list its files with list_files instead. (bad_request)",
        "'out/r.csv' is a file, not a directory: read it with read_file, or list its directory "
        "with list_files. (bad_request)",
    ]


def test_a_session_id_that_is_none_is_refused_before_sending(
    executor: ToolExecutor, service: ToolService
) -> None:
    for bad in ("../../v1/sessions", "s 1", "x" * 101):
        refused = run(executor, "run_code", code="1", session_id=bad)
        assert refused.is_error and "is not a session id" in refused.text, refused.text
    assert service.log == []


def test_run_code_attaches_only_images_a_model_api_takes(
    executor: ToolExecutor, service: ToolService
) -> None:
    # A 6.75 MB PNG, a figure 9360 pixels wide and 20 bytes that were no PNG went to the
    # model as they were: the API refuses such an image, and the conversation with it.
    def picture(name: str, mime: str, data: bytes, size: int | None = None) -> dict[str, Any]:
        aid = name * 64
        service.blobs[aid] = data
        return {
            "id": aid,
            "mime": mime,
            "size": len(data) if size is None else size,
            "url": f"/v1/sessions/s1/artifacts/{aid}",
        }

    big = picture("a", "image/png", PNG, size=6_753_829)  # never fetched
    twin = picture("b", "image/jpeg", _jpeg())
    wide = picture("c", "image/png", _png(9_000, 1))
    junk = picture("d", "image/png", b"<html>not a png</html>")
    service.pictures = [
        {"type": "display_data", "data": {"text/plain": "<PIL>"}, "artifacts": [big, twin]},
        {"type": "display_data", "data": {"text/plain": "<Figure>"}, "artifacts": [wide]},
        {"type": "display_data", "data": {"text/plain": "<Figure>"}, "artifacts": [junk]},
    ]
    result = run(executor, "run_code", code="pictures")
    assert [(i.mime, i.data) for i in result.images] == [("image/jpeg", service.blobs["b" * 64])]
    assert not any(line.endswith("/" + "a" * 64) for line in service.log)
    assert "1 image attached, in order; not attached" in result.text
    assert f"image 2 (image/png, {len(_png(9_000, 1)):,} bytes) {wide['url']}: 9000x1 pixels" in (
        result.text
    )
    assert f"image 3 (image/png, 22 bytes) {junk['url']}: not a PNG, JPEG, GIF or WebP" in (
        result.text
    )


def _jpeg() -> bytes:
    """The smallest JPEG header that says its size: SOI, then a baseline frame of 2x3."""
    frame = struct.pack(">HBHHB", 11, 8, 3, 2, 1) + b"\x01\x11\x00"
    return b"\xff\xd8\xff\xc0" + frame + b"\xff\xd9"


def test_close_session_frees_the_current_one_and_the_next_run_starts_anew(
    executor: ToolExecutor, service: ToolService
) -> None:
    # An agent at the session cap was told to "delete some" and had no tool to do it.
    assert run(executor, "close_session").is_error  # nothing current yet: nothing sent
    run(executor, "run_code", code="a = 1")
    closed = run(executor, "close_session")
    assert not closed.is_error and "Closed session s1" in closed.text
    assert "DELETE /v1/sessions/s1" in service.log and executor.session_id is None
    assert "ran print(a)" in run(executor, "run_code", code="print(a)").text
    assert executor.session_id == "s2"
    other = run(executor, "close_session", session_id="s1")  # closing twice is no error
    assert not other.is_error and "next run_code" not in other.text


def test_the_session_cap_names_the_tool_that_frees_a_place() -> None:
    from interpreter.client import APIError
    from interpreter.tools.executors import api_error_text

    capped = APIError(
        "32 sessions are open (the maximum); delete some.", status=429, code="too_many_sessions"
    )
    assert "close_session" in api_error_text(capped)


def test_the_responses_api_shapes() -> None:
    # `--format openai` fits Chat Completions only: the Responses API wants its tools flat
    # and its answers as function_call_output items.
    tools = tool_definitions("openai-responses")
    assert {t["name"] for t in tools} == set(TOOL_NAMES)
    assert all(t["type"] == "function" and "function" not in t for t in tools)
    assert all(t["parameters"]["type"] == "object" for t in tools)
    plain = ToolResult([TextPart("hi")], call_id="fc_1").to_openai_responses()
    assert plain == {"type": "function_call_output", "call_id": "fc_1", "output": "hi"}
    pictured = ToolResult([TextPart("a plot"), ImagePart("image/png", PNG)], call_id="fc_2")
    output = pictured.to_openai_responses()["output"]
    assert output[0] == {"type": "input_text", "text": "a plot"}
    assert output[1]["type"] == "input_image"
    assert output[1]["image_url"].startswith("data:image/png;base64,")


def test_list_files_gives_a_model_one_page_and_says_more_follow(
    service: ToolService, executor: ToolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory of 100,000 files was listed whole into the model's context."""
    monkeypatch.setattr(tools_logic, "LIST_FILES_MOST", 2)
    run(executor, "create_session")
    for name in ("a.csv", "b.csv", "c.csv"):
        service.files[("s1", name)] = b"x"
    listing = run(executor, "list_files").text
    assert "a.csv" in listing and "b.csv" in listing and "c.csv" not in listing
    assert listing.endswith(
        "(the first 2 entries, directories first, then by name; more follow. To find or "
        "count files among them, use run_code: glob, os.scandir.)"
    )
    assert service.queries[-1] == "limit=2", service.queries
