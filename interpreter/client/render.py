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
from interpreter.mime import CHART_MIME, DATAFRAME_MIME, SVG_MIME, is_image
from interpreter.mime import strip_ansi as strip_ansi
from interpreter.models import ArtifactRef, ErrorInfo, Execution, Output
from interpreter.policy.explain import policy_text

# ``<IPython.core.display.Markdown object>``, ``<pandas...Styler at 0x7f...>``: a repr that
# says nothing about the value. Any other form of the output is better.
_OBJECT_REPR = re.compile(r"^<[\w.]+(?: object)?(?: at 0x[0-9a-fA-F]+)?>$")


#: The service's own mark where it cut a text (``interpreter.execution.cut_middle``):
#: how many characters, and the artifact that holds them when it is known.
_SERVICE_CUT = re.compile(
    r"\[\.\.\. (\d+) characters omitted; full text in the artifact ?([^\]\n]*)\]"
)
#: Characters a model gains nothing from: C0 controls but tab, newline and carriage
#: return, DEL, and the bidirectional embeddings, overrides and isolates (which can make
#: text read otherwise than it is).
_INVISIBLE = dict.fromkeys(
    [*range(0, 9), 11, 12, *range(14, 32), 127, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)


#: How to see what the model text leaves out of a printed text or a value it has whole.
SEE_MORE = "print a part of it (a slice, head(), tail()) to see more"


def clean(text: str) -> str:
    """``text`` without terminal codes and the control characters a model cannot use."""
    return strip_ansi(text).translate(_INVISIBLE)


def clip(text: str, limit: int, hint: str | None = None) -> str:
    """``text`` if short enough, else its head and tail with a note of what was cut.

    Where the service had already cut the text (its own ``[... N characters omitted;
    full text in the artifact URL]`` mark falls in what is cut here), the note counts
    those characters too and names that artifact; else it adds ``hint`` (how to see what
    was cut), if given.
    """
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 2 // 3
    end = len(text) - (limit - head)
    # Whole lines on both sides of the note when a line ends near the cut ("line 1442",
    # not "lin"), as the service cuts its own texts.
    if text[head - 1] != "\n" and text[head] != "\n":
        line_end = text.rfind("\n", head - max(head // 4, 1), head)
        head = line_end if line_end > 0 else head
    if text[end - 1] != "\n" and text[end] != "\n":
        line_start = text.find("\n", end, end + max((len(text) - end) // 4, 1))
        end = line_start + 1 if line_start >= 0 else end
    for mark in _SERVICE_CUT.finditer(text):  # never keep half a mark
        if mark.start() < head < mark.end():
            head = mark.start()
        if mark.start() < end < mark.end():
            end = mark.end()
    cut = end - head
    where = None
    for mark in _SERVICE_CUT.finditer(text, head, end):
        # The service's mark stands for its count, and so do the line breaks it put
        # around it (they are no characters of the text).
        framing = text[mark.start() - 1 : mark.start()] + text[mark.end() : mark.end() + 1]
        cut += int(mark.group(1)) - len(mark.group(0)) - framing.count("\n")
        if mark.group(2).startswith(("/", "http")):
            where = mark.group(2)
    if where is not None:
        note = f"{cut} characters omitted; full text in the artifact {where} (read_artifact)"
    else:
        note = f"{cut} characters omitted" + (f"; {hint}" if hint else "")
    return f"{text[:head]}\n[... {note} ...]\n{text[end:]}"


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
        size = _many(shape[0], "row")
    elif len(shape) == 2:
        size = f"{_many(shape[0], 'row')} x {_many(shape[1], 'column')}"
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


def _many(n: Any, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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


#: Raster types a model takes, the preferred first: one picture given in several of them
#: (a PIL image has PNG and JPEG) is shown once, in the first.
MODEL_IMAGE_ORDER = ("image/png", "image/jpeg", "image/webp", "image/gif")


def model_images(execution: Execution) -> list[ArtifactRef]:
    """The images a model is shown of ``execution``, numbered 1, 2, ... in this order: of
    each output, its picture in the preferred type; a picture an earlier output showed
    (the same bytes) only once."""
    return [forms[0] for forms in image_forms(execution)]


def image_forms(execution: Execution) -> list[list[ArtifactRef]]:
    """For each image of :func:`model_images`, the types its output gives it in, the
    preferred first (a form too large for a model may have a smaller twin)."""
    picked: list[list[ArtifactRef]] = []
    seen: set[str] = set()
    for output in execution.outputs:
        forms = _forms(output)
        if forms and forms[0].id not in seen:
            seen.add(forms[0].id)
            picked.append(forms)
    return picked


def _forms(output: Output) -> list[ArtifactRef]:
    forms = {ref.mime: ref for ref in output.artifacts if ref.mime in MODEL_IMAGE_ORDER}
    return [forms[mime] for mime in MODEL_IMAGE_ORDER if mime in forms]


def _picture(output: Output) -> ArtifactRef | None:
    forms = _forms(output)
    return forms[0] if forms else None


class _Numbers:
    """The numbers of an execution's images (:func:`model_images`), and which of them a
    reader has met already."""

    def __init__(self, execution: Execution) -> None:
        self.of = {ref.id: n for n, ref in enumerate(model_images(execution), 1)}
        self.met: set[str] = set()


def _image_lines(output: Output, numbers: _Numbers | None) -> list[str]:
    picture = _picture(output) if numbers is not None else None
    lines = []
    others = []
    for ref in output.artifacts:
        if not is_image(ref.mime):
            continue
        if picture is not None and numbers is not None and ref is picture:
            n = numbers.of[ref.id]
            if ref.id in numbers.met:
                lines.append(f"[image {n} again: the same image as shown above]")
            else:
                numbers.met.add(ref.id)
                lines.append(f"[image {n}: {ref.mime}, {ref.size:,} bytes]")
        elif picture is not None and ref.mime in MODEL_IMAGE_ORDER:
            others.append(f"{ref.mime}, {ref.size:,} bytes")
        elif ref.mime == SVG_MIME:
            lines.append(
                f"[image {ref.mime}, {ref.size:,} bytes, not attached: {ref.url} "
                "(read_artifact gives its SVG text)]"
            )
        else:
            lines.append(f"[image {ref.mime}, {ref.size:,} bytes: {ref.url}]")
    if others and lines:
        lines[0] = lines[0][:-1] + f"; the same picture also as {'; '.join(others)}]"
    return lines


def output_text(output: Output, limit: int, numbers: _Numbers | None = None) -> str:
    """What a model should read of one rich output (images are described, not included).

    With ``numbers`` (of the execution's images), each picture is named by its number and
    once (an output that shows it again says so); without, every image by its URL.
    """
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
    if text is not None and not (_OBJECT_REPR.match(text.strip()) and output.artifacts):
        whole = next((a for a in output.artifacts if a.mime == "text/plain"), None)
        hint = (
            SEE_MORE if whole is None else f"full text in the artifact {whole.url} (read_artifact)"
        )
        parts.append(clip(clean(text), limit, hint))
    parts += _image_lines(output, numbers)
    others = [a for a in output.artifacts if not is_image(a.mime)]
    for ref in others:
        parts.append(f"[{ref.mime} output stored as artifact, {ref.size:,} bytes: {ref.url}]")
    if not parts and not data:
        # What the service dropped whole (a value over its size limit) leaves no data.
        parts.append(
            "[an output with no data: a value too large to keep is dropped, and stderr says so]"
        )
    elif not parts:
        parts.append(f"[output of type {', '.join(sorted(data))}]")
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
    """``status: ok (In [3], 41 ms)`` plus a warning when state was lost: the cell named
    as the notebook and a rebuild's summary name it."""
    bits = []
    if execution.execution_count is not None:
        bits.append(f"In [{execution.execution_count}]")
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
    if execution.state_lost and _lost_here(execution):
        head += (
            "\nWARNING: the kernel was restarted; all variables, imports and loaded data "
            "are gone. Re-run the setup code before continuing."
        )
    elif execution.state_lost:
        head += (
            "\nNote: this code ran in a fresh kernel (it was restarted after an earlier "
            "cell), so what cells before it defined is gone; what this code defined is kept."
        )
    return head


#: Endings whose ``state_lost`` is this code's own: the kernel was restarted as it ended.
_ENDS_IN_RESTART = frozenset({"timeout", "kernel_died", "interrupted", "cancelled", "unknown"})


def _lost_here(execution: Execution) -> bool:
    """Whether the state was lost as this code ended (a timeout's restart, a death, an
    ``exit()``), not before it began (the first code on a kernel started after another
    cell lost its state)."""
    return execution.status in _ENDS_IN_RESTART or execution.reason == "exit"


def truncation_note(execution: Execution) -> str | None:
    """What the service cut of the printed text and where the whole of it is: each stream's
    artifact by URL and size. None when it cut only the error (its traceback says so)."""
    refs = {ref.id: ref for ref in execution.artifacts if ref.mime.startswith("text/")}
    named = []
    for stream in ("stdout", "stderr"):
        text = getattr(execution, stream)
        for ref_id, ref in list(refs.items()):
            if ref.url in text:
                named.append(f"{stream}: {ref.url} ({ref.size:,} bytes)")
                del refs[ref_id]
    named += [f"{ref.url} ({ref.size:,} bytes)" for ref in refs.values()]
    if named:
        return (
            f"(output was cut; the full text is in artifact {'; '.join(named)}: "
            "read a range of it with read_artifact, offset and length in bytes)"
        )
    if _SERVICE_CUT.search(execution.stdout) or _SERVICE_CUT.search(execution.stderr):
        return "(output was cut; what was over the limit was not kept)"
    if execution.error is not None and not (execution.stdout or execution.stderr):
        return None
    return "(output was cut; what was over the limit was not kept)"


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
    stdout = clean(execution.stdout[out_from:out_to]).rstrip("\n")
    if stdout.strip():
        blocks.append("stdout:\n" + stdout)
    stderr = clean(execution.stderr[err_from:err_to]).rstrip("\n")
    if stderr.strip():
        blocks.append("stderr:\n" + stderr)
    return blocks


def _output_block(output: Output, limit: int, numbers: _Numbers | None = None) -> str:
    label = "result" if output.type == "execute_result" else "display"
    return f"{label}:\n{output_text(output, limit, numbers)}"


class _Budget:
    """What the outputs of one result may take together: ``limit`` characters, and more
    when the printed text leaves room, up to twice ``limit`` for the whole result. An
    output past it is given by its images alone, and one note counts what was left out."""

    def __init__(self, limit: int, printed: int) -> None:
        self.left = max(limit, 2 * limit - printed) if limit > 0 else None
        self.shown = 0
        self.omitted = 0
        self.omitted_chars = 0

    def block(self, output: Output, limit: int, numbers: _Numbers) -> str | None:
        text = _output_block(output, limit, numbers)
        if self.left is None:
            return text
        if not self.omitted and (len(text) <= self.left or not self.shown):
            self.left -= len(text)  # the first output is shown in any case
            self.shown += 1
            return text
        self.omitted += 1
        self.omitted_chars += len(text)
        images = _image_lines(output, numbers)
        label = "result" if output.type == "execute_result" else "display"
        return f"{label} (not shown, see below):\n" + "\n".join(images) if images else None

    def note(self) -> str | None:
        if not self.omitted:
            return None
        n = self.omitted
        return (
            f"[... {n} more output{'s' if n > 1 else ''} ({self.omitted_chars:,} characters) "
            "not shown: one result shows about as much output as its limit. Show fewer or "
            "smaller values per call (a summary, a slice), or write them to a file and "
            "read_file it.]"
        )


def _without_repeated_error(execution: Execution) -> Execution:
    """``execution`` without the last line of its stderr when that line is its error
    said again: IPython prints a ``UsageError`` (``%pip`` where nothing can be installed,
    a magic's bad argument) on stderr and also sends it as the error, without a
    traceback, so the model read the same sentence twice."""
    err = execution.error
    if err is None or err.traceback:
        return execution
    said = f"{err.ename}: {err.evalue}".rstrip("\n")
    stderr = execution.stderr.rstrip("\n")
    if not said or not stderr.endswith(said):
        return execution
    return execution.model_copy(update={"stderr": stderr[: -len(said)].rstrip("\n")})


def error_text(err: ErrorInfo, limit: int, *, went_on: bool = False) -> str:
    """``error: ename: evalue`` and the traceback, within about ``limit`` characters.

    The message and each traceback line get at most a quarter of it (the traceback's last
    line usually repeats the message), so a long message leaves room for the frames. A
    frame repeated one after another (a recursion) is given once, with how many times
    more it came. ``went_on``: the code ended ``ok`` all the same (the error was raised
    while showing a value), and the header says so.
    """
    share = max(limit // 4, 1) if limit > 0 else 0
    label = "error (the code went on and ended ok)" if went_on else "error"
    head = f"{label}: {clip(clean(err.ename), share)}: {clip(clean(err.evalue), share)}"
    if not err.traceback:
        return head
    lines = [clip(clean(line), share) for line in _once(err.traceback)]
    return head + "\n" + clip("\n".join(lines), max(limit - len(head), share))


def _once(frames: list[str]) -> list[str]:
    """``frames`` with each run of one repeated frame given once and counted."""
    out: list[str] = []
    at = 0
    while at < len(frames):
        end = at + 1
        while end < len(frames) and frames[end] == frames[at]:
            end += 1
        out.append(frames[at])
        if end - at > 1:
            more = end - at - 1
            out.append(f"[... the frame above repeats {more} more time{'s' if more > 1 else ''}]")
        at = end
    return out


def render_execution(execution: Execution, *, limit: int = 20_000) -> list[str]:
    """Text blocks describing an execution, in the order a reader needs them.

    Args:
        execution: The finished execution.
        limit: Characters kept of each long text (stdout, stderr, a value, a traceback);
            the outputs together take about as much (up to twice, when little was
            printed), and those past it are counted in a note instead.

    Returns:
        Blocks: the header; the printed text and the rich outputs in the order they came
        (when each output says where it came, :attr:`Output.after`, and no text is cut;
        else all of stdout, all of stderr, then the outputs); then the error.
    """
    execution = _without_repeated_error(execution)
    blocks = [execution_header(execution)]
    numbers = _Numbers(execution)
    places = _places(execution, limit)
    printed = len(execution.stdout) + len(execution.stderr)
    budget = _Budget(limit, printed if limit <= 0 else min(printed, 2 * limit))
    if places is not None:
        # Prints and outputs as they came: each output after the text printed before it.
        out_at = err_at = 0
        for output, (out_to, err_to) in zip(execution.outputs, places, strict=True):
            blocks += _printed(execution, out_at, out_to, err_at, err_to)
            out_at, err_at = out_to, err_to
            blocks.append(budget.block(output, limit, numbers) or "")
        end_out, end_err = len(execution.stdout), len(execution.stderr)
        blocks += _printed(execution, out_at, end_out, err_at, end_err)
        note = truncation_note(execution) if execution.truncated else None
        blocks.append(note or "")
    else:
        if execution.stdout:
            stdout = clean(execution.stdout).rstrip("\n")
            blocks.append("stdout:\n" + clip(stdout, limit, SEE_MORE))
        if execution.stderr:
            stderr = clean(execution.stderr).rstrip("\n")
            blocks.append("stderr:\n" + clip(stderr, limit, SEE_MORE))
        note = truncation_note(execution) if execution.truncated else None
        blocks.append(note or "")
        blocks += [budget.block(output, limit, numbers) or "" for output in execution.outputs]
    blocks.append(budget.note() or "")
    if execution.error is not None:
        went_on = execution.status == "ok"
        blocks.append(error_text(execution.error, limit, went_on=went_on))
    blocks = [block for block in blocks if block]
    if len(blocks) == 1 and execution.status == "ok":
        blocks.append("(no output)")
    return blocks
