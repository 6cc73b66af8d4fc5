"""The structured description of a matplotlib Figure (``application/vnd.chart+json``).

The schema is documented in :mod:`interpreter_kernel.mime`. The description is read from the
artists already on each Axes (lines, bar containers, collections, wedges, images); nothing
is drawn. matplotlib is only touched once the user's code has imported it.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .chart_layout import bar_layout as _bar_layout
from .chart_layout import layout as _layout
from .chart_layout import name_from_legends as _name_from_legends
from .chart_layout import stats as _stats
from .chart_marks import Mark, marks_of
from .jsonsafe import JSONScalar, cut, json_scalar
from .mime import SCHEMA_VERSION

#: Data points kept per series by default.
DEFAULT_MAX_POINTS = 1000
#: Largest 2-D image whose values are included.
MAX_IMAGE_CELLS = 400
#: Longest title, label or category kept.
MAX_TEXT_CHARS = 200

Decoder = Callable[[Any], JSONScalar]
Series = dict[str, Any]


def chart_json(fig: Any, *, max_points: int = DEFAULT_MAX_POINTS) -> dict[str, Any] | None:
    """Describe what a matplotlib Figure shows, for a reader that cannot see the image.

    Args:
        fig: any object; only ``matplotlib.figure.Figure`` instances are described.
        max_points: most data points kept per series.

    Returns:
        The JSON-safe description, or ``None`` when ``fig`` is not a Figure.
    """
    figure_module = sys.modules.get("matplotlib.figure")
    if figure_module is None or not isinstance(fig, figure_module.Figure):
        return None
    plotted = [ax for ax in fig.get_axes() if not _is_colorbar(ax)]
    axes = [_describe_axes(ax, max_points) for ax in plotted]
    _name_from_legends(fig, plotted, axes)
    _layout(plotted, axes)
    return {
        "version": SCHEMA_VERSION,
        "suptitle": _text(fig.get_suptitle()),
        "axes": axes,
        "truncated": any(series.get("truncated", False) for a in axes for series in a["series"]),
    }


def _is_colorbar(ax: Any) -> bool:
    return bool(ax.get_label() == "<colorbar>")


def _describe_axes(ax: Any, max_points: int) -> dict[str, Any]:
    if getattr(ax, "name", None) == "3d":
        return _describe_3d(ax, max_points)
    decode_x = _axis_decoder(ax.xaxis)
    decode_y = _axis_decoder(ax.yaxis)
    marks = marks_of(ax)
    owned = set().union(*(mark.artists for mark in marks)) if marks else set()
    series: list[Series] = []
    series += [_mark_series(ax, mark) for mark in marks]
    series += _lines(ax, decode_x, decode_y, max_points, owned)
    series += _bars(ax, max_points)
    series += _scatters(ax, decode_x, decode_y, max_points, owned)
    series += _pie(ax, max_points)
    series += _images(ax)
    series += _meshes(ax, owned, marks)
    _give_bars_their_intervals(series)
    titles = [ax.get_title(loc) for loc in ("left", "center", "right")]
    bar_layout = _bar_layout(series)
    for s in series:
        s.pop("_base", None)
    return {
        **({"bar_layout": bar_layout} if bar_layout else {}),
        "kind": _kind(ax, series),
        "title": _text(" | ".join(title for title in titles if title)),
        "xlabel": _text(ax.get_xlabel()),
        "ylabel": _text(ax.get_ylabel()),
        **_scales(ax),
        "series": series,
    }


def _scales(ax: Any) -> dict[str, str]:
    """``xscale``/``yscale`` of an axis that is not linear (``log``, ``symlog``, ``logit``,
    ...): a log axis read as a linear one is a wrong reading of every value on it."""
    scales = {}
    for name, get in (("xscale", ax.get_xscale), ("yscale", ax.get_yscale)):
        scale = get()
        if isinstance(scale, str) and scale != "linear":
            scales[name] = scale
    return scales


def _describe_3d(ax: Any, max_points: int) -> dict[str, Any]:
    """A 3-D Axes: its lines and scatters by their data (x, y and z), never by the 2-D
    projections matplotlib keeps for drawing them; surfaces and other 3-D artists are
    counted, not described."""
    series: list[Series] = []
    for line in ax.get_lines():
        data = getattr(line, "get_data_3d", None)
        if data is not None:
            series.append(_xyz_series("line", line.get_label(), *data(), max_points))
    described = 0
    for collection in ax.collections:
        offsets = getattr(collection, "_offsets3d", None)
        if offsets is not None and len(offsets) == 3:
            series.append(_xyz_series("scatter", collection.get_label(), *offsets, max_points))
            described += 1
    titles = [ax.get_title(loc) for loc in ("left", "center", "right")]
    return {
        "kind": "3d",
        "title": _text(" | ".join(title for title in titles if title)),
        "xlabel": _text(ax.get_xlabel()),
        "ylabel": _text(ax.get_ylabel()),
        "zlabel": _text(ax.get_zlabel()),
        "series": series,
        "other_artists": len(ax.collections) - described,
    }


def _xyz_series(kind: str, label: Any, x: Any, y: Any, z: Any, max_points: int) -> Series:
    n = min(len(x), len(y), len(z))
    indices = _sample(n, max_points)
    return {
        "type": kind,
        "label": _label(label),
        "x": _pick(x, indices, _number),
        "y": _pick(y, indices, _number),
        "z": _pick(z, indices, _number),
        "points": n,
        "truncated": len(indices) < n,
        "stats": _stats(z),
    }


def _give_bars_their_intervals(series: list[Series]) -> None:
    """Hand seaborn's error bars to the bars they were drawn for (in drawing order, one
    per bar, when they are as many and stand at the same categories), as ``low`` and
    ``high`` of each bar series; else keep them as a series of their own, after the bars."""
    found = [s for s in series if s["type"] == "errorbars"]
    if not found:
        return
    (bars_of_intervals,) = found
    series.remove(bars_of_intervals)
    bars = [s for s in series if s["type"] in ("bar", "barh") and not s.get("truncated")]
    xs = bars_of_intervals["x"]
    if not bars_of_intervals["truncated"] and [c for b in bars for c in b["categories"]] == xs:
        at = 0
        for bar in bars:
            n = len(bar["categories"])
            bar["low"] = bars_of_intervals["low"][at : at + n]
            bar["high"] = bars_of_intervals["high"][at : at + n]
            at += n
        return
    series.append(bars_of_intervals)


def _kind(ax: Any, series: list[Series]) -> str:
    # A seaborn heatmap is recorded as a mark and read from its mesh: one kind.
    series[:] = [s for s in series if not s.get("recorded") or len(series) == 1]
    types = {s["type"] for s in series} - {"errorbars"}  # they go with the bars
    if len(types) == 1:
        return str(types.pop())
    if types:
        return "mixed"
    if ax.lines or ax.patches or ax.collections or ax.images or ax.texts:
        return "unknown"
    return "empty"


# --- lines and scatters -----------------------------------------------------------------


def _lines(
    ax: Any, decode_x: Decoder, decode_y: Decoder, max_points: int, owned: set[int]
) -> list[Series]:
    errorbar_caps = _errorbar_caps(ax)
    out: list[Series] = []
    # seaborn draws a bar's error bar as a line of two points one above the other.
    intervals: list[tuple[JSONScalar, JSONScalar, JSONScalar]] = []
    orientations = {getattr(c, "orientation", None) for c in ax.containers}
    for line in ax.get_lines():
        # axhline/axvline live in axes coordinates, error bar caps are decoration, and the
        # whiskers and medians of a box plot belong to its mark.
        if line.get_transform() is not ax.transData or id(line) in errorbar_caps | owned:
            continue
        x, y = line.get_xdata(), line.get_ydata()
        if len(y) and all(_number(v) is None for v in y):
            continue  # every value NaN: it draws nothing (a bar of one sample's interval)
        if len(x) == 2 and len(y) == 2:
            # Across the bars' length only: a segment along it may be the user's own line.
            if "vertical" in orientations and x[0] == x[1]:
                intervals.append((decode_x(x[0]), *_span(y[0], y[1])))
                continue
            if "horizontal" in orientations and y[0] == y[1]:
                intervals.append((decode_y(y[0]), *_span(x[0], x[1])))
                continue
        markers_only = str(line.get_linestyle()).lower() in ("none", "", " ") and (
            str(line.get_marker()).lower() not in ("none", "", " ")
        )
        kind = "scatter" if markers_only else "line"
        if min(len(x), len(y)) == 0:
            # seaborn's legend proxies: lines without data.
            continue
        series = _xy_series(kind, line.get_label(), x, y, decode_x, decode_y, max_points)
        series["_color"] = line.get_color()
        out.append(series)
    if intervals:
        kept = intervals[:max_points]
        out.append(
            {
                "type": "errorbars",
                "label": None,
                "x": [i[0] for i in kept],
                "low": [i[1] for i in kept],
                "high": [i[2] for i in kept],
                "points": len(intervals),
                "truncated": len(kept) < len(intervals),
            }
        )
    return out


def _span(a: Any, b: Any) -> tuple[JSONScalar, JSONScalar]:
    low, high = _number(a), _number(b)
    if isinstance(low, int | float) and isinstance(high, int | float) and high < low:
        low, high = high, low
    return low, high


def _errorbar_caps(ax: Any) -> set[int]:
    from matplotlib.container import ErrorbarContainer

    caps: set[int] = set()
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            _data_line, caplines, _barlinecols = container.lines
            caps.update(id(cap) for cap in caplines)
    return caps


def _scatters(
    ax: Any, decode_x: Decoder, decode_y: Decoder, max_points: int, owned: set[int]
) -> list[Series]:
    from matplotlib.collections import PathCollection

    out: list[Series] = []
    for collection in ax.collections:
        if not isinstance(collection, PathCollection) or id(collection) in owned:
            continue
        if collection.get_offset_transform() is not ax.transData:
            continue
        offsets: Any = collection.get_offsets()
        if len(offsets) == 0:
            continue
        x, y = offsets[:, 0], offsets[:, 1]
        label = collection.get_label()
        series = _xy_series("scatter", label, x, y, decode_x, decode_y, max_points)
        colors = collection.get_facecolor()
        series["_color"] = tuple(colors[0]) if len(colors) == 1 else None
        out.append(series)
    return out


def _xy_series(
    kind: str,
    label: Any,
    x: Any,
    y: Any,
    decode_x: Decoder,
    decode_y: Decoder,
    max_points: int,
) -> Series:
    n = min(len(x), len(y))
    indices = _sample(n, max_points)
    return {
        "type": kind,
        "label": _label(label),
        "x": _pick(x, indices, decode_x),
        "y": _pick(y, indices, decode_y),
        "points": n,
        "truncated": len(indices) < n,
        "stats": _stats(y),
    }


def _sample(n: int, max_points: int) -> list[int]:
    """Evenly spaced indices into ``n`` points, first and last included."""
    if n <= max_points:
        return list(range(n))
    if max_points <= 1:
        return [0][:max_points]
    step = (n - 1) / (max_points - 1)
    return [round(i * step) for i in range(max_points)]


def _pick(values: Any, indices: Sequence[int], decode: Decoder) -> list[JSONScalar]:
    import numpy as np

    mask = np.ma.getmaskarray(values) if np.ma.isMaskedArray(values) else None
    data = np.ma.getdata(values) if mask is not None else values
    if not isinstance(data, np.ndarray):
        # Positional access: a pandas object would be indexed by label.
        data = data.to_numpy() if hasattr(data, "to_numpy") else list(data)
    return [None if mask is not None and mask[i] else decode(data[i]) for i in indices]


# --- bars and histograms ----------------------------------------------------------------


def _bars(ax: Any, max_points: int) -> list[Series]:
    from matplotlib.container import BarContainer

    out: list[Series] = []
    for container in ax.containers:
        if isinstance(container, BarContainer) and len(container.patches) > 0:
            out.append(_bar_series(ax, container, max_points))
    return out


def _bar_series(ax: Any, container: Any, max_points: int) -> Series:
    horizontal = container.orientation == "horizontal"
    patches = container.patches
    if horizontal:
        starts = [p.get_y() for p in patches]
        extents = [p.get_height() for p in patches]
        values = [p.get_width() for p in patches]
        position_axis = ax.yaxis
    else:
        starts = [p.get_x() for p in patches]
        extents = [p.get_width() for p in patches]
        values = [p.get_height() for p in patches]
        position_axis = ax.xaxis
    n = len(patches)
    shown = min(n, max_points)
    label = _label(container.get_label())

    if _looks_like_histogram(position_axis, starts, extents):
        decode = _axis_decoder(position_axis)
        edges = [*starts[:shown], starts[shown - 1] + extents[shown - 1]]
        return {
            "_color": patches[0].get_facecolor(),
            "type": "hist",
            "label": label,
            "orientation": "horizontal" if horizontal else "vertical",
            "bin_edges": [decode(edge) for edge in edges],
            "counts": [_number(value) for value in values[:shown]],
            "points": n,
            "truncated": shown < n,
        }
    centers = [start + extent / 2 for start, extent in zip(starts, extents, strict=True)]
    bases = [p.get_x() if horizontal else p.get_y() for p in patches]
    return {
        "type": "barh" if horizontal else "bar",
        "label": label,
        "categories": _categories(position_axis, centers[:shown]),
        "values": [_number(value) for value in values[:shown]],
        "points": n,
        "truncated": shown < n,
        "stats": _stats(values),
        "_color": patches[0].get_facecolor(),
        "_base": (centers, bases),
    }


def _looks_like_histogram(axis: Any, starts: list[float], extents: list[float]) -> bool:
    """Bars that touch each other on a plain numeric axis are histogram bins.

    ``Axes.hist`` draws through ``Axes.bar`` and leaves no mark of its own, so this is a
    judgement from the geometry: categorical or explicitly ticked bars are bar charts, and
    bar charts normally leave gaps between bars.
    """
    if len(starts) < 2 or _has_explicit_ticks(axis):
        return False
    span = abs(starts[-1] + extents[-1] - starts[0]) or 1.0
    return all(
        abs(starts[i] + extents[i] - starts[i + 1]) <= 1e-6 * span for i in range(len(starts) - 1)
    )


def _has_explicit_ticks(axis: Any) -> bool:
    from matplotlib.category import StrCategoryLocator
    from matplotlib.ticker import FixedLocator

    return isinstance(axis.get_major_locator(), FixedLocator | StrCategoryLocator)


def _categories(axis: Any, centers: list[float]) -> list[JSONScalar]:
    """Name each bar after the tick label under it, or else by its decoded position."""
    decode = _axis_decoder(axis)
    if not _has_explicit_ticks(axis):
        return [decode(center) for center in centers]
    ticks = [float(tick) for tick in axis.get_majorticklocs()]
    labels = [label.get_text() for label in axis.get_majorticklabels()]
    if not ticks or len(ticks) != len(labels):
        return [decode(center) for center in centers]
    gaps = [b - a for a, b in itertools.pairwise(sorted(ticks)) if b > a]
    # Grouped bars sit beside their tick, never further than half the tick spacing.
    reach = min(gaps) / 2 if gaps else 0.5
    out: list[JSONScalar] = []
    for center in centers:
        distance, position = min((abs(tick - center), i) for i, tick in enumerate(ticks))
        text = labels[position]
        out.append(cut(text, MAX_TEXT_CHARS) if distance <= reach and text else decode(center))
    return out


# --- pies and images --------------------------------------------------------------------


def _pie(ax: Any, max_points: int) -> list[Series]:
    from matplotlib.patches import Wedge

    wedges = [patch for patch in ax.patches if isinstance(patch, Wedge)]
    if not wedges:
        return []
    shown = wedges[:max_points]
    return [
        {
            "type": "pie",
            "labels": [_label(wedge.get_label()) for wedge in shown],
            "sizes": [_number((wedge.theta2 - wedge.theta1) / 360.0) for wedge in shown],
            "points": len(wedges),
            "truncated": len(shown) < len(wedges),
        }
    ]


def _images(ax: Any) -> list[Series]:
    out: list[Series] = []
    for image in ax.get_images():
        array = image.get_array()
        if array is None:
            continue
        series: Series = {"type": "image", "shape": list(array.shape[:2])}
        series.update(_grid_values(array))
        # A 2-D array drawn through a colour map is a heatmap; RGB(A) pixels are a picture.
        series["heatmap"] = array.ndim == 2
        out.append(series)
    return out


def _grid_values(array: Any) -> dict[str, Any]:
    import numpy as np

    values = None
    if array.ndim == 2 and array.size <= MAX_IMAGE_CELLS:
        filled: Any = np.ma.filled(np.ma.asarray(array, dtype=float), np.nan)
        values = [[_number(value) for value in row] for row in filled.tolist()]
    return {"values": values, "stats": _stats(array) if array.ndim == 2 else None}


def _meshes(ax: Any, owned: set[int], marks: list[Mark]) -> list[Series]:
    """``pcolormesh`` grids (seaborn's ``heatmap``): shape, values or stats, and the row
    and column names from the tick labels."""
    from matplotlib.collections import QuadMesh

    heatmap_artists = set().union(*(m.artists for m in marks if m.kind == "heatmap"))
    out: list[Series] = []
    for mesh in ax.collections:
        if not isinstance(mesh, QuadMesh):
            continue
        if id(mesh) in owned and id(mesh) not in heatmap_artists:
            continue
        array = mesh.get_array()
        if array is None:
            continue
        if array.ndim == 1:
            rows, columns = mesh.get_coordinates().shape[:2]
            array = array.reshape(rows - 1, columns - 1)
        series: Series = {"type": "heatmap", "shape": list(array.shape[:2])}
        series.update(_grid_values(array))
        series["rows"] = _tick_texts(ax.yaxis, array.shape[0])
        series["columns"] = _tick_texts(ax.xaxis, array.shape[1])
        out.append(series)
    return out


def _tick_texts(axis: Any, n: int) -> list[str] | None:
    if not _has_explicit_ticks(axis):
        return None
    texts = [cut(label.get_text(), MAX_TEXT_CHARS) for label in axis.get_majorticklabels()]
    return texts if len(texts) == n and any(texts) else None


def _mark_series(ax: Any, mark: Mark) -> Series:
    """A recorded box plot, violin plot or heatmap, its groups named after their ticks."""
    if mark.kind == "heatmap":
        return {"type": "heatmap", "recorded": True}
    axis = ax.yaxis if mark.horizontal else ax.xaxis
    names = _categories(axis, mark.positions) if mark.positions else []
    if not mark.stats:
        # seaborn's violins carry no numbers we can read back: name the groups.
        axis = (
            ax.yaxis
            if _has_explicit_ticks(ax.yaxis) and not _has_explicit_ticks(ax.xaxis)
            else ax.xaxis
        )
        names = [label.get_text() for label in axis.get_majorticklabels()]
        mark.stats = [{"label": name} for name in names if name]
    groups = []
    for i, entry in enumerate(mark.stats):
        group = {k: _number(v) if isinstance(v, float) else v for k, v in entry.items()}
        if group.get("label") is None and i < len(names):
            group["label"] = names[i]
        groups.append(group)
    return {
        "type": mark.kind,
        "label": None,
        "orientation": "horizontal" if mark.horizontal else "vertical",
        "groups": groups,
        "points": len(groups),
        "truncated": False,
        "_color": mark.color,
    }


# --- values -----------------------------------------------------------------------------


def _axis_decoder(axis: Any) -> Decoder:
    """A function turning a value on ``axis`` into what the reader of the chart sees.

    Numbers on a date axis become ISO dates, pandas period ordinals become periods, positions
    on a categorical axis become category names. Anything else is a rounded number or JSON
    scalar.
    """
    getter = getattr(axis, "get_converter", None)
    converter = getter() if getter is not None else getattr(axis, "converter", None)
    name = type(converter).__name__ if converter is not None else ""

    if name == "PeriodConverter":
        pd = sys.modules.get("pandas")
        freq = getattr(axis, "freq", None) or getattr(axis.get_major_formatter(), "freq", None)
        if pd is not None and freq is not None:
            return _when_number(lambda v: str(pd.Period(ordinal=round(v), freq=freq)))
    if "Date" in name:
        from matplotlib import dates

        num2date: Callable[[float], Any] = dates.num2date
        # matplotlib's date numbers are UTC; drop the "+00:00" so they read like data values.
        return _when_number(lambda v: num2date(v).replace(tzinfo=None).isoformat())
    if name == "StrCategoryConverter":
        formatter = axis.get_major_formatter()
        return _when_number(lambda v: str(formatter(v)) or _number(v))
    return _number


def _when_number(convert: Callable[[float], JSONScalar]) -> Decoder:
    """Apply ``convert`` to finite real numbers; other values go through :func:`_number`."""

    def decode(value: Any) -> JSONScalar:
        plain = json_scalar(value, max_chars=MAX_TEXT_CHARS)
        if isinstance(plain, int | float) and not isinstance(plain, bool):
            try:
                return convert(plain)
            except (ValueError, OverflowError, TypeError):
                return _number(plain)
        return plain

    return decode


def _number(value: Any) -> JSONScalar:
    """A JSON scalar with floats rounded to 6 significant digits."""
    plain = json_scalar(value, max_chars=MAX_TEXT_CHARS)
    if isinstance(plain, float):
        rounded = float(f"{plain:.6g}")
        return int(rounded) if rounded.is_integer() and abs(rounded) < 2**53 else rounded
    return plain


def _text(value: Any) -> str | None:
    """A title or axis label; empty becomes ``None``."""
    if not value:
        return None
    return cut(str(value), MAX_TEXT_CHARS)


def _label(value: Any) -> str | None:
    """A user-given label, or ``None`` for matplotlib's generated ones (``_child0``)."""
    if not isinstance(value, str) or not value or value.startswith("_"):
        return None
    return cut(value, MAX_TEXT_CHARS)
