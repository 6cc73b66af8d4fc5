"""The message translator, driven by recorded real-kernel messages and by hostile ones."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from interpreter.execution import (
    ClearEvent,
    ErrorEvent,
    ExecutionRecorder,
    RichEvent,
    StreamEvent,
    clean_json,
    cut_middle,
    strip_ansi,
)

MESSAGES = Path(__file__).parent.parent / "messages"


def replay(name: str, **kwargs: Any) -> tuple[ExecutionRecorder, list[Any]]:
    data = json.loads((MESSAGES / f"{name}.json").read_text())
    rec = ExecutionRecorder(data["msg_id"], **kwargs)
    events: list[Any] = []
    for msg in data["iopub"]:
        events += rec.feed_iopub(msg)
    events += rec.feed_reply(data["reply"])
    return rec, events


def nb_valid(outputs: list[dict[str, Any]]) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells.append(cell)
    nbformat.validate(nb)


def test_stream_interleaving_keeps_order_and_names() -> None:
    rec, events = replay("stream_interleaved")
    data = json.loads((MESSAGES / "stream_interleaved.json").read_text())
    recorded = [
        (m["content"]["name"], m["content"]["text"])
        for m in data["iopub"]
        if m["header"]["msg_type"] == "stream"
    ]
    assert rec.done and rec.reply_status == "ok"
    assert [(e.name, e.text) for e in events if isinstance(e, StreamEvent)] == recorded
    outputs = rec.notebook_outputs()
    assert [(o["name"], o["text"]) for o in outputs] == recorded
    assert rec.stream_text("stdout") == "a\nc\n" and rec.stream_text("stderr") == "b\n"
    nb_valid(outputs)


def test_execute_result_and_count() -> None:
    rec, events = replay("execute_result")
    assert rec.execution_count == 1
    [idx] = rec.rich_indexes()
    assert rec.output(idx)["data"]["text/plain"] == "42"
    assert rec.output(idx)["execution_count"] == 1
    assert events == [RichEvent(idx)]
    nb_valid(rec.notebook_outputs())


def test_error_is_captured_without_ansi() -> None:
    rec, events = replay("error")
    assert rec.reply_status == "error"
    [err] = [e for e in events if isinstance(e, ErrorEvent)]
    assert (err.ename, err.evalue) == ("ValueError", "bad value")
    assert all("\x1b" not in line for line in err.traceback)
    assert rec.notebook_outputs()[-1]["output_type"] == "error"
    nb_valid(rec.notebook_outputs())


def test_clear_output_wait_keeps_only_the_last_frame() -> None:
    rec, events = replay("clear_output_wait")
    assert rec.stream_text("stdout") == "tick 2\n"
    assert sum(isinstance(e, ClearEvent) for e in events) == 3
    assert rec.notebook_outputs() == [
        {"output_type": "stream", "name": "stdout", "text": "tick 2\n"}
    ]


def test_clear_output_now() -> None:
    rec, _ = replay("clear_output_now")
    assert rec.stream_text("stdout") == "kept\n"


def test_update_display_replaces_in_place() -> None:
    rec, events = replay("update_display")
    texts = [rec.output(i)["data"]["text/plain"] for i in rec.rich_indexes()]
    assert texts == ["'v2'", "'other'"]
    assert RichEvent(0, updated=True) in events
    nb_valid(rec.notebook_outputs())
    assert all(not k.startswith("_") for o in rec.notebook_outputs() for k in o)


def test_plot_carries_png_and_chart() -> None:
    rec, _ = replay("plot")
    [idx] = rec.rich_indexes()
    data = rec.output(idx)["data"]
    assert {"image/png", "application/vnd.chart+json", "text/plain"} <= set(data)
    assert "Bars" in json.dumps(data["application/vnd.chart+json"])


def test_messages_of_other_requests_change_nothing() -> None:
    data = json.loads((MESSAGES / "stream_interleaved.json").read_text())
    rec = ExecutionRecorder("some-other-id")
    # The session routes by parent id; the recorder itself also ignores unknown types.
    for msg in data["iopub"]:
        bad = copy.deepcopy(msg)
        bad["header"]["msg_type"] = "comm_open"
        assert rec.feed_iopub(bad) == []
    assert rec.items == [] and not rec.done


@pytest.mark.parametrize(
    "msg",
    [
        {"header": {"msg_type": "stream"}, "content": {"name": "stdin", "text": "x"}},
        {"header": {"msg_type": "stream"}, "content": "not a dict"},
        {"header": None, "content": {}},
        {"header": {"msg_type": "display_data"}, "content": {"data": "nope"}},
        {
            "header": {"msg_type": "display_data"},
            "content": {"data": {"x/y": 1}, "transient": None},
        },
        {
            "header": {"msg_type": "update_display_data"},
            "content": {"data": {"text/plain": "u"}, "transient": {"display_id": "missing"}},
        },
        {"header": {"msg_type": "execute_input"}, "content": {"execution_count": True}},
        {"header": {"msg_type": "error"}, "content": {"ename": 5, "traceback": "nope"}},
    ],
)
def test_hostile_messages_never_raise(msg: dict[str, Any]) -> None:
    rec = ExecutionRecorder("m")
    rec.feed_iopub(msg)
    rec.feed_reply({"content": "garbage"})
    json.dumps(rec.notebook_outputs(), allow_nan=False)


def test_sanitises_nan_surrogates_and_nul() -> None:
    rec = ExecutionRecorder("m")
    rec.feed_iopub(
        {
            "header": {"msg_type": "display_data"},
            "content": {
                "data": {
                    "application/json": {"v": float("nan"), "s": "a\ud800b"},
                    "text/plain": "x\x00y",
                },
            },
        }
    )
    rec.feed_iopub(
        {"header": {"msg_type": "stream"}, "content": {"name": "stdout", "text": "\ud83d!"}}
    )
    out = rec.notebook_outputs()
    text = json.dumps(out, allow_nan=False)
    text.encode("utf-8")
    assert out[0]["data"]["application/json"]["v"] is None
    assert "\x00" not in out[0]["data"]["text/plain"]


def test_stream_hard_limit_counts_what_it_drops() -> None:
    rec = ExecutionRecorder("m", hard_limit=10)
    for _ in range(5):
        rec.feed_iopub(
            {"header": {"msg_type": "stream"}, "content": {"name": "stdout", "text": "abcd"}}
        )
    assert rec.stream_text("stdout") == "abcdabcdab"
    assert rec.streams.dropped == 10 and rec.streams.seen == 20


def test_completion_needs_reply_and_idle() -> None:
    rec = ExecutionRecorder("m")
    rec.feed_iopub({"header": {"msg_type": "status"}, "content": {"execution_state": "idle"}})
    assert not rec.done
    rec.feed_reply({"content": {"status": "ok", "execution_count": 3}})
    assert rec.done and rec.execution_count == 3


def test_helpers() -> None:
    assert strip_ansi("\x1b[31mred\x1b[0m") == "red"
    assert clean_json([float("inf"), {"a": (1, 2)}]) == [None, {"a": [1, 2]}]
    cut = cut_middle("a" * 50 + "b" * 50, 20)
    assert cut.startswith("a" * 10) and cut.endswith("b" * 10) and "80 characters omitted" in cut
    assert cut_middle("short", 20) == "short"
    assert rec_asked_exit()


def rec_asked_exit() -> bool:
    rec = ExecutionRecorder("m")
    rec.feed_reply({"content": {"status": "ok", "payload": [{"source": "ask_exit"}]}})
    return rec.asked_exit


def test_a_rich_value_over_the_size_limit_is_dropped_with_a_notice() -> None:
    """A figure whose PNG is over 16 M characters (a 14 MB image) lost its image with only
    ``truncated`` to show for it; the cell now says on stderr what was dropped, its size
    and the limit, in the result, the stream and the notebook."""
    from interpreter.execution import MAX_RICH_VALUE_CHARS

    data = json.loads((MESSAGES / "plot.json").read_text())
    rec = ExecutionRecorder(data["msg_id"])
    events: list[Any] = []
    for msg in data["iopub"]:
        if msg["header"]["msg_type"] == "display_data" and "image/png" in msg["content"]["data"]:
            msg = copy.deepcopy(msg)
            msg["content"]["data"]["image/png"] = "A" * (MAX_RICH_VALUE_CHARS + 4)
        events += rec.feed_iopub(msg)
    events += rec.feed_reply(data["reply"])
    said = "".join(e.text for e in events if isinstance(e, StreamEvent) and e.name == "stderr")
    assert said.count("[output dropped") == 1
    assert f"image/png value of {MAX_RICH_VALUE_CHARS + 4} characters" in said
    assert f"limit of {MAX_RICH_VALUE_CHARS} characters" in said
    assert rec.stream_text("stderr") == said
    outputs = rec.notebook_outputs()
    assert any(o["output_type"] == "stream" and "image/png value" in o["text"] for o in outputs)
    (shown,) = [o for o in outputs if o["output_type"] == "display_data"]
    assert "image/png" not in shown["data"] and "text/plain" in shown["data"]
    nb_valid(outputs)


def test_rich_output_past_the_cells_rich_limit_is_dropped_with_a_notice() -> None:
    data = json.loads((MESSAGES / "plot.json").read_text())
    rec = ExecutionRecorder(data["msg_id"], rich_limit=1000)
    events: list[Any] = []
    for msg in data["iopub"]:
        events += rec.feed_iopub(msg)
    said = "".join(e.text for e in events if isinstance(e, StreamEvent) and e.name == "stderr")
    assert "went past the broker's limit of 1000 characters" in said
    assert rec.rich_dropped > 0


def test_a_long_traceback_keeps_its_first_and_last_lines() -> None:
    """A RecursionError's traceback kept its first 500 frames, all alike, and lost the
    innermost frames and the line naming the exception, which tell a model what failed."""
    frames = [f"frame {i}\n" for i in range(3000)] + ["RecursionError: maximum depth\n"]
    rec = ExecutionRecorder("m")
    (event,) = rec.feed_iopub(
        {
            "header": {"msg_type": "error"},
            "content": {"ename": "RecursionError", "evalue": "max", "traceback": frames},
        }
    )
    assert isinstance(event, ErrorEvent) and rec.error_cut
    kept = event.traceback
    assert len(kept) == 501
    assert kept[:250] == frames[:250]
    assert kept[250] == "[... 2501 more traceback lines omitted by the service ...]"
    assert kept[251:] == frames[-250:]
    assert kept[-1] == "RecursionError: maximum depth\n"
