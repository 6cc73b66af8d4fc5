"""Statistical marks (box plots, violins, seaborn heatmaps) recorded when they are drawn.

A box plot leaves only anonymous lines and patches on its Axes: read back from the artists
it looks like 28 line fragments. So the plotting calls that make such marks are wrapped
(``Axes.bxp``, which ``Axes.boxplot`` and seaborn's ``boxplot`` both use; ``Axes.violin``;
seaborn's ``violinplot`` and ``heatmap``): each call records what it drew, with its numbers
where the call has them, and which artists it added, so the chart description can name the
mark and leave its pieces out of the generic line and patch reading.

Nothing here imports matplotlib or seaborn: :func:`install` is run by the import hook when
the user's code imports them.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

#: Attribute set on a wrapped function, so wrapping twice is a no-op.
_WRAPPED = "__interp_chart_mark__"
#: Outlier values kept per box (``outliers`` still counts them all).
MAX_OUTLIER_VALUES = 100


@dataclass
class Mark:
    """One recorded plotting call on an Axes."""

    kind: str  # "box", "violin" or "heatmap"
    stats: list[dict[str, Any]] = field(default_factory=list)
    positions: list[float] = field(default_factory=list)
    horizontal: bool = False
    color: Any = None
    artists: set[int] = field(default_factory=set)


_marks: weakref.WeakKeyDictionary[Any, list[Mark]] = weakref.WeakKeyDictionary()


def marks_of(ax: Any) -> list[Mark]:
    """The marks recorded on ``ax``, in drawing order."""
    return list(_marks.get(ax, []))


def _artists(ax: Any) -> set[int]:
    return {id(a) for group in (ax.lines, ax.patches, ax.collections, ax.images) for a in group}


def _record(ax: Any, mark: Mark, before: set[int]) -> None:
    mark.artists = _artists(ax) - before
    _marks.setdefault(ax, []).append(mark)


def _wrap(owner: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = getattr(owner, name, None)
    if original is None or getattr(original, _WRAPPED, False):
        return
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _WRAPPED, True)
    setattr(owner, name, wrapper)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _box_stats(stats: Any) -> list[dict[str, Any]]:
    out = []
    for entry in stats:
        fliers = entry.get("fliers")
        kept = [_number(v) for v in (fliers if fliers is not None else [])]
        out.append(
            {
                "median": _number(entry.get("med")),
                "q1": _number(entry.get("q1")),
                "q3": _number(entry.get("q3")),
                "whisker_low": _number(entry.get("whislo")),
                "whisker_high": _number(entry.get("whishi")),
                "mean": _number(entry.get("mean")),
                "outliers": len(fliers) if fliers is not None else 0,
                "outlier_values": [v for v in kept if v is not None][:MAX_OUTLIER_VALUES],
                "label": str(entry["label"]) if entry.get("label") is not None else None,
            }
        )
    return out


def _violin_stats(stats: Any) -> list[dict[str, Any]]:
    return [
        {
            "median": _number(entry.get("median")),
            "mean": _number(entry.get("mean")),
            "min": _number(entry.get("min")),
            "max": _number(entry.get("max")),
            "label": None,
        }
        for entry in stats
    ]


def _is_horizontal(kwargs: dict[str, Any]) -> bool:
    if kwargs.get("orientation") is not None:
        return bool(kwargs["orientation"] == "horizontal")
    return kwargs.get("vert") is False


def _axes_method(
    kind: str, stats_name: str, summarise: Callable[[Any], list[dict[str, Any]]]
) -> Any:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            before = _artists(self)
            result = original(self, *args, **kwargs)
            try:
                stats = args[0] if args else kwargs.get(f"{stats_name}stats")
                summary = summarise(stats)
                positions = kwargs.get("positions")
                if positions is None and len(args) > 1:
                    positions = args[1]
                if positions is None:
                    positions = range(1, len(summary) + 1)
                mark = Mark(
                    kind,
                    summary,
                    [float(p) for p in positions],
                    horizontal=_is_horizontal(kwargs),
                    color=_first_face_color(result),
                )
                _record(self, mark, before)
            except Exception:
                log.debug("recording a %s mark failed", kind, exc_info=True)
            return result

        return call

    return make


def _first_face_color(result: Any) -> Any:
    if not isinstance(result, dict):
        return None
    for key in ("boxes", "bodies"):
        for artist in result.get(key) or []:
            getter = getattr(artist, "get_facecolor", None)
            if getter is not None:
                color = getter()
                # A collection answers with an array of colours; its first one names it.
                if hasattr(color, "ndim") and color.ndim == 2:
                    return tuple(color[0]) if len(color) else None
                return color
    return None


def _seaborn_function(kind: str) -> Any:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            import matplotlib.pyplot as plt

            ax = kwargs.get("ax") or plt.gca()
            before = _artists(ax)
            result = original(*args, **kwargs)
            try:
                target = result if hasattr(result, "collections") else ax
                _record(target, Mark(kind), before if target is ax else set())
            except Exception:
                log.debug("recording a %s mark failed", kind, exc_info=True)
            return result

        return call

    return make


def install_matplotlib(axes_module: ModuleType) -> None:
    """Wrap ``Axes.bxp`` and ``Axes.violin`` (run when ``matplotlib.axes`` is imported)."""
    axes_class = getattr(axes_module, "Axes", None)
    if axes_class is None:
        return
    _wrap(axes_class, "bxp", _axes_method("box", "bxp", _box_stats))
    _wrap(axes_class, "violin", _axes_method("violin", "vp", _violin_stats))


def install_seaborn(seaborn: ModuleType) -> None:
    """Wrap seaborn's ``violinplot`` and ``heatmap`` (its ``boxplot`` goes through ``bxp``)."""
    for name, kind in (("violinplot", "violin"), ("heatmap", "heatmap")):
        for owner in (
            seaborn,
            getattr(seaborn, "categorical", None),
            getattr(seaborn, "matrix", None),
        ):
            if owner is not None and hasattr(owner, name):
                _wrap(owner, name, _seaborn_function(kind))
