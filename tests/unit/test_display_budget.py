"""The per-cell rich output budget counts what the cell shows now, not what it showed.

A live plot (``clear_output(wait=True); display(frame)`` per step) or a display updated in
place (``handle.update(frame)``) draws many frames and shows one. The budget
(``rich_limit``) counted every frame drawn, so past it the loop lost its final frame (all
of it with ``clear_output``; a stale one with ``update_display``) and stderr took one
notice per frame dropped. Driven by recorded real-kernel messages (``tests/messages``)
with their values swapped for numbered frames.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import nbformat

from interpreter.artifacts import ArtifactStore
from interpreter.execution import (
    MAX_CELL_METADATA_CHARS,
    MAX_METADATA_CHARS,
    TRACEBACK_CHARS,
    ExecutionRecorder,
    json_size,
)
from interpreter.handle import ExecutionHandle, OutputAdded
from interpreter.models import Execution
from interpreter.outputs import OutputCapture

MESSAGES = Path(__file__).parent.parent / "messages"
#: Characters of each frame's value, and a budget that holds four of them.
FRAME = 10_000
LIMIT = 4 * FRAME + 1_000
FRAMES = 30


def recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MESSAGES / f"{name}.json").read_text())
    return data


def of_type(data: dict[str, Any], msg_type: str) -> dict[str, Any]:
    """The first iopub message of ``msg_type`` in a recording (a deep copy)."""
    msg = next(m for m in data["iopub"] if m["header"]["msg_type"] == msg_type)
    return copy.deepcopy(msg)


def frame_value(step: int) -> str:
    return f"<p>frame {step:04d}</p>".ljust(FRAME, "x")


def display(template: dict[str, Any], step: int, display_id: str | None = None) -> dict[str, Any]:
    """A display_data message of the recording, carrying frame ``step`` as text/html."""
    msg = copy.deepcopy(template)
    msg["content"]["data"] = {"text/plain": f"frame {step}", "text/html": frame_value(step)}
    msg["content"]["transient"] = {"display_id": display_id} if display_id else {}
    return msg


def update(template: dict[str, Any], step: int, display_id: str) -> dict[str, Any]:
    msg = display(template, step, display_id)
    msg["header"]["msg_type"] = "update_display_data"
    return msg


def recorder(name: str) -> tuple[ExecutionRecorder, dict[str, Any]]:
    data = recording(name)
    rec = ExecutionRecorder(data["msg_id"], rich_limit=LIMIT)
    return rec, data


def shown(rec: ExecutionRecorder) -> list[str]:
    return [rec.output(i)["data"].get("text/html", "")[:16] for i in rec.rich_indexes()]


def stderr_of(rec: ExecutionRecorder) -> str:
    return rec.stream_text("stderr")


def finish(rec: ExecutionRecorder, tmp_path: Path) -> tuple[Execution, list[dict[str, Any]]]:
    cap = OutputCapture(
        ArtifactStore(tmp_path / "artifacts", "s_test"), inline_bytes=64_000, output_bytes=100_000
    )
    ex = Execution(id="ex_1", session_id="s_test", status="ok")
    outputs = asyncio.run(cap.finish(ex, rec, {}))
    return ex, outputs


def nb_valid(outputs: list[dict[str, Any]]) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells.append(cell)
    nbformat.validate(nb)


def test_a_clear_output_loop_past_the_budget_keeps_its_last_frame(tmp_path: Path) -> None:
    rec, data = recorder("clear_output_wait")
    plot = recording("plot")
    clear = of_type(data, "clear_output")
    assert clear["content"]["wait"] is True
    for step in range(FRAMES):
        rec.feed_iopub(clear)
        rec.feed_iopub(display(of_type(plot, "display_data"), step))
    rec.feed_reply(data["reply"])
    assert shown(rec) == [frame_value(FRAMES - 1)[:16]]
    assert rec.rich_dropped == 0 and "[output dropped" not in stderr_of(rec)
    # What the cell holds is its one frame: the cleared ones were given back.
    assert FRAME <= rec.rich_chars < 2 * FRAME
    ex, outputs = finish(rec, tmp_path)
    assert not ex.truncated and len(ex.outputs) == 1
    (out,) = [o for o in outputs if o["output_type"] == "display_data"]
    assert out["data"]["text/html"] == frame_value(FRAMES - 1)
    nb_valid(outputs)


def test_an_update_display_loop_past_the_budget_keeps_its_last_frame(tmp_path: Path) -> None:
    rec, data = recorder("update_display")
    template = of_type(data, "display_data")
    display_id = template["content"]["transient"]["display_id"]
    rec.feed_iopub(display(template, 0, display_id))
    for step in range(1, FRAMES):
        rec.feed_iopub(update(template, step, display_id))
    rec.feed_reply(data["reply"])
    assert shown(rec) == [frame_value(FRAMES - 1)[:16]]
    assert rec.rich_dropped == 0 and stderr_of(rec) == ""
    assert FRAME <= rec.rich_chars < 2 * FRAME
    ex, outputs = finish(rec, tmp_path)
    assert not ex.truncated and ex.stderr == ""
    (out,) = [o for o in outputs if o["output_type"] == "display_data"]
    assert out["data"]["text/html"] == frame_value(FRAMES - 1)


def test_a_display_id_shown_again_gives_back_the_values_it_replaces() -> None:
    """``display(x, display_id=d)`` again updates the earlier outputs of ``d``: all of them
    share the new values, counted once."""
    rec, data = recorder("update_display")
    template = of_type(data, "display_data")
    for step in range(FRAMES):
        rec.feed_iopub(display(template, step, "d"))
    assert rec.rich_dropped == 0
    assert shown(rec) == [frame_value(FRAMES - 1)[:16]] * FRAMES
    assert FRAME <= rec.rich_chars < 2 * FRAME


def test_what_is_shown_at_once_is_still_bounded_and_said_once(tmp_path: Path) -> None:
    """Frames that stay (no clear, no display id) still fill the budget; the ones past it
    are dropped, with one notice on stderr that counts them all."""
    rec, data = recorder("plot")
    template = of_type(data, "display_data")
    for step in range(FRAMES):
        rec.feed_iopub(display(template, step))
    rec.feed_reply(data["reply"])
    kept = len(rec.rich_indexes())
    assert 0 < kept < FRAMES and rec.rich_chars <= LIMIT
    said = stderr_of(rec)
    assert said.count("[output dropped") == 1
    ex, outputs = finish(rec, tmp_path)
    assert ex.truncated and ex.stderr.count("[output dropped") == 1
    assert f"{FRAMES - kept} rich outputs" in ex.stderr
    assert f"limit of {LIMIT} characters" in ex.stderr
    streams = [o for o in outputs if o["output_type"] == "stream"]
    assert "".join(o["text"] for o in streams).count("[output dropped") == 1
    assert f"{FRAMES - kept} rich outputs" in "".join(o["text"] for o in streams)
    nb_valid(outputs)


def test_the_event_log_keeps_no_replaced_frame_whole(tmp_path: Path) -> None:
    """The execution's event log (for SSE resumes) kept every frame published as it was,
    while counting each as one small event: a redraw loop's frames were all held there.
    A frame a later one replaced keeps only a note; the last one is whole."""
    rec, data = recorder("update_display")
    template = of_type(data, "display_data")
    display_id = template["content"]["transient"]["display_id"]
    cap = OutputCapture(
        ArtifactStore(tmp_path / "artifacts", "s_test"),
        inline_bytes=64_000,
        output_bytes=100_000,
    )
    handle = ExecutionHandle(
        execution=Execution(id="ex_1", session_id="s_test", status="running"), seq=1, timeout_s=60
    )
    plot = recording("plot")
    clear = of_type(recording("clear_output_wait"), "clear_output")

    async def feed() -> None:
        await cap.publish(handle, rec, rec.feed_iopub(display(template, 0, display_id)))
        for step in range(1, FRAMES):
            await cap.publish(handle, rec, rec.feed_iopub(update(template, step, display_id)))
        for step in range(FRAMES):
            await cap.publish(handle, rec, rec.feed_iopub(clear))
            await cap.publish(
                handle, rec, rec.feed_iopub(display(of_type(plot, "display_data"), step))
            )

    asyncio.run(feed())
    _, queue = handle.watch(0)
    events = [queue.get_nowait() for _ in range(queue.qsize())]
    added = [e.output for e in events if isinstance(e, OutputAdded)]
    assert len(added) == 2 * FRAMES
    held = [sum(len(str(v)) for v in out.data.values()) for out in added]
    assert all(size < 1_000 for size in held[:-1]), held
    assert added[-1].data["text/html"] == frame_value(FRAMES - 1)
    assert [handle.api_outputs[i] for i in rec.rich_indexes()] == [added[-1]]


def small(template: dict[str, Any], step: int) -> dict[str, Any]:
    msg = copy.deepcopy(template)
    msg["content"]["data"] = {"text/plain": str(step)}
    msg["content"]["transient"] = {}
    return msg


def test_outputs_past_the_count_limit_are_dropped_and_said_once(tmp_path: Path) -> None:
    """``for i in range(100_000): display(i)``: values of a few characters, far within the
    characters' budget, held the broker's memory without end (1 GB for 100,000 outputs).
    Past the count limit new ones are dropped, with one notice counting them; a clear
    gives the room back."""
    data = recording("plot")
    rec = ExecutionRecorder(data["msg_id"], outputs_limit=50)
    template = of_type(data, "display_data")
    for step in range(80):
        rec.feed_iopub(small(template, step))
    assert len(rec.rich_indexes()) == 50 and rec.rich_held == 50
    assert stderr_of(rec).count("[output dropped") == 1
    rec.feed_reply(data["reply"])
    ex, outputs = finish(rec, tmp_path)
    assert ex.truncated and ex.stderr.count("[output dropped") == 1
    assert "30 rich outputs; this cell held the broker's limit of 50 outputs" in ex.stderr
    assert [o.data["text/plain"] for o in ex.outputs] == [str(i) for i in range(50)]
    nb_valid(outputs)


def test_a_clear_gives_the_outputs_room_back() -> None:
    data = recording("clear_output_wait")
    plot = recording("plot")
    rec = ExecutionRecorder(data["msg_id"], outputs_limit=10)
    clear = of_type(data, "clear_output")
    template = of_type(plot, "display_data")
    for batch in range(5):
        rec.feed_iopub(clear)
        for step in range(10):
            rec.feed_iopub(small(template, 100 * batch + step))
    assert [rec.output(i)["data"]["text/plain"] for i in rec.rich_indexes()] == [
        str(400 + i) for i in range(10)
    ]
    assert rec.rich_dropped == 0 and "[output dropped" not in stderr_of(rec)


def with_metadata(template: dict[str, Any], step: int, metadata: Any) -> dict[str, Any]:
    msg = small(template, step)
    msg["content"]["metadata"] = metadata
    return msg


def test_metadata_past_its_limit_is_dropped_with_one_notice_and_the_values_kept(
    tmp_path: Path,
) -> None:
    """``publish_display_data({...}, metadata={"blob": "v" * 25_000_000})``, 30 times in
    one cell: metadata was counted by no budget, so the broker held 5.6 GB and wrote a
    750 MB notebook (found by an outside security tester). Metadata past its limit is
    dropped, each output keeping its values, with one notice for all."""
    data = recording("plot")
    rec = ExecutionRecorder(data["msg_id"])
    template = of_type(data, "display_data")
    big = {"blob": "v" * (MAX_METADATA_CHARS + 1)}
    for step in range(30):
        rec.feed_iopub(with_metadata(template, step, big))
    rec.feed_iopub(with_metadata(template, 30, {"image/png": {"width": 640, "height": 480}}))
    rec.feed_reply(data["reply"])
    ex, outputs = finish(rec, tmp_path)
    assert [o.data["text/plain"] for o in ex.outputs] == [str(i) for i in range(31)]
    assert all(o.metadata == {} for o in ex.outputs[:30])
    assert ex.outputs[30].metadata == {"image/png": {"width": 640, "height": 480}}
    assert ex.stderr.count("[output metadata dropped") == 1
    assert f"30 outputs' metadata, each larger than the broker's limit of {MAX_METADATA_CHARS}" in (
        ex.stderr
    )
    assert len(json.dumps(outputs)) < 100_000
    nb_valid(outputs)


def test_metadata_counts_toward_the_cells_rich_budget() -> None:
    """Metadata just under its limit, on many outputs: the characters a cell holds at once
    count it, so it is bounded by ``rich_limit`` as values are."""
    data = recording("plot")
    rec = ExecutionRecorder(data["msg_id"], rich_limit=10 * MAX_METADATA_CHARS)
    template = of_type(data, "display_data")
    meta = {"hint": "m" * (MAX_METADATA_CHARS - 100)}
    for step in range(40):
        rec.feed_iopub(with_metadata(template, step, meta))
    held = len(rec.rich_indexes())
    assert 5 <= held <= 10
    assert rec.rich_chars <= 10 * MAX_METADATA_CHARS
    assert stderr_of(rec).count("[output dropped") == 1


def test_the_metadata_of_all_a_cells_outputs_is_bounded_and_said_once(tmp_path: Path) -> None:
    """A thousand displays of 60,000 characters of metadata each, under the per-output
    limit: 60 MB per cell, and a session kept every cell's (found by an outside security
    tester: the broker grew 120 MB a cell). Past the cell's limit, metadata is dropped, the
    values kept, with one notice."""
    data = recording("plot")
    rec = ExecutionRecorder(data["msg_id"])
    template = of_type(data, "display_data")
    meta = {"a": "m" * 60_000}
    for step in range(1000):
        rec.feed_iopub(with_metadata(template, step, meta))
    rec.feed_reply(data["reply"])
    ex, outputs = finish(rec, tmp_path)
    assert [o.data["text/plain"] for o in ex.outputs] == [str(i) for i in range(1000)]
    kept = [o for o in ex.outputs if o.metadata]
    assert len(kept) == MAX_CELL_METADATA_CHARS // 60_000
    assert ex.stderr.count("[output metadata dropped") == 1
    assert f"{1000 - len(kept)} outputs' metadata, past the broker's limit of" in ex.stderr
    assert len(json.dumps(outputs)) < 2 * MAX_CELL_METADATA_CHARS
    nb_valid(outputs)


def test_a_huge_traceback_keeps_its_ends_within_the_limit(tmp_path: Path) -> None:
    """An error of 300 lines of 99,000 characters each (a kernel may send any): 30 MB per
    cell that no budget counted, kept for the session's life (found by an outside security
    tester: the broker grew 60 MB a cell, the notebook past its budget to 237 MB). The
    traceback keeps its first and last lines within its limit, and says what it left out."""
    data = recording("error")
    rec = ExecutionRecorder(data["msg_id"])
    msg = of_type(data, "error")
    lines = [f"{i:03d}" + "y" * 99_000 for i in range(299)] + ["E: the last line"]
    msg["content"].update(ename="E", evalue="v", traceback=lines)
    rec.feed_iopub(msg)
    assert rec.error is not None and rec.error_cut
    kept = rec.error.traceback
    assert sum(map(len, kept)) <= TRACEBACK_CHARS + 200
    assert kept[0].startswith("000") and kept[-1] == "E: the last line"
    (notice,) = [t for t in kept if t.startswith("[... ")]
    gone = 300 - (len(kept) - 1)
    assert (
        notice.startswith(f"[... {gone} traceback lines, ") and "omitted by the service" in notice
    )
    rec.feed_reply(data["reply"])
    ex, outputs = finish(rec, tmp_path)
    assert ex.truncated
    assert len(json.dumps(outputs)) < 2 * TRACEBACK_CHARS
    nb_valid(outputs)


def test_json_size_stops_early_past_its_limit() -> None:
    value = {"a": ["x" * 100, 1, 2.5, None, True, {"b": "y"}]}
    exact = len(json.dumps(value, separators=(",", ":")))
    assert exact <= json_size(value) <= exact + 10
    deep: Any = ["z" * 1000 for _ in range(10_000)]
    assert 5000 < json_size(deep, 5000) < 10_000
