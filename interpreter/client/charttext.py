"""The text a model reads of an ``application/vnd.chart+json`` value.

One line per Axes: its kind (stacked or grouped bars, box plot, heatmap, ...), title, axis
labels, where it sits (subplot, twin axes), then each series by name: its values when it
has at most :data:`MAX_VALUES` points, else its count, min, max and mean.
"""

from __future__ import annotations

from typing import Any

#: Series with at most this many points are given value by value.
MAX_VALUES = 20
#: Series described per Axes at most.
MAX_SERIES = 8


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _stats(stats: dict[str, Any] | None, what: str = "", points: Any = None) -> str:
    if not stats:
        return f"{points} points" if points is not None else "no numeric values"
    prefix = f"{what} " if what else ""
    return (
        f"{stats.get('count')} values, {prefix}min {_num(stats.get('min'))}, "
        f"max {_num(stats.get('max'))}, mean {_num(stats.get('mean'))}"
    )


def _pairs(keys: list[Any], values: list[Any]) -> str:
    return ", ".join(f"{_num(k)}={_num(v)}" for k, v in zip(keys, values, strict=False))


def _x_span(xs: list[Any], sampled: object) -> str:
    """Where the x values lie: first to last when they run one way (a time series), else
    their smallest and largest (a scatter's first and last x said nothing of its range)."""
    if not xs:
        return ""
    numbers = [x for x in xs if isinstance(x, int | float) and not isinstance(x, bool)]
    if len(numbers) < len(xs) or numbers == sorted(numbers) or numbers == sorted(numbers)[::-1]:
        return f"; x from {_num(xs[0])} to {_num(xs[-1])}"
    among = f" (of {len(numbers)} sampled)" if sampled else ""
    return f"; x between {_num(min(numbers))} and {_num(max(numbers))}{among}"


def _series_text(s: dict[str, Any]) -> str:
    kind = s.get("type")
    points = s.get("points")
    shown = s.get("values") or s.get("y") or s.get("counts") or s.get("sizes") or []
    # Values one by one only when all of them are here (a description may cut a series).
    small = isinstance(points, int) and points <= MAX_VALUES and len(shown) == points
    if kind in ("bar", "barh"):
        if small and s.get("low") and s.get("high"):
            spans = zip(s.get("values") or [], s["low"], s["high"], strict=False)
            labelled = [f"{_num(v)} (error bar {_num(lo)} to {_num(hi)})" for v, lo, hi in spans]
            return _pairs(s.get("categories") or [], labelled)
        if small:
            return _pairs(s.get("categories") or [], s.get("values") or [])
        return _stats(s.get("stats"), points=points)
    if kind in ("line", "scatter") and "z" in s:
        if small:
            xs, ys, zs = s.get("x") or [], s.get("y") or [], s.get("z") or []
            points3d = zip(xs, ys, zs, strict=False)
            return ", ".join(f"({_num(x)}, {_num(y)}, {_num(z)})" for x, y, z in points3d)
        return f"{points} points (x, y, z), z: {_stats(s.get('stats'))}"
    if kind in ("line", "scatter"):
        if small:
            xs, ys = s.get("x") or [], s.get("y") or []
            return ", ".join(f"({_num(x)}, {_num(y)})" for x, y in zip(xs, ys, strict=False))
        span = _x_span([x for x in (s.get("x") or []) if x is not None], s.get("truncated"))
        if not s.get("stats"):
            return f"{points} points{span}"
        return f"{points} points, y: {_stats(s.get('stats'))}{span}"
    if kind == "errorbars":
        spans = zip(s.get("x") or [], s.get("low") or [], s.get("high") or [], strict=False)
        bars = [f"{_num(x)} {_num(lo)} to {_num(hi)}" for x, lo, hi in spans]
        more = (
            f", ... {points - MAX_VALUES} more"
            if isinstance(points, int) and points > MAX_VALUES
            else ""
        )
        return ", ".join(bars[:MAX_VALUES]) + more
    if kind == "hist":
        edges, counts = s.get("bin_edges") or [], s.get("counts") or []
        head = f"{len(counts)} bins from {_num(edges[0])} to {_num(edges[-1])}" if edges else ""
        if small:
            return f"{head}, counts {', '.join(_num(c) for c in counts)}"
        return f"{head}, total count {sum(c for c in counts if isinstance(c, int | float))}"
    if kind == "pie":
        sizes = [
            f"{size * 100:.1f}%" if isinstance(size, int | float) else "?"
            for size in s.get("sizes") or []
        ]
        return _pairs(s.get("labels") or [], sizes)
    if kind in ("box", "violin"):
        return "; ".join(_group_text(g) for g in s.get("groups") or []) or "no groups"
    if kind in ("heatmap", "image"):
        shape = "x".join(str(n) for n in s.get("shape") or []) or "?"
        text = f"{shape} grid"
        if s.get("rows"):
            text += f", rows {', '.join(map(str, s['rows']))}"
        if s.get("columns"):
            text += f", columns {', '.join(map(str, s['columns']))}"
        values = s.get("values")
        if values and sum(len(row) for row in values) <= MAX_VALUES:
            text += ", values " + "; ".join(", ".join(_num(v) for v in row) for row in values)
        elif s.get("stats"):
            text += ", " + _stats(s["stats"])
        elif kind == "image" and not s.get("heatmap"):
            text += " (a picture)"
        return text
    return f"{points} points" if points is not None else str(kind)


def _group_text(group: dict[str, Any]) -> str:
    name = group.get("label") or "?"
    parts = []
    if group.get("median") is not None:
        parts.append(f"median {_num(group['median'])}")
    if group.get("q1") is not None:
        parts.append(f"quartiles {_num(group['q1'])} to {_num(group.get('q3'))}")
    if group.get("whisker_low") is not None:
        parts.append(f"whiskers {_num(group['whisker_low'])} to {_num(group.get('whisker_high'))}")
    if group.get("min") is not None:
        parts.append(f"range {_num(group['min'])} to {_num(group.get('max'))}")
    if group.get("outliers"):
        count = group["outliers"]
        parts.append(f"{count} outlier{'' if count == 1 else 's'}")
    return f"{name}: {', '.join(parts)}" if parts else str(name)


def _kind_text(ax: dict[str, Any]) -> str:
    kind = str(ax.get("kind", "unknown"))
    names = {
        "box": "box plot",
        "violin": "violin plot",
        "hist": "histogram",
        "barh": "horizontal bar",
        "3d": "3-D plot",
    }
    text = names.get(kind, kind)
    if ax.get("bar_layout") in ("stacked", "grouped"):
        text = f"{ax['bar_layout']} {text}"
    if kind == "image" and any(s.get("heatmap") for s in ax.get("series") or []):
        text = "heatmap (image)"
    return text


def chart_summary(chart: dict[str, Any]) -> str:
    """One line per Axes describing an ``application/vnd.chart+json`` value."""
    lines = []
    source = " (plotly)" if chart.get("source") == "plotly" else ""
    if chart.get("suptitle") or source:
        lines.append(f"Figure{source}: {chart.get('suptitle') or ''}".rstrip(": "))
    for n, ax in enumerate(chart.get("axes") or [], start=1):
        desc = f"plot {n}: {_kind_text(ax)}"
        if ax.get("title"):
            desc += f" titled {ax['title']!r}"
        named = (("x", "xlabel"), ("y", "ylabel"), ("z", "zlabel"))
        labels = [f"{name}={ax[key]!r}" for name, key in named if ax.get(key)]
        if labels:
            desc += " (" + ", ".join(labels) + ")"
        scaled = (("x", "xscale"), ("y", "yscale"))
        scales = [f"{name} on a {ax[key]} scale" for name, key in scaled if ax.get(key)]
        if scales:
            desc += ", " + ", ".join(scales)
        if isinstance(ax.get("twin_of"), int):
            desc += f", twin axes over plot {ax['twin_of'] + 1} (same x, own y axis)"
        grid = ax.get("grid")
        if isinstance(grid, list) and len(grid) == 4:
            desc += f", subplot row {grid[0] + 1} column {grid[1] + 1} of {grid[2]}x{grid[3]}"
        series = ax.get("series") or []
        for s in series[:MAX_SERIES]:
            name = s.get("label")
            title = f"series {name!r}" if name else "series"
            if s.get("type") == "errorbars":
                title = "error bars"
            desc += f"\n  {title}: {_series_text(s)}"
        if len(series) > MAX_SERIES:
            desc += f"\n  ... {len(series) - MAX_SERIES} more series"
        if ax.get("other_artists"):
            desc += f"\n  ({ax['other_artists']} surface(s) or other 3-D artists, not described)"
        if ax.get("legend_title"):
            desc += f"\n  (legend: {ax['legend_title']})"
        lines.append(desc)
    if chart.get("not_drawn"):
        lines.append(f"(trace types not drawn in the image: {', '.join(chart['not_drawn'])})")
    return "\n".join(lines) if lines else "a figure"
