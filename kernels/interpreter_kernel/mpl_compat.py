"""``boxplot(labels=...)`` keeps working on a matplotlib that renamed it ``tick_labels``.

matplotlib 3.9 renamed ``boxplot``'s ``labels`` to ``tick_labels`` and 3.11 removed the
old name: ``plt.boxplot(data, labels=names)`` raises ``TypeError``. Code written by models
(trained on the older name) and E2B's own examples use it. Here ``labels`` is taken as
``tick_labels`` when the installed matplotlib has no ``labels`` and the call gives no
``tick_labels``; nothing changes on a matplotlib that still accepts it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

_MARK = "_interp_accepts_labels"


def accept_labels(owner: Any, name: str = "boxplot") -> None:
    """Let ``owner.name`` (``Axes.boxplot``, ``pyplot.boxplot``) take ``labels=``."""
    original: Callable[..., Any] | None = getattr(owner, name, None)
    if original is None or getattr(original, _MARK, False):
        return
    try:
        parameters = inspect.signature(original).parameters
    except (TypeError, ValueError):
        return
    if "labels" in parameters or "tick_labels" not in parameters:
        return

    @functools.wraps(original)
    def boxplot(*args: Any, **kwargs: Any) -> Any:
        if "labels" in kwargs and "tick_labels" not in kwargs:
            kwargs["tick_labels"] = kwargs.pop("labels")
        return original(*args, **kwargs)

    setattr(boxplot, _MARK, True)
    setattr(owner, name, boxplot)


def install_axes(axes_module: ModuleType) -> None:
    """For ``matplotlib.axes`` once imported."""
    axes_class = getattr(axes_module, "Axes", None)
    if axes_class is not None:
        accept_labels(axes_class)


def install_pyplot(pyplot: ModuleType) -> None:
    """For ``matplotlib.pyplot`` once imported."""
    accept_labels(pyplot)
