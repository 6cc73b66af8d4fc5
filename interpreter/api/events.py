"""Execution events on the wire: each typed event as one server-sent event.

The payloads are the models the SDK decodes them with (``interpreter.models``), one JSON
object per event, so a newline in output can never break the framing (docs/security.md
H-47). Each frame carries its event's ``id:`` (its number in the execution's log, from 1),
which a client that reconnects sends back as ``Last-Event-ID`` (or ``?after=``).
"""

from __future__ import annotations

import asyncio
import re

import tornado.web
from pydantic import BaseModel
from tornado.iostream import StreamClosedError

from interpreter.errors import BadRequest
from interpreter.handle import (
    ApprovalRequired,
    Done,
    ErrorRaised,
    Event,
    OutputAdded,
    OutputCleared,
    StreamText,
    Subscription,
)
from interpreter.models import ClearEvent, TextChunk

SSE_KEEPALIVE_S = 15.0
#: ASCII digits only: ``\d`` would also take other scripts' digits (Arabic-Indic ones).
_EVENT_ID = re.compile(r"[0-9]{1,12}")


def sse_frame(event: Event, event_id: int | None = None) -> str:
    """The ``id:``/``event:``/``data:`` frame of one execution event."""
    name, payload = _named_payload(event)
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {payload.model_dump_json()}\n\n"


def resume_after(handler: tornado.web.RequestHandler) -> int | None:
    """The id of the last event a reconnecting client saw: ``?after=N``, else the
    ``Last-Event-ID`` header; None when it gives neither."""
    after = handler.get_query_argument("after", None)
    source = "after"
    if after is None:
        after = handler.request.headers.get("Last-Event-ID")
        source = "Last-Event-ID"
        if after is None or after.strip() == "":
            return None
    value = after.strip(" \t")
    if not _EVENT_ID.fullmatch(value):
        raise BadRequest(
            f"{source} must be an event id (a whole number >= 0 of at most 12 ASCII digits), "
            f"got {after[:40]!r}."
        )
    return int(value)


async def send_events(
    handler: tornado.web.RequestHandler, queue: Subscription, first_id: int
) -> None:
    """Write a subscription as server-sent events, numbered from ``first_id``, until the
    execution is done (then finish the response) or the client goes away (then return:
    the execution goes on, docs/security.md decision 1)."""
    handler.set_header("Content-Type", "text/event-stream; charset=utf-8")
    handler.set_header("X-Accel-Buffering", "no")
    event_id = first_id
    try:
        await handler.flush()
        while True:
            try:
                async with asyncio.timeout(SSE_KEEPALIVE_S):
                    item = await queue.get()
            except TimeoutError:
                # A dead client is only noticed when a write fails.
                handler.write(": keep-alive\n\n")
                await handler.flush()
                continue
            if item is None:
                break
            handler.write(sse_frame(item, event_id))
            event_id += 1
            if queue.empty():
                await handler.flush()
    except StreamClosedError:
        return
    try:
        handler.finish()
    except StreamClosedError:
        return


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
