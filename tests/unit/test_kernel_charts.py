"""Chart descriptions of statistical and composite figures (issue 13): box and violin plots,
heatmaps, stacked and grouped bars, twin axes, subplots, seaborn's hue names, and plotly
figures redrawn offline. The kernel-side package is imported directly."""

from __future__ import annotations

import base64
import json
from typing import Any

import matplotlib.axes
import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import pytest
import seaborn as sns
from matplotlib.figure import Figure
from plotly.subplots import make_subplots

from interpreter.client.charttext import chart_summary
from interpreter_kernel import CHART_MIME, chart_json
from interpreter_kernel.chart_marks import install_matplotlib, install_seaborn
from interpreter_kernel.plotly_figure import figure_bundle
from tests.unit.chart_samples import BOX_GROUP_A

install_matplotlib(matplotlib.axes)
install_seaborn(sns)

FRAME = pd.DataFrame(
    {"g": ["a"] * 5 + ["b"] * 5, "v": [1, 2, 3, 4, 10, 2, 3, 4, 5, 6], "h": ["x", "y"] * 5}
)


def axes_of(fig: Any) -> list[dict[str, Any]]:
    chart = chart_json(fig)
    assert chart is not None and json.loads(json.dumps(chart, allow_nan=False)) == chart
    return list(chart["axes"])


def test_a_seaborn_boxplot_is_one_box_series_with_its_statistics() -> None:
    fig = Figure()
    sns.boxplot(data=FRAME, x="g", y="v", ax=fig.subplots())
    [ax] = axes_of(fig)
    assert ax["kind"] == "box" and len(ax["series"]) == 1
    a, b = ax["series"][0]["groups"]
    assert a == BOX_GROUP_A
    assert b["label"] == "b" and b["median"] == 4 and b["outliers"] == 0


def test_seaborn_hue_levels_name_the_series() -> None:
    fig = Figure()
    sns.boxplot(data=FRAME, x="g", y="v", hue="h", ax=fig.subplots())
    [ax] = axes_of(fig)
    assert [s["label"] for s in ax["series"]] == ["x", "y"] and ax["legend_title"] == "h"
    fig = Figure()
    lines = pd.DataFrame({"x": [1, 2, 1, 2], "y": [1, 2, 3, 4], "k": ["u", "u", "w", "w"]})
    sns.lineplot(data=lines, x="x", y="y", hue="k", ax=fig.subplots())
    [ax] = axes_of(fig)
    assert [(s["label"], s["y"]) for s in ax["series"]] == [("u", [1, 2]), ("w", [3, 4])]


def test_matplotlib_boxplot_and_violins() -> None:
    fig = Figure()
    box, violin = fig.subplots(1, 2)
    box.boxplot([[1, 2, 3], [4, 5, 6]], tick_labels=["p", "q"])
    violin.violinplot([[1, 2, 3], [4, 5, 9]])
    first, second = axes_of(fig)
    assert first["kind"] == "box" and [g["label"] for g in first["series"][0]["groups"]] == [
        "p",
        "q",
    ]
    assert second["kind"] == "violin"
    assert second["series"][0]["groups"][1]["max"] == 9


def test_a_box_keeps_its_first_outlier_values_and_counts_them_all() -> None:
    fig = Figure()
    fig.subplots().boxplot([[*range(500), *range(10_000, 10_150)], [1, 2, 3]])
    first, second = axes_of(fig)[0]["series"][0]["groups"]
    assert first["outliers"] == 150 and len(first["outlier_values"]) == 100
    assert set(first["outlier_values"]) <= set(range(10_000, 10_150))
    assert second["outliers"] == 0 and second["outlier_values"] == []


def test_seaborn_violins_are_named_by_their_ticks() -> None:
    fig = Figure()
    sns.violinplot(data=FRAME, x="g", y="v", ax=fig.subplots())
    [ax] = axes_of(fig)
    assert ax["kind"] == "violin"
    assert [g["label"] for g in ax["series"][0]["groups"]] == ["a", "b"]


def test_heatmaps_from_seaborn_and_imshow() -> None:
    fig = Figure()
    frame = pd.DataFrame([[1, 2, 3], [4, 5, 6]], index=["r1", "r2"], columns=["c1", "c2", "c3"])
    sns.heatmap(frame, ax=fig.subplots())
    [ax] = axes_of(fig)
    assert ax["kind"] == "heatmap"
    [series] = ax["series"]
    assert series["shape"] == [2, 3] and series["values"] == [[1, 2, 3], [4, 5, 6]]
    assert series["rows"] == ["r1", "r2"] and series["columns"] == ["c1", "c2", "c3"]
    fig = Figure()
    fig.subplots().imshow(np.arange(900).reshape(30, 30))
    [ax] = axes_of(fig)
    [image] = ax["series"]
    assert image["heatmap"] is True and image["values"] is None
    assert image["stats"] == {"count": 900, "min": 0, "max": 899, "mean": 449.5}


@pytest.mark.parametrize(("stacked", "layout"), [(True, "stacked"), (False, "grouped")])
def test_stacked_and_grouped_bars(stacked: bool, layout: str) -> None:
    fig = Figure()
    frame = pd.DataFrame({"a": [1, 2], "b": [3, 4]}, index=["p", "q"])
    frame.plot.bar(stacked=stacked, ax=fig.subplots())
    [ax] = axes_of(fig)
    assert ax["bar_layout"] == layout
    assert [(s["label"], s["categories"], s["values"]) for s in ax["series"]] == [
        ("a", ["p", "q"], [1, 2]),
        ("b", ["p", "q"], [3, 4]),
    ]


def test_twin_axes_and_subplots() -> None:
    fig = Figure()
    left, right = fig.subplots(1, 2)
    left.plot([1, 2], [3, 4])
    left.twinx().plot([1, 2], [30, 40])
    right.bar(["a", "b"], [1, 2])
    first, second, twin = axes_of(fig)
    assert first["grid"] == [0, 0, 1, 2] and second["grid"] == [0, 1, 1, 2]
    assert twin["twin_of"] == 0 and "grid" not in twin


def test_an_axis_that_is_not_linear_says_its_scale() -> None:
    """A log axis described without its scale read as linear: every value on it misread
    (E2B's suite asks for its chart's ``y_scale`` to be ``log``)."""
    fig = Figure()
    log_y, symlog_x, linear = fig.subplots(1, 3)
    log_y.plot([1, 2, 3], [10, 100, 1000])
    log_y.set_yscale("log")
    symlog_x.plot([-10, 0, 10], [1, 2, 3])
    symlog_x.set_xscale("symlog")
    linear.plot([1, 2], [3, 4])
    first, second, third = axes_of(fig)
    assert (first.get("xscale"), first["yscale"]) == (None, "log")
    assert (second["xscale"], second.get("yscale")) == ("symlog", None)
    assert "xscale" not in third and "yscale" not in third
    plots = chart_summary({"axes": [first, second, third]}).splitlines()
    plots = [line for line in plots if line.startswith("plot ")]
    assert ", y on a log scale" in plots[0] and "x on" not in plots[0]
    assert ", x on a symlog scale" in plots[1] and "y on" not in plots[1]
    assert "scale" not in plots[2]
    # A plotly figure's log axis too (its redraw is on the same scale).
    growth = px.line(x=[1, 2, 3], y=[10, 100, 1000], log_y=True).to_dict()
    [redrawn] = figure_bundle(growth)[CHART_MIME]["axes"]
    assert (redrawn.get("xscale"), redrawn["yscale"]) == (None, "log")


def test_a_large_series_carries_statistics_of_all_its_points() -> None:
    fig = Figure()
    fig.subplots().plot(np.arange(5000) % 100)
    [ax] = axes_of(fig)
    [series] = ax["series"]
    assert series["truncated"] and len(series["y"]) == 1000
    assert series["stats"] == {"count": 5000, "min": 0, "max": 99, "mean": 49.5}


def test_a_plotly_figure_becomes_a_png_and_a_chart_from_its_data() -> None:
    fig = px.bar(
        x=["north", "south"], y=[120, 95], title="Revenue", labels={"x": "region", "y": "revenue"}
    )
    bundle = figure_bundle(fig.to_dict())
    assert base64.b64decode(bundle["image/png"]).startswith(b"\x89PNG")
    chart = bundle[CHART_MIME]
    assert chart["source"] == "plotly"
    [ax] = chart["axes"]
    assert (ax["kind"], ax["title"], ax["xlabel"], ax["ylabel"]) == (
        "bar",
        "Revenue",
        "region",
        "revenue",
    )
    assert ax["series"][0]["categories"] == ["north", "south"]
    assert ax["series"][0]["values"] == [120, 95]
    assert bundle["text/plain"] == "Plotly figure 'Revenue': 1 trace(s) of type bar"


def test_plotly_traces_keep_their_names_and_layout() -> None:
    frame = pd.DataFrame({"r": ["a", "b", "a", "b"], "v": [1, 2, 3, 4], "k": ["x", "x", "y", "y"]})
    stacked = figure_bundle(px.bar(frame, x="r", y="v", color="k").to_dict())[CHART_MIME]
    [ax] = stacked["axes"]
    assert ax["bar_layout"] == "stacked"
    assert [(s["label"], s["values"]) for s in ax["series"]] == [("x", [1, 2]), ("y", [3, 4])]
    box = figure_bundle(px.box(frame, x="r", y="v").to_dict())[CHART_MIME]
    assert box["axes"][0]["kind"] == "box"
    heat = figure_bundle(px.imshow([[1, 2], [3, 4]]).to_dict())[CHART_MIME]
    assert heat["axes"][0]["series"][0]["values"] == [[1, 2], [3, 4]]
    odd = figure_bundle({"data": [{"type": "sunburst", "labels": ["a"]}], "layout": {}})
    assert odd[CHART_MIME]["not_drawn"] == ["sunburst"]


def panels(chart: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Each axes as (title, grid, xlabel, [(label, y values)])."""
    return [
        (ax["title"], ax.get("grid"), ax["xlabel"], [(s["label"], s["y"]) for s in ax["series"]])
        for ax in chart["axes"]
    ]


def test_plotly_subplots_are_redrawn_on_their_own_axes_with_their_titles() -> None:
    # Exploration B, issue 3: every trace was drawn on one axes, the small series shrank to
    # a dot, and the subplot titles were lost.
    fig = make_subplots(rows=1, cols=2, subplot_titles=["Left panel", "Right panel"])
    fig.add_trace(go.Scatter(x=[1, 2, 3], y=[3, 1, 2], name="s1"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[100, 200, 300], y=[1000, 2000, 1500], name="s2"), row=1, col=2)
    fig.update_layout(title="two panels", xaxis2_title="right x")
    chart = figure_bundle(fig.to_dict())[CHART_MIME]
    assert chart["suptitle"] == "two panels"
    assert panels(chart) == [
        ("Left panel", [0, 0, 1, 2], None, [("s1", [3, 1, 2])]),
        ("Right panel", [0, 1, 1, 2], "right x", [("s2", [1000, 2000, 1500])]),
    ]


def test_plotly_facets_are_panels_whose_series_are_named_after_their_facet() -> None:
    frame = pd.DataFrame(
        {"g": ["small"] * 3 + ["large"] * 3, "x": [1, 2, 3] * 2, "y": [1, 2, 3, 1000, 2000, 3000]}
    )
    chart = figure_bundle(px.line(frame, x="x", y="y", facet_col="g").to_dict())[CHART_MIME]
    assert panels(chart) == [
        ("g=small", [0, 0, 1, 2], "x", [("g=small", [1, 2, 3])]),
        ("g=large", [0, 1, 1, 2], "x", [("g=large", [1000, 2000, 3000])]),
    ]
    grid = px.scatter(
        pd.DataFrame(
            {"x": [1, 2] * 4, "y": range(8), "r": list("aabbaabb"), "c": list("ppppqqqq")}
        ),
        x="x",
        y="y",
        facet_row="r",
        facet_col="c",
        color="c",
    )
    described = panels(figure_bundle(grid.to_dict())[CHART_MIME])
    assert sorted(
        (title, position, [s[0] for s in series]) for title, position, _, series in described
    ) == [
        ("c=p, r=a", [0, 0, 2, 2], ["p"]),
        ("c=p, r=b", [1, 0, 2, 2], ["p"]),
        ("c=q, r=a", [0, 1, 2, 2], ["q"]),
        ("c=q, r=b", [1, 1, 2, 2], ["q"]),
    ]


def test_a_plotly_secondary_y_axis_is_a_twin_axes() -> None:
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=[1, 2], y=[1, 2], name="count"), secondary_y=False)
    fig.add_trace(go.Scatter(x=[1, 2], y=[0.1, 0.2], name="share"), secondary_y=True)
    fig.update_layout(title="both")
    first, twin = figure_bundle(fig.to_dict())[CHART_MIME]["axes"]
    assert first["title"] == "both" and [s["label"] for s in first["series"]] == ["count"]
    assert twin["twin_of"] == 0 and [s["label"] for s in twin["series"]] == ["share"]


def test_plotly_subplots_from_a_layout_grid_and_an_empty_figure() -> None:
    traces = [go.Scatter(y=[1, 2]), go.Scatter(y=[3, 4], xaxis="x2", yaxis="y2")]
    grid = go.Figure(traces, layout={"grid": {"rows": 2, "columns": 1}})
    chart = figure_bundle(grid.to_dict())[CHART_MIME]
    assert [(ax["grid"], ax["series"][0]["y"]) for ax in chart["axes"]] == [
        ([0, 0, 2, 1], [1, 2]),
        ([1, 0, 2, 1], [3, 4]),
    ]
    [empty] = figure_bundle(go.Figure(layout={"title": "nothing"}).to_dict())[CHART_MIME]["axes"]
    assert (empty["kind"], empty["title"]) == ("empty", "nothing")


def test_a_3d_plot_is_described_by_its_data_not_its_projection() -> None:
    # Its lines were read as 2-D screen coordinates: (-0.0707, -0.0431), ...
    fig = Figure()
    ax = fig.add_subplot(projection="3d")
    ax.plot([0, 10, 20], [0, 100, 200], [5, 50, 500], label="path")
    ax.scatter([1, 2, 3], [4, 5, 6], [7, 8, 9])
    grid = np.arange(3)
    ax.plot_surface(*np.meshgrid(grid, grid), np.ones((3, 3)))
    ax.set_zlabel("height")
    [described] = axes_of(fig)
    assert described["kind"] == "3d" and described["zlabel"] == "height"
    line, dots = described["series"]
    assert (line["label"], line["x"], line["y"], line["z"]) == (
        "path",
        [0, 10, 20],
        [0, 100, 200],
        [5, 50, 500],
    )
    assert (dots["type"], dots["z"]) == ("scatter", [7, 8, 9])
    assert described["other_artists"] == 1
    text = chart_summary(chart_json(fig) or {})
    assert "3-D plot (z='height')" in text and "(0, 0, 5), (10, 100, 50)" in text


def test_seaborn_error_bars_go_with_their_bars() -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {"day": list("ABC") * 20, "tip": rng.normal(3, 1, 60), "sex": ["M", "F"] * 30}
    )
    fig = Figure()
    sns.barplot(frame, x="day", y="tip", hue="sex", ax=fig.subplots())
    [ax] = axes_of(fig)
    assert ax["kind"] == "bar" and [s["label"] for s in ax["series"]] == ["M", "F"]
    for s in ax["series"]:
        assert len(s["low"]) == len(s["high"]) == 3
        spans = zip(s["low"], s["values"], s["high"], strict=True)
        assert all(lo < v < hi for lo, v, hi in spans)
    assert "A=" in chart_summary(chart_json(fig) or {})
    assert "(error bar " in chart_summary(chart_json(fig) or {})
    # One sample a bar: seaborn's intervals are NaN lines that draw nothing.
    fig = Figure()
    sns.barplot(x=["a", "b"], y=[1, 2], ax=fig.subplots())
    [ax] = axes_of(fig)
    assert [s["type"] for s in ax["series"]] == ["bar"] and "low" not in ax["series"][0]


def test_boxplot_takes_labels_as_matplotlib_before_3_11_did() -> None:
    """matplotlib 3.11 removed ``labels`` (now ``tick_labels``): code written for the older
    name raised TypeError."""
    import matplotlib.axes
    import matplotlib.pyplot as plt

    from interpreter_kernel.mpl_compat import install_axes, install_pyplot

    install_axes(matplotlib.axes)
    install_pyplot(plt)
    fig, ax = plt.subplots()
    ax.boxplot([[1, 2, 3], [2, 3, 4]], labels=["a", "b"])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    plt.close(fig)
    plt.boxplot([[1, 2, 3]], labels=["only"])
    assert [t.get_text() for t in plt.gca().get_xticklabels()] == ["only"]
    plt.close("all")
