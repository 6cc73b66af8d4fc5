"""Plain-text renderings of executions for a language model (and for terminals).

A model reads text best when each part says what it is: the status, what was printed, the
value, a table summary with dtypes, a description of each plot, and the traceback. Long
texts keep their head and tail, because both ends of a log usually matter.
"""

from __future__ import annotations

import json
import re
from typing import Any

from interpreter.mime import CHART_MIME, DATAFRAME_MIME, is_image
from interpreter.mime import strip_ansi as strip_ansi
from interpreter.models import Execution, Output
from interpreter.policy.explain import policy_text

_HTML_TAG = re.compile(r"<[^>]+>")


def clip(text: str, limit: int) -> str:
    """``text`` if short enough, else its head and tail with a note of what was cut."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters omitted ...]\n{text[-tail:]}"


def bundle_text(value: Any) -> str:
    """A MIME-bundle text value as one string (nbformat may split it into a list)."""
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value)


def dataframe_summary(summary: dict[str, Any]) -> str:
    """One-paragraph description of an ``application/vnd.dataframe+json`` value."""
    kind = "Series" if summary.get("kind") == "series" else "DataFrame"
    shape = summary.get("shape") or []
    if kind == "Series" and shape:
        size = f"{shape[0]} rows"
    elif len(shape) == 2:
        size = f"{shape[0]} rows x {shape[1]} columns"
    else:
        size = "unknown shape"
    lines = [f"{kind}: {size}"]
    columns = summary.get("columns") or []
    if columns:
        parts = []
        for col in columns:
            part = f"{col.get('name')} ({col.get('dtype')}"
            if col.get("nulls"):
                part += f", {col['nulls']} null"
            parts.append(part + ")")
        more = ""
        if len(shape) == 2 and isinstance(shape[1], int) and shape[1] > len(columns):
            more = f", ... {shape[1] - len(columns)} more"
        lines.append("columns: " + ", ".join(parts) + more)
    index = summary.get("index") or {}
    if index.get("type") and index.get("type") != "RangeIndex":
        lines.append(f"index: {index['type']} ({index.get('dtype')})")
    rows = summary.get("rows") or []
    if summary.get("truncated") and rows:
        lines.append(f"(the table shows the first {len(rows)} rows)")
    return "\n".join(lines)


def chart_summary(chart: dict[str, Any]) -> str:
    """One line per Axes describing an ``application/vnd.chart+json`` value."""
    lines = []
    if chart.get("suptitle"):
        lines.append(f"Figure: {chart['suptitle']}")
    for n, ax in enumerate(chart.get("axes") or [], start=1):
        desc = f"plot {n}: {ax.get('kind', 'unknown')}"
        if ax.get("title"):
            desc += f" titled {ax['title']!r}"
        axes = [
            f"{name}={ax[key]!r}" for name, key in (("x", "xlabel"), ("y", "ylabel")) if ax.get(key)
        ]
        if axes:
            desc += " (" + ", ".join(axes) + ")"
        series = ax.get("series") or []
        if series:
            names = [
                f"{s.get('label') or s.get('type')}: {s.get('points', '?')} points"
                for s in series[:8]
            ]
            extra = f", ... {len(series) - 8} more" if len(series) > 8 else ""
            desc += "; series " + "; ".join(names) + extra
        lines.append(desc)
    return "\n".join(lines) if lines else "a figure"


def output_text(output: Output, limit: int) -> str:
    """What a model should read of one rich output (images are described, not included)."""
    data = output.data
    parts: list[str] = []
    if isinstance(data.get(DATAFRAME_MIME), dict):
        parts.append(dataframe_summary(data[DATAFRAME_MIME]))
    if isinstance(data.get(CHART_MIME), dict):
        parts.append(chart_summary(data[CHART_MIME]))
    if "text/plain" in data and CHART_MIME not in data:
        parts.append(clip(strip_ansi(bundle_text(data["text/plain"])), limit))
    elif "text/markdown" in data:
        parts.append(clip(bundle_text(data["text/markdown"]), limit))
    elif "text/html" in data and not parts:
        html = _HTML_TAG.sub(" ", bundle_text(data["text/html"]))
        parts.append(clip(" ".join(html.split()), limit))
    elif "application/json" in data and not parts:
        parts.append(clip(json.dumps(data["application/json"], indent=1), limit))
    images = [a for a in output.artifacts if is_image(a.mime)]
    for ref in images:
        parts.append(f"[image {ref.mime}, {ref.size} bytes]")
    others = [a for a in output.artifacts if not is_image(a.mime)]
    for ref in others:
        parts.append(f"[{ref.mime} output stored as artifact, {ref.size} bytes: {ref.url}]")
    if not parts:
        kinds = ", ".join(sorted(data)) or "nothing"
        parts.append(f"[output of type {kinds}]")
    return "\n".join(parts)


def execution_header(execution: Execution) -> str:
    """``status: ok (cell 3, 41 ms)`` plus a warning when state was lost."""
    bits = []
    if execution.execution_count is not None:
        bits.append(f"cell {execution.execution_count}")
    if execution.duration_ms is not None:
        bits.append(f"{execution.duration_ms:.0f} ms")
    head = f"status: {execution.status}" + (f" ({', '.join(bits)})" if bits else "")
    if execution.status == "timeout":
        head += "\nThe code ran past its time limit and was stopped."
    elif execution.status == "kernel_died":
        head += "\nThe kernel died (out of memory, a crash, or os._exit) and was restarted."
    elif execution.status == "interrupted":
        head += "\nThe code was interrupted."
    policy = policy_text(execution)
    if policy:
        head += "\n" + policy
    elif execution.reason and execution.status != "ok":
        head += f" Reason: {execution.reason}."
    if execution.state_lost:
        head += (
            "\nWARNING: the kernel was restarted; all variables, imports and loaded data "
            "are gone. Re-run the setup code before continuing."
        )
    return head


def truncation_note(execution: Execution) -> str:
    """What was cut and where the whole text is: each artifact by URL and size."""
    refs = [r for r in execution.artifacts if r.mime.startswith("text/")]
    if not refs:
        return "(output was cut; what was over the limit was not kept)"
    where = "; ".join(f"{r.url} ({r.size} bytes)" for r in refs)
    return (
        f"(output was cut; the full text is in artifact {where}: "
        "read a range of it with read_artifact, offset and length in bytes)"
    )


def render_execution(execution: Execution, *, limit: int = 20_000) -> list[str]:
    """Text blocks describing an execution, in the order a reader needs them.

    Args:
        execution: The finished execution.
        limit: Characters kept of each long text (stdout, stderr, a value, a traceback).

    Returns:
        Blocks: the header, stdout, stderr, one per rich output, then the error.
    """
    blocks = [execution_header(execution)]
    if execution.stdout:
        blocks.append("stdout:\n" + clip(strip_ansi(execution.stdout).rstrip("\n"), limit))
    if execution.stderr:
        blocks.append("stderr:\n" + clip(strip_ansi(execution.stderr).rstrip("\n"), limit))
    if execution.truncated:
        blocks.append(truncation_note(execution))
    for output in execution.outputs:
        label = "result" if output.type == "execute_result" else "display"
        blocks.append(f"{label}:\n{output_text(output, limit)}")
    if execution.error is not None:
        err = execution.error
        tb = strip_ansi("\n".join(err.traceback)) if err.traceback else ""
        text = f"error: {err.ename}: {err.evalue}"
        if tb:
            text += "\n" + clip(tb, limit)
        blocks.append(text)
    if len(blocks) == 1 and execution.status == "ok":
        blocks.append("(no output)")
    return blocks
