"""Execution events as E2B's newline-delimited JSON items.

One item per line: ``stdout``/``stderr`` (text and a timestamp in nanoseconds),
``result`` (one rich output, its forms under E2B's names), ``error`` (name, value and the
traceback as one string), ``number_of_executions``, ``keepalive`` and, last,
``end_of_execution``. Binary forms the broker moved to artifacts are read back and sent as
base64, as E2B does.
"""

from __future__ import annotations

import ast
import base64
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from interpreter.api.e2b.charts import e2b_chart
from interpreter.mime import CHART_MIME, DATAFRAME_MIME
from interpreter.models import ErrorInfo, Execution, Output

#: Reads an artifact's bytes by id (the session's artifact store).
ArtifactReader = Callable[[str], Awaitable[bytes]]

#: Our MIME types under E2B's result field names; the rest goes to ``extra``.
FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    DATAFRAME_MIME: "data",
}
BINARY_FIELDS = frozenset({"png", "jpeg", "pdf"})


def line(item: dict[str, Any]) -> str:
    """One NDJSON line (JSON escapes newlines inside strings, so framing holds).

    ASCII only, as E2B's server writes it: E2B's JS SDK decodes each network chunk on its
    own, so a UTF-8 character split across two chunks would reach it as U+FFFD."""
    return json.dumps(item) + "\n"


def stream_item(name: str, text: str) -> dict[str, Any]:
    return {"type": name, "text": text, "timestamp": time.time_ns()}


def error_item(error: ErrorInfo) -> dict[str, Any]:
    return {
        "type": "error",
        "name": error.ename,
        "value": error.evalue,
        "traceback": "\n".join(error.traceback),
    }


def count_item(execution: Execution) -> dict[str, Any] | None:
    if execution.execution_count is None:
        return None
    return {"type": "number_of_executions", "execution_count": execution.execution_count}


#: The mark a cut stream text carries where its middle was left out
#: (``interpreter.execution.cut_middle`` and ``cut_around``): the count it omits, the rest.
OMITTED = re.compile(r"\n\[\.\.\. (\d+)( characters omitted; full text in the artifact [^\n]*\])\n")


def unstreamed(final: str, streamed: int) -> str:
    """What of a stream's final text never went out live, of which ``streamed`` characters
    did: past the broker's in-memory limit, text stops streaming (it goes on to disk), and
    the record keeps a head, a mark naming the full-text artifact, and the tail the cell
    printed last. The client lacks the part of that tail it did not get, after a mark
    counting what it will never get; nothing when all of it streamed."""
    mark = OMITTED.search(final)
    if mark is None:
        return ""  # an uncut text was all in memory, so all of it streamed
    tail = final[mark.end() :]
    total = mark.start() + int(mark.group(1)) + len(tail)
    missing = total - streamed
    if missing <= len(tail):
        return tail[len(tail) - max(missing, 0) :]
    return f"\n[... {missing - len(tail)}{mark.group(2)}\n{tail}"


KEEPALIVE = {"type": "keepalive"}
END = {"type": "end_of_execution"}


async def result_item(output: Output, read_artifact: ArtifactReader) -> dict[str, Any]:
    """One rich output as an E2B ``result`` item."""
    item: dict[str, Any] = {"type": "result", "is_main_result": output.type == "execute_result"}
    extra: dict[str, Any] = {}
    for mime, value in output.data.items():
        text = "".join(value) if isinstance(value, list) and mime.startswith("text/") else value
        if mime == CHART_MIME:
            chart = e2b_chart(text)
            if chart is not None:
                item["chart"] = chart
        elif mime == DATAFRAME_MIME:
            item["data"] = frame_data(text)
        elif mime == "text/plain" and item["is_main_result"]:
            item["text"] = plain_text(text)
        elif mime in FIELDS:
            item[FIELDS[mime]] = text
        else:
            extra[mime] = text
    for ref in output.artifacts:
        name = FIELDS.get(ref.mime)
        if name in BINARY_FIELDS:
            item[name] = base64.b64encode(await read_artifact(ref.id)).decode("ascii")
        elif name is not None and name not in item:
            item[name] = (await read_artifact(ref.id)).decode("utf-8", "replace")
    if extra:
        item["extra"] = extra
    return item


def plain_text(text: object) -> object:
    """A string result as its text, without the quotes of its repr (as E2B shows it)."""
    if isinstance(text, str) and 2 <= len(text) <= 100_000 and text[0] in "'\"":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return text
        if isinstance(value, str):
            return value
    return text


def frame_data(summary: object) -> object:
    """Our table summary as E2B's ``data``: each column's values (the rows the summary
    holds: the first ones of a long table), by column name."""
    if not isinstance(summary, dict):
        return summary
    columns, rows = summary.get("columns"), summary.get("rows")
    if not isinstance(columns, list) or not isinstance(rows, list):
        return summary
    names = [str(c.get("name")) if isinstance(c, dict) else str(c) for c in columns]
    return {
        name: [row[i] for row in rows if isinstance(row, list) and i < len(row)]
        for i, name in enumerate(names)
    }
