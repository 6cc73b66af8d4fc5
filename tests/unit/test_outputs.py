"""Recorder state to API outputs and notebook outputs, driven by recorded real-kernel messages."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from interpreter.artifacts import ArtifactStore
from interpreter.client.render import render_execution
from interpreter.execution import ExecutionRecorder
from interpreter.models import ErrorInfo, Execution, Output
from interpreter.outputs import (
    MIN_STREAM_SHARE,
    OutputCapture,
    Placement,
    conclude,
    placement,
    stream_shares,
)
from interpreter.overwrite import OverwrittenText
from interpreter.restore_cells import layout_of, outputs_of

MESSAGES = Path(__file__).parent.parent / "messages"
RECORDED = sorted(p.stem for p in MESSAGES.glob("*.json"))


def recorded(name: str) -> ExecutionRecorder:
    data = json.loads((MESSAGES / f"{name}.json").read_text())
    rec = ExecutionRecorder(data["msg_id"])
    for msg in data["iopub"]:
        rec.feed_iopub(msg)
    rec.feed_reply(data["reply"])
    return rec


def capture(tmp_path: Path, *, inline: int = 10_000, budget: int = 100_000) -> OutputCapture:
    store = ArtifactStore(tmp_path / "artifacts", "s_test")
    return OutputCapture(store, inline_bytes=inline, output_bytes=budget)


def finish(
    cap: OutputCapture, rec: ExecutionRecorder, **fields: Any
) -> tuple[Execution, list[Any]]:
    ex = Execution(id="ex_1", session_id="s_test", status=fields.pop("status", "ok"), **fields)
    return ex, run(cap.finish(ex, rec, {}))


def run(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


def nb_valid(outputs: list[dict[str, Any]]) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells.append(cell)
    nbformat.validate(nb)


@pytest.mark.parametrize("name", RECORDED)
def test_every_recording_gives_valid_notebook_outputs_and_one_api_output_per_rich_one(
    tmp_path: Path, name: str
) -> None:
    rec = recorded(name)
    ex, nb_outputs = finish(capture(tmp_path), rec)
    nb_valid(nb_outputs)
    assert len(ex.outputs) == len(rec.rich_indexes())
    assert ex.stdout == rec.stream_text("stdout") and ex.stderr == rec.stream_text("stderr")
    assert not ex.truncated and ex.artifacts == []
    for out in ex.outputs:
        # Images never travel inline; text forms always do.
        assert not any(m.startswith("image/") for m in out.data)
        assert "text/plain" in out.data


def test_a_plot_goes_to_an_artifact_with_its_decoded_bytes(tmp_path: Path) -> None:
    rec = recorded("plot")
    ex, _ = finish(capture(tmp_path), rec)
    (out,) = ex.outputs
    png = rec.output(rec.rich_indexes()[0])["data"]["image/png"]
    refs = {ref.mime: ref for ref in out.artifacts}
    assert set(refs) == {"image/png"}
    path = tmp_path / "artifacts" / refs["image/png"].id
    assert path.read_bytes() == base64.b64decode(png)
    assert refs["image/png"].url == f"/v1/sessions/s_test/artifacts/{refs['image/png'].id}"
    # The chart description is small JSON: inline.
    assert "application/vnd.chart+json" in out.data


def test_the_kernel_error_is_kept_without_colour(tmp_path: Path) -> None:
    ex, nb_outputs = finish(capture(tmp_path), recorded("error"), status="error")
    assert ex.error is not None and ex.error.ename
    assert not any("\x1b[" in line for line in ex.error.traceback)
    assert [o["output_type"] for o in nb_outputs] == ["error"]


def test_a_cut_error_message_is_said_and_the_model_text_keeps_to_max_chars(
    tmp_path: Path,
) -> None:
    # ``raise ValueError('y' * 300000)``: the message, and the traceback's last line.
    message = "bad value: " + "y" * 300_000
    rec = ExecutionRecorder("m")
    rec.feed_iopub(
        {
            "header": {"msg_type": "error"},
            "content": {
                "ename": "ValueError",
                "evalue": message,
                "traceback": ["Traceback", "  File x, line 1", f"ValueError: {message}"],
            },
        }
    )
    rec.feed_reply({"content": {"status": "error", "execution_count": 1}})
    ex, nb_outputs = finish(capture(tmp_path), rec, status="error")
    assert ex.error is not None and ex.truncated
    assert ex.error.evalue.startswith("bad value: yyy") and ex.error.evalue.endswith("yyy")
    assert "characters of this error text omitted by the service" in ex.error.evalue
    assert len(ex.error.evalue) < 100_200 and len(ex.error.traceback[-1]) < 100_200
    blocks = render_execution(ex, limit=20_000)
    assert sum(len(b) for b in blocks) < 21_000
    assert "error: ValueError: bad value: yyy" in blocks[-1] and "  File x, line 1" in blocks[-1]
    assert "characters omitted" in blocks[-1]
    nb_valid(nb_outputs)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ("timeout", "timeout"),
        ("kernel_died", "oom_killed"),
        ("interrupted", "restarted"),
        ("interrupted", "session_closed"),
        ("interrupted", "broker_shutdown"),
    ],
)
def test_a_broker_error_replaces_the_kernels_in_the_notebook(
    tmp_path: Path, status: str, reason: str
) -> None:
    """The cell's last output is the broker's error, whose traceback (all that JupyterLab
    and nbconvert show of it) ends with what the broker did: it was the kernel's alone (a
    bare KeyboardInterrupt for a timeout, nothing for a death), and a restart on request
    had no error output at all."""
    error = ErrorInfo(ename="ExecutionTimeout", evalue="too slow", traceback=["tb"])
    ex, nb_outputs = finish(
        capture(tmp_path), recorded("error"), status=status, reason=reason, error=error
    )
    assert ex.error == error  # the API's error is as it was
    errors = [o for o in nb_outputs if o["output_type"] == "error"]
    assert errors == [
        {
            "output_type": "error",
            "ename": "ExecutionTimeout",
            "evalue": "too slow",
            "traceback": ["tb", "ExecutionTimeout: too slow"],
        }
    ]
    assert nb_outputs[-1] is errors[0]
    nb_valid(nb_outputs)


def test_a_broker_error_without_a_kernel_traceback_still_has_one_line(tmp_path: Path) -> None:
    error = ErrorInfo(ename="KernelDied", evalue="The kernel died (exit:1).")
    rec = ExecutionRecorder("m")
    _, nb_outputs = finish(
        capture(tmp_path), rec, status="kernel_died", reason="exit:1", error=error
    )
    assert nb_outputs == [
        {
            "output_type": "error",
            "ename": "KernelDied",
            "evalue": "The kernel died (exit:1).",
            "traceback": ["KernelDied: The kernel died (exit:1)."],
        }
    ]
    nb_valid(nb_outputs)


def test_streams_over_the_budget_are_cut_and_kept_whole_as_artifacts(tmp_path: Path) -> None:
    rec = ExecutionRecorder("m1")
    big_out, big_err = "o" * 30_000, "e" * 10_000
    for name, text in (("stdout", big_out), ("stderr", big_err)):
        rec.feed_iopub(
            {
                "header": {"msg_type": "stream"},
                "parent_header": {"msg_id": "m1"},
                "content": {"name": name, "text": text},
            }
        )
    ex, _ = finish(capture(tmp_path, budget=8_000), rec)
    assert ex.truncated
    stored = sorted((tmp_path / "artifacts" / ref.id).read_text() for ref in ex.artifacts)
    assert stored == sorted([big_out, big_err])
    share_out, share_err = stream_shares(30_000, 10_000, 8_000)
    assert len(ex.stdout) <= share_out + 200 and len(ex.stderr) <= share_err + 200
    assert len(ex.stdout) > len(ex.stderr)


def test_a_large_text_result_is_stored_whole_and_cut_inline(tmp_path: Path) -> None:
    rec = ExecutionRecorder("m1")
    text = "x" * 5_000
    rec.feed_iopub(
        {
            "header": {"msg_type": "execute_result"},
            "parent_header": {"msg_id": "m1"},
            "content": {
                "data": {"text/plain": text, "text/html": "<b>" + text + "</b>"},
                "metadata": {},
                "execution_count": 1,
            },
        }
    )
    out: Output = run(capture(tmp_path, inline=1_000).output(rec, rec.rich_indexes()[0]))
    assert {ref.mime for ref in out.artifacts} == {"text/plain", "text/html"}
    assert set(out.data) == {"text/plain"} and len(out.data["text/plain"]) < 1_200


@pytest.mark.parametrize(
    ("mime", "value", "where"),
    [
        ("image/png", "iVBOR", Placement.ARTIFACT),
        ("image/svg+xml", "<svg/>", Placement.ARTIFACT),
        ("application/pdf", "JVBER", Placement.ARTIFACT),
        ("text/plain", "short", Placement.INLINE),
        ("text/plain", "x" * 101, Placement.BOTH),
        ("text/html", "<p>short</p>", Placement.INLINE),
        ("text/html", "x" * 101, Placement.ARTIFACT),
        ("application/json", {"a": 1}, Placement.INLINE),
        ("application/json", {"a": "x" * 100}, Placement.ARTIFACT),
        ("application/vnd.dataframe+json", {"rows": ["x" * 500]}, Placement.INLINE),
    ],
)
def test_placement(mime: str, value: object, where: Placement) -> None:
    assert placement(mime, value, inline_limit=100) is where


@pytest.mark.parametrize(
    ("out", "err", "limit", "expected"),
    [
        (9_000, 1_000, 5_000, (4_500, MIN_STREAM_SHARE)),
        (1_000, 9_000, 5_000, (MIN_STREAM_SHARE, 4_000)),
        (5_000, 5_000, 6_000, (3_000, 3_000)),
        (0, 50_000, 6_000, (MIN_STREAM_SHARE, 5_000)),
    ],
)
def test_stream_shares(out: int, err: int, limit: int, expected: tuple[int, int]) -> None:
    assert stream_shares(out, err, limit) == expected


def test_late_stream_output_updates_a_finished_execution(tmp_path: Path) -> None:
    cap = capture(tmp_path, budget=2_000)
    rec = recorded("stream_interleaved")
    ex, _ = finish(cap, rec)
    rec.feed_iopub(
        {
            "header": {"msg_type": "stream"},
            "parent_header": {"msg_id": rec.msg_id},
            "content": {"name": "stdout", "text": "late\n" * 1000},
        }
    )
    nb_outputs = cap.late_streams(ex, rec)
    # Cut as a finished cell's text is, within the same budget (it was cut again to half
    # of it, and its notice lost its artifact).
    assert ex.truncated and ex.stdout.startswith("a\nc\nlate\n") and len(ex.stdout) < 2_300
    nb_valid(nb_outputs)


def ended(name: str) -> ExecutionRecorder:
    """A recorder fed a recording, or nothing at all (``none``: the kernel never answered);
    ``NAME/iopub``: the recording's iopub alone (its reply never arrived)."""
    if name == "none":
        return ExecutionRecorder("m0")
    name, _, part = name.partition("/")
    if part != "iopub":
        return recorded(name)
    data = json.loads((MESSAGES / f"{name}.json").read_text())
    rec = ExecutionRecorder(data["msg_id"])
    for msg in data["iopub"]:
        rec.feed_iopub(msg)
    return rec


@pytest.mark.parametrize(
    ("recording", "ending", "state_lost", "interrupted", "expected"),
    [
        ("execute_result", "done", False, False, ("ok", None, False, None)),
        ("error", "done", False, False, ("error", None, False, None)),
        ("error", "done", False, True, ("interrupted", "interrupted", False, None)),
        ("execute_result", "done", False, True, ("ok", None, False, None)),
        ("none", "timeout", False, False, ("timeout", "timeout", False, "ExecutionTimeout")),
        ("none", "timeout", True, False, ("timeout", "timeout", True, "ExecutionTimeout")),
        ("error", "died", False, False, ("kernel_died", "signal:9", True, "KernelDied")),
        ("none", "restarted", False, True, ("interrupted", "restarted", True, "KernelRestarted")),
        # An idle without its reply (waiting.py gives up on the reply): what iopub said.
        ("execute_result/iopub", "done", False, False, ("ok", None, False, None)),
        ("error/iopub", "done", False, False, ("error", None, False, None)),
        # Interrupted with neither reply nor traceback: the broker says it was interrupted.
        (
            "execute_result/iopub",
            "done",
            False,
            True,
            ("interrupted", "interrupted", False, "KeyboardInterrupt"),
        ),
        ("none", "done", False, True, ("interrupted", "interrupted", False, "KeyboardInterrupt")),
    ],
)
def test_conclude(
    recording: str,
    ending: str,
    state_lost: bool,
    interrupted: bool,
    expected: tuple[str, str | None, bool, str | None],
) -> None:
    rec = ended(recording)
    ex = Execution(id="ex_1", session_id="s", status="running")
    conclude(
        ex,
        rec,
        ending=ending,
        reason="signal:9" if ending == "died" else None,
        state_lost=state_lost,
        interrupted=interrupted,
        timeout_s=2.5,
    )
    status, reason, lost, ename = expected
    assert (ex.status, ex.reason, ex.state_lost) == (status, reason, lost)
    assert (ex.error.ename if ex.error else None) == ename
    if ename == "ExecutionTimeout":
        assert "timeout_s=2.5" in ex.error.evalue  # type: ignore[union-attr]
        assert ("state was lost" in ex.error.evalue) is state_lost  # type: ignore[union-attr]
    if ename == "KeyboardInterrupt":
        assert "no traceback" in ex.error.evalue  # type: ignore[union-attr]
    if ename == "KernelDied":
        # The broker's error keeps what the kernel had sent of its traceback.
        assert ex.error.traceback == rec.error.traceback  # type: ignore[union-attr]
        assert "signal:9" in ex.error.evalue  # type: ignore[union-attr]


def test_exit_restarts_and_says_state_was_lost() -> None:
    rec = ExecutionRecorder("m1")
    rec.feed_reply(
        {
            "header": {"msg_type": "execute_reply"},
            "parent_header": {"msg_id": "m1"},
            "content": {
                "status": "ok",
                "execution_count": 1,
                "payload": [{"source": "ask_exit", "keepkernel": False}],
            },
        }
    )
    assert rec.asked_exit
    ex = Execution(id="ex_1", session_id="s", status="running")
    conclude(ex, rec, ending="done", reason=None, state_lost=False, interrupted=False, timeout_s=1)
    assert (ex.status, ex.reason, ex.state_lost, ex.error) == ("ok", "exit", True, None)


def test_finishing_a_cell_does_not_read_its_text_through_the_redraw_rules_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker's work per cell (issue 10): each chunk's ``\\r`` and ``\\b`` are applied
    once, as it comes. Finishing the cell joins the kept text; it used to read it through
    the redraw rules three more times (stdout, stderr, the outputs' places), which doubled
    the broker's CPU for a 10,000-line print."""
    rec = ExecutionRecorder("m")
    lines = "".join(f"line {i}\n" for i in range(10_000))
    for name, text in (("stdout", lines), ("stderr", "careful\n")):
        rec.feed_iopub({"header": {"msg_type": "stream"}, "content": {"name": name, "text": text}})
        content = {"data": {"text/plain": name}, "metadata": {}}
        rec.feed_iopub({"header": {"msg_type": "display_data"}, "content": content})
    fed: list[int] = []
    feed = OverwrittenText.feed

    def counted(self: OverwrittenText, text: str) -> None:
        fed.append(len(text))
        feed(self, text)

    monkeypatch.setattr(OverwrittenText, "feed", counted)
    ex, _ = finish(capture(tmp_path, budget=1 << 20), rec)
    assert ex.stdout == lines and ex.stderr == "careful\n"
    assert [o.after.model_dump() if o.after else None for o in ex.outputs] == [
        {"stdout": len(lines), "stderr": 0},
        {"stdout": len(lines), "stderr": len("careful\n")},
    ]
    assert sum(fed) == 0


def test_an_interrupt_the_kernel_sent_no_traceback_for_ends_its_notebook_cell(
    tmp_path: Path,
) -> None:
    """A client's interrupt that reached ipykernel outside the cell's code: no reply, no
    traceback, and the broker's own ``KeyboardInterrupt`` in the API. The notebook cell
    showed no error at all (found by a helper writing the notebook-endings tests); it
    ends with the broker's error, as a cell the broker ended does, and a cell written
    back from the record takes the same form."""
    data = json.loads((MESSAGES / "stream_interleaved.json").read_text())
    rec = ExecutionRecorder(data["msg_id"])
    for msg in data["iopub"]:
        rec.feed_iopub(msg)  # its output, and no reply
    ex = Execution(id="ex_1", session_id="s_test", status="running")
    conclude(ex, rec, ending="done", reason=None, state_lost=False, interrupted=True, timeout_s=30)
    assert (ex.status, ex.reason) == ("interrupted", "interrupted")
    assert ex.error is not None and ex.error.traceback == []
    nb_outputs = run(capture(tmp_path).finish(ex, rec, {}))
    last = nb_outputs[-1]
    assert last["output_type"] == "error" and last["ename"] == "KeyboardInterrupt"
    assert last["traceback"] == [f"KeyboardInterrupt: {ex.error.evalue}"]
    assert [o["output_type"] for o in nb_outputs].count("error") == 1
    nb_valid(nb_outputs)
    written_back = outputs_of(ex, tmp_path, layout_of(nb_outputs))
    assert written_back[-1] == last
    # Brokers before wrote no error output for it, and their cells come back so.
    assert [o["output_type"] for o in outputs_of(ex, tmp_path, older=True)].count("error") == 0
