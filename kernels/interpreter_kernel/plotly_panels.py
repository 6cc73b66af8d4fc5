"""Where each trace of a plotly figure is drawn: panels read from the layout's axis domains.

A plotly figure places its subplots (``make_subplots``, plotly express facets) by giving each
trace an axis pair (``xaxis: "x2"``, ``yaxis: "y2"``) whose layout entries (``xaxis2``,
``yaxis2``) hold a ``domain``: the part of the figure's width or height the axis spans. Pies
carry a ``domain`` of their own, and a secondary y axis ``overlaying`` another shares its
place. Subplot titles and facet labels are paper-positioned annotations above or beside a
panel. This module turns all that into :class:`Panel` objects, each with its cell in a grid,
for the matplotlib redraw in :mod:`interpreter_kernel.plotly_figure`. It draws nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Trace types placed by a ``domain`` of their own instead of an x/y axis pair.
DOMAIN_TYPES = {"pie", "sunburst", "treemap", "icicle", "funnelarea", "indicator", "table"}

#: How close (a fraction of the figure) two domain edges must be to count as one.
_EDGE = 0.005


@dataclass
class Panel:
    """One matplotlib axes of the redraw and the traces drawn on it."""

    xaxis: str
    yaxis: str
    #: x0, x1, y0, y1 as fractions of the figure, y upwards as in plotly.
    box: tuple[float, float, float, float]
    traces: list[dict[str, Any]] = field(default_factory=list)
    #: Subplot title and facet labels (``"c=p, r=a"``); empty when there are none.
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    #: The axis names whose scale this panel shares (plotly's ``matches``).
    matches_x: str = ""
    matches_y: str = ""
    hide_xticks: bool = False
    hide_yticks: bool = False
    #: ``"log"`` for an axis plotly draws on a log scale, else empty (linear, dates, ...).
    xscale: str = ""
    yscale: str = ""
    #: Index of the panel this one is drawn over (a secondary y axis), and which axis the
    #: two share: ``"x"`` (a second y axis) or ``"y"``.
    overlays: int | None = None
    shared: str = "x"
    #: row, column, rows spanned, columns spanned in the grid of :func:`grid_shape`.
    cell: tuple[int, int, int, int] = (0, 0, 1, 1)


def find_panels(traces: list[dict[str, Any]], layout: dict[str, Any]) -> list[Panel]:
    """The panels of a figure, those that stand on their own first, then the ones drawn
    over another (whose ``overlays`` indexes the returned list)."""
    by_key: dict[tuple[Any, ...], Panel] = {}
    for trace in traces:
        key = _key(trace)
        if key not in by_key:
            by_key[key] = _panel(key, layout)
        by_key[key].traces.append(trace)
    # An empty figure is one empty plot, titled like any other.
    found = list(by_key.values()) or [_panel(("x", "y"), layout)]
    axis_pairs = {(p.xaxis, p.yaxis): p for p in found}
    hosts: list[Panel] = []
    overlaid: list[tuple[Panel, Panel, str]] = []
    for panel in found:
        over_x = _axis(layout, panel.xaxis).get("overlaying")
        over_y = _axis(layout, panel.yaxis).get("overlaying")
        host = None
        if isinstance(over_y, str):
            host = axis_pairs.get((panel.xaxis, over_y))
        elif isinstance(over_x, str):
            host = axis_pairs.get((over_x, panel.yaxis))
        if host is not None and host is not panel:
            overlaid.append((panel, host, "x" if isinstance(over_y, str) else "y"))
        else:
            if isinstance(over_y, str) or isinstance(over_x, str):
                # Drawn over an axis pair that has no traces: take that pair's place.
                panel.box = _box(
                    layout, over_x if isinstance(over_x, str) else panel.xaxis,
                    over_y if isinstance(over_y, str) else panel.yaxis,
                )  # fmt: skip
            hosts.append(panel)
    for panel, host, shared in overlaid:
        panel.overlays = hosts.index(host)
        panel.shared = shared
    _place(hosts)
    _name(hosts, layout.get("annotations") or [])
    return hosts + [panel for panel, _, _ in overlaid]


def grid_shape(panels: list[Panel]) -> tuple[int, int]:
    """Rows and columns of the grid the panels were placed in."""
    rows = max((p.cell[0] + p.cell[2] for p in panels), default=1)
    columns = max((p.cell[1] + p.cell[3] for p in panels), default=1)
    return rows, columns


def text_of(node: Any) -> str:
    """A plotly title or annotation text: a string or ``{"text": ...}``."""
    if isinstance(node, dict):
        node = node.get("text")
    return str(node) if node else ""


def _key(trace: dict[str, Any]) -> tuple[Any, ...]:
    if trace.get("type") in DOMAIN_TYPES:
        domain = trace.get("domain") or {}
        return ("domain", *_span(domain.get("x")), *_span(domain.get("y")))
    return (str(trace.get("xaxis") or "x"), str(trace.get("yaxis") or "y"))


def _panel(key: tuple[Any, ...], layout: dict[str, Any]) -> Panel:
    if key[0] == "domain":
        return Panel("", "", box=(key[1], key[2], key[3], key[4]))
    xaxis, yaxis = str(key[0]), str(key[1])
    x_layout, y_layout = _axis(layout, xaxis), _axis(layout, yaxis)
    return Panel(
        xaxis,
        yaxis,
        box=_box(layout, xaxis, yaxis),
        xlabel=_title(layout, xaxis),
        ylabel=_title(layout, yaxis),
        matches_x=str(x_layout.get("matches") or ""),
        matches_y=str(y_layout.get("matches") or ""),
        hide_xticks=x_layout.get("showticklabels") is False,
        hide_yticks=y_layout.get("showticklabels") is False,
        xscale="log" if x_layout.get("type") == "log" else "",
        yscale="log" if y_layout.get("type") == "log" else "",
    )


def _axis(layout: dict[str, Any], name: str) -> dict[str, Any]:
    """The layout entry of an axis named as traces name it: ``"x2"`` is ``xaxis2``."""
    entry = layout.get(f"{name[:1]}axis{name[1:]}") if name else None
    return entry if isinstance(entry, dict) else {}


def _title(layout: dict[str, Any], name: str) -> str:
    """An axis' title, or that of the axis it ``matches`` (facets title only the outer ones)."""
    own = text_of(_axis(layout, name).get("title"))
    matches = _axis(layout, name).get("matches")
    return own or (text_of(_axis(layout, str(matches)).get("title")) if matches else "")


def _box(layout: dict[str, Any], xaxis: str, yaxis: str) -> tuple[float, float, float, float]:
    x0, x1 = _domain(layout, xaxis)
    y0, y1 = _domain(layout, yaxis)
    return (x0, x1, y0, y1)


def _domain(layout: dict[str, Any], name: str) -> tuple[float, float]:
    """An axis' domain, or its cell of ``layout.grid`` when the figure sets a grid instead
    (then plotly computes the domains in the browser)."""
    domain = _axis(layout, name).get("domain")
    if domain is not None:
        return _span(domain)
    grid, suffix = layout.get("grid"), name[1:]
    if not isinstance(grid, dict) or (suffix and not suffix.isdigit()):
        return (0.0, 1.0)
    rows, columns = int(grid.get("rows") or 0), int(grid.get("columns") or 0)
    index = int(suffix or 1) - 1
    coupled = grid.get("pattern") == "coupled"
    if name[:1] == "x" and columns > 0:
        column = index if coupled else index % columns
        return (column / columns, (column + 1) / columns) if column < columns else (0.0, 1.0)
    if name[:1] == "y" and rows > 0 and columns > 0:
        row = index if coupled else index // columns
        if row >= rows:
            return (0.0, 1.0)
        if grid.get("roworder") != "bottom to top":
            row = rows - 1 - row
        return (row / rows, (row + 1) / rows)
    return (0.0, 1.0)


def _span(domain: Any) -> tuple[float, float]:
    try:
        low, high = float(domain[0]), float(domain[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return (0.0, 1.0)
    return (low, high) if high > low else (0.0, 1.0)


def _place(panels: list[Panel]) -> None:
    """Give each panel a grid cell: one column per distinct left edge, one row per distinct
    top edge (from the top), a panel spanning the edges its domain covers."""
    lefts = _edges(p.box[0] for p in panels)
    tops = _edges((p.box[3] for p in panels), reverse=True)
    for panel in panels:
        x0, x1, y0, y1 = panel.box
        column = _index(lefts, x0)
        columns = sum(1 for edge in lefts if x0 - _EDGE < edge < x1 - _EDGE)
        row = _index(tops, y1)
        rows = sum(1 for edge in tops if y0 + _EDGE < edge < y1 + _EDGE)
        panel.cell = (row, column, max(rows, 1), max(columns, 1))


def _edges(values: Any, *, reverse: bool = False) -> list[float]:
    edges: list[float] = []
    for value in sorted(values, reverse=reverse):
        if not edges or abs(value - edges[-1]) > _EDGE:
            edges.append(value)
    return edges


def _index(edges: list[float], value: float) -> int:
    return min(range(len(edges)), key=lambda i: abs(edges[i] - value))


def _name(panels: list[Panel], annotations: list[Any]) -> None:
    """Title panels after the annotations plotly writes above them (subplot titles, facet
    columns) and beside their row (facet rows, turned 90 degrees)."""
    above: dict[int, str] = {}
    beside: dict[int, list[str]] = {}
    for note in annotations:
        if not isinstance(note, dict) or not note.get("text"):
            continue
        if note.get("xref", "x") != "paper" or note.get("yref", "y") != "paper":
            continue
        try:
            x, y = float(note.get("x", 0.5)), float(note.get("y", 0.5))
        except (TypeError, ValueError):
            continue
        text = text_of(note)
        if note.get("textangle") in (90, -90, 270):
            # A facet row label: it names every panel of the row it sits beside.
            for i, panel in enumerate(panels):
                if panel.box[2] - _EDGE <= y <= panel.box[3] + _EDGE and x >= panel.box[1] - _EDGE:
                    beside.setdefault(i, []).append(text)
            continue
        under = [
            (abs(y - panel.box[3]), i)
            for i, panel in enumerate(panels)
            if panel.box[0] - _EDGE <= x <= panel.box[1] + _EDGE
            and panel.box[3] - 0.02 <= y <= panel.box[3] + 0.15
        ]
        if under:
            above.setdefault(min(under)[1], text)
    # A facet column is labelled once, above its top panel: the panels below it whose x axis
    # matches that panel's (plotly express facets) are in the same column.
    for i, panel in enumerate(panels):
        if i in above:
            continue
        for j, top in above.items():
            other = panels[j]
            same_column = other.cell[1] == panel.cell[1] and other.cell[3] == panel.cell[3]
            matched = (other.matches_x or other.xaxis) == (panel.matches_x or panel.xaxis)
            if same_column and other.cell[0] < panel.cell[0] and matched and panel.xaxis:
                above[i] = top
                break
    for i, panel in enumerate(panels):
        texts = ([above[i]] if i in above else []) + beside.get(i, [])
        panel.title = ", ".join(texts)
