"""What a model reads of common outputs, from recorded real-kernel messages (issue 13).

Each recording in tests/messages/ is fed through the recorder and the output capture as the
broker does, then rendered as the text a model gets: progress bars in their final state,
Markdown and HTML as text, a Styler as its frame, plotly and seaborn charts with numbers.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interpreter.artifacts import ArtifactStore
from interpreter.client.charttext import chart_summary
from interpreter.client.htmltext import html_to_text
from interpreter.client.render import output_text, readable_text, render_execution
from interpreter.execution import ExecutionRecorder
from interpreter.mime import DATAFRAME_MIME
from interpreter.models import Execution, Output
from interpreter.outputs import OutputCapture
from interpreter.overwrite import OverwrittenText, apply_overwrites

MESSAGES = Path(__file__).parent.parent / "messages"


def recorded(name: str) -> ExecutionRecorder:
    data = json.loads((MESSAGES / f"{name}.json").read_text())
    rec = ExecutionRecorder(data["msg_id"])
    for msg in data["iopub"]:
        rec.feed_iopub(msg)
    rec.feed_reply(data["reply"])
    return rec


def model_text(tmp_path: Path, name: str) -> tuple[Execution, list[dict[str, object]], str]:
    rec = recorded(name)
    capture = OutputCapture(
        ArtifactStore(tmp_path / "artifacts", "s_test"), inline_bytes=10_000, output_bytes=100_000
    )
    ex = Execution(id="ex_1", session_id="s_test", status="ok")
    notebook = asyncio.run(capture.finish(ex, rec, {}))
    return ex, notebook, "\n\n".join(render_execution(ex))


# --- carriage returns -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("chunks", "shown"),
    [
        (["a\rb"], "b"),
        (["abc\rX"], "Xbc"),  # a shorter frame leaves the tail, as on a terminal
        (["a\r\nb"], "a\nb"),
        (["ab\x08c"], "ac"),
        (["\x08x"], "x"),
        (["10%", "\r", "50%", "\r100%", "\n"], "100%\n"),
        (["line 1\nstep 1", "\rstep 2\r"], "line 1\nstep 2"),
        (["a\r", "\nb"], "a\nb"),
        (["one\ntwo\r\n\rthree"], "one\ntwo\nthree"),
    ],
)
def test_carriage_returns_and_backspaces_apply_like_a_front_end(
    chunks: list[str], shown: str
) -> None:
    text = OverwrittenText()
    for chunk in chunks:
        text.feed(chunk)
    assert text.text == shown and len(text) == len(shown)
    assert apply_overwrites("".join(chunks)) == shown


def _terminal(text: str) -> str:
    """What a front end shows, one character at a time: the rules on their own."""
    lines: list[list[str]] = [[]]
    cursor = 0
    for char in text:
        line = lines[-1]
        if char == "\n":
            lines.append([])
            cursor = 0
        elif char == "\r":
            cursor = 0
        elif char == "\x08":
            if cursor > 0:
                del line[cursor - 1]
                cursor -= 1
        elif cursor < len(line):
            line[cursor] = char
            cursor += 1
        else:
            line.append(char)
            cursor += 1
    return "\n".join("".join(line) for line in lines)


@given(st.lists(st.text(alphabet="ab\n\r\x08", max_size=12), max_size=8))
@settings(max_examples=300, deadline=None)
def test_text_fed_in_any_chunks_shows_what_a_terminal_shows(chunks: list[str]) -> None:
    """Chunks with and without control characters, in any order: the result is the
    character-by-character rules' (plain chunks take a shorter path than the others)."""
    text = OverwrittenText()
    for fed in range(1, len(chunks) + 1):
        text.feed(chunks[fed - 1])
        expected = _terminal("".join(chunks[:fed]))
        assert text.text == expected and len(text) == len(expected)


def test_a_carriage_return_loop_keeps_only_its_last_frame(tmp_path: Path) -> None:
    rec = recorded("progress_cr")
    assert rec.stream_text("stdout") == "step 5/5\ndone\n"
    ex, notebook, text = model_text(tmp_path, "progress_cr")
    assert ex.stdout == "step 5/5\ndone\n"
    assert [o.get("text") for o in notebook] == ["step 5/5\ndone\n"]
    assert "step 1/5" not in text and "step 5/5" in text


def test_a_progress_bar_that_redraws_forever_takes_no_room() -> None:
    rec = ExecutionRecorder("m", hard_limit=1000)
    for i in range(10_000):
        rec.feed_iopub(
            {
                "parent_header": {"msg_id": "m"},
                "header": {"msg_type": "stream"},
                "content": {"name": "stderr", "text": f"\r{i:>5}/10000"},
            }
        )
    assert rec.stream_text("stderr") == " 9999/10000"
    assert rec.streams.dropped == 0 and rec.streams.kept == len(rec.stream_text("stderr"))


def _streams(rec: ExecutionRecorder, chunks: list[tuple[str, str]]) -> None:
    for name, text in chunks:
        rec.feed_iopub({"header": {"msg_type": "stream"}, "content": {"name": name, "text": text}})


def test_redraws_apply_across_interleaved_streams() -> None:
    # A hand-written ``\rA{i}`` / ``\rB{i}`` loop: each chunk is its own notebook output,
    # as in JupyterLab, but stdout and stderr read as one terminal stream each.
    rec = ExecutionRecorder("m")
    chunks = [c for i in range(3) for c in (("stdout", f"\rA{i}"), ("stderr", f"\rB{i}"))]
    _streams(rec, [*chunks, ("stdout", "\n")])
    assert rec.stream_text("stdout") == "A2\n" and rec.stream_text("stderr") == "B2"
    assert [o["text"] for o in rec.notebook_outputs()][:2] == ["A0", "B0"]
    # tqdm with a print per step; a frame ending in ``\r`` is overwritten too.
    rec = ExecutionRecorder("m")
    _streams(
        rec,
        [
            ("stderr", "\r  0%|"),
            ("stdout", "epoch 0\n"),
            ("stderr", "\r 50%|#"),
            ("stdout", "epoch 1\n"),
            ("stderr", "\r100%|##"),
            ("stdout", "done\n"),
            ("stderr", "\n"),
        ],
    )
    assert rec.stream_text("stderr") == "100%|##\n"
    assert rec.stream_text("stdout") == "epoch 0\nepoch 1\ndone\n"
    # A frame that ends with ``\r`` is overwritten by the next one.
    rec = ExecutionRecorder("m")
    _streams(rec, [("stderr", "50%\r"), ("stdout", "x"), ("stderr", "99%")])
    assert rec.stream_text("stderr") == "99%"


_PIECES = st.sampled_from(["ab", "xyz", "\n", "\r", "\r\n", "\x08", "q\n", "\rc"])
_EVENTS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["stdout", "stderr"]), st.lists(_PIECES, max_size=4)),
        st.just(("display", [])),
    ),
    max_size=12,
)


@given(_EVENTS)
@settings(max_examples=300, deadline=None)
def test_text_read_end_to_end_is_the_text_read_through_the_rewriting_path(
    events: list[tuple[str, list[str]]],
) -> None:
    """Segments are joined end to end unless one rewrites the line another left open:
    both ways give the same text and the same places for any mix of streams, redraws and
    displays (the joined way is the common, cheap one)."""
    rec = ExecutionRecorder("m")
    for name, pieces in events:
        if name == "display":
            content = {"data": {"text/plain": "d"}, "metadata": {}}
            rec.feed_iopub({"header": {"msg_type": "display_data"}, "content": content})
        else:
            _streams(rec, [(name, "".join(pieces))])
    assert rec._merged() == rec._merged_rewriting()


def test_a_tqdm_auto_bar_ends_as_its_final_text_without_a_warning(tmp_path: Path) -> None:
    ex, notebook, text = model_text(tmp_path, "tqdm_loop")
    assert ex.stderr == ""  # no "IProgress not found" warning
    assert len(ex.outputs) == 1
    final = str(ex.outputs[0].data["text/plain"])
    assert final.startswith("work: 100%") and "5/5" in final
    assert "0%|" not in text.replace("100%|", "")
    assert notebook[0]["data"]["text/plain"] == final  # type: ignore[index]


# --- rich displays --------------------------------------------------------------------


def test_markdown_reaches_the_model_as_its_text(tmp_path: Path) -> None:
    _ex, _nb, text = model_text(tmp_path, "markdown")
    assert "display:\n**x**" in text and "object>" not in text


def test_html_reaches_the_model_as_text(tmp_path: Path) -> None:
    _ex, _nb, text = model_text(tmp_path, "html")
    assert "Result\n- alpha & beta\n- gamma\nk | v\na | 1" in text
    assert "<" not in text.split("display:", 1)[1]


def test_a_styler_reads_as_its_frame(tmp_path: Path) -> None:
    ex, _nb, text = model_text(tmp_path, "styler")
    assert "DataFrame: 2 rows x 2 columns" in text and "columns: a (int64), b (float64)" in text
    assert "Styler" not in text and "0x" not in text
    assert "application/vnd.dataframe+json" in ex.outputs[0].data


def test_a_plotly_bar_has_a_png_and_its_values(tmp_path: Path) -> None:
    ex, notebook, text = model_text(tmp_path, "plotly_bar")
    assert "plot 1: bar titled 'Revenue' (x='region', y='revenue')" in text
    assert "north=120, south=95, east=143, west=80" in text
    assert [a.mime for a in ex.outputs[0].artifacts] == ["image/png"]
    assert "image/png" in notebook[0]["data"]  # type: ignore[operator]
    assert "[output of type" not in text


def test_a_seaborn_boxplot_is_a_box_plot_with_its_statistics(tmp_path: Path) -> None:
    _ex, _nb, text = model_text(tmp_path, "seaborn_box")
    assert "plot 1: box plot titled 'Spread' (x='g', y='v')" in text
    assert "a: median 3, quartiles 2 to 4, whiskers 1 to 4, 1 outlier" in text
    assert "b: median 4" in text


@pytest.mark.parametrize(
    ("bundle", "text"),
    [
        ({"text/plain": "<IPython.core.display.Latex object>", "text/latex": "$x^2$"}, "$x^2$"),
        ({"text/plain": "<IPython.core.display.JSON object>", "application/json": [1]}, "[\n 1\n]"),
        ({"text/plain": "<Foo at 0x7f00aa>", "text/html": "<b>bold</b> &lt;tag&gt;"}, "bold <tag>"),
        ({"text/plain": "42", "text/html": "<b>41</b>"}, "42"),
        ({"text/html": "<p>a</p><p>b</p>"}, "a\nb"),
    ],
)  # fmt: skip
def test_the_best_text_form_of_a_bundle(bundle: dict[str, object], text: str) -> None:
    assert readable_text(bundle) == text


def test_html_to_text_drops_scripts_and_keeps_links_and_rows() -> None:
    html = (
        "<style>p {color: red}</style><script>alert(1)</script>"
        "<p>See <a href='https://example.org/x'>the docs</a>.</p>"
        "<table><thead><tr><th>name</th><th>n</th></tr></thead>"
        "<tbody><tr><td>a&nbsp;b</td><td>1</td></tr></tbody></table><pre>x\n  y</pre>"
    )
    assert html_to_text(html) == (
        "See the docs (https://example.org/x).\nname | n\na b | 1\nx\n  y"
    )


def test_chart_text_gives_values_for_small_series_and_statistics_for_large() -> None:
    small = {"type": "line", "label": "s", "x": [1, 2], "y": [3, 4], "points": 2}
    large = {
        "type": "line",
        "label": "big",
        "x": [0, 99],
        "y": [0, 99],
        "points": 100,
        "truncated": True,
        "stats": {"count": 100, "min": 0, "max": 99, "mean": 49.5},
    }
    text = chart_summary({"axes": [{"kind": "line", "series": [small, large]}]})
    assert "series 's': (1, 3), (2, 4)" in text
    assert (
        "series 'big': 100 points, y: 100 values, min 0, max 99, mean 49.5; x from 0 to 99" in text
    )


def test_chart_text_gives_a_scatters_x_range_not_its_first_and_last_x() -> None:
    """A scatter of x spanning 0..100 whose first and last points sit at x=5 was said to
    lie "x from 5 to 5"; a series whose x runs one way keeps its direction."""
    xs = [5, 0, 40, 100, 60, 5]
    scatter = {"type": "scatter", "label": "q", "x": xs, "y": xs, "points": 60, "truncated": True}
    text = chart_summary({"axes": [{"kind": "scatter", "series": [scatter]}]})
    assert "60 points; x between 0 and 100 (of 6 sampled)" in text
    falling = {**scatter, "x": [9, 5, 1], "points": 30}
    assert "x from 9 to 1" in chart_summary({"axes": [{"kind": "line", "series": [falling]}]})
    dates = {**scatter, "x": ["2026-01-02", "2026-01-01"], "points": 30}
    assert "x from 2026-01-02 to 2026-01-01" in chart_summary(
        {"axes": [{"kind": "line", "series": [dates]}]}
    )


def test_chart_text_names_layouts() -> None:
    bars = {"type": "bar", "label": "a", "categories": ["p"], "values": [1], "points": 1}
    chart = {
        "axes": [
            {"kind": "bar", "bar_layout": "stacked", "series": [bars], "grid": [0, 0, 1, 2]},
            {"kind": "line", "series": [], "twin_of": 0},
            {"kind": "heatmap", "series": [{"type": "heatmap", "shape": [1, 2], "values": [[1]]}]},
            {"kind": "image", "series": [{"type": "image", "shape": [30, 30], "heatmap": True,
                                          "stats": {"count": 900, "min": 0, "max": 1}}]},
        ]
    }  # fmt: skip
    text = chart_summary(chart)
    assert "plot 1: stacked bar, subplot row 1 column 1 of 1x2" in text
    assert "plot 2: line, twin axes over plot 1" in text
    assert "plot 3: heatmap\n  series: 1x2 grid, values 1" in text
    assert "plot 4: heatmap (image)\n  series: 30x30 grid, 900 values, min 0, max 1" in text


def _frame_bundle(obj: object) -> dict[str, object]:
    """What the kernel displays for a frame or Series, with its pandas options."""
    pd = pytest.importorskip("pandas")
    from interpreter_kernel.configure import PANDAS_OPTIONS
    from interpreter_kernel.dataframe import dataframe_json

    with pd.option_context(*[x for kv in PANDAS_OPTIONS.items() for x in kv]):
        return {"text/plain": repr(obj), DATAFRAME_MIME: dataframe_json(obj)}


@pytest.mark.parametrize(
    ("rows", "note"),
    [
        (25, None),
        (30, None),
        (31, "(the table below shows the first 5 and the last 5 of 31 rows)"),
        (10_000, "(the table below shows the first 5 and the last 5 of 10000 rows)"),
    ],
)
def test_the_table_note_says_which_rows_the_text_shows(rows: int, note: str | None) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"x": range(rows), "y": range(rows)})
    for obj in (frame, frame["x"]):
        text = output_text(Output(type="execute_result", data=_frame_bundle(obj)), 20_000)
        assert "first 20 rows" not in text
        if note is None:
            assert "(the table" not in text
        else:
            assert note in text


def test_json_html_pre_and_an_unnamed_series_read_as_they_are() -> None:
    shown = readable_text(
        {"text/plain": "<IPython.core.display.JSON object>", "application/json": {"c": "ü"}}
    )
    assert shown == '{\n "c": "ü"\n}'
    html = "<p>x</p><pre>  pre   formatted\n   block</pre><p>y</p>"
    assert html_to_text(html) == "x\n  pre   formatted\n   block\ny"
    pd = pytest.importorskip("pandas")
    dtypes = pd.DataFrame({"a": [1], "b": ["s"]}).dtypes
    text = output_text(Output(type="execute_result", data=_frame_bundle(dtypes)), 20_000)
    assert text.startswith("Series: 2 rows\ndtype object\n") and "None" not in text


def _finished(tmp_path: Path, rec: ExecutionRecorder, budget: int = 100_000) -> Execution:
    rec.feed_reply({"content": {"status": "ok", "execution_count": 1}})
    store = ArtifactStore(tmp_path / "artifacts", "s_test")
    capture = OutputCapture(store, inline_bytes=10_000, output_bytes=budget)
    ex = Execution(id="ex_1", session_id="s_test", status="ok")
    asyncio.run(capture.finish(ex, rec, {}))
    return ex


def _display(rec: ExecutionRecorder, text: str) -> None:
    rec.feed_iopub(
        {"header": {"msg_type": "display_data"}, "content": {"data": {"text/plain": text}}}
    )


def test_the_model_reads_prints_and_displays_in_the_order_they_came(tmp_path: Path) -> None:
    # for g in groups: print(f'== group {g} =='); display(grp)
    rec = ExecutionRecorder("m")
    for group in "ab":
        _streams(rec, [("stdout", f"== group {group} ==\n")])
        _display(rec, f"table {group}")
    _streams(rec, [("stderr", "a warning\n"), ("stdout", "done\n")])
    ex = _finished(tmp_path, rec)
    assert [(o.after.stdout, o.after.stderr) for o in ex.outputs if o.after] == [(14, 0), (28, 0)]
    blocks = render_execution(ex)
    assert blocks[1:] == [
        "stdout:\n== group a ==",
        "display:\ntable a",
        "stdout:\n== group b ==",
        "display:\ntable b",
        "stdout:\ndone",
        "stderr:\na warning",
    ]
    # A progress line redrawn after an output comes after it, as the text shows it.
    rec = ExecutionRecorder("m")
    _streams(rec, [("stderr", "\r 50%")])
    _display(rec, "shown at 50%")
    _streams(rec, [("stderr", "\r100%\n")])
    ex = _finished(tmp_path, rec)
    assert ex.stderr == "100%\n" and ex.outputs[0].after is not None
    assert ex.outputs[0].after.stderr == 0
    assert render_execution(ex)[1:] == ["display:\nshown at 50%", "stderr:\n100%"]


def test_cut_streams_give_no_places_and_the_old_grouping(tmp_path: Path) -> None:
    rec = ExecutionRecorder("m")
    _streams(rec, [("stdout", "x" * 300 + "\n")])
    _display(rec, "table")
    _streams(rec, [("stdout", "y" * 300 + "\n")])
    ex = _finished(tmp_path, rec, budget=200)
    assert ex.truncated and ex.outputs[0].after is None
    blocks = render_execution(ex)
    assert blocks[1].startswith("stdout:\nxxx") and blocks[-1] == "display:\ntable"


def test_an_unknown_ending_tells_the_model_not_to_run_the_code_again() -> None:
    """A cell a shutdown left running in its kept kernel read as ``status: unknown ...
    Reason: broker_shutdown.``, and a model would run it again (its effects twice)."""
    kept = Execution(
        id="ex_k", session_id="s", code="x", status="unknown", reason="broker_shutdown"
    )
    text = "".join(render_execution(kept))
    assert "may still be running it: do not run it again" in text
    assert "read execution ex_k again" in text
    crashed = kept.model_copy(update={"reason": "broker_restarted"})
    assert "how it ended is not known" in "".join(render_execution(crashed))
