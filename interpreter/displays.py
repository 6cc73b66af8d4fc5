"""Displays updated from a later cell: the earlier execution's output changes too.

``h = display("Hello", display_id="d1")`` in one cell and ``h.update("world")`` in the next
send ``update_display_data`` with the *next* cell as parent; a notebook front end updates
every output with that display id, wherever it is. The recorder of the running cell only
knows its own outputs, so the session keeps the recently finished executions that showed
a display with an id here, and applies such a message to them as well: their API outputs,
their stored record and their notebook cell then hold the updated display. A new
``display(..., display_id="d1")`` in a later cell updates the earlier ones the same way.
"""

from __future__ import annotations

from typing import Any

from interpreter.execution import ExecutionRecorder, RichEvent
from interpreter.handle import KEPT_CHARS, ExecutionHandle, held_chars
from interpreter.outputs import OutputCapture

#: Finished executions with display ids whose outputs later cells may still update.
KEPT_EXECUTIONS = 32
_DISPLAY_MESSAGES = ("update_display_data", "display_data")


def display_id_of(msg: dict[str, Any]) -> str | None:
    """The display id an iopub display or update message targets, if any."""
    header = msg.get("header") or {}
    if not isinstance(header, dict) or header.get("msg_type") not in _DISPLAY_MESSAGES:
        return None
    content = msg.get("content")
    transient = content.get("transient") if isinstance(content, dict) else None
    display_id = transient.get("display_id") if isinstance(transient, dict) else None
    return display_id if isinstance(display_id, str) and display_id else None


def _display_ids(rec: ExecutionRecorder) -> set[str]:
    ids = (rec.output(i).get("_display_id") for i in rec.rich_indexes())
    return {i for i in ids if isinstance(i, str)}


class EarlierDisplays:
    """The finished executions of one session whose displays have ids."""

    def __init__(self, capture: OutputCapture) -> None:
        self.capture = capture
        self._handles: dict[str, ExecutionHandle] = {}
        #: Their :func:`~interpreter.handle.held_chars` as they were kept.
        self._chars: dict[str, int] = {}

    def remember(self, handle: ExecutionHandle) -> None:
        """Keep a finished execution if it showed a display with an id."""
        rec = handle.recorder
        if rec is None or not _display_ids(rec):
            return
        newest = handle.execution.id
        self._handles.pop(newest, None)
        self._handles[newest] = handle
        self._chars[newest] = held_chars(handle.execution)
        # The last KEPT_EXECUTIONS, as far as they hold KEPT_CHARS (the newest whatever
        # its size): a display id in every cell of many small values held them all.
        for key in list(self._handles):
            if len(self._handles) <= KEPT_EXECUTIONS and sum(self._chars.values()) <= KEPT_CHARS:
                break
            if key != newest:
                del self._handles[key], self._chars[key]

    async def apply(
        self, msg: dict[str, Any], current: ExecutionHandle | None
    ) -> list[tuple[ExecutionHandle, list[dict[str, Any]]]]:
        """Apply a display message of the running cell to earlier executions showing the
        same display id. Returns each execution changed, with its new notebook outputs
        (its API record is updated here)."""
        display_id = display_id_of(msg)
        if display_id is None:
            return []
        update = {"header": {"msg_type": "update_display_data"}, "content": msg.get("content")}
        changed = []
        for handle in list(self._handles.values()):
            rec = handle.recorder
            if handle is current or rec is None or display_id not in _display_ids(rec):
                continue
            indexes = [e.index for e in rec.feed_iopub(update) if isinstance(e, RichEvent)]
            if not indexes:
                continue
            positions = {index: n for n, index in enumerate(rec.rich_indexes())}
            outputs = list(handle.execution.outputs)
            for index in indexes:
                output = await self.capture.output(rec, index)
                at = positions.get(index)
                if at is not None and at < len(outputs):
                    # Updated in place: it stays where it came among the printed text.
                    output = output.model_copy(update={"after": outputs[at].after})
                    outputs[at] = output
                handle.api_outputs[index] = output
            handle.execution.outputs = outputs
            changed.append((handle, self.capture.notebook_form(handle.execution, rec)))
        return changed
