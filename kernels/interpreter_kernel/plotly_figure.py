"""Plotly figures as a PNG and a chart description, made offline inside the kernel.

Plotly renders in the browser (plotly.js), so a notebook file, the HTML export and a model
that cannot run JavaScript see nothing of a figure. Plotly's own static export (kaleido)
needs a Chromium, which the image does not carry. Instead a plotly renderer named
``interp`` is added to the default one: it redraws the figure's traces from the figure's
own data with matplotlib (Agg, no pyplot, so the inline backend never shows it twice) and
returns ``image/png`` plus ``application/vnd.chart+json`` (kind, title, axis titles, traces
with their names and values) next to plotly's ``application/vnd.plotly.v1+json``.

The PNG is a faithful chart of the data, not plotly's styling: bar (grouped, stacked),
scatter and line, pie, histogram, box, violin and heatmap traces are drawn; other trace
types are named in the description and left out of the picture.
"""

from __future__ import annotations

import base64
import io
import logging
from types import ModuleType
from typing import Any

from .chart import chart_json
from .mime import CHART_MIME

log = logging.getLogger(__name__)

#: Resolution of the PNG: a 6.4 x 4.8 inch figure becomes 640 x 480 pixels.
DPI = 100

#: Trace types the redraw understands.
DRAWN = {"bar", "scatter", "scattergl", "pie", "histogram", "box", "violin", "heatmap"}


def configure_plotly(pio: ModuleType) -> None:
    """Register the ``interp`` renderer and add it to plotly's default renderer."""
    base = getattr(pio, "base_renderers", None)
    if base is None:
        return

    class InterpRenderer(base.MimetypeRenderer):  # type: ignore[misc, name-defined]
        def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, Any]:
            return figure_bundle(fig_dict)

    pio.renderers["interp"] = InterpRenderer()
    current = pio.renderers.default or "plotly_mimetype"
    if "interp" not in current.split("+"):
        pio.renderers.default = f"{current}+interp"


def figure_bundle(fig_dict: dict[str, Any]) -> dict[str, Any]:
    """``image/png`` (base64) and the chart description of a plotly figure dict; empty when
    the figure cannot be redrawn (a failure never reaches the user's cell)."""
    try:
        figure = redraw(fig_dict)
        chart = chart_json(figure) or {}
        chart["source"] = "plotly"
        skipped = sorted({str(t.get("type", "scatter")) for t in _traces(fig_dict)} - DRAWN)
        if skipped:
            chart["not_drawn"] = skipped
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
        return {
            "text/plain": _plain(fig_dict),
            "image/png": base64.b64encode(buffer.getvalue()).decode("ascii"),
            CHART_MIME: chart,
        }
    except Exception:
        log.debug("redrawing a plotly figure failed", exc_info=True)
        return {}


def _plain(fig_dict: dict[str, Any]) -> str:
    """A one-line text form: plotly figures have none but their long repr."""
    traces = _traces(fig_dict)
    kinds = sorted({str(t.get("type", "scatter")) for t in traces})
    title = _text((fig_dict.get("layout") or {}).get("title"))
    named = f" {title!r}" if title else ""
    return f"Plotly figure{named}: {len(traces)} trace(s) of type {', '.join(kinds) or 'none'}"


def _traces(fig_dict: dict[str, Any]) -> list[dict[str, Any]]:
    data = fig_dict.get("data") or []
    return [t for t in data if isinstance(t, dict)]


def _values(value: Any) -> list[Any]:
    """A trace's array as a list: plain lists, numpy arrays and plotly's typed arrays."""
    import numpy as np

    if value is None:
        return []
    if isinstance(value, dict) and "bdata" in value:
        raw = base64.b64decode(value["bdata"])
        array = np.frombuffer(raw, dtype=np.dtype(value.get("dtype", "f8")))
        shape = value.get("shape")
        if shape:
            dims = [int(n) for n in str(shape).split(",")] if isinstance(shape, str) else shape
            array = array.reshape(dims)
        return list(array.tolist())
    if hasattr(value, "tolist"):
        return list(value.tolist())
    return list(value)


def _text(node: Any) -> str:
    if isinstance(node, dict):
        node = node.get("text")
    return str(node) if node else ""


def redraw(fig_dict: dict[str, Any]) -> Any:
    """A matplotlib ``Figure`` drawing the traces of a plotly figure dict."""
    from matplotlib.figure import Figure

    layout = fig_dict.get("layout") or {}
    figure = Figure(figsize=(6.4, 4.8))
    ax = figure.add_subplot()
    traces = _traces(fig_dict)
    bars = [t for t in traces if t.get("type") == "bar"]
    mode = layout.get("barmode") or "group"
    _draw_bars(ax, bars, mode)
    for trace in traces:
        kind = trace.get("type", "scatter")
        name = trace.get("name") or None
        if kind in ("scatter", "scattergl"):
            x, y = _values(trace.get("x")), _values(trace.get("y"))
            if not x:
                x = list(range(len(y)))
            trace_mode = trace.get("mode") or ("lines" if len(y) > 20 else "lines+markers")
            style = "-" if "lines" in trace_mode else ""
            marker = "o" if "markers" in trace_mode else ""
            ax.plot(x, y, linestyle=style or "none", marker=marker or None, label=name)
        elif kind == "pie":
            values = _values(trace.get("values"))
            ax.pie(values, labels=[str(v) for v in _values(trace.get("labels"))])
        elif kind == "histogram":
            data = _values(trace.get("x")) or _values(trace.get("y"))
            bins = trace.get("nbinsx") or "auto"
            ax.hist(data, bins=bins, label=name)
        elif kind in ("box", "violin"):
            _draw_distribution(ax, trace, kind)
        elif kind == "heatmap":
            _draw_heatmap(ax, trace)
    ax.set_title(_text(layout.get("title")))
    ax.set_xlabel(_text((layout.get("xaxis") or {}).get("title")))
    ax.set_ylabel(_text((layout.get("yaxis") or {}).get("title")))
    if any(t.get("name") for t in traces if t.get("type") != "pie") and len(traces) > 1:
        ax.legend()
    return figure


def _draw_bars(ax: Any, bars: list[dict[str, Any]], mode: str) -> None:
    if not bars:
        return
    horizontal = bars[0].get("orientation") == "h"
    categories: list[Any] = []
    for trace in bars:
        for c in _values(trace.get("y" if horizontal else "x")):
            if c not in categories:
                categories.append(c)
    position = {c: i for i, c in enumerate(categories)}
    stacked = mode in ("stack", "relative")
    width = 0.8 if stacked or len(bars) == 1 or mode == "overlay" else 0.8 / len(bars)
    bottoms = [0.0] * len(categories)
    for n, trace in enumerate(bars):
        cats = _values(trace.get("y" if horizontal else "x"))
        values = _values(trace.get("x" if horizontal else "y"))
        if not cats:
            cats = categories = categories or list(range(len(values)))
            position = {c: i for i, c in enumerate(categories)}
            bottoms = bottoms or [0.0] * len(categories)
        where = [float(position[c]) for c in cats]
        if not stacked and mode != "overlay" and len(bars) > 1:
            where = [w - 0.4 + width * (n + 0.5) for w in where]
        base = [bottoms[position[c]] for c in cats] if stacked else None
        name = trace.get("name") or None
        if horizontal:
            ax.barh(where, values, height=width, left=base, label=name)
        else:
            ax.bar(where, values, width=width, bottom=base, label=name)
        if stacked:
            for c, v in zip(cats, values, strict=False):
                bottoms[position[c]] += float(v or 0)
    ticks = list(range(len(categories)))
    labels = [str(c) for c in categories]
    if horizontal:
        ax.set_yticks(ticks, labels)
    else:
        ax.set_xticks(ticks, labels)


def _draw_distribution(ax: Any, trace: dict[str, Any], kind: str) -> None:
    values = _values(trace.get("y")) or _values(trace.get("x"))
    groups = _values(trace.get("x")) if trace.get("y") is not None else []
    if groups and len(groups) == len(values):
        names = list(dict.fromkeys(groups))
        data = [[v for g, v in zip(groups, values, strict=True) if g == name] for name in names]
    else:
        names = [trace.get("name") or kind]
        data = [values]
    positions = list(range(1, len(data) + 1))
    if kind == "box":
        ax.boxplot(data, positions=positions)
    else:
        ax.violinplot(data, positions=positions, showmedians=True)
    ax.set_xticks(positions, [str(n) for n in names])


def _draw_heatmap(ax: Any, trace: dict[str, Any]) -> None:
    import numpy as np

    z = np.asarray(_values(trace.get("z")), dtype=float)
    ax.pcolormesh(z)
    x, y = _values(trace.get("x")), _values(trace.get("y"))
    if len(x) == z.shape[1]:
        ax.set_xticks([i + 0.5 for i in range(len(x))], [str(v) for v in x])
    if len(y) == z.shape[0]:
        ax.set_yticks([i + 0.5 for i in range(len(y))], [str(v) for v in y])
