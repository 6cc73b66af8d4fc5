"""A sans-I/O decoder for server-sent events (the ``text/event-stream`` format).

It takes lines (without their line terminators) and returns a complete event whenever a
blank line ends one. It knows nothing about sockets, so the sync and async clients share it
and tests can feed it strings.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerSentEvent:
    """One dispatched event: its name (``message`` when unnamed), data and optional id."""

    event: str
    data: str
    id: str | None = None


class SSEDecoder:
    """Folds ``field: value`` lines into events, following the WHATWG parsing rules.

    Comment lines (starting with ``:``) are keep-alives and are ignored; multiple ``data``
    lines of one event are joined with newlines; unknown fields are ignored.
    """

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._has_fields = False

    def feed(self, line: str) -> ServerSentEvent | None:
        """Consume one line; return the event it completes, if any."""
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\x00" not in value:
            self._id = value
        else:
            return None  # "retry" and unknown fields do not concern us
        self._has_fields = True
        return None

    def flush(self) -> ServerSentEvent | None:
        """End of stream: return a last event that was not followed by a blank line."""
        return self._dispatch()

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._has_fields:
            return None
        if not self._data:
            # An event without data lines is dropped, as browsers do.
            self._event, self._has_fields = "", False
            return None
        event = ServerSentEvent(
            event=self._event or "message", data="\n".join(self._data), id=self._id
        )
        self._event, self._data, self._has_fields = "", [], False
        return event
