"""Our chart description (``application/vnd.chart+json``) in the shape E2B's SDK decodes.

E2B's ``Result.chart`` is one chart, or a ``superchart`` holding one per Axes. Line and
scatter series become point elements, bars become (label, group, value) elements, pie
wedges get their angle in degrees, box plots become ``box_and_whisker`` boxes (whisker ends
as min and max, the first 100 outliers). Axes kinds E2B has no type for (histograms,
violins, heatmaps, images, mixed axes) become ``unknown`` charts with their title, never a
wrong reading.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

#: A unit at the end of an axis label, as in "Time (s)" or "Y-axis (log scale)".
UNIT = re.compile(r"\(([^()]+)\)\s*$")


def e2b_chart(described: object) -> dict[str, Any] | None:
    """The E2B chart of a figure description, or None when there is nothing to show."""
    if not isinstance(described, dict):
        return None
    axes = [a for a in described.get("axes") or [] if isinstance(a, dict)]
    charts = [_axes_chart(a) for a in axes if a.get("kind") != "empty"]
    if not charts:
        return None
    if len(charts) == 1:
        return charts[0]
    title = described.get("suptitle")
    return {"type": "superchart", "title": title, "elements": charts}


def _axes_chart(axes: dict[str, Any]) -> dict[str, Any]:
    kind = axes.get("kind")
    series = [s for s in axes.get("series") or [] if isinstance(s, dict)]
    base: dict[str, Any] = {"title": axes.get("title")}
    two_d = {
        "x_label": axes.get("xlabel"),
        "y_label": axes.get("ylabel"),
        "x_unit": _unit(axes.get("xlabel")),
        "y_unit": _unit(axes.get("ylabel")),
    }
    if kind in ("line", "scatter"):
        elements = [
            {
                "label": s.get("label") or "",
                "points": [
                    [_coordinate(x), _coordinate(y)]
                    for x, y in zip(s.get("x") or [], s.get("y") or [], strict=False)
                ],
            }
            for s in series
        ]
        return {
            **base,
            **two_d,
            "type": kind,
            "x_ticks": [],
            "x_tick_labels": [],
            "x_scale": _scale(axes.get("xscale"), [v for s in series for v in s.get("x") or []]),
            "y_ticks": [],
            "y_tick_labels": [],
            "y_scale": _scale(axes.get("yscale"), [v for s in series for v in s.get("y") or []]),
            "elements": elements,
        }
    if kind in ("bar", "barh"):
        bars = [
            {"label": str(category), "group": s.get("label") or "", "value": value}
            for s in series
            for category, value in zip(
                s.get("categories") or [], s.get("values") or [], strict=False
            )
        ]
        return {**base, **two_d, "type": "bar", "elements": bars}
    if kind == "pie" and series:
        wedges = series[0]
        return {
            **base,
            "type": "pie",
            "elements": [
                {"label": str(label), "angle": round(float(size) * 360, 6), "radius": 1}
                for label, size in zip(
                    wedges.get("labels") or [], wedges.get("sizes") or [], strict=False
                )
                if isinstance(size, int | float)
            ],
        }
    if kind == "box":
        boxes = [_box(group) for s in series for group in s.get("groups") or []]
        elements = [box for box in boxes if box is not None]
        return {**base, **two_d, "type": "box_and_whisker", "elements": elements}
    return {**base, "type": "unknown", "elements": []}


#: E2B's box fields, from ours: min and max are the whiskers' ends.
BOX_FIELDS = {
    "min": "whisker_low",
    "first_quartile": "q1",
    "median": "median",
    "third_quartile": "q3",
    "max": "whisker_high",
}


def _box(group: object) -> dict[str, Any] | None:
    """One E2B box of a box-plot group; None without its five numbers."""
    if not isinstance(group, dict):
        return None
    numbers = {theirs: group.get(ours) for theirs, ours in BOX_FIELDS.items()}
    if not all(isinstance(v, int | float) for v in numbers.values()):
        return None
    outliers = group.get("outlier_values")
    return {
        "label": str(group.get("label") or ""),
        **numbers,
        "outliers": [v for v in outliers if isinstance(v, int | float)]
        if isinstance(outliers, list)
        else [],
    }


def _coordinate(value: object) -> object:
    """A point's coordinate as E2B gives it: a number is a float (our description writes
    whole numbers as integers, ``0`` for ``0.0``); dates and categories stay text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _unit(label: object) -> str | None:
    """The unit an axis label ends with in parentheses, as E2B reads it."""
    match = UNIT.search(label) if isinstance(label, str) else None
    return match.group(1).strip() if match else None


def _scale(described: object, values: list[Any]) -> str:
    """The axis's scale where the description names one (``log``, ``symlog``, ... E2B
    has the same names as matplotlib), else ``datetime`` for ISO dates (a date axis),
    ``categorical`` for other text, ``linear`` for numbers."""
    if isinstance(described, str) and described:
        return described
    texts = [v for v in values if isinstance(v, str)]
    if not texts or len(texts) < len(values):
        return "linear"
    try:
        for text in texts[:50]:
            date.fromisoformat(text[:10])
    except ValueError:
        return "categorical"
    return "datetime"
