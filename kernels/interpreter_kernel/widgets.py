"""Widgets (ipywidgets, tqdm's notebook bars) end a cell as their final text.

A widget is displayed once; everything after that (a progress bar advancing to 100 %)
travels as widget state over comm messages, which a notebook file, the HTML export and a
language model never see. What they keep is the ``text/plain`` of the first display:
``work:   0%|          | 0/50``. So each widget display gets a display id, and when the
cell ends (``post_execute``) every widget displayed in it is displayed again as an update
of that id, with the widget's state as it is then: ``work: 100%|██████████| 50/50``.
"""

from __future__ import annotations

import logging
import sys
import uuid
from typing import Any

log = logging.getLogger(__name__)

#: The MIME type a widget view is displayed as.
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

#: Widget displays tracked per cell at most (a loop that displays thousands of widgets
#: keeps the first ones up to date).
MAX_TRACKED = 200


class FinalWidgetState:
    """Wraps a shell's display publisher to track widget displays of the running cell."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.publisher = shell.display_pub
        self._publish = self.publisher.publish
        self.shown: dict[str, str] = {}  # display id -> widget model id

    @classmethod
    def install(cls, shell: Any) -> FinalWidgetState | None:
        """Start tracking on ``shell``; ``None`` if it has no display publisher to wrap."""
        publisher = getattr(shell, "display_pub", None)
        if publisher is None or getattr(publisher, "_interp_widgets", None) is not None:
            return None
        tracker = cls(shell)
        publisher.publish = tracker.publish
        publisher._interp_widgets = tracker
        shell.events.register("post_execute", tracker.finish_cell)
        return tracker

    def publish(self, data: Any, metadata: Any = None, **kwargs: Any) -> Any:
        """Publish as usual; a widget view without a display id gets one, and is tracked."""
        view = data.get(WIDGET_VIEW_MIME) if isinstance(data, dict) else None
        transient = kwargs.get("transient") or {}
        model_id = view.get("model_id") if isinstance(view, dict) else None
        if (
            isinstance(model_id, str)
            and not kwargs.get("update")
            and not transient.get("display_id")
            and len(self.shown) < MAX_TRACKED
        ):
            display_id = f"interp-widget-{uuid.uuid4().hex}"
            kwargs["transient"] = {**transient, "display_id": display_id}
            self.shown[display_id] = model_id
        return self._publish(data, metadata, **kwargs)

    def finish_cell(self) -> None:
        """Update every widget display of the cell to the widget's current text."""
        shown, self.shown = self.shown, {}
        module = sys.modules.get("ipywidgets.widgets.widget")
        instances = getattr(module, "_instances", None)
        if not shown or not isinstance(instances, dict):
            return
        formatter = self.shell.display_formatter
        for display_id, model_id in shown.items():
            widget = instances.get(model_id)
            if widget is None:
                continue
            try:
                data, metadata = formatter.format(widget)
                self._publish(data, metadata, transient={"display_id": display_id}, update=True)
            except Exception:
                log.debug("updating widget display %s failed", display_id, exc_info=True)
