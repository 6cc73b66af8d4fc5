"""Our chart description, translated for E2B, decodes with the E2B SDK's own chart classes."""

from __future__ import annotations

from typing import Any

import pytest
from e2b_code_interpreter.charts import ChartType, _deserialize_chart

from interpreter.api.e2b.charts import e2b_chart
from interpreter.api.e2b.files import workspace_path
from interpreter.errors import BadRequest, PathNotAllowed
from tests.unit.chart_samples import BOX_GROUP_A


def axes(kind: str, *series: dict[str, Any], title: str | None = "t") -> dict[str, Any]:
    return {"kind": kind, "title": title, "xlabel": "x", "ylabel": "y", "series": list(series)}


def decoded(*described_axes: dict[str, Any], suptitle: str | None = None) -> Any:
    raw = e2b_chart({"version": 1, "suptitle": suptitle, "axes": list(described_axes)})
    return _deserialize_chart(raw)


def test_bars_become_label_group_value_elements() -> None:
    bar = {"type": "bar", "label": "2024", "categories": ["a", "b"], "values": [3, 4]}
    chart = decoded(axes("bar", bar))
    assert chart.type == ChartType.BAR and (chart.x_label, chart.y_label) == ("x", "y")
    assert [(e.label, e.group, e.value) for e in chart.elements] == [
        ("a", "2024", 3),
        ("b", "2024", 4),
    ]


def test_pie_wedges_get_their_angle_in_degrees() -> None:
    pie = {"type": "pie", "labels": ["yes", "no"], "sizes": [0.25, 0.75]}
    chart = decoded(axes("pie", pie))
    assert chart.type == ChartType.PIE
    assert [(e.label, e.angle) for e in chart.elements] == [("yes", 90.0), ("no", 270.0)]


def test_box_plots_become_box_and_whisker_elements() -> None:
    full = BOX_GROUP_A  # as the kernel describes a box (tests/unit/test_kernel_charts.py)
    without_numbers = {"label": "v"}  # as a seaborn violin's group: no box to draw
    box = {"type": "box", "label": None, "groups": [full, {**full, "label": None}]}
    chart = decoded(axes("box", box, {"type": "box", "groups": [without_numbers]}))
    assert chart.type == ChartType.BOX_AND_WHISKER and chart.y_label == "y"
    got = [
        (e.label, e.min, e.first_quartile, e.median, e.third_quartile, e.max, e.outliers)
        for e in chart.elements
    ]
    assert got == [("a", 1, 2, 3, 4, 4, [10]), ("", 1, 2, 3, 4, 4, [10])]


def test_several_axes_are_a_superchart_and_unknown_kinds_stay_unknown() -> None:
    line = {"type": "line", "label": None, "x": [0, 1], "y": [1, 2]}
    hist = {"type": "hist", "label": None, "bin_edges": [0, 1], "counts": [3]}
    violin = {"type": "violin", "label": None, "groups": [{"label": "v", "median": 1}]}
    chart = decoded(axes("line", line), axes("hist", hist), axes("violin", violin), suptitle="both")
    assert chart.type == ChartType.SUPERCHART and chart.title == "both"
    assert [c.type for c in chart.elements] == [
        ChartType.LINE,
        ChartType.UNKNOWN,
        ChartType.UNKNOWN,
    ]
    assert chart.elements[0].elements[0].points == [(0, 1), (1, 2)]


def test_nothing_drawn_is_no_chart() -> None:
    assert e2b_chart({"version": 1, "axes": [axes("empty")]}) is None
    assert e2b_chart("not a description") is None


@pytest.mark.parametrize(
    ("given", "relative"),
    [("/home/user/a.txt", "a.txt"), ("a/b.txt", "a/b.txt"), ("~/c", "c"), ("/home/user/./d", "d")],
)
def test_e2b_paths_map_into_the_workspace(given: str, relative: str) -> None:
    assert workspace_path(given) == relative


@pytest.mark.parametrize("given", ["/etc/passwd", "/home/user/../x", "/home/username/x"])
def test_paths_outside_the_home_are_refused(given: str) -> None:
    with pytest.raises(PathNotAllowed, match="outside /home/user"):
        workspace_path(given)


@pytest.mark.parametrize("given", ["", "/home/user", "a\x00b"])
def test_paths_that_name_no_file_are_refused(given: str) -> None:
    with pytest.raises(BadRequest):
        workspace_path(given)


def test_units_come_from_labels_and_scales_from_values() -> None:
    line = {"type": "line", "label": "s", "x": ["2023-09-01", "2023-09-02"], "y": [1.0, 2.0]}
    described = {**axes("line", line), "xlabel": "Time (s)", "ylabel": "Y-axis (log scale)"}
    chart = decoded(described)
    assert (chart.x_unit, chart.y_unit) == ("s", "log scale")
    assert (chart.x_scale, chart.y_scale) == ("datetime", "linear")
    points = {"type": "scatter", "label": None, "x": [1, 2], "y": ["low", "high"]}
    assert decoded(axes("scatter", points)).y_scale == "categorical"
    assert decoded(axes("scatter", points)).x_unit is None
    numbers = {"type": "line", "label": "e^x", "x": [0, 1, 2], "y": [1.0, 2.7, 7.4]}
    log_y = decoded({**axes("line", numbers), "yscale": "log"})
    assert (log_y.x_scale, log_y.y_scale) == ("linear", "log")
    # Our description writes whole numbers as integers; E2B's points are floats.
    assert log_y.elements[0].points == [(0.0, 1.0), (1.0, 2.7), (2.0, 7.4)]
    assert all(isinstance(v, float) for point in log_y.elements[0].points for v in point)
    assert decoded(axes("line", line)).elements[0].points[0] == ("2023-09-01", 1.0)


def test_string_results_lose_their_quotes_and_frames_give_columns() -> None:
    from interpreter.api.e2b.results import frame_data, plain_text

    assert plain_text("['a']") == "['a']"  # not a string: kept as the repr
    assert plain_text("'a\\nb'") == "a\nb"
    assert plain_text("42") == "42"
    summary = {"columns": [{"name": "a"}, {"name": "b"}], "rows": [[1, "x"], [2, "y"]]}
    assert frame_data(summary) == {"a": [1, 2], "b": ["x", "y"]}
