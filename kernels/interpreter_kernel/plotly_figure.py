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
types are named in the description and left out of the picture. Subplots and facets are
one matplotlib axes per panel, laid out by :mod:`interpreter_kernel.plotly_panels`.
"""

from __future__ import annotations

import base64
import io
import logging
from types import ModuleType
from typing import Any

from .chart import chart_json
from .mime import CHART_MIME
from .plotly_panels import Panel, find_panels, grid_shape, text_of

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
    title = text_of((fig_dict.get("layout") or {}).get("title"))
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


def redraw(fig_dict: dict[str, Any]) -> Any:
    """A matplotlib ``Figure`` drawing the traces of a plotly figure dict.

    Subplots and facets become a grid of axes placed as the layout's axis domains place
    them (:mod:`interpreter_kernel.plotly_panels`), each with its subplot or facet title,
    and a secondary y axis becomes a twin axes.
    """
    from matplotlib.figure import Figure

    layout = fig_dict.get("layout") or {}
    traces = _traces(fig_dict)
    panels = find_panels(traces, layout)
    colors = {id(trace): _color(trace, i) for i, trace in enumerate(traces)}
    rows, columns = grid_shape(panels)
    single = rows * columns == 1
    figure = Figure(figsize=_size(rows, columns), layout=None if single else "constrained")
    grid = figure.add_gridspec(rows, columns)
    drawn: list[Any] = []
    for panel in panels:
        if panel.overlays is not None:
            host = drawn[panel.overlays]
            ax = host.twinx() if panel.shared == "x" else host.twiny()
        else:
            row, column, row_span, column_span = panel.cell
            ax = figure.add_subplot(grid[row : row + row_span, column : column + column_span])
        drawn.append(ax)
    # Shared before drawing, so that each shared scale fits the data of all its panels.
    _share(panels, drawn)
    for panel, ax in zip(panels, drawn, strict=True):
        # A facet's traces are unnamed (the colour legend names them, if any): the facet
        # names them then, so the chart description says which panel holds which series.
        fallback = "" if single else panel.title
        looks = {id(t): _look(t, colors[id(t)], fallback) for t in panel.traces}
        _draw_panel(ax, panel.traces, str(layout.get("barmode") or "group"), looks)
        if panel.overlays is None:
            ax.set_title(panel.title)
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        if panel.xscale:
            ax.set_xscale(panel.xscale)
        if panel.yscale:
            ax.set_yscale(panel.yscale)
        if panel.hide_xticks:
            ax.tick_params(labelbottom=False)
        if panel.hide_yticks:
            ax.tick_params(labelleft=False)
    title = text_of(layout.get("title"))
    if single and drawn and not drawn[0].get_title():
        drawn[0].set_title(title)
    elif title:
        figure.suptitle(title)
    _legend(figure, traces, drawn, single)
    return figure


def _size(rows: int, columns: int) -> tuple[float, float]:
    """Inches: the default 6.4 x 4.8 up to a 2 x 2 grid, then 3.2 x 2.4 per panel, capped."""
    return (min(max(6.4, 3.2 * columns), 12.8), min(max(4.8, 2.4 * rows), 9.6))


def _color(trace: dict[str, Any], index: int) -> str:
    """The trace's own colour (plotly express gives one per colour group), else the next of
    the cycle in trace order across the whole figure, as plotly colours traces."""
    from matplotlib.colors import is_color_like

    for part in ("marker", "line"):
        color = (trace.get(part) or {}).get("color")
        if isinstance(color, str) and is_color_like(color):
            return color
    return f"C{index % 10}"


def _look(trace: dict[str, Any], color: str, fallback: str) -> dict[str, Any]:
    """Keyword arguments naming and colouring a trace's artists."""
    return {"label": trace.get("name") or fallback or None, "color": color}


def _draw_panel(
    ax: Any, traces: list[dict[str, Any]], barmode: str, looks: dict[int, dict[str, Any]]
) -> None:
    _draw_bars(ax, [t for t in traces if t.get("type") == "bar"], barmode, looks)
    for trace in traces:
        kind = trace.get("type", "scatter")
        look = looks[id(trace)]
        if kind in ("scatter", "scattergl"):
            x, y = _values(trace.get("x")), _values(trace.get("y"))
            if not x:
                x = list(range(len(y)))
            trace_mode = trace.get("mode") or ("lines" if len(y) > 20 else "lines+markers")
            style = "-" if "lines" in trace_mode else ""
            marker = "o" if "markers" in trace_mode else ""
            ax.plot(x, y, linestyle=style or "none", marker=marker or None, **look)
        elif kind == "pie":
            values = _values(trace.get("values"))
            ax.pie(values, labels=[str(v) for v in _values(trace.get("labels"))])
        elif kind == "histogram":
            data = _values(trace.get("x")) or _values(trace.get("y"))
            bins = trace.get("nbinsx") or "auto"
            ax.hist(data, bins=bins, **look)
        elif kind in ("box", "violin"):
            _draw_distribution(ax, trace, kind)
        elif kind == "heatmap":
            _draw_heatmap(ax, trace)


def _share(panels: list[Panel], drawn: list[Any]) -> None:
    """Panels whose axis ``matches`` another's share its scale, as plotly draws them."""
    by_x = {p.xaxis: ax for p, ax in zip(panels, drawn, strict=True) if p.xaxis}
    by_y = {p.yaxis: ax for p, ax in zip(panels, drawn, strict=True) if p.yaxis}
    for panel, ax in zip(panels, drawn, strict=True):
        other_x, other_y = by_x.get(panel.matches_x), by_y.get(panel.matches_y)
        # matplotlib refuses to share an axis twice (a twin already shares its host's).
        if (
            other_x is not None
            and other_x is not ax
            and len(ax.get_shared_x_axes().get_siblings(ax)) == 1
        ):
            ax.sharex(other_x)
        if (
            other_y is not None
            and other_y is not ax
            and len(ax.get_shared_y_axes().get_siblings(ax)) == 1
        ):
            ax.sharey(other_y)


def _legend(figure: Any, traces: list[dict[str, Any]], drawn: list[Any], single: bool) -> None:
    """One legend of the traces' own names (a facet's name is its title, not a legend
    entry), when there is more than one trace: on the axes of a single plot (its twin's
    series too), beside the grid of several."""
    names = {t.get("name") for t in traces if t.get("type") != "pie" and t.get("name")}
    if not names or len(traces) < 2:
        return
    if single and len(drawn) == 1:
        drawn[0].legend()
        return
    handles: dict[str, Any] = {}
    for ax in drawn:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label in names:
                handles.setdefault(label, handle)
    if not handles:
        return
    if single:
        drawn[0].legend(list(handles.values()), list(handles))
    else:
        figure.legend(list(handles.values()), list(handles), loc="outside right upper")


def _draw_bars(
    ax: Any, bars: list[dict[str, Any]], mode: str, looks: dict[int, dict[str, Any]]
) -> None:
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
        if horizontal:
            ax.barh(where, values, height=width, left=base, **looks[id(trace)])
        else:
            ax.bar(where, values, width=width, bottom=base, **looks[id(trace)])
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
