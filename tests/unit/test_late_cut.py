"""Late output of a cell whose stdout was cut (head, tail and a notice naming the full-text
artifact): the execution keeps the form of a cut cell's.

A cell printed 320 KB, then a background thread printed one more line after it ended. The
execution's stdout was cut again from the already cut text: half the budget, a notice
counting about 50,000 characters omitted instead of 220,000, and the artifact URL replaced
by a literal ``...``; the notebook kept another form. Driven by a recorded real-kernel
stream message (``tests/messages``) with its text swapped.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
from pathlib import Path
from typing import Any

import nbformat

from interpreter.artifacts import ArtifactStore
from interpreter.execution import ExecutionRecorder
from interpreter.models import Execution
from interpreter.outputs import OutputCapture
from interpreter.overwrite import OverwrittenText

MESSAGES = Path(__file__).parent.parent / "messages"
BUDGET = 10_000
LATE = "late line\n"
NOTICE = re.compile(r"\[\.\.\. (\d+) characters omitted; ([^\]]*)\]")


def recording() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MESSAGES / "stream_interleaved.json").read_text())
    return data


def stream(name: str, text: str) -> dict[str, Any]:
    """A stream message of the recording carrying ``text`` on ``name``."""
    data = recording()
    msg = next(m for m in data["iopub"] if m["header"]["msg_type"] == "stream")
    msg = copy.deepcopy(msg)
    msg["content"] = {"name": name, "text": text}
    return msg


def lines(count: int) -> str:
    return "".join(f"{i:07d}\n" for i in range(count))


def setup(
    tmp_path: Path, printed: dict[str, str], **limits: Any
) -> tuple[OutputCapture, ExecutionRecorder, Execution, list[dict[str, Any]]]:
    data = recording()
    rec = ExecutionRecorder(data["msg_id"], **limits)
    for name, text in printed.items():
        rec.feed_iopub(stream(name, text))
    rec.feed_reply(data["reply"])
    cap = OutputCapture(
        ArtifactStore(tmp_path / "artifacts", "s_test"), inline_bytes=64_000, output_bytes=BUDGET
    )
    ex = Execution(id="ex_1", session_id="s_test", status="ok")
    nb = asyncio.run(cap.finish(ex, rec, {}))
    return cap, rec, ex, nb


def late(cap: OutputCapture, rec: ExecutionRecorder, ex: Execution, name: str, text: str) -> Any:
    """What the session does with late output: feed it, then write the cell down
    (``routing._write_late``)."""
    rec.feed_iopub(stream(name, text))
    cap.late_streams(ex, rec)
    return cap.notebook_form(ex, rec)


def stream_texts(outputs: list[dict[str, Any]], name: str) -> str:
    return "".join(o["text"] for o in outputs if o.get("name") == name)


def nb_valid(outputs: list[dict[str, Any]]) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells.append(cell)
    nbformat.validate(nb)


def ends(cut: str, whole: str) -> tuple[str, str]:
    """The head and tail a cut text keeps of ``whole``, checked: each is of about half
    the budget, made of whole lines of it, and the notice counts every character between."""
    match = NOTICE.search(cut)
    assert match is not None, cut[:200]
    head, tail = cut[: match.start() - 1], cut[match.end() + 1 :]
    assert whole.startswith(head) and whole.endswith(tail)
    assert BUDGET // 2 - BUDGET // 8 <= len(head) <= BUDGET // 2
    assert BUDGET // 2 - BUDGET // 8 <= len(tail) <= BUDGET // 2
    # Whole lines on both sides of the notice, never "lin" (found by an outside tester).
    assert head.endswith("\n") or whole[len(head)] == "\n"
    assert tail.startswith("\n") or whole[-len(tail) - 1] == "\n"
    assert int(match.group(1)) == len(whole) - len(head) - len(tail)
    return head, tail


def test_late_output_of_a_cut_cell_keeps_the_cut_form(tmp_path: Path) -> None:
    printed = lines(4_000)  # 32,000 characters
    cap, rec, ex, nb = setup(tmp_path, {"stdout": printed})
    (artifact,) = ex.artifacts
    assert cap.artifacts.open(artifact.id)[0].read_text() == printed
    finished = ex.stdout
    ((_, where),) = NOTICE.findall(finished)
    ends(finished, printed)
    assert artifact.url in where
    assert stream_texts(nb, "stdout") == finished

    nb = late(cap, rec, ex, "stdout", LATE)
    ((_, where),) = NOTICE.findall(ex.stdout)
    # Every character cut is counted, the artifact is still named, and it is said that
    # the late text is not in it; the late text ends the tail.
    ends(ex.stdout, printed + LATE)
    assert artifact.url in where and "after the cell finished" in where
    assert "the artifact ..." not in ex.stdout
    assert ex.stdout.endswith(LATE)
    assert abs(len(ex.stdout) - len(finished)) < 100
    assert ex.truncated and ex.artifacts == [artifact]
    # The notebook says the same.
    assert stream_texts(nb, "stdout") == ex.stdout
    nb_valid(nb)


def test_more_late_output_keeps_one_notice_with_the_right_count(tmp_path: Path) -> None:
    printed = lines(4_000)
    cap, rec, ex, _ = setup(tmp_path, {"stdout": printed})
    more = ""
    for step in range(5):
        text = f"late {step}\n" * 300
        more += text
        nb = late(cap, rec, ex, "stdout", text)
        whole = printed + more
        ends(ex.stdout, whole)
        assert stream_texts(nb, "stdout") == ex.stdout
        assert len(NOTICE.findall(stream_texts(nb, "stdout"))) == 1


def test_late_output_past_the_budget_of_an_uncut_cell_names_no_artifact(tmp_path: Path) -> None:
    cap, rec, ex, _ = setup(tmp_path, {"stdout": "before\n"})
    assert not ex.truncated and ex.artifacts == []
    text = lines(2_000)
    nb = late(cap, rec, ex, "stdout", text)
    ((_, where),) = NOTICE.findall(ex.stdout)
    ends(ex.stdout, "before\n" + text)
    assert "no artifact" in where and "the artifact ..." not in ex.stdout
    assert ex.truncated
    assert stream_texts(nb, "stdout") == ex.stdout


def whole_count(text: str) -> int:
    """Characters a cut text stands for: those kept and those its notice counts."""
    match = NOTICE.search(text)
    assert match is not None, text[:200]
    return len(text) - len(match.group(0)) - 2 + int(match.group(1))


def test_late_output_keeps_both_streams_shared_as_a_finished_cell(tmp_path: Path) -> None:
    out, err = lines(3_000), "E" * 6_000 + "\n"
    cap, rec, ex, _ = setup(tmp_path, {"stdout": out, "stderr": err})
    assert whole_count(ex.stdout) == len(out) and whole_count(ex.stderr) == len(err)
    nb = late(cap, rec, ex, "stderr", LATE)
    assert whole_count(ex.stdout) == len(out)
    assert whole_count(ex.stderr) == len(err) + len(LATE)
    assert len(ex.stdout) + len(ex.stderr) < BUDGET + 500
    assert ex.stderr.endswith(LATE) and ex.stdout.endswith(out[-1000:])
    (_, where_out), (_, where_err) = NOTICE.findall(ex.stdout + ex.stderr)
    assert "after the cell finished" not in where_out and "after the cell finished" in where_err
    assert [a.url in w for a, w in zip(ex.artifacts, (where_out, where_err), strict=True)] == [
        True,
        True,
    ]
    assert stream_texts(nb, "stderr").endswith(LATE)
    nb_valid(nb)


def test_a_cell_past_its_in_memory_limit_keeps_its_text_after_late_output(
    tmp_path: Path,
) -> None:
    """Past the in-memory limit a finished cell takes no more text (it is dropped and
    said): its stdout and stderr stay as finished, the notice of the drop added."""
    cap, rec, ex, _ = setup(tmp_path, {"stdout": lines(4_000)}, hard_limit=20_000)
    finished_out, finished_err = ex.stdout, ex.stderr
    assert rec.overflowing and ex.truncated
    rec.feed_iopub(stream("stdout", LATE))
    assert rec.streams.dropped > 0
    # What routing._late_output does for it.
    rec.streams.dropped_late = True
    said = "\n[output limit reached: text printed after the cell ended ... was dropped]\n"
    rec.streams.notice += said
    cap.late_streams(ex, rec)
    assert ex.stdout == finished_out
    assert ex.stderr == finished_err + said


def test_a_tail_kept_after_a_cut_is_still_overwritten_by_a_carriage_return() -> None:
    text = OverwrittenText("a" * 50 + "\n" + "progress 1")
    assert text.keep_last(11) == 50
    assert text.text == "\nprogress 1"
    text.feed("\rprogress 2")
    assert text.text == "\nprogress 2"
    text = OverwrittenText("line one\nbar 10%\r")
    assert text.keep_last(4) == len("line one\nbar 10%") - 4
    text.feed("bar 99%")
    assert text.text == "bar 99%"
