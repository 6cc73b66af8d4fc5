"""Execution events on the wire: each typed event as one server-sent event.

The payloads are the models the SDK decodes them with (``interpreter.models``), one JSON
object per event, so a newline in output can never break the framing (docs/security.md
H-47).
"""

from __future__ import annotations

from pydantic import BaseModel

from interpreter.handle import (
    ApprovalRequired,
    Done,
    ErrorRaised,
    Event,
    OutputAdded,
    OutputCleared,
    StreamText,
)
from interpreter.models import ClearEvent, TextChunk


def sse_frame(event: Event) -> str:
    """The ``event:``/``data:`` frame of one execution event."""
    name, payload = _named_payload(event)
    return f"event: {name}\ndata: {payload.model_dump_json()}\n\n"


def _named_payload(event: Event) -> tuple[str, BaseModel]:
    if isinstance(event, StreamText):
        return event.name, TextChunk(text=event.text)
    if isinstance(event, OutputAdded):
        return "output", event.output
    if isinstance(event, OutputCleared):
        return "clear", ClearEvent(wait=event.wait)
    if isinstance(event, ErrorRaised):
        return "error", event.error
    if isinstance(event, ApprovalRequired):
        return "approval_required", event.approval
    if isinstance(event, Done):
        return "done", event.execution
    raise TypeError(f"not an execution event: {event!r}")
