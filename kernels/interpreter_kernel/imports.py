"""Run a callback right after a module is first imported, without importing it ourselves.

Display defaults for pandas must be in place before the user's first ``df`` is shown, which
can be in the very cell that imports pandas; importing pandas at kernel start to set them
would cost every session its import time and memory, used or not. So a finder on
``sys.meta_path`` wraps the module's loader, and the callback runs when the module has
finished executing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

Callback = Callable[[ModuleType], None]


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once module ``name`` has been imported.

    If it is already imported the callback runs now. Otherwise it runs right after the
    module's code has executed, on whatever import brings it in (also an indirect one).
    Exceptions from the callback are logged and never reach the importing code.

    Args:
        name: the absolute module name, e.g. ``"pandas"``.
        callback: receives the module object.
    """
    module = sys.modules.get(name)
    if module is not None:
        _run(callback, module)
        return
    _finder().add(name, callback)


def _run(callback: Callback, module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:
        log.warning("post-import callback for %s failed", module.__name__, exc_info=True)


_FINDER_LOCK = threading.Lock()


def _finder() -> _PostImportFinder:
    with _FINDER_LOCK:
        for finder in sys.meta_path:
            if isinstance(finder, _PostImportFinder):
                return finder
        finder = _PostImportFinder()
        sys.meta_path.insert(0, finder)
        return finder


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader the other finders return for watched names."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {}
        self._searching: set[str] = set()
        self._lock = threading.Lock()

    def add(self, name: str, callback: Callback) -> None:
        with self._lock:
            self._callbacks.setdefault(name, []).append(callback)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        with self._lock:
            if fullname not in self._callbacks or fullname in self._searching:
                return None
            self._searching.add(fullname)
        try:
            # Asks the whole meta path again; this finder answers None while searching.
            spec = importlib.util.find_spec(fullname)
        finally:
            with self._lock:
                self._searching.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        with self._lock:
            callbacks = self._callbacks.pop(fullname, [])
        if not callbacks:
            return None
        spec.loader = _NotifyingLoader(spec.loader, callbacks)
        return spec


class _NotifyingLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the callbacks and puts the real loader back."""

    def __init__(self, loader: importlib.abc.Loader, callbacks: list[Callback]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # Later reloads and introspection (importlib.resources, inspect) see the real loader.
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        for callback in self._callbacks:
            _run(callback, module)

    def __getattr__(self, name: str) -> Any:
        # get_resource_reader, is_package, get_source, ... of the real loader.
        return getattr(self._loader, name)
