"""``matplotlib.use("Agg")`` keeps the inline backend: a cell's figures still come back.

Code written for scripts, and so much of what models write, starts with
``matplotlib.use("Agg")`` before plotting. In a kernel that switched the session away from
the inline backend for good: every later ``plt.show()`` showed nothing, with no word of
why, and the figures stayed open until something chose the inline backend again, when they
all came out in that later, unrelated cell. The inline backend draws with Agg and saves
files as Agg does (``savefig`` is the same), so a request for a backend that only writes
files is answered by keeping it. A GUI backend or a module path is passed on as asked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: Backends that only write files (matplotlib's names, in lower case).
FILE_BACKENDS = frozenset({"agg", "pdf", "svg", "ps", "pgf", "cairo", "template"})


def _keeping(switch: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(switch)
    def wrapper(backend: object, *args: Any, **kwargs: Any) -> Any:
        if isinstance(backend, str) and backend.lower() in FILE_BACKENDS:
            return None  # the inline backend already draws with Agg
        return switch(backend, *args, **kwargs)

    wrapper.__interp_keeps_inline__ = True  # type: ignore[attr-defined]
    return wrapper


def keep_inline_use(matplotlib: ModuleType) -> None:
    """For ``matplotlib`` once imported: ``matplotlib.use`` keeps the inline backend."""
    use = matplotlib.__dict__["use"]
    if not getattr(use, "__interp_keeps_inline__", False):
        matplotlib.use = _keeping(use)  # type: ignore[attr-defined]


def keep_inline_switch(pyplot: ModuleType) -> None:
    """For ``matplotlib.pyplot`` once imported: ``switch_backend`` keeps it too."""
    switch = pyplot.__dict__["switch_backend"]
    if not getattr(switch, "__interp_keeps_inline__", False):
        pyplot.switch_backend = _keeping(switch)  # type: ignore[attr-defined]
