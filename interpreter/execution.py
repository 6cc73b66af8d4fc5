"""Pure translation of one execution's Jupyter messages into outputs, with no I/O.

An :class:`ExecutionRecorder` is fed the iopub messages and the ``execute_reply`` whose parent
is its request. It keeps the outputs in notebook (nbformat v4) form, applies ``clear_output``
(including the deferred ``wait=True`` form) and ``update_display_data``, and returns, for each
message, the events to stream. Completion needs both the reply and the iopub ``idle``; the
session decides how long to wait for an idle that a flood may have lost (docs/security.md H-33).

Kernel messages are attacker input (docs/security.md §1.2): every field is read defensively, text
is sanitised (lone surrogates, NUL) and sizes are bounded. Stream text past the in-memory
limit is handed, in order, to an :class:`Overflow` the caller supplies (the session's
:class:`~interpreter.spill.StreamSpill`, which only queues it), or counted and dropped.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from interpreter.mime import is_json, strip_ansi
from interpreter.overwrite import OverwrittenText

#: The type of the message the broker itself reports a dropped kernel message with
#: (interpreter/iopub_watch.py); never sent by a kernel.
DROPPED_MSG_TYPE = "interp_message_dropped"
#: A message of the broker's own to the running execution: ``content.text`` goes to its
#: stderr (see :func:`broker_notice`).
NOTICE_MSG_TYPE = "interp_broker_notice"

#: Largest single rich output value accepted; larger values are dropped with a notice.
MAX_RICH_VALUE_CHARS = 16 << 20
#: Characters of one rich output's metadata (its JSON form) kept at most: a figure's
#: size or a library's hints take a few hundred. Larger metadata is dropped, the values
#: kept, with a notice (30 outputs of 25 MB of metadata each held 5.6 GB of the broker
#: and a 750 MB notebook when metadata was counted nowhere). What is kept counts toward
#: the cell's rich budget, :data:`RICH_LIMIT`, as the values do.
MAX_METADATA_CHARS = 64 << 10
#: Characters of metadata all of one execution's outputs keep at most (past it, later
#: outputs' metadata is dropped, their values kept, with a notice): a thousand displays of
#: 60,000 characters of metadata each were 60 MB per cell, kept for the session's life.
MAX_CELL_METADATA_CHARS = 1 << 20
#: Characters of rich output one execution holds at once at most by default (the
#: broker's is ``settings.max_rich_output_bytes``; images are also artifacts): what it
#: shows now, not what it showed. A value cleared (``clear_output``) or
#: replaced (``update_display_data``, a display with a known id) gives its characters back,
#: so a redraw loop keeps its last frame however many frames it drew.
RICH_LIMIT = 64 << 20
#: Rich outputs one execution holds at once at most, however small (a ``display`` in a
#: loop of 100,000 turns held 7 KB of the broker's memory per output, 1 GB in all, for
#: values of a few characters): past it new ones are dropped, with one notice. A clear
#: gives the room back, and a display updated in place takes none.
OUTPUTS_LIMIT = 2000


def broker_notice(parent_msg_id: str, text: str) -> dict[str, Any]:
    """A message of the broker's own that puts ``text`` on the stderr of the execution
    whose execute request was ``parent_msg_id`` (routed as the kernel's messages are)."""
    return {
        "header": {"msg_type": NOTICE_MSG_TYPE, "msg_id": secrets.token_hex(8)},
        "parent_header": {"msg_id": parent_msg_id},
        "metadata": {},
        "content": {"text": text},
    }


def clean_text(value: object, limit: int | None = None) -> str:
    """Coerce a kernel-supplied value to storable text (no NUL, no lone surrogates)."""
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit]
    text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def header_date(date: object) -> object:
    """A message header's date as jupyter_client's stock ``Session.deserialize`` gives it.

    The broker's session (:mod:`interpreter.wire`) leaves header dates as the text the kernel
    sent; the few kept as timing are parsed here, with jupyter_client's own function, so the
    recorded text is the same as with the stock session. An ISO 8601 text becomes a
    ``datetime`` (one without a zone is taken as local time); other text, and whatever is not
    text, is returned as it is. None for an ISO 8601-looking date that is no date
    (``2024-02-30``): the stock session refuses the whole message for it; here the message
    is kept and that date is not.
    """
    if not isinstance(date, str):
        return date
    # The kernel's own form (``2026-01-01T00:00:00.000000Z``) the fast way; the same result.
    if len(date) > 19 and date[-1] == "Z" and date[4] == date[7] == "-" and date[10] == "T":
        try:
            return datetime.fromisoformat(date)
        except ValueError:
            pass
    # Imported here: the SDK, the tools and replay use this module without jupyter_client.
    from jupyter_client.jsonutil import parse_date

    try:
        parsed: object = parse_date(date)
    except (ValueError, OverflowError):
        return None
    return parsed


def clean_json(value: Any, depth: int = 0) -> Any:
    """Make kernel-supplied JSON safe to store and send: finite numbers, clean strings."""
    if depth > 64:
        return None
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {clean_text(k): clean_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v, depth + 1) for v in value]
    return clean_text(value)


# ------------------------------------------------------------------------------ events


@dataclass
class StreamEvent:
    """New text on stdout or stderr."""

    name: str
    text: str


@dataclass
class RichEvent:
    """A display_data / execute_result output was added (or updated in place)."""

    index: int
    updated: bool = False


@dataclass
class ClearEvent:
    """All outputs so far were cleared."""

    wait: bool


@dataclass
class ErrorEvent:
    """The cell raised."""

    ename: str
    evalue: str
    traceback: list[str]


Event = StreamEvent | RichEvent | ClearEvent | ErrorEvent


# ---------------------------------------------------------------------------- recorder


@dataclass
class _Stream:
    name: str
    # Carriage returns and backspaces applied: a progress bar keeps only its last frame.
    text: OverwrittenText = field(default_factory=OverwrittenText)
    #: The segment's text began with ``\r``: read as one stream with the segments of the
    #: same name before it (the other stream came between), it overwrites their open line.
    returns: bool = False
    #: Once cut (:meth:`ExecutionRecorder.compact`): its first characters, kept as they
    #: were; :attr:`text` then holds its last ones (and what is printed later), and
    #: :attr:`omitted` counts the characters cut between them. None: not cut.
    head: str | None = None
    omitted: int = 0

    def parts(self) -> list[str | int]:
        """Its text, with the characters cut from its middle as their count."""
        text = self.text.text
        return [text] if self.head is None else [self.head, self.omitted, text]

    def size(self) -> int:
        """Characters of its whole text, cut or not."""
        return len(self.text) + (0 if self.head is None else len(self.head) + self.omitted)


#: A stream's text as kept: strings, and between them the count of characters cut there.
Parts = list[str | int]


@dataclass
class _DropNotice:
    """The one notice on stderr of rich values dropped for one reason in one cell: later
    drops for the same reason are counted in it (:meth:`ExecutionRecorder.settle_notices`)
    instead of said again, 132 times for a redraw loop."""

    #: Makes the collapsed text from the count and the characters dropped in all.
    collapsed: Callable[[int, int], str]
    count: int = 1
    chars: int = 0
    #: As said on the stream, where it is kept (None: not kept whole, e.g. past the
    #: in-memory limit) and at which character of that segment's text.
    text: str = ""
    segment: _Stream | None = None
    start: int = 0
    #: The recorder's clear count when said: a clear since took it away.
    clears: int = 0


@dataclass
class StreamTotals:
    """Characters of stream text seen, kept in memory, handed to the overflow or dropped,
    for one execution."""

    seen: int = 0
    kept: int = 0
    #: Past the in-memory limit, handed to the :class:`Overflow`.
    spilled: int = 0
    #: Past the in-memory limit with no overflow to take it.
    dropped: int = 0
    #: What the broker appended to stderr about the limits when the execution finished
    #: (``outputs.py``); said again when output arrives late.
    notice: str = ""
    #: Text printed after the execution finished went past the limit (said once).
    dropped_late: bool = False
    #: Characters of each stream kept after the execution finished (late output): they
    #: are in no full-text artifact.
    late: dict[str, int] = field(default_factory=dict)


class Overflow(Protocol):
    """Takes the stream text past the recorder's in-memory limit (no I/O on the caller's
    side: :class:`~interpreter.spill.StreamSpill` queues it)."""

    def write(self, name: str, text: str) -> None:
        """Take ``text`` of stream ``name``, after everything given before."""

    def clear(self) -> None:
        """The cell cleared its outputs: forget what was taken so far."""


class ExecutionRecorder:
    """Collects the outputs of one execute request, in order, in notebook form.

    Args:
        msg_id: the ``msg_id`` of the execute request; messages with another parent are refused.
        hard_limit: stream characters kept in memory at most; past it text goes to
            ``overflow``, or is counted and dropped.
        rich_limit: characters of rich output held at once at most (what the cell shows
            now: a cleared or replaced output's characters are given back).
        outputs_limit: rich outputs held at once at most (:data:`OUTPUTS_LIMIT`).
        overflow: takes the stream text past ``hard_limit`` (the caller may detach it by
            setting :attr:`overflow` to None).
    """

    def __init__(
        self,
        msg_id: str,
        *,
        hard_limit: int = 4 << 20,
        rich_limit: int = RICH_LIMIT,
        overflow: Overflow | None = None,
        outputs_limit: int = OUTPUTS_LIMIT,
    ) -> None:
        self.msg_id = msg_id
        self.hard_limit = hard_limit
        self.rich_limit = rich_limit
        self.outputs_limit = outputs_limit
        #: Rich outputs held now (since the last clear).
        self.rich_held = 0
        self.overflow = overflow
        #: Set once text went past the limit: all later stream text follows it, so that
        #: each stream's in-memory part comes before its overflow.
        self.overflowing = False
        # Each item is a _Stream or an nbformat-shaped dict for a rich/error output.
        self.items: list[_Stream | dict[str, Any]] = []
        self.streams = StreamTotals()
        #: Characters of the rich values held now (an output shared by a display id once).
        self.rich_chars = 0
        self.rich_dropped = 0
        #: Rich values not stored: the session's artifact budget was spent (told once).
        self.unstored = 0
        self.unstored_told = False
        #: Characters held by the outputs of each display id (they share one bundle).
        self._display_chars: dict[str, int] = {}
        #: The notice of dropped rich values said so far, by reason (one each per cell).
        self._drop_notices: dict[str, _DropNotice] = {}
        #: Clears so far (a notice said before the last clear is gone with the outputs).
        self._clears = 0
        #: The execution was finished (``outputs.py``): stream text taken from now on is
        #: late output, in no full-text artifact.
        self.ended = False
        #: The API's stdout and stderr (without the limit's notice) as the execution was
        #: finished: a cell past its in-memory limit keeps them after late output.
        self.final_streams: tuple[str, str] | None = None
        #: Output messages taken (streams, displays, errors): grows as the cell prints.
        self.taken = 0
        #: Kernel messages dropped for their size (the output link was cut and renewed).
        self.messages_dropped = 0
        #: Per stream, the URL of the artifact with its whole text, once stored: a text
        #: cut for the notebook says where the rest is.
        self.stream_urls: dict[str, str] = {}
        #: Streams whose text an earlier broker had already cut (:meth:`seed_cut`): no
        #: artifact holds their full text; each maps to the artifact of the text up to
        #: the shutdown that an earlier broker stored, if there is one (else None).
        self.cut_before: dict[str, str | None] = {}
        #: Characters of each such stream the earlier broker's cut kept (head and tail).
        self._kept_before: dict[str, int] = {}
        #: Streams whose full-text artifact could not be stored, and why (the data disk
        #: was full): a notice of their cut says no artifact holds their full text.
        self.unstored_text: dict[str, str] = {}
        self._unreadable_told = False
        self.reply: dict[str, Any] | None = None
        self.idle = False
        self.busy_seen = False
        self.execution_count: int | None = None
        self.error: ErrorEvent | None = None
        #: The error's message or traceback was cut (:data:`ERROR_TEXT_LIMIT`).
        self.error_cut = False
        self._clear_pending = False
        self._display_index: dict[str, list[int]] = {}
        self._error_on_iopub = False
        #: What :meth:`_bundle` dropped from the message being fed, said on stderr: the
        #: reason, the characters, the notice and its collapsed form.
        self._dropped_notices: list[tuple[str, int, str, Callable[[int, int], str]]] = []
        #: JupyterLab's ``metadata.execution`` timing: message times by their usual keys.
        self.timing: dict[str, str] = {}
        #: Characters of the metadata of the outputs kept so far
        #: (:data:`MAX_CELL_METADATA_CHARS`).
        self.metadata_chars = 0

    # -- state ---------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Both the shell reply and the iopub idle have arrived."""
        return self.reply is not None and self.idle

    @property
    def asked_exit(self) -> bool:
        """The code called ``exit()``/``quit()``: the kernel ends itself after replying."""
        payload = (self.reply or {}).get("payload")
        return isinstance(payload, list) and any(
            isinstance(p, dict) and p.get("source") == "ask_exit" for p in payload
        )

    @property
    def reply_status(self) -> str | None:
        if self.reply is None:
            return None
        status = self.reply.get("status")
        return status if isinstance(status, str) else "error"

    def compact(self, limit: int) -> None:
        """Once the execution is final, keep about ``limit`` characters of each stream
        segment (head and tail): the full text is in its artifact, and a finished cell is
        kept a while for late output, which must not hold megabytes per cell. A segment
        cut so keeps its head, the count of characters cut and its tail, to which late
        output is added (and cut again here): its notice is written when it is read
        (:meth:`notebook_outputs`, :meth:`stream_cut`), with the right count."""
        half = max(limit // 2, 1)
        for item in self.items:
            if not isinstance(item, _Stream):
                continue
            if item.head is not None:
                if len(item.head) > half:
                    item.omitted += len(item.head) - half
                    item.head = item.head[:half]
                item.omitted += item.text.keep_last(half)
            elif len(item.text) > limit:
                item.head = item.text.text[:half]
                item.omitted = item.text.keep_last(half) - half

    def settle_notices(self) -> None:
        """Once the execution is final: each notice of dropped rich values that later drops
        were counted in says how many were dropped in all (one line, not one per drop)."""
        for notice in self._drop_notices.values():
            segment = notice.segment
            if notice.count < 2 or segment is None or notice.clears != self._clears:
                continue
            text = notice.collapsed(notice.count, notice.chars)
            if segment.text.replace_done(notice.start, notice.text, text):
                self.streams.kept += len(text) - len(notice.text)
                notice.text = text

    # -- feeding -------------------------------------------------------------------------

    def feed_reply(self, msg: dict[str, Any]) -> list[Event]:
        """Take the ``execute_reply`` of this request."""
        content = msg.get("content") or {}
        if not isinstance(content, dict):
            content = {}
        self._time(msg, "shell.execute_reply")
        metadata = msg.get("metadata")
        started = metadata.get("started") if isinstance(metadata, dict) else None
        if started is not None:
            self._keep_time("shell.execute_reply.started", started)
        # Only what is read of it: a reply's payloads and user expressions are the
        # kernel's to fill (``set_next_input`` with 30 MB of text), and a finished cell
        # is kept a while.
        payload = content.get("payload")
        self.reply = {
            "status": content.get("status"),
            "payload": [
                {"source": "ask_exit"}
                for p in (payload if isinstance(payload, list) else [])
                if isinstance(p, dict) and p.get("source") == "ask_exit"
            ][:1],
        }
        count = _count(content.get("execution_count"))
        if count is not None:
            self.execution_count = count
        if content.get("status") == "error" and self.error is None:
            # An error reply without an iopub error message (e.g. lost in a flood).
            return [self._set_error(content)]
        return []

    def feed_iopub(self, msg: dict[str, Any]) -> list[Event]:
        """Take one iopub message of this request and return the events it causes."""
        header = msg.get("header") or {}
        msg_type = header.get("msg_type") if isinstance(header, dict) else None
        content = msg.get("content")
        if not isinstance(content, dict):
            return []
        if msg_type == "status":
            state = content.get("execution_state")
            if state == "busy":
                self.busy_seen = True
                self._time(msg, "iopub.status.busy")
            elif state == "idle":
                self.idle = True
                self._time(msg, "iopub.status.idle")
            return []
        if msg_type == "execute_input":
            self._time(msg, "iopub.execute_input")
            count = _count(content.get("execution_count"))
            if count is not None:
                self.execution_count = count
            return []
        if msg_type == "stream":
            self.taken += 1
            return self._stream(content)
        if msg_type in ("display_data", "execute_result"):
            self.taken += 1
            return self._rich(msg_type, content)
        if msg_type == "update_display_data":
            return self._update(content)
        if msg_type == "clear_output":
            if content.get("wait"):
                self._clear_pending = True
                return []
            return [self._clear(False)]
        if msg_type == "error":
            self._error_on_iopub = True
            events = [*self._apply_pending_clear(), self._set_error(content)]
            # Kept in place: the notebook shows it where the kernel sent it (a figure the
            # inline backend shows after a failing cell comes after the error).
            self.items.append({"output_type": "error", "_kernel_error": True})
            return events
        if msg_type == NOTICE_MSG_TYPE:
            return self._stream({"name": "stderr", "text": str(content.get("text", ""))})
        if msg_type == DROPPED_MSG_TYPE:
            self.messages_dropped += 1
            unreadable = content.get("unreadable")
            if unreadable is not None:
                if self._unreadable_told:
                    return []  # said once per cell: a flood of them is one notice
                self._unreadable_told = True
                text = (
                    f"\n[output dropped: the kernel sent a message the broker could not read "
                    f"({unreadable}, e.g. a value nested too deeply); that output is missing]\n"
                )
                return self._stream({"name": "stderr", "text": text})
            limit = content.get("limit")
            if content.get("reconnected"):
                text = (
                    "\n[output link interrupted: the connection to the kernel dropped and "
                    "came back while the cell ran; what it printed meanwhile may be missing]\n"
                )
                return self._stream({"name": "stderr", "text": text})
            return self._stream(
                {
                    "name": "stderr",
                    "text": f"\n[output dropped: the kernel sent a message larger than the "
                    f"broker's limit of {limit} bytes (max_kernel_message_bytes); that output "
                    "and what the cell printed right after it are missing]\n",
                }
            )
        return []

    def _time(self, msg: dict[str, Any], key: str) -> None:
        """Keep the first time of ``key``: the message header's date, as ISO 8601 text."""
        header = msg.get("header")
        date = header.get("date") if isinstance(header, dict) else None
        if key in self.timing or date is None:
            return
        self._keep_time(key, header_date(date))

    def _keep_time(self, key: str, date: object) -> None:
        """Keep ``date`` (a ``datetime`` or text) as the time of ``key`` unless it has one."""
        if key in self.timing or date is None:
            return
        text = date.isoformat() if hasattr(date, "isoformat") else clean_text(date, 64)
        if text:
            self.timing[key] = text.replace("+00:00", "Z")

    # -- handlers ------------------------------------------------------------------------

    def _apply_pending_clear(self) -> list[Event]:
        if self._clear_pending:
            self._clear_pending = False
            return [self._clear(True)]
        return []

    def _clear(self, wait: bool) -> Event:
        self.items.clear()
        self._display_index.clear()
        # What was shown is gone: its characters and its room are given back.
        self.rich_chars = 0
        self.rich_held = 0
        self._display_chars.clear()
        self._clears += 1
        if self.overflow is not None and self.overflowing:
            self.overflow.clear()
        return ClearEvent(wait=wait)

    def _stream(self, content: dict[str, Any]) -> list[Event]:
        name = content.get("name")
        if name not in ("stdout", "stderr"):
            return []
        text = clean_text(content.get("text", ""))
        if not text:
            return []
        events = self._apply_pending_clear()
        self.streams.seen += len(text)
        room = 0 if self.overflowing else self.hard_limit - self.streams.kept
        if len(text) > room:
            self.overflowing = True
            self._overflow(name, text[max(room, 0) :])
            if room <= 0:
                return events
            text = text[:room]
        if self.ended:
            self.streams.late[name] = self.streams.late.get(name, 0) + len(text)
        last = self.items[-1] if self.items else None
        if not (isinstance(last, _Stream) and last.name == name):
            last = _Stream(name, returns=text.startswith("\r") and not text.startswith("\r\n"))
            self.items.append(last)
        # What is kept is the text after overwrites: redrawn frames take no room.
        before = len(last.text)
        last.text.feed(text)
        self.streams.kept += len(last.text) - before
        events.append(StreamEvent(name, text))
        return events

    def _overflow(self, name: str, text: str) -> None:
        if self.overflow is None:
            self.streams.dropped += len(text)
        else:
            self.streams.spilled += len(text)
            self.overflow.write(name, text)

    def _bundle(
        self, content: dict[str, Any], held: int = 0
    ) -> tuple[dict[str, Any], dict[str, Any], int] | None:
        """The cleaned values and metadata of a display message, and their characters;
        None when they would take the cell's rich outputs past :attr:`rich_limit` (the
        values they replace, ``held`` characters, given back first)."""
        data = content.get("data")
        if not isinstance(data, dict):
            return None
        clean: dict[str, Any] = {}
        size = 0
        for mime, value in data.items():
            if not isinstance(mime, str) or len(mime) > 200:
                continue
            mime = clean_text(mime)
            value = clean_json(value)
            if not is_json(mime):
                value = _as_text(value)
            length = len(value) if isinstance(value, str) else len(str(value))
            if length > MAX_RICH_VALUE_CHARS:
                self.rich_dropped += length
                self._dropped_notices.append(
                    (
                        "value",
                        length,
                        f"\n[output dropped: its {mime} value of {length} characters is "
                        f"larger than the broker's limit of {MAX_RICH_VALUE_CHARS} characters "
                        "per value]\n",
                        _values_dropped,
                    )
                )
                continue
            size += length
            clean[mime] = value
        metadata = self._metadata(content.get("metadata"))
        metadata_size = json_size(metadata) if metadata else 0
        size += metadata_size
        if self.rich_chars - held + size > self.rich_limit:
            self.rich_dropped += size
            limit = self.rich_limit

            def collapsed(count: int, chars: int) -> str:
                return (
                    f"\n[output dropped: {count} rich outputs, {chars} characters in all; "
                    "this cell's rich outputs went past the broker's limit of "
                    f"{limit} characters]\n"
                )

            self._dropped_notices.append(
                (
                    "budget",
                    size,
                    f"\n[output dropped: a rich output of {size} characters; this cell's rich "
                    f"outputs went past the broker's limit of {limit} characters]\n",
                    collapsed,
                )
            )
            return None
        self.metadata_chars += metadata_size
        return clean, metadata, size

    def _metadata(self, metadata: object) -> dict[str, Any]:
        """A display message's metadata, cleaned; empty when it is not a dict or is larger
        than :data:`MAX_METADATA_CHARS` (said on stderr)."""
        if not isinstance(metadata, dict) or not metadata:
            return {}
        length = json_size(metadata, MAX_METADATA_CHARS)
        if length > MAX_METADATA_CHARS:
            self._dropped_notices.append(
                (
                    "metadata",
                    0,
                    "\n[output metadata dropped: an output's metadata is larger than the "
                    f"broker's limit of {MAX_METADATA_CHARS} characters; its values were kept]\n",
                    _metadata_dropped,
                )
            )
            return {}
        if self.metadata_chars + length > MAX_CELL_METADATA_CHARS:
            self._dropped_notices.append(
                (
                    "metadata_total",
                    0,
                    "\n[output metadata dropped: this cell's outputs' metadata went past the "
                    f"broker's limit of {MAX_CELL_METADATA_CHARS} characters; the values were "
                    "kept]\n",
                    _cell_metadata_dropped,
                )
            )
            return {}
        cleaned: dict[str, Any] = clean_json(metadata)
        return cleaned

    @staticmethod
    def _display_id(content: dict[str, Any]) -> str | None:
        # ``transient`` may be present and explicitly None, so don't chain .get() calls.
        transient = content.get("transient")
        if isinstance(transient, dict):
            display_id = transient.get("display_id")
            if isinstance(display_id, str) and display_id:
                return display_id
        return None

    def _said_dropped(self) -> list[Event]:
        """The notices of rich values :meth:`_bundle` just dropped, on stderr: the first
        for each reason; later ones are counted in it (:meth:`settle_notices`)."""
        events: list[Event] = []
        notices, self._dropped_notices = self._dropped_notices, []
        for reason, chars, text, collapsed in notices:
            said = self._drop_notices.get(reason)
            if said is not None and said.clears == self._clears:
                said.count += 1
                said.chars += chars
                continue
            fed = self._stream({"name": "stderr", "text": text})
            events += fed
            notice = _DropNotice(collapsed, chars=chars, text=text, clears=self._clears)
            last = self.items[-1] if self.items else None
            if (
                fed
                and isinstance(last, _Stream)
                and last.name == "stderr"
                and last.head is None
                and len(last.text) >= len(text)
            ):
                notice.segment, notice.start = last, len(last.text) - len(text)
            self._drop_notices[reason] = notice
        return events

    def _rich(self, msg_type: str, content: dict[str, Any]) -> list[Event]:
        events = self._apply_pending_clear()
        if self.rich_held >= self.outputs_limit:
            return events + self._too_many_outputs()
        display_id = self._display_id(content)
        # A known display id: the new values replace those of its earlier outputs.
        held = self._display_chars.get(display_id, 0) if display_id else 0
        bundle = self._bundle(content, held)
        events += self._said_dropped()
        if bundle is None:
            return events
        data, metadata, size = bundle
        self.rich_chars += size - held
        output: dict[str, Any] = {"output_type": msg_type, "data": data, "metadata": metadata}
        if msg_type == "execute_result":
            count = _count(content.get("execution_count"))
            output["execution_count"] = self.execution_count if count is None else count
        if display_id:
            self._display_chars[display_id] = size
            output["_display_id"] = display_id
            # A display with a known id also updates every earlier output with that id.
            for idx in self._display_index.get(display_id, []):
                self._replace(idx, data, metadata)
                events.append(RichEvent(idx, updated=True))
            self._display_index.setdefault(display_id, []).append(len(self.items))
        self.items.append(output)
        self.rich_held += 1
        events.append(RichEvent(len(self.items) - 1))
        return events

    def _too_many_outputs(self) -> list[Event]:
        self.rich_dropped += 1
        limit = self.outputs_limit
        hint = (
            "clear_output(), or a display updated in place (display_id), keeps the room; "
            "write many results to a file instead"
        )

        def collapsed(count: int, chars: int) -> str:
            return (
                f"\n[output dropped: {count} rich outputs; this cell held the broker's limit "
                f"of {limit} outputs at once ({hint})]\n"
            )

        self._dropped_notices.append(
            ("outputs", 0, collapsed(1, 0).replace("1 rich outputs", "a rich output"), collapsed)
        )
        return self._said_dropped()

    def _replace(self, idx: int, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        item = self.items[idx]
        if isinstance(item, dict):
            item["data"] = data
            item["metadata"] = metadata
            # New values: the notebook's budget decides about them afresh (outputs.py).
            item.pop("_kept", None)
            item.pop("_set_aside", None)

    def _update(self, content: dict[str, Any]) -> list[Event]:
        display_id = self._display_id(content)
        if not display_id or display_id not in self._display_index:
            return []
        held = self._display_chars.get(display_id, 0)
        bundle = self._bundle(content, held)
        events = self._said_dropped()
        if bundle is None:
            return events
        data, metadata, size = bundle
        self.rich_chars += size - held
        self._display_chars[display_id] = size
        for idx in self._display_index[display_id]:
            self._replace(idx, data, metadata)
            events.append(RichEvent(idx, updated=True))
        return events

    def _set_error(self, content: dict[str, Any]) -> ErrorEvent:
        traceback = content.get("traceback")
        lines = traceback if isinstance(traceback, list) else []
        evalue = clean_text(content.get("evalue", ""))
        omitted = max(len(lines) - TRACEBACK_LINES, 0)
        # Head and tail: the innermost frames and the exception's own line are at the end
        # (a RecursionError kept only its first 500 frames, all alike, and lost both).
        head = TRACEBACK_LINES // 2
        kept = lines[:head] + lines[head + omitted :] if omitted else lines
        texts = [strip_ansi(clean_text(line)) for line in kept]
        # Said by ``truncated`` on the execution (outputs.py).
        self.error_cut = bool(omitted) or any(
            len(text) > ERROR_TEXT_LIMIT for text in [evalue, *texts]
        )
        evalue = _cut_error(evalue, ERROR_TEXT_LIMIT)
        texts = [_cut_error(text, ERROR_TEXT_LIMIT) for text in texts]
        if omitted:
            texts.insert(head, f"[... {omitted} more traceback lines omitted by the service ...]")
        if sum(map(len, texts)) > TRACEBACK_CHARS:
            texts = _lines_within(texts, TRACEBACK_CHARS)
            self.error_cut = True
        self.error = ErrorEvent(
            ename=clean_text(content.get("ename", "Error"), 1000),
            evalue=evalue,
            traceback=texts,
        )
        return self.error

    # -- results -------------------------------------------------------------------------

    def output(self, index: int) -> dict[str, Any]:
        """The rich output at ``index`` (nbformat shape, with a private ``_display_id``)."""
        item = self.items[index]
        assert isinstance(item, dict)
        return item

    def without(self, index: int, mimes: set[str]) -> None:
        """Drop the values ``mimes`` of the rich output at ``index`` (they could not be
        stored): the notebook does not show what the API cannot give. A new dict, since
        the old one may be shared with other outputs of its display id."""
        item = self.output(index)
        item["data"] = {m: v for m, v in item["data"].items() if m not in mimes}

    def broker_stderr(self, text: str) -> list[Event]:
        """Put ``text`` of the broker's own on the cell's stderr, as a kernel's would go."""
        return self._stream({"name": "stderr", "text": text})

    def seed_cut(self, name: str, cut: CutText) -> None:
        """Take, as the start of stream ``name``, a text an earlier broker kept of this
        cell already cut (its head, the characters it left out, its tail; see
        :func:`split_cut`): a broker that attaches a cell left running goes on from it.
        Fed as text, its notice was read as what the cell printed and cut again, and
        said only how much of the kept text the second cut left out; and the cut text
        was stored as the stream's "full text". Kept so, the characters left out stay
        counted in every later cut, whose notice says that no artifact holds the full
        text (or names the earlier broker's artifact of it up to its shutdown)."""
        if name not in ("stdout", "stderr"):
            return
        stream = _Stream(name, head=cut.head, omitted=cut.omitted)
        stream.text.feed(cut.tail)
        self.items.append(stream)
        size = len(cut.head) + len(stream.text)
        self.streams.seen += size + cut.omitted
        self.streams.kept += size
        self.cut_before.setdefault(name, cut.artifact)
        self._kept_before[name] = self._kept_before.get(name, 0) + size

    def cut_share(self, name: str, share: int) -> int:
        """The characters of stream ``name`` to keep when its share of the output budget
        is ``share``: a stream an earlier broker cut (:meth:`seed_cut`) keeps at least
        what that cut kept, so that its head and tail are not cut again (and its notice's
        count is the earlier one) unless what the cell printed since needs the room."""
        return max(share, self._kept_before.get(name, 0))

    def stream_text(self, name: str) -> str:
        """All kept text of one stream, across the outputs not cleared, read as one stream:
        where the other stream came between two segments, a ``\\r`` at the start of the
        later one (or at the end of the earlier one) still overwrites the open line, as on
        a terminal (a progress bar on stderr with a print per step on stdout keeps only its
        last frame). A segment cut by :meth:`compact` reads as its head, a notice of what
        was cut, and its tail."""
        return "".join(
            part if isinstance(part, str) else f"\n{self._cut_notice(name, part)}\n"
            for part in self._merged()[0][name]
        )

    def stream_size(self, name: str) -> int:
        """Characters of one stream's whole text (:meth:`stream_text` uncut), counting what
        :meth:`compact` cut."""
        return _parts_size(self._merged()[0][name])

    def stream_cut(self, name: str, limit: int) -> str:
        """One stream as the API gives it within ``limit`` characters: whole when it fits,
        else its head and tail with a notice of how many characters were cut (all of them,
        also those :meth:`compact` cut) and where the full text is."""
        return _cut_parts(self._merged()[0][name], limit, lambda n: self._cut_notice(name, n))

    def cut_notice(self, name: str, count: int) -> str:
        """The notice of ``count`` characters of stream ``name`` cut (see :meth:`_cut_notice`)."""
        return self._cut_notice(name, count)

    def _cut_notice(self, name: str, count: int) -> str:
        """The notice of ``count`` characters of stream ``name`` cut: its full-text artifact
        holds what the cell printed until it finished, not its late output; a stream an
        earlier broker had cut (:meth:`seed_cut`) has no full text."""
        if name in self.cut_before:
            return _omitted_lost(count, self.cut_before[name])
        if name in self.unstored_text:
            return _omitted_unstored(count, self.unstored_text[name])
        late = self.streams.late.get(name, 0) > 0
        return _omitted(count, self.stream_urls.get(name), late=late)

    def stream_offsets(self) -> dict[int, tuple[int, int]]:
        """For each rich output still present (by index), how many characters of
        :meth:`stream_text` ``("stdout")`` and ``("stderr")`` came before it. A line that
        a later ``\\r`` rewrote counts as coming after the outputs shown while it was
        open."""
        return self._merged()[1]

    def _merged(self) -> tuple[dict[str, Parts], dict[int, tuple[int, int]]]:
        """The streams' text (as :data:`Parts`: a segment cut by :meth:`compact` leaves
        the count of the characters cut) and the rich outputs' places in it. Where no
        segment rewrites the line another left open (nearly always), each stream is its
        segments' text end to end. Only where one does is the text read again through
        :class:`OverwrittenText`, which costs a Python step per line: a 10,000-line print,
        read so three times per cell, had doubled the broker's work for it."""
        texts: dict[str, Parts] = {"stdout": [], "stderr": []}
        sizes = {"stdout": 0, "stderr": 0}
        rewound = {"stdout": False, "stderr": False}
        offsets: dict[int, tuple[int, int]] = {}
        for index, item in enumerate(self.items):
            if isinstance(item, _Stream):
                if not item.size():
                    continue
                if item.returns or rewound[item.name]:
                    return self._merged_rewriting()
                texts[item.name] += item.parts()
                sizes[item.name] += item.size()
                rewound[item.name] = item.text.rewound
            elif item.get("output_type") != "error":
                offsets[index] = (sizes["stdout"], sizes["stderr"])
        return {name: _joined(parts) for name, parts in texts.items()}, offsets

    def _merged_rewriting(self) -> tuple[dict[str, Parts], dict[int, tuple[int, int]]]:
        """:meth:`_merged` where a segment rewrites the line another left open."""
        # Per stream: the text before the last cut (parts), and after it (being written).
        before: dict[str, Parts] = {"stdout": [], "stderr": []}
        merged = {"stdout": OverwrittenText(), "stderr": OverwrittenText()}
        rewound = {"stdout": False, "stderr": False}
        offsets: dict[int, list[int]] = {}
        for index, item in enumerate(self.items):
            if isinstance(item, _Stream):
                if not item.size():
                    continue
                name = item.name
                stream = merged[name]
                column = 0 if name == "stdout" else 1
                first = item.text.text if item.head is None else item.head
                if item.returns or rewound[name]:
                    # The open line is rewritten: outputs shown while it was open come
                    # before it.
                    whole = stream.text
                    line_start = (
                        _parts_size(before[name]) + len(whole) - len(whole.rpartition("\n")[2])
                    )
                    for pair in offsets.values():
                        pair[column] = min(pair[column], line_start)
                    first = "\r" + first
                stream.feed(first)
                if item.head is not None:
                    before[name] += [stream.text, item.omitted]
                    merged[name] = stream = OverwrittenText(item.text.text)
                rewound[name] = item.text.rewound
            elif item.get("output_type") != "error":
                offsets[index] = [
                    _parts_size(before["stdout"]) + len(merged["stdout"]),
                    _parts_size(before["stderr"]) + len(merged["stderr"]),
                ]
        texts = {name: _joined([*before[name], stream.text]) for name, stream in merged.items()}
        return texts, {i: (out, err) for i, (out, err) in offsets.items()}

    def rich_indexes(self) -> list[int]:
        """Indexes of the display_data / execute_result outputs still present."""
        return [
            i
            for i, item in enumerate(self.items)
            if isinstance(item, dict) and item.get("output_type") != "error"
        ]

    def notebook_outputs(self, *, stream_limit: int | None = None) -> list[dict[str, Any]]:
        """Outputs in nbformat v4 form; stream texts longer than ``stream_limit`` are cut."""
        outputs: list[dict[str, Any]] = []
        for item in self.items:
            if isinstance(item, _Stream):
                name = item.name

                def notice(count: int, name: str = name) -> str:
                    return self._cut_notice(name, count)

                if stream_limit is not None:
                    text = _cut_parts(item.parts(), stream_limit, notice)
                elif item.head is not None:
                    text = f"{item.head}\n{notice(item.omitted)}\n{item.text.text}"
                else:
                    text = item.text.text
                outputs.append({"output_type": "stream", "name": name, "text": text})
            elif item.get("_kernel_error"):
                if self.error is not None:
                    outputs.append(self._error_output(self.error))
            else:
                outputs.append({k: v for k, v in item.items() if not k.startswith("_")})
        if self.error is not None and not self._error_shown():
            outputs.append(self._error_output(self.error))
        return outputs

    def _error_shown(self) -> bool:
        """Whether the cell's outputs already say what the error says: the kernel sent it
        on iopub (even if cleared since), or, with only the reply saying it, printed it on
        stderr with no traceback (IPython's ``UsageError`` for an unknown magic), as a
        notebook client records it."""
        if self.error is None or self._error_on_iopub:
            return True
        return not self.error.traceback and self.error.evalue in self.stream_text("stderr")

    @staticmethod
    def _error_output(error: ErrorEvent) -> dict[str, Any]:
        return {
            "output_type": "error",
            "ename": error.ename,
            "evalue": error.evalue,
            "traceback": error.traceback,
        }


def _values_dropped(count: int, chars: int) -> str:
    """The notice of ``count`` rich values over the per-value limit, collapsed."""
    return (
        f"\n[output dropped: {count} rich values, {chars} characters in all, each larger than "
        f"the broker's limit of {MAX_RICH_VALUE_CHARS} characters per value]\n"
    )


def _metadata_dropped(count: int, chars: int) -> str:
    """The notice of ``count`` outputs' metadata over the limit, collapsed."""
    return (
        f"\n[output metadata dropped: {count} outputs' metadata, each larger than the "
        f"broker's limit of {MAX_METADATA_CHARS} characters; their values were kept]\n"
    )


def _cell_metadata_dropped(count: int, chars: int) -> str:
    """The notice of ``count`` outputs' metadata past the cell's limit, collapsed."""
    return (
        f"\n[output metadata dropped: {count} outputs' metadata, past the broker's limit of "
        f"{MAX_CELL_METADATA_CHARS} characters for this cell's outputs; their values were kept]\n"
    )


def json_size(value: Any, limit: int | None = None, depth: int = 0) -> int:
    """About the characters of ``value``'s JSON form (strings counted unescaped), or a
    number past ``limit`` as soon as it is known to be past it: a large value is not
    walked whole, nor written out to be measured."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int | float):
        return len(repr(value))
    if depth > 64 or not isinstance(value, dict | list | tuple):
        return 4
    size = 2
    items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
    for key, item in items:
        size += 1 + (len(key) + 3 if isinstance(key, str) else 0)
        size += json_size(item, None if limit is None else limit - size, depth + 1)
        if limit is not None and size > limit:
            return size
    return size


#: Largest execution count taken from the kernel (SQLite's integers are 64-bit).
_MAX_COUNT = 2**53


def _count(value: Any) -> int | None:
    """An execution count as nbformat allows one (a whole number >= 0), else None: the
    kernel's messages are untrusted, and one such count made the notebook invalid."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_COUNT:
        return value
    return None


def _as_text(value: Any) -> str:
    """A display value of a text MIME type as text: a list of strings joined (nbformat's
    multiline form), anything else that is not a string written as JSON. A value of
    another shape would make the notebook invalid, so it could not be saved."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "".join(value)
    return json.dumps(value, ensure_ascii=False)


#: Characters of an error's message, and of each traceback line, kept at most.
ERROR_TEXT_LIMIT = 100_000
#: Traceback lines kept at most (the first and the last half).
TRACEBACK_LINES = 500
#: Characters of one traceback kept at most, its lines together (the first and the last
#: lines that fit in half each): 500 lines of 100,000 characters were 50 MB per cell, which
#: no output budget counted and a session kept for its life.
TRACEBACK_CHARS = 1 << 20
_CUT_TAIL_MARK = " characters of this error text omitted by the service ...]"


def _lines_within(lines: list[str], limit: int) -> list[str]:
    """The first and the last of ``lines`` that fit in half of ``limit`` characters each,
    with a notice of how many lines (and characters) between them the service left out."""
    half = limit // 2
    head: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) > half:
            break
        head.append(line)
        used += len(line)
    tail: list[str] = []
    used = 0
    for line in reversed(lines[len(head) :]):
        if used + len(line) > half:
            break
        tail.append(line)
        used += len(line)
    tail.reverse()
    gone = lines[len(head) : len(lines) - len(tail)]
    chars = sum(map(len, gone))
    notice = f"[... {len(gone)} traceback lines, {chars} characters, omitted by the service ...]"
    return [*head, notice, *tail]


def _cut_error(text: str, limit: int) -> str:
    """``text``, or its head and tail with a notice of how much of it the service cut
    (an error message has no artifact to hold its whole text)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    omitted = len(text) - 2 * half
    return f"{text[:half]}\n[... {omitted}{_CUT_TAIL_MARK}\n{text[-half:]}"


def cut_around(
    head: str,
    tail: str,
    total: int,
    limit: int,
    artifact: str | None = None,
    notice: Callable[[int], str] | None = None,
) -> str:
    """Like :func:`cut_middle` for a text of ``total`` characters that is not whole in
    memory: it starts with ``head`` and ends with ``tail``. ``notice`` (given the count)
    writes the notice instead of the one naming ``artifact``."""
    half = max(limit // 2, 1)
    head, tail = _ends(head, tail, half)
    omitted = max(total - len(head) - len(tail), 0)
    said = notice(omitted) if notice is not None else _omitted(omitted, artifact)
    return f"{head}\n{said}\n{tail}"


def cut_middle(
    text: str,
    limit: int,
    artifact: str | None = None,
    notice: Callable[[int], str] | None = None,
) -> str:
    """Keep the head and tail of ``text`` within about ``limit`` characters, with a notice
    naming ``artifact`` (the URL of the whole text) when given, or written by ``notice``
    (given the count)."""
    if len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    head, tail = _ends(text, text, half)
    omitted = len(text) - len(head) - len(tail)
    said = notice(omitted) if notice is not None else _omitted(omitted, artifact)
    return f"{head}\n{said}\n{tail}"


def _ends(lead: str, trail: str, half: int) -> tuple[str, str]:
    """The head of ``lead`` and the tail of ``trail`` that a cut text keeps, ``half``
    characters at most each; a head or tail that would begin or end within a line ends
    or begins at that line's boundary instead when one is in its last or first quarter,
    so that a reader gets whole lines on both sides of the notice ("line 1442", not
    "lin"; what is left out is counted in the notice)."""
    head, tail = lead[:half], trail[-half:]
    reach = max(half // 4, 1)
    if len(lead) > half and not head.endswith("\n") and lead[half] != "\n":
        end = head.rfind("\n", half - reach)
        if end >= 0:
            head = head[:end]
    if len(trail) > half and not tail.startswith("\n") and trail[-half - 1] != "\n":
        start = tail.find("\n", 0, reach)
        if start >= 0:
            tail = tail[start + 1 :]
    return head, tail


def _omitted(count: int, artifact: str | None, *, late: bool = False) -> str:
    """The notice of ``count`` characters cut from a text. ``late``: the text went on after
    its cell finished, and that late output is in no artifact (artifacts never change)."""
    if late:
        if artifact is None:
            return (
                f"[... {count} characters omitted; the output grew past the limit after the "
                "cell finished, and no artifact holds its full text]"
            )
        return (
            f"[... {count} characters omitted; full text in the artifact {artifact}, except "
            "what was printed after the cell finished]"
        )
    where = "the artifact ..." if artifact is None else f"the artifact {artifact}"
    return f"[... {count} characters omitted; full text in {where}]"


def _omitted_lost(count: int, artifact: str | None) -> str:
    """The notice of ``count`` characters cut from a text whose full text no artifact holds:
    the service restarted while its cell ran (the text an earlier broker had kept was
    already cut). ``artifact``: the earlier broker's artifact of the text up to its
    shutdown, if it stored one."""
    if artifact is None:
        return (
            f"[... {count} characters omitted; the service restarted while the cell ran, "
            "and its full text is lost]"
        )
    return (
        f"[... {count} characters omitted; the service restarted while the cell ran: the "
        f"artifact {artifact} holds its full text up to the restart, the rest is lost]"
    )


def _omitted_unstored(count: int, why: str) -> str:
    """The notice of ``count`` characters cut from a text whose full-text artifact could not
    be stored, because ``why`` (the data disk was full, or refused the write)."""
    return f"[... {count} characters omitted; no artifact holds the full text: {why}]"


#: A cut notice of this module's (:func:`_omitted`, :func:`_omitted_lost`) on a line of
#: its own: the count, and where it said the full text is.
_CUT_NOTICE = re.compile(
    r"\n\[\.\.\. (\d{1,15}) characters omitted; (full text in the artifact (\S+)"
    r"|the service restarted while the cell ran[^\]\n]*)\]\n"
)
#: What a progress write's notice names as the artifact (none exists until the end).
_NO_ARTIFACT_YET = "..."


@dataclass(frozen=True)
class CutText:
    """A stream text as a broker kept it cut: ``head``, ``omitted`` characters, ``tail``;
    ``artifact`` is the URL of an artifact an earlier broker stored with its full text
    (up to that broker's shutdown), or None when no artifact holds it."""

    head: str
    omitted: int
    tail: str
    artifact: str | None


def split_cut(text: str) -> CutText | None:
    """``text`` read as a stream text a broker cut (the first notice of a cut in it), or
    None when it has none. A running cell's notice (written by its progress writes)
    promises an artifact built when the cell ends; a broker that did not end it has none."""
    found = _CUT_NOTICE.search(text)
    if found is None:
        return None
    artifact = found.group(3)
    if artifact == _NO_ARTIFACT_YET:
        artifact = None
    elif artifact is None:
        # Already said lost; an earlier artifact it named stays named.
        named = re.search(r"the artifact (\S+) holds", found.group(2))
        artifact = named.group(1) if named else None
    return CutText(text[: found.start()], int(found.group(1)), text[found.end() :], artifact)


def lost_cut(text: str) -> str:
    """``text`` with a running cell's cut notice (the artifact it promises was never
    built: its broker stopped) saying that the full text is lost; otherwise as it is."""
    cut = split_cut(text)
    if cut is None or cut.artifact is not None:
        return text
    return f"{cut.head}\n{_omitted_lost(cut.omitted, None)}\n{cut.tail}"


def _joined(parts: Parts) -> Parts:
    """``parts`` with adjacent strings joined and empty ones left out."""
    out: Parts = []
    run: list[str] = []
    for part in parts:
        if isinstance(part, str):
            run.append(part)
            continue
        if run:
            out.append("".join(run))
            run = []
        out.append(part)
    if run:
        out.append("".join(run))
    return [part for part in out if part != ""]


def _parts_size(parts: Parts) -> int:
    return sum(len(part) if isinstance(part, str) else part for part in parts)


def _cut_parts(parts: Parts, limit: int, notice: Callable[[int], str]) -> str:
    """A text kept as ``parts`` within about ``limit`` characters: whole when it fits and
    nothing was cut from it, else its head and tail (``limit // 2`` characters each, as
    :func:`cut_middle` keeps them) around ``notice(characters left out)``."""
    if all(isinstance(part, str) for part in parts):
        text = "".join(part for part in parts if isinstance(part, str))
        if len(text) <= limit:
            return text
        lead = trail = text
    else:
        first = next(i for i, part in enumerate(parts) if isinstance(part, int))
        last = max(i for i, part in enumerate(parts) if isinstance(part, int))
        lead = "".join(part for part in parts[:first] if isinstance(part, str))
        trail = "".join(part for part in parts[last + 1 :] if isinstance(part, str))
    half = max(limit // 2, 1)
    head, tail = _ends(lead, trail, half)
    omitted = max(_parts_size(parts) - len(head) - len(tail), 0)
    return f"{head}\n{notice(omitted)}\n{tail}"
