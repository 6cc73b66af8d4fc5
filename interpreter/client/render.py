"""Plain-text renderings of executions for a language model (and for terminals).

A model reads text best when each part says what it is: the status, what was printed, the
value, a table summary with dtypes, a description of each plot, and the traceback. Long
texts keep their head and tail, because both ends of a log usually matter.
"""

from __future__ import annotations

import json
import re
from typing import Any

from interpreter.client.charttext import chart_summary as chart_summary
from interpreter.client.htmltext import html_to_text
from interpreter.mime import CHART_MIME, DATAFRAME_MIME, is_image
from interpreter.mime import strip_ansi as strip_ansi
from interpreter.models import ErrorInfo, Execution, Output
from interpreter.policy.explain import policy_text

# ``<IPython.core.display.Markdown object>``, ``<pandas...Styler at 0x7f...>``: a repr that
# says nothing about the value. Any other form of the output is better.
_OBJECT_REPR = re.compile(r"^<[\w.]+(?: object)?(?: at 0x[0-9a-fA-F]+)?>$")


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
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def dataframe_summary(summary: dict[str, Any], table: str | None = None) -> str:
    """One-paragraph description of an ``application/vnd.dataframe+json`` value.

    Args:
        summary: The value.
        table: The text table shown after the description (its ``text/plain``), if any:
            the description then says which rows it leaves out.
    """
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
    if kind == "Series" and len(columns) == 1:
        # A Series has a name (None for most: ``df.dtypes``, ``s.value_counts()`` keeps
        # the column's) and one dtype, not columns.
        col = columns[0]
        part = f"dtype {col.get('dtype')}"
        if col.get("nulls"):
            part += f", {col['nulls']} null"
        lines.append(part if col.get("name") is None else f"name: {col['name']}, {part}")
    elif columns:
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
    note = _rows_note(table, shape[0] if shape and isinstance(shape[0], int) else None)
    if note:
        lines.append(note)
    return "\n".join(lines)


# pandas' row of ellipses where a long table's repr leaves rows out ("...", "..  ...  ...").
_ELLIPSIS_ROW = re.compile(r"^\s*\.\.+(?:\s+\.\.+)*\s*$")
# What ends a repr after its rows: a DataFrame's "[100 rows x 2 columns]", a Series' footer.
_REPR_FOOTER = ("[", "Name:", "Length:", "dtype:", "Freq:")


def _rows_note(table: str | None, total: int | None) -> str | None:
    """What the text table shown after the summary leaves out, read from that text.

    pandas cuts a long frame's repr to as many rows from the head as from the tail, with
    a row of ellipses between them; a repr with no such row shows every row (no note).
    """
    if not table:
        return None
    lines = table.splitlines()
    cut = next((i for i, line in enumerate(lines) if _ELLIPSIS_ROW.match(line)), None)
    if cut is None:
        return None
    tail = 0
    for line in lines[cut + 1 :]:
        if not line.strip() or line.startswith(_REPR_FOOTER):
            break
        tail += 1
    if not tail:
        return "(the table below leaves rows out)"
    of = f" of {total}" if total else ""
    return f"(the table below shows the first {tail} and the last {tail}{of} rows)"


def output_text(output: Output, limit: int) -> str:
    """What a model should read of one rich output (images are described, not included)."""
    data = output.data
    parts: list[str] = []
    frame = data.get(DATAFRAME_MIME)
    text = None
    if CHART_MIME not in data:
        text = readable_text(data, have_summary=isinstance(frame, dict))
    if isinstance(frame, dict):
        parts.append(dataframe_summary(frame, text))
    if isinstance(data.get(CHART_MIME), dict):
        parts.append(chart_summary(data[CHART_MIME]))
    if text is not None:
        parts.append(clip(text, limit))
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


def readable_text(data: dict[str, Any], *, have_summary: bool = False) -> str | None:
    """The best text form of a MIME bundle: ``text/plain`` unless it is a bare object repr,
    else Markdown, LaTeX, HTML converted to text, or JSON.

    With ``have_summary`` (a dataframe summary was already given) an HTML table is not
    repeated as text.
    """
    plain = strip_ansi(bundle_text(data["text/plain"])) if "text/plain" in data else None
    if plain is not None and not _OBJECT_REPR.match(plain.strip()):
        return plain
    if "text/markdown" in data:
        return bundle_text(data["text/markdown"])
    if "text/latex" in data:
        return bundle_text(data["text/latex"])
    if "text/html" in data and not have_summary:
        return html_to_text(bundle_text(data["text/html"]))
    if "application/json" in data:
        # The characters themselves: a model reads "ü" better than "\\u00fc".
        return json.dumps(data["application/json"], indent=1, ensure_ascii=False)
    if have_summary:
        return None
    return plain


#: What an ``unknown`` status means to the model, by reason: the bare reason led a model
#: to run again code whose kernel was still running it.
UNKNOWN_ENDINGS = {
    "broker_shutdown": "The service stopped while this code ran. Its kernel was kept and "
    "may still be running it: do not run it again. Once the service is back, read "
    "execution {id} again for what it printed since (its status stays unknown).",
}
UNKNOWN_ENDING = (
    "The service restarted while this code ran, so how it ended is not known (what it "
    "printed while no service ran is lost). Check what it should have done before going on."
)


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
    elif execution.status == "unknown":
        head += "\n" + UNKNOWN_ENDINGS.get(execution.reason or "", UNKNOWN_ENDING).format(
            id=execution.id
        )
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


def _places(execution: Execution, limit: int) -> list[tuple[int, int]] | None:
    """Where each output came in stdout and stderr (:attr:`Output.after`), when prints
    and outputs can be given in that order: every output says where it came, in order,
    and no text needs cutting. Else None."""
    if not execution.outputs or not (execution.stdout or execution.stderr):
        return None
    if limit > 0 and max(len(execution.stdout), len(execution.stderr)) > limit:
        return None
    places: list[tuple[int, int]] = []
    last = (0, 0)
    for output in execution.outputs:
        at = output.after
        if at is None or not (
            last[0] <= at.stdout <= len(execution.stdout)
            and last[1] <= at.stderr <= len(execution.stderr)
        ):
            return None
        last = (at.stdout, at.stderr)
        places.append(last)
    return places


def _printed(
    execution: Execution, out_from: int, out_to: int, err_from: int, err_to: int
) -> list[str]:
    """The stdout and stderr blocks for the text printed between two outputs."""
    blocks = []
    stdout = strip_ansi(execution.stdout[out_from:out_to]).rstrip("\n")
    if stdout.strip():
        blocks.append("stdout:\n" + stdout)
    stderr = strip_ansi(execution.stderr[err_from:err_to]).rstrip("\n")
    if stderr.strip():
        blocks.append("stderr:\n" + stderr)
    return blocks


def _output_block(output: Output, limit: int) -> str:
    label = "result" if output.type == "execute_result" else "display"
    return f"{label}:\n{output_text(output, limit)}"


def error_text(err: ErrorInfo, limit: int) -> str:
    """``error: ename: evalue`` and the traceback, within about ``limit`` characters.

    The message and each traceback line get at most a quarter of it (the traceback's last
    line usually repeats the message), so a long message leaves room for the frames.
    """
    share = max(limit // 4, 1) if limit > 0 else 0
    head = f"error: {clip(err.ename, share)}: {clip(err.evalue, share)}"
    if not err.traceback:
        return head
    lines = [clip(strip_ansi(line), share) for line in err.traceback]
    return head + "\n" + clip("\n".join(lines), max(limit - len(head), share))


def render_execution(execution: Execution, *, limit: int = 20_000) -> list[str]:
    """Text blocks describing an execution, in the order a reader needs them.

    Args:
        execution: The finished execution.
        limit: Characters kept of each long text (stdout, stderr, a value, a traceback).

    Returns:
        Blocks: the header; the printed text and the rich outputs in the order they came
        (when each output says where it came, :attr:`Output.after`, and no text is cut;
        else all of stdout, all of stderr, then the outputs); then the error.
    """
    blocks = [execution_header(execution)]
    places = _places(execution, limit)
    if places is not None:
        # Prints and outputs as they came: each output after the text printed before it.
        out_at = err_at = 0
        for output, (out_to, err_to) in zip(execution.outputs, places, strict=True):
            blocks += _printed(execution, out_at, out_to, err_at, err_to)
            out_at, err_at = out_to, err_to
            blocks.append(_output_block(output, limit))
        end_out, end_err = len(execution.stdout), len(execution.stderr)
        blocks += _printed(execution, out_at, end_out, err_at, end_err)
        if execution.truncated:
            blocks.append(truncation_note(execution))
    else:
        if execution.stdout:
            blocks.append("stdout:\n" + clip(strip_ansi(execution.stdout).rstrip("\n"), limit))
        if execution.stderr:
            blocks.append("stderr:\n" + clip(strip_ansi(execution.stderr).rstrip("\n"), limit))
        if execution.truncated:
            blocks.append(truncation_note(execution))
        blocks += [_output_block(output, limit) for output in execution.outputs]
    if execution.error is not None:
        blocks.append(error_text(execution.error, limit))
    if len(blocks) == 1 and execution.status == "ok":
        blocks.append("(no output)")
    return blocks
