"""Log lines of the service: events with fields, a JSON formatter, and the setup of logging.

An event (one HTTP request, one finished execution) is logged once, through :func:`emit`:
in the text format its fields follow the summary as ``key=value`` pairs; in the JSON
format (``INTERP_LOG_FORMAT=json``) every line is one JSON object, and the fields are keys
of it. Nothing here ever receives an API key: requests are named by their key's id.
"""

from __future__ import annotations

import atexit
import copy
import json
import logging
import logging.handlers
import queue
import sys
from datetime import UTC, datetime
from typing import Any, Literal

from interpreter.models import Execution

#: Attributes every LogRecord has; anything else on a record came in as ``extra`` fields.
_RECORD_ATTRS = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: One line per HTTP request (written by the API layer) and per finished execution.
ACCESS = logging.getLogger("interpreter.access")
EXECUTIONS = logging.getLogger("interpreter.executions")


def emit(
    logger: logging.Logger,
    event: str,
    fields: dict[str, Any],
    level: int = logging.INFO,
    *,
    always: frozenset[str] = frozenset(),
) -> None:
    """Log one event: its name, then ``key=value`` for each field that is not None. The
    fields named in ``always`` are in a JSON line even when None (``null``), so that each
    line of the event has the same keys."""
    present = {k: v for k, v in fields.items() if v is not None}
    pairs = " ".join(f"{k}={v}" for k, v in present.items())
    extra = {k: v for k, v in fields.items() if v is not None or k in always}
    logger.log(level, "%s %s", event, pairs, extra={"event": event, **extra})


def execution_finished(ex: Execution, *, key_id: str, request_id: str | None) -> None:
    """The line of a finished execution (``request_id``: of the request that submitted it)."""
    fields = {
        "request_id": request_id,
        "session_id": ex.session_id,
        "execution_id": ex.id,
        "key_id": key_id,
        "status": ex.status,
        "reason": ex.reason,
        "duration_ms": ex.duration_ms,
    }
    emit(EXECUTIONS, "execution", fields, always=_EXECUTION_ALWAYS)


#: The fields of every execution line in JSON, null or not (a shipper's schema).
_EXECUTION_ALWAYS = frozenset({"reason", "duration_ms"})


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``message``, the event's
    fields, and ``exc_info`` as text when there is a traceback. JSON escapes every control
    character, so nothing a client sends can break or forge a line (docs/security.md H-47).
    """

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and key not in data and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:  # handed over from another thread (see configure)
            data["exc_info"] = record.exc_text
        if record.stack_info:
            data["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(data, default=str, ensure_ascii=False)


#: The lines ``interp serve`` writes to stdout (listening, shutting down, stopped).
ANNOUNCEMENTS = logging.getLogger("interpreter.server")


def complain(
    fmt: Literal["text", "json"], level: Literal["warning", "error"], message: str
) -> None:
    """Write one of ``interp serve``'s own warnings or errors (before, or instead of,
    logging) to stderr: ``interp: error: ...`` in the text format, one JSON object in the
    json format, so that a shipper reading JSON logs gets the line that stopped the
    service as JSON too."""
    if fmt == "json":
        record = ANNOUNCEMENTS.makeRecord(
            ANNOUNCEMENTS.name,
            logging.ERROR if level == "error" else logging.WARNING,
            "",
            0,
            message,
            (),
            None,
            extra={"event": f"startup_{level}"},
        )
        line = JsonFormatter().format(record)
    else:
        line = f"interp: {level}: {message}"
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def announce(fmt: Literal["text", "json"], message: str, event: str, **fields: Any) -> None:
    """Write one of ``interp serve``'s own lines to stdout: ``message`` as it is in the
    text format, one JSON object (a log record of ``interpreter.server`` with ``event``
    and ``fields``) in the json format, so a shipper reading stdout too gets only JSON.

    Written at once, not through the writer thread: a supervisor waiting for
    "listening on" must see it before the first request is served. Written whole, in one
    write: ``print`` writes the line and its newline apart, and with stdout unbuffered
    (``PYTHONUNBUFFERED``) a log line the writer thread sent to stderr, when both go to
    one pipe, could land between them (a test read the port as ``454972026-11-27``).
    """
    if fmt == "json":
        present = {k: v for k, v in fields.items() if v is not None}
        record = ANNOUNCEMENTS.makeRecord(
            ANNOUNCEMENTS.name,
            logging.INFO,
            "",
            0,
            message,
            (),
            None,
            extra={"event": event, **present},
        )
        message = JsonFormatter().format(record)
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def formatter(fmt: Literal["text", "json"]) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT)


class _HandOff(logging.handlers.QueueHandler):
    """Hands records to the writer thread with only their message rendered (and a
    traceback as text); the line itself is formatted and written there."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        record = copy.copy(record)
        record.message = record.getMessage()
        record.msg, record.args = record.message, None
        if record.exc_info:
            record.exc_text = record.exc_text or _TRACEBACKS.formatException(record.exc_info)
            record.exc_info = None
        return record


_TRACEBACKS = logging.Formatter()
_listener: logging.handlers.QueueListener | None = None


def _stop_writer() -> None:
    """Write what is queued, then end the writer thread."""
    global _listener
    if _listener is not None:
        listener, _listener = _listener, None
        listener.stop()


# Before logging's own shutdown (exit handlers run last registered first): what was logged
# last is written before the process ends.
atexit.register(_stop_writer)


def configure(fmt: Literal["text", "json"], level: int = logging.INFO) -> None:
    """Send every log record of the process to stderr in ``fmt`` (replaces earlier setup).

    Lines are written by a thread of their own: a slow or stalled stderr (a full pipe, a
    busy journal) never holds up the event loop, and the loop does not pay the write.
    """
    global _listener
    _stop_writer()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(fmt))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    _listener = logging.handlers.QueueListener(records, handler)
    _listener.start()
    logging.basicConfig(level=level, handlers=[_HandOff(records)], force=True)
