"""The workspace as the function-calling tools, the SDK and HTTP clients see it, against a
real broker (local backend): a listing a model reads keeps its text budget, and a file
cannot be written to a path that names a directory (both found by an outside agent
tester)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from interpreter.client import BadRequestError, Client
from interpreter.tools import ToolExecutor, ToolResult
from tests.conftest import Server

#: A dataset folder as data analysis makes them: many files with long names.
DATASET = "dataset/images/train/class_golden_retriever_outdoor_photos"
MAKE_DATASET = (
    "import os\n"
    f"os.makedirs({DATASET!r}, exist_ok=True)\n"
    "os.makedirs(os.path.join({d!r}, 'augmented'), exist_ok=True)\n"
    "for i in range(2000):\n"
    "    name = f'img_{{i:05d}}_augmented_rotation_15deg_flip_horizontal.jpg'\n"
    "    open(os.path.join({d!r}, name), 'wb').write(b'x')\n"
).format(d=DATASET)


@pytest.fixture(scope="module")
def client(local_server: Server) -> Iterator[Client]:
    with Client(local_server.url, api_key=local_server.api_key, max_retries=0) as c:
        yield c


def call(executor: ToolExecutor, name: str, **arguments: Any) -> ToolResult:
    return executor.execute({"type": "tool_use", "id": "t", "name": name, "input": arguments})


def test_list_files_keeps_the_text_budget_with_names_and_a_count(client: Client) -> None:
    """2000 files were listed as 500 lines of full paths: 84,000 characters, four times
    the 20,000 every other tool keeps to."""
    for max_chars in (20_000, 3_000):
        with contextlib.closing(ToolExecutor(client, max_chars=max_chars)) as executor:
            made = call(executor, "run_code", code=MAKE_DATASET)
            assert not made.is_error, made.text
            listing = call(executor, "list_files", path=DATASET)
            text = listing.text
            assert not listing.is_error and len(text) <= max_chars, len(text)
            lines = text.splitlines()
            assert lines[0] == f"{DATASET}:"
            # Directories first, each name relative to the listed directory.
            assert lines[1].startswith("directory") and lines[1].endswith("  augmented/")
            assert lines[2].endswith("  img_00000_augmented_rotation_15deg_flip_horizontal.jpg")
            assert DATASET not in "\n".join(lines[1:-1])
            shown = len(lines) - 2
            assert lines[-1] == (
                f"(the first {shown} entries, directories first, then by name; "
                f"{500 - shown} more left out to keep this answer short, and more after "
                "them. To find or count files among them, use run_code: glob, os.scandir.)"
            )
            # A small directory is listed whole, with no note.
            whole = call(executor, "list_files", path="dataset/images").text
            assert whole.splitlines()[0] == "dataset/images:"
            assert whole.splitlines()[1].endswith("  train/") and len(whole.splitlines()) == 2
            # 'data/' is 'data', as listings always took it.
            assert call(executor, "list_files", path="dataset/images/").text == whole


def test_a_file_path_ending_in_a_slash_is_refused_everywhere(
    client: Client, local_server: Server
) -> None:
    """'report/' made a FILE named 'report', and the tool answered "Wrote 5 bytes to
    report/."; a later open('report/x.csv') then failed."""
    advice = "'report/' ends in '/', so it names a directory, not a file: give the file's name"
    with contextlib.closing(ToolExecutor(client)) as executor:
        tool = call(executor, "upload_file", path="report/", content="hello")
        assert tool.is_error and advice in tool.text, tool.text
        assert "e.g. 'report/out.csv'" in tool.text
        session = client.get_session(executor.session_id or "")
        with pytest.raises(BadRequestError, match="'results/' ends in '/'") as refused:
            session.upload("results/", b"abc")
        assert refused.value.status == 400
        with httpx.Client(
            base_url=local_server.url,
            headers={"Authorization": f"Bearer {local_server.api_key}"},
            timeout=60,
        ) as http:
            put = http.put(f"/v1/sessions/{session.id}/files/report/", content=b"hello")
            assert put.status_code == 400 and advice in put.json()["error"]["message"]
            assert put.json()["error"]["type"] == "bad_request"
        assert session.list_files().entries == []  # nothing was written
        # The file's name works, and its directory lists with or without the slash.
        ok = call(executor, "upload_file", path="report/out.csv", content="a\n1\n")
        assert not ok.is_error and "report/out.csv" in ok.text
        assert [e.path for e in session.list_files("report/").entries] == ["report/out.csv"]
        opened = call(executor, "run_code", code="open('report/out.csv').read()")
        assert "'a\\n1\\n'" in opened.text
