"""The kernel-side package, imported directly: summaries, charts, formatters, import hooks.

Figures are built with ``matplotlib.figure.Figure`` (Agg canvas, no pyplot state), so these
tests touch no display and leave no global matplotlib state behind.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest
from IPython.core.formatters import DisplayFormatter
from matplotlib.figure import Figure

from interpreter_kernel import CHART_MIME, DATAFRAME_MIME, chart_json, dataframe_json
from interpreter_kernel.configure import PANDAS_OPTIONS, configure_pandas
from interpreter_kernel.formatters import StructuredJSONFormatter, register_formatters
from interpreter_kernel.imports import when_imported
from interpreter_kernel.jsonsafe import json_label, json_scalar
from interpreter_kernel.kernel import INPUT_NOT_SUPPORTED


def strict_json(value: Any) -> Any:
    """Round-trip through JSON exactly as a strict encoder would (no NaN, no numpy)."""
    return json.loads(json.dumps(value, allow_nan=False))


def one_axes(fig: Figure) -> dict[str, Any]:
    chart = chart_json(fig)
    assert chart is not None
    assert strict_json(chart) == chart
    [axes] = chart["axes"]
    return axes


# --- JSON-safe values -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (True, True),
        (np.bool_(False), False),
        (np.int64(7), 7),
        (np.float32(0.5), 0.5),
        (float("nan"), None),
        (float("inf"), "inf"),
        (np.float64("-inf"), "-inf"),
        (decimal.Decimal("-Infinity"), "-inf"),
        (decimal.Decimal("NaN"), None),
        (pd.NaT, None),
        (pd.NA, None),
        (np.datetime64("NaT"), None),
        (pd.Timestamp("2024-03-01 12:30"), "2024-03-01T12:30:00"),
        (np.datetime64("2024-03-01T12:30:00.000000000"), "2024-03-01T12:30:00"),
        (dt.date(2024, 3, 1), "2024-03-01"),
        (pd.Timedelta(hours=26), "1 days 02:00:00"),
        (decimal.Decimal("1.25"), 1.25),
        (complex(1, 2), "(1+2j)"),
        (b"\x00ab", "b'\\x00ab'"),
        (pd.Period("2024-03", freq="M"), "2024-03"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_json_scalar(value: Any, expected: Any) -> None:
    converted = json_scalar(value)
    assert converted == expected
    assert type(converted) is type(expected)


def test_json_scalar_cuts_long_strings_and_survives_broken_objects() -> None:
    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert json_scalar("x" * 500, max_chars=10) == "xxxxxxxxx…"
    assert json_scalar(Broken()) == "<Broken>"
    assert json_label(("a", np.int64(2))) == ["a", 2]


# --- DataFrame and Series summaries -----------------------------------------------------


def test_dataframe_summary_exact() -> None:
    frame = pd.DataFrame(
        {
            "when": pd.to_datetime(["2024-01-01", None, "2024-01-03"]),
            "amount": [1.5, float("nan"), np.inf],
            "count": pd.array([1, None, 3], dtype="Int64"),
            "note": ["a" * 150, None, "ok"],
        },
        index=pd.Index(["r1", "r2", "r3"], name="row"),
    )
    summary = dataframe_json(frame)
    assert summary is not None
    assert strict_json(summary) == summary
    note_dtype = summary["columns"][3].pop("dtype")
    assert note_dtype in ("str", "object")  # pandas 3 names string columns "str"
    index_dtype = summary["index"].pop("dtype")
    assert index_dtype in ("str", "object")
    assert summary == {
        "version": 1,
        "kind": "dataframe",
        "shape": [3, 4],
        "columns": [
            {"name": "when", "dtype": str(frame["when"].dtype), "nulls": 1},
            {"name": "amount", "dtype": "float64", "nulls": 1},
            {"name": "count", "dtype": "Int64", "nulls": 1},
            {"name": "note", "nulls": 1},
        ],
        "index": {"type": "Index", "names": ["row"], "values": ["r1", "r2", "r3"]},
        "rows": [
            ["2024-01-01T00:00:00", 1.5, 1, "a" * 99 + "…"],
            [None, None, None, None],
            ["2024-01-03T00:00:00", "inf", 3, "ok"],
        ],
        "truncated": False,
    }


def test_long_frame_keeps_first_rows_and_says_so() -> None:
    frame = pd.DataFrame({"n": np.arange(100)})
    summary = dataframe_json(frame, max_rows=5)
    assert summary is not None
    assert summary["shape"] == [100, 1]
    assert summary["rows"] == [[0], [1], [2], [3], [4]]
    assert summary["index"]["values"] == [0, 1, 2, 3, 4]
    assert summary["truncated"] is True
    assert len(dataframe_json(frame)["rows"]) == 20  # type: ignore[index]


def test_wide_frame_keeps_first_columns_and_says_so() -> None:
    frame = pd.DataFrame(np.zeros((2, 45)), columns=[f"c{i}" for i in range(45)])
    summary = dataframe_json(frame)
    assert summary is not None
    assert summary["shape"] == [2, 45]
    assert [c["name"] for c in summary["columns"]] == [f"c{i}" for i in range(30)]
    assert all(len(row) == 30 for row in summary["rows"])
    assert summary["truncated"] is True


def test_series_summary() -> None:
    series = pd.Series([1.0, None], name="price", index=pd.date_range("2024-01-01", periods=2))
    summary = dataframe_json(series)
    assert summary is not None
    assert strict_json(summary) == summary
    assert summary["kind"] == "series"
    assert summary["shape"] == [2]
    assert summary["columns"] == [{"name": "price", "dtype": "float64", "nulls": 1}]
    assert summary["index"]["type"] == "DatetimeIndex"
    assert summary["index"]["values"] == ["2024-01-01T00:00:00", "2024-01-02T00:00:00"]
    assert summary["rows"] == [[1.0], [None]]
    unnamed = dataframe_json(pd.Series([1]))
    assert unnamed is not None and unnamed["columns"][0]["name"] is None


def test_multiindex_labels_become_lists() -> None:
    frame = pd.DataFrame(
        {("sales", "eu"): [1, 2]},
        index=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["k", "n"]),
    )
    summary = dataframe_json(frame)
    assert summary is not None
    assert summary["columns"][0]["name"] == ["sales", "eu"]
    assert summary["index"]["names"] == ["k", "n"]
    assert summary["index"]["values"] == [["a", 1], ["b", 2]]


def test_null_counts_skipped_on_huge_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    from interpreter_kernel import dataframe

    monkeypatch.setattr(dataframe, "MAX_NULL_COUNT_CELLS", 3)
    summary = dataframe_json(pd.DataFrame({"a": [1, 2], "b": [3, 4]}))
    assert summary is not None
    assert [c["nulls"] for c in summary["columns"]] == [None, None]


def test_other_objects_are_not_summarised() -> None:
    assert dataframe_json([1, 2]) is None
    assert dataframe_json(np.arange(3)) is None
    assert chart_json(pd.DataFrame()) is None


# --- charts -----------------------------------------------------------------------------


def test_line_chart() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.plot([1, 2, 3], [2.0, float("nan"), 1 / 3], label="growth")
    ax.plot([1, 2], [5, 6])  # unlabelled: matplotlib calls it "_child1"
    ax.axhline(1.0)  # a reference line in axes coordinates, not data
    ax.set_title("Growth")
    ax.set_xlabel("day")
    ax.set_ylabel("value")
    fig.suptitle("Report")
    chart = chart_json(fig)
    assert chart == {
        "version": 1,
        "suptitle": "Report",
        "axes": [
            {
                "kind": "line",
                "title": "Growth",
                "xlabel": "day",
                "ylabel": "value",
                "series": [
                    {
                        "type": "line",
                        "label": "growth",
                        "x": [1, 2, 3],
                        "y": [2, None, 0.333333],
                        "points": 3,
                        "truncated": False,
                        "stats": {"count": 2, "min": 0.333333, "max": 2, "mean": 1.16667},
                    },
                    {
                        "type": "line",
                        "label": None,
                        "x": [1, 2],
                        "y": [5, 6],
                        "points": 2,
                        "truncated": False,
                        "stats": {"count": 2, "min": 5, "max": 6, "mean": 5.5},
                    },
                ],
            }
        ],
        "truncated": False,
    }
    assert strict_json(chart) == chart


def test_bar_and_barh_charts() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    left.bar(["north", "south", "east"], [3, 5, 2], label="units")
    right.barh(["a", "b"], [0.5, 1.5])
    bar, barh = chart_json(fig)["axes"]  # type: ignore[index]
    assert bar["kind"] == "bar"
    assert bar["series"] == [
        {
            "type": "bar",
            "label": "units",
            "categories": ["north", "south", "east"],
            "values": [3, 5, 2],
            "points": 3,
            "truncated": False,
            "stats": {"count": 3, "min": 2, "max": 5, "mean": 3.33333},
        }
    ]
    assert barh["kind"] == "barh"
    assert barh["series"][0]["categories"] == ["a", "b"]
    assert barh["series"][0]["values"] == [0.5, 1.5]


def test_pandas_grouped_bars_are_named_after_their_ticks() -> None:
    fig = Figure()
    ax = fig.subplots()
    frame = pd.DataFrame({"q1": [1, 2], "q2": [3, 4]}, index=["eu", "us"])
    frame.plot.bar(ax=ax)
    axes = one_axes(fig)
    assert axes["kind"] == "bar"
    assert [(s["label"], s["categories"], s["values"]) for s in axes["series"]] == [
        ("q1", ["eu", "us"], [1, 2]),
        ("q2", ["eu", "us"], [3, 4]),
    ]


def test_histogram() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.hist([1, 2, 2, 3, 3, 3, 4], bins=[1, 2, 3, 4], label="values")
    axes = one_axes(fig)
    assert axes["kind"] == "hist"
    assert axes["series"] == [
        {
            "type": "hist",
            "label": None,  # hist labels its first patch, not the container
            "orientation": "vertical",
            "bin_edges": [1, 2, 3, 4],
            "counts": [1, 2, 4],
            "points": 3,
            "truncated": False,
        }
    ]


def test_scatter_both_ways() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.scatter([1, 2, 3], [4, 5, 6], label="points")
    ax.plot([7, 8], [9, 10], "o")  # markers without a line are a scatter too
    axes = one_axes(fig)
    assert axes["kind"] == "scatter"
    assert {(s["label"], tuple(s["x"]), tuple(s["y"])) for s in axes["series"]} == {
        ("points", (1, 2, 3), (4, 5, 6)),
        (None, (7, 8), (9, 10)),
    }


def test_pie_chart() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.pie([1, 3], labels=["cats", "dogs"])
    axes = one_axes(fig)
    assert axes["kind"] == "pie"
    assert axes["series"] == [
        {
            "type": "pie",
            "labels": ["cats", "dogs"],
            "sizes": [0.25, 0.75],
            "points": 2,
            "truncated": False,
        }
    ]


def test_heatmap_image_without_its_colorbar() -> None:
    fig = Figure()
    ax = fig.subplots()
    image = ax.imshow(np.array([[0.0, 0.5], [np.nan, 1.0]]))
    fig.colorbar(image, ax=ax)
    chart = chart_json(fig)
    assert chart is not None
    assert strict_json(chart) == chart
    [axes] = chart["axes"]
    assert axes["kind"] == "image"
    assert axes["series"] == [
        {
            "type": "image",
            "shape": [2, 2],
            "values": [[0, 0.5], [None, 1]],
            "stats": {"count": 3, "min": 0, "max": 1, "mean": 0.5},
            "heatmap": True,
        }
    ]


def test_mixed_empty_and_unknown_axes() -> None:
    fig = Figure()
    mixed, _empty, unknown = fig.subplots(1, 3)
    mixed.bar([1, 2], [3, 4])
    mixed.plot([1, 2], [3, 4])
    unknown.fill_between([0, 1], [0, 1])
    kinds = [axes["kind"] for axes in chart_json(fig)["axes"]]  # type: ignore[index]
    assert kinds == ["mixed", "empty", "unknown"]


def test_errorbar_caps_are_not_series() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.errorbar([1, 2], [3, 4], yerr=[0.5, 0.5], capsize=3, label="mean")
    axes = one_axes(fig)
    assert [(s["type"], s["label"], s["y"]) for s in axes["series"]] == [("line", None, [3, 4])]


def test_long_series_are_sampled_evenly() -> None:
    fig = Figure()
    ax = fig.subplots()
    x = np.arange(5000)
    ax.plot(x, x * 2)
    chart = chart_json(fig, max_points=100)
    assert chart is not None
    [series] = chart["axes"][0]["series"]
    assert series["points"] == 5000
    assert series["truncated"] is True
    assert chart["truncated"] is True
    assert len(series["x"]) == 100
    assert series["x"][0] == 0 and series["x"][-1] == 4999
    assert series["y"] == [2 * v for v in series["x"]]
    assert series["x"] == sorted(set(series["x"]))


def test_many_bars_are_cut() -> None:
    fig = Figure()
    ax = fig.subplots()
    ax.bar(np.arange(50), np.ones(50))
    [series] = chart_json(fig, max_points=10)["axes"][0]["series"]  # type: ignore[index]
    assert series["points"] == 50
    assert len(series["values"]) == 10
    assert series["truncated"] is True


def test_dates_are_iso_strings() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    days = np.array(["2024-01-01", "2024-01-02"], dtype="datetime64[D]")
    left.scatter(days, [1, 2])  # offsets are stored as matplotlib date numbers
    index = pd.date_range("2024-01-01", periods=3, freq="D")
    pd.Series([1.0, 2.0, 3.0], index=index, name="v").plot(ax=right)  # pandas period axis
    scatter, line = chart_json(fig)["axes"]  # type: ignore[index]
    assert scatter["series"][0]["x"] == ["2024-01-01T00:00:00", "2024-01-02T00:00:00"]
    assert line["series"][0]["label"] == "v"
    assert line["series"][0]["x"] == ["2024-01-01", "2024-01-02", "2024-01-03"]


# --- IPython formatters -----------------------------------------------------------------


@pytest.fixture
def display_formatter() -> DisplayFormatter:
    formatter = DisplayFormatter()
    register_formatters(formatter)
    return formatter


def test_formatters_add_mime_types_next_to_the_usual_ones(
    display_formatter: DisplayFormatter,
) -> None:
    data, _ = display_formatter.format(pd.DataFrame({"a": [1]}))
    assert {"text/plain", "text/html", DATAFRAME_MIME} <= set(data)
    assert data[DATAFRAME_MIME]["rows"] == [[1]]

    fig = Figure()
    fig.subplots().plot([1, 2])
    data, _ = display_formatter.format(fig)
    assert data[CHART_MIME]["axes"][0]["kind"] == "line"

    data, _ = display_formatter.format(42)
    assert set(data) == {"text/plain"}


def test_chart_survives_inline_backend_resetting_figure_printers(
    display_formatter: DisplayFormatter,
) -> None:
    # matplotlib's inline backend drops every formatter's Figure printer when it activates
    # (IPython.core.pylabtools.select_figure_formats); the chart must not depend on one.
    for formatter in display_formatter.formatters.values():
        formatter.pop(Figure, None)
    fig = Figure()
    fig.subplots().plot([1, 2])
    data, _ = display_formatter.format(fig)
    assert CHART_MIME in data


def test_a_failing_printer_returns_none_silently() -> None:
    def broken(obj: Any) -> dict[str, Any]:
        raise ValueError("boom")

    formatter = StructuredJSONFormatter(broken, format_type="application/x-test+json")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert formatter(object()) is None
    assert out.getvalue() == err.getvalue() == ""


# --- post-import hooks, pandas options, input -------------------------------------------


@pytest.fixture
def probe_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = "interp_probe_module"
    (tmp_path / f"{name}.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_when_imported_runs_after_the_module_executed(probe_module: str) -> None:
    seen: list[int] = []

    def bump(module: ModuleType) -> None:
        seen.append(module.VALUE)
        module.VALUE += 1

    def broken(module: ModuleType) -> None:
        raise RuntimeError("must not reach the importer")

    when_imported(probe_module, broken)
    when_imported(probe_module, bump)
    assert seen == []
    module = __import__(probe_module)
    assert seen == [41]
    assert module.VALUE == 42
    # The module keeps its real loader, and the hook fires only once.
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    assert module.__spec__ is not None and module.__spec__.loader is module.__loader__
    when_imported(probe_module, bump)  # already imported: runs at once
    assert seen == [41, 42]


def test_pandas_options() -> None:
    keys = list(PANDAS_OPTIONS)
    with pd.option_context(*[item for key in keys for item in (key, pd.get_option(key))]):
        configure_pandas(pd)
        assert {key: pd.get_option(key) for key in keys} == PANDAS_OPTIONS


def test_input_error_message_says_what_to_do() -> None:
    assert "not supported" in INPUT_NOT_SUPPORTED
    assert "in code" in INPUT_NOT_SUPPORTED and "file" in INPUT_NOT_SUPPORTED


# --- the example notebook ---------------------------------------------------------------


def test_example_notebook_is_a_complete_recorded_run() -> None:
    import nbformat

    path = Path(__file__).resolve().parents[2] / "notebooks" / "eda_example.ipynb"
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert 8 <= len(code) <= 12
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    outputs = [output for cell in code for output in cell.outputs]
    assert all(cell.outputs for cell in code), "every cell was recorded with its output"
    assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"]
    kinds = [
        axes["kind"]
        for output in outputs
        for axes in output.get("data", {}).get(CHART_MIME, {}).get("axes", [])
    ]
    assert {"line", "bar", "hist"} <= set(kinds)
    assert all("image/png" in o.data for o in outputs if CHART_MIME in o.get("data", {}))
    assert any(DATAFRAME_MIME in o.get("data", {}) for o in outputs)
    # It writes its own data, into the working directory.
    assert 'to_csv("sales.csv"' in code[0].source


def test_remove_stale_ipython_dirs(tmp_path: Path) -> None:
    import os
    import subprocess

    from interpreter_kernel.ipythondir import PREFIX, remove_stale

    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(finished.stdout)
    stale = tmp_path / f"{PREFIX}{dead}-abc"
    (stale / "profile_default").mkdir(parents=True)
    mine = tmp_path / f"{PREFIX}{os.getpid()}-def"
    mine.mkdir()
    unrelated = tmp_path / f"{PREFIX}notapid"
    unrelated.mkdir()
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / f"{PREFIX}{dead}-link"
    link.symlink_to(target, target_is_directory=True)

    assert remove_stale(tmp_path) == [stale]
    assert not stale.exists()
    assert mine.is_dir() and unrelated.is_dir() and target.is_dir() and link.is_symlink()


# --- installing packages ------------------------------------------------------------------


@pytest.fixture
def shell_without_pip() -> Iterator[Any]:
    """A plain IPython shell (no history file) set up as a kernel whose image has no pip;
    its shell escapes are recorded, never run."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from interpreter_kernel.packages import install_package_magics

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell(config=config)
    ran: list[str] = []
    shell.system = ran.append  # type: ignore[method-assign]
    assert install_package_magics(shell, has_pip=False)
    shell.ran = ran
    yield shell
    shell.cleanup()


@pytest.mark.parametrize(
    "cell",
    ["%pip install polars", "%conda install polars", "!pip install -q polars",
     "!python -m pip install polars", "%uv pip install polars"],
)  # fmt: skip
def test_installing_a_package_without_pip_is_an_error_that_says_so(
    shell_without_pip: Any, cell: str
) -> None:
    # Exploration B, issue 16: in the image `%pip install x` printed "No module named pip"
    # and "you may need to restart the kernel", and the cell succeeded.
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        result = shell_without_pip.run_cell(cell)
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "packages cannot be installed in this session" in err.getvalue()
    assert "%pip list" in str(result.error_in_exec)
    assert shell_without_pip.ran == []


def test_pip_list_without_pip_lists_the_installed_packages(shell_without_pip: Any) -> None:
    out = io.StringIO()
    with redirect_stdout(out):
        assert shell_without_pip.run_cell("%pip list").success
        assert shell_without_pip.run_cell("!pip freeze").success
        assert shell_without_pip.run_cell("!echo other commands still run").success
    assert out.getvalue().count(f"pandas=={pd.__version__}\n") == 2
    assert shell_without_pip.ran == ["echo other commands still run"]


def test_a_kernel_with_pip_keeps_the_packaging_magics() -> None:
    from interpreter_kernel.packages import install_package_magics

    assert not install_package_magics(object(), has_pip=True)  # type: ignore[arg-type]


def test_a_shell_command_reads_end_of_file_not_a_terminal() -> None:
    # `!cat` or a `[Y/n]` prompt waited for a person at IPython's pseudo-terminal, and the
    # cell hung until its timeout; `timeout 20` bounds each command here without it.
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    from interpreter_kernel.shell_stdin import no_terminal_input

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell(config=config)
    no_terminal_input(shell)
    no_terminal_input(shell)  # once is enough
    shell.user_ns["n"] = 3
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            shell.run_cell("!timeout 20 cat; echo cat=$?")
            shell.run_cell("!timeout 20 sh -c 'read x; echo read=$?'")
            shell.run_cell("!echo $n {n+1}  # a comment")
            shell.run_cell("!test -t 1 && echo still a terminal")
    finally:
        shell.cleanup()
    lines = out.getvalue().splitlines()
    assert lines == ["cat=0", "read=1", "3 4", "still a terminal"], lines


def test_pil_show_uses_the_ipython_viewer_first() -> None:
    """A desktop's viewer (xdg-open) came first: on the local backend Image.show() opened
    it on the service's machine and the cell had no image."""
    import PIL.ImageShow

    from interpreter_kernel.configure import show_pil_images_inline

    before = list(PIL.ImageShow._viewers)
    try:
        show_pil_images_inline(PIL.ImageShow)
        assert isinstance(PIL.ImageShow._viewers[0], PIL.ImageShow.IPythonViewer)
    finally:
        PIL.ImageShow._viewers[:] = before
