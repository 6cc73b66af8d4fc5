"""Figure-level parts of the chart description: how the Axes sit, what the legends call
each series, how bars are arranged, and summary statistics of a series' values.

Used by :mod:`interpreter_kernel.chart`; matplotlib is only touched through the objects the
user's figure already holds.
"""

from __future__ import annotations

import math
from typing import Any

#: Rounding of colours when series are matched with legend entries.
_COLOR_DIGITS = 3


def stats(values: Any) -> dict[str, Any] | None:
    """Count, min, max and mean of the finite numbers in ``values`` (all of them, not the
    sampled points), or ``None`` when there are none."""
    import numpy as np

    try:
        array = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan).ravel()
    except (TypeError, ValueError):
        return None
    finite = array[np.isfinite(array)]
    if finite.size == 0:
        return None
    return {
        "count": int(finite.size),
        "min": _round(finite.min()),
        "max": _round(finite.max()),
        "mean": _round(finite.mean()),
    }


def _round(value: Any) -> float | int:
    rounded = float(f"{float(value):.6g}")
    return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded


def bar_layout(series: list[dict[str, Any]]) -> str | None:
    """``"stacked"`` when bars of several series sit on each other, ``"grouped"`` when they
    stand side by side around the same categories; ``None`` for a single bar series."""
    bars = [s for s in series if s.get("type") in ("bar", "barh") and "_base" in s]
    if len(bars) < 2:
        return None
    for s in bars:
        _centers, bases = s["_base"]
        if any(abs(float(base)) > 0 for base in bases):
            return "stacked"
    first_centers = {round(float(c), 6) for c in bars[0]["_base"][0]}
    others = {round(float(c), 6) for s in bars[1:] for c in s["_base"][0]}
    return "grouped" if others and not others <= first_centers else "overlaid"


def _color_key(color: Any) -> tuple[float, ...] | None:
    if color is None:
        return None
    try:
        from matplotlib.colors import to_rgba

        return tuple(round(c, _COLOR_DIGITS) for c in to_rgba(color))
    except (ValueError, TypeError):
        return None


def _legend_colors(legend: Any) -> dict[tuple[float, ...], str]:
    names: dict[tuple[float, ...], str] = {}
    handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
    for handle, text in zip(handles, legend.get_texts(), strict=False):
        label = text.get_text()
        if not label:
            continue
        for getter in ("get_facecolor", "get_color", "get_markerfacecolor"):
            method = getattr(handle, getter, None)
            if method is None:
                continue
            color = method()
            if hasattr(color, "ndim") and color.ndim == 2:
                color = color[0] if len(color) else None
            key = _color_key(color)
            if key is not None and key[3] > 0:
                names.setdefault(key, label)
                break
    return names


def name_from_legends(fig: Any, axes: list[Any], described: list[dict[str, Any]]) -> None:
    """Give unnamed series the legend text drawn in their colour (seaborn's ``hue`` levels,
    pandas' columns), from the Axes' own legend or a figure legend; drop the colours."""
    figure_names: dict[tuple[float, ...], str] = {}
    for legend in getattr(fig, "legends", []):
        figure_names.update(_legend_colors(legend))
    for ax, description in zip(axes, described, strict=True):
        legend = ax.get_legend()
        names = {**figure_names, **(_legend_colors(legend) if legend is not None else {})}
        title = legend.get_title().get_text() if legend is not None else ""
        if title:
            description["legend_title"] = title
        for series in description["series"]:
            key = _color_key(series.pop("_color", None))
            if series.get("label") is None and key is not None and key in names:
                series["label"] = names[key]


def layout(axes: list[Any], described: list[dict[str, Any]]) -> None:
    """Mark subplot positions (``grid``: [row, column, rows, columns]) and twin axes
    (``twin_of``: the index of the Axes drawn at the same place)."""
    bounds: list[tuple[float, ...]] = []
    for ax, description in zip(axes, described, strict=True):
        spec = ax.get_subplotspec() if hasattr(ax, "get_subplotspec") else None
        if spec is not None:
            # A colorbar taken from an Axes (seaborn's heatmap) nests its spec in a grid of
            # its own: the position on the figure is that of the outermost spec.
            spec = spec.get_topmost_subplotspec()
            rows, columns = spec.get_gridspec().get_geometry()
            if rows * columns > 1:
                description["grid"] = [spec.rowspan.start, spec.colspan.start, rows, columns]
        box = tuple(round(v, 4) for v in ax.get_position().bounds)
        for index, other in enumerate(bounds):
            if all(math.isclose(a, b, abs_tol=1e-4) for a, b in zip(box, other, strict=True)):
                description["twin_of"] = index
                description.pop("grid", None)
                break
        bounds.append(box)
