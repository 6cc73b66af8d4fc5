"""The notebook and the API say what the kernel said, in its order: recorded real-kernel
messages (tests/messages/) and display updates across cells, at the message level."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat

from interpreter.artifacts import ArtifactStore
from interpreter.displays import EarlierDisplays, display_id_of
from interpreter.execution import ExecutionRecorder
from interpreter.handle import ExecutionHandle
from interpreter.models import Execution
from interpreter.outputs import OutputCapture

MESSAGES = Path(__file__).parent.parent / "messages"


def replay(name: str) -> ExecutionRecorder:
    data = json.loads((MESSAGES / f"{name}.json").read_text())
    rec = ExecutionRecorder(data["msg_id"])
    for msg in data["iopub"]:
        rec.feed_iopub(msg)
    rec.feed_reply(data["reply"])
    return rec


def valid(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells.append(cell)
    nbformat.validate(nb)
    return outputs


def test_error_keeps_its_place_before_a_figure_shown_after_it() -> None:
    # `plt.plot([1, 2]); 1/0`: the kernel sends the error, then the inline backend's figure.
    rec = replay("plot_then_error")
    outputs = valid(rec.notebook_outputs())
    assert [o["output_type"] for o in outputs] == ["error", "display_data"]
    assert outputs[0]["ename"] == "ZeroDivisionError"
    assert rec.error is not None and rec.rich_indexes() == [1]


def test_an_error_sent_once_is_recorded_once() -> None:
    outputs = valid(replay("error").notebook_outputs())
    assert [o["output_type"] for o in outputs] == ["error"]


def test_unknown_magic_has_no_second_empty_error() -> None:
    # IPython prints the UsageError on stderr and says it again only in the reply.
    rec = replay("unknown_magic")
    outputs = valid(rec.notebook_outputs())
    assert [(o["output_type"], o.get("name")) for o in outputs] == [("stream", "stderr")]
    assert "UsageError: Line magic function" in outputs[0]["text"]
    assert rec.error is not None and rec.error.ename == "UsageError"  # the API still says it


def test_an_error_only_the_reply_carries_is_still_shown() -> None:
    # The iopub error was lost (a flood): the reply's error, with its traceback, is shown.
    rec = ExecutionRecorder("m")
    rec.feed_reply(
        {"content": {"status": "error", "ename": "E", "evalue": "v", "traceback": ["tb"]}}
    )
    assert [o["output_type"] for o in valid(rec.notebook_outputs())] == ["error"]


async def test_output_metadata_reaches_the_api(tmp_path: Path) -> None:
    rec = replay("retina_plot")
    capture = OutputCapture(ArtifactStore(tmp_path, "s"), inline_bytes=64_000, output_bytes=10**5)
    (index,) = rec.rich_indexes()
    output = await capture.output(rec, index)
    size = output.metadata["image/png"]
    assert set(size) == {"width", "height"} and size["width"] > 0 and size["height"] > 0
    assert [a.mime for a in output.artifacts][:1] == ["image/png"]


# ---------------------------------------------------------------- displays across cells


def msg(msg_type: str, parent: str, content: dict[str, Any]) -> dict[str, Any]:
    return {
        "header": {"msg_type": msg_type},
        "parent_header": {"msg_id": parent},
        "content": content,
    }


def display(parent: str, text: str, display_id: str | None = "d1") -> dict[str, Any]:
    transient = {"display_id": display_id} if display_id else {}
    content = {"data": {"text/plain": text}, "metadata": {}, "transient": transient}
    return msg("display_data", parent, content)


def update(parent: str, text: str, display_id: str = "d1") -> dict[str, Any]:
    content = {
        "data": {"text/plain": text},
        "metadata": {},
        "transient": {"display_id": display_id},
    }
    return msg("update_display_data", parent, content)


async def finished(capture: OutputCapture, msg_id: str, *msgs: dict[str, Any]) -> ExecutionHandle:
    """A finished execution whose cell sent ``msgs``."""
    handle = ExecutionHandle(Execution(id=f"ex_{msg_id}", session_id="s", status="running"), 1, 9)
    rec = ExecutionRecorder(msg_id)
    handle.recorder = rec
    for m in msgs:
        rec.feed_iopub(m)
    rec.feed_reply(msg("execute_reply", msg_id, {"status": "ok", "execution_count": 1}))
    handle.execution.status = "ok"
    await capture.finish(handle.execution, rec, {})
    handle.finish()
    return handle


async def test_a_later_cell_updates_an_earlier_display(tmp_path: Path) -> None:
    capture = OutputCapture(ArtifactStore(tmp_path, "s"), inline_bytes=64_000, output_bytes=10**5)
    displays = EarlierDisplays(capture)
    first = await finished(capture, "c1", display("c1", "Hello"), display("c1", "plain", None))
    displays.remember(first)
    untouched = await finished(capture, "c2", display("c2", "other", "d2"))
    displays.remember(untouched)
    running = ExecutionHandle(Execution(id="ex_c3", session_id="s", status="running"), 3, 9)
    assert await displays.apply(update("c3", "world", "nobody"), running) == []
    ((changed, nb_outputs),) = await displays.apply(update("c3", "world"), running)
    assert changed is first
    assert [o.data["text/plain"] for o in first.execution.outputs] == ["world", "plain"]
    assert first.execution.outputs[0].display_id == "d1"
    assert [o["data"]["text/plain"] for o in valid(nb_outputs)] == ["world", "plain"]
    assert [o.data["text/plain"] for o in untouched.execution.outputs] == ["other"]
    # A new display with the same id in a later cell updates the earlier one too.
    ((changed, _),) = await displays.apply(display("c4", "again"), running)
    assert first.execution.outputs[0].data["text/plain"] == "again"
    # The running cell's own displays are its recorder's business.
    assert await displays.apply(update("c1", "x"), first) == []


async def test_an_updated_display_keeps_its_place_among_the_prints(tmp_path: Path) -> None:
    capture = OutputCapture(ArtifactStore(tmp_path, "s"), inline_bytes=64_000, output_bytes=10**5)
    displays = EarlierDisplays(capture)
    first = await finished(
        capture,
        "c1",
        msg("stream", "c1", {"name": "stdout", "text": "before\n"}),
        display("c1", "Hello"),
        msg("stream", "c1", {"name": "stdout", "text": "after\n"}),
    )
    displays.remember(first)
    (shown,) = first.execution.outputs
    assert shown.after is not None and shown.after.stdout == len("before\n")
    running = ExecutionHandle(Execution(id="ex_c2", session_id="s", status="running"), 2, 9)
    await displays.apply(update("c2", "world"), running)
    (updated,) = first.execution.outputs
    assert updated.data["text/plain"] == "world"
    assert updated.after == shown.after
    assert first.recorder is not None
    (index,) = first.recorder.rich_indexes()
    assert first.api_outputs[index].after == shown.after


def test_display_id_of_reads_only_display_messages() -> None:
    assert display_id_of(update("p", "x", "abc")) == "abc"
    assert display_id_of(display("p", "x", None)) is None
    assert display_id_of(msg("stream", "p", {"transient": {"display_id": "d"}})) is None
    assert display_id_of({"header": None, "content": None}) is None
    assert display_id_of(msg("display_data", "p", {"transient": {"display_id": 7}})) is None
