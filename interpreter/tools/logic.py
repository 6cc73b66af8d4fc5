"""What each tool does, written once as steps of SDK protocol calls, so the sync and
the async executor share it (the SDK's sans-I/O pattern)."""

from __future__ import annotations

import base64
import codecs
import json
import mimetypes
import re
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from interpreter.client import (
    APIError,
    BadRequestError,
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
)
from interpreter.client import protocol as proto
from interpreter.client.render import (
    bundle_text,
    chart_summary,
    clip,
    dataframe_summary,
    image_forms,
    render_execution,
    strip_ansi,
)
from interpreter.mime import CHART_MIME, DATAFRAME_MIME, MODEL_IMAGE_MIMES, SVG_MIME, is_image
from interpreter.models import ArtifactRef, Execution, FileList
from interpreter.models import Session as SessionInfo
from interpreter.tools import images
from interpreter.tools.calls import ToolCall, ToolCallError, validate_arguments
from interpreter.tools.results import ImagePart, TextPart, ToolResult, error_result
from interpreter.tools.specs import TOOL_NAMES, TOOLS_BY_NAME
from interpreter.tools.structured import execution_data

# ------------------------------------------------------------------------- executors


@dataclass(frozen=True)
class RunStep:
    """Run code in a session and receive its finished :class:`Execution`.

    Yielded instead of a plain ``execute`` call so that an executor may run it its own
    way (the MCP server streams it, to report progress and to interrupt it on cancel).
    """

    session_id: str
    code: str
    timeout_s: float | None = None

    def call(self) -> proto.Call[Execution]:
        """The plain request-and-wait form."""
        return proto.execute(self.session_id, self.code, self.timeout_s)


# Each tool is a generator that yields API calls and receives their results, so the sync and
# async executors share one implementation and differ only in how they send a call.
Step = proto.Call[Any] | RunStep
_Steps = Generator[Step, Any, ToolResult]


class _ToolLogic:
    """What each tool does, written once as a sequence of API calls."""

    def __init__(
        self,
        *,
        max_chars: int,
        max_images: int,
        own_sessions_only: bool,
        base_url: str,
        keeps_current: bool = True,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.base_url = base_url
        self.max_chars = max_chars
        self.max_images = max_images
        self.own_sessions_only = own_sessions_only
        #: False when each call stands alone (stateless MCP): no later call uses a
        #: current session, so results do not promise one.
        self.keeps_current = keeps_current
        #: Sessions created here close after this many idle seconds (None: the service's
        #: own idle timeout).
        self.idle_timeout_s = idle_timeout_s
        self.session_id: str | None = None
        self.created: list[str] = []

    def steps(self, call: ToolCall) -> _Steps:
        spec = TOOLS_BY_NAME.get(call.name)
        if spec is None:
            return _fail(f"unknown tool {call.name!r}; available: {', '.join(TOOL_NAMES)}")
        try:
            validate_arguments(spec, call.arguments)
        except ToolCallError as exc:
            return _fail(str(exc))
        handler = getattr(self, f"_tool_{call.name}")
        steps: _Steps = handler(**call.arguments)
        return steps

    # -- sessions ---------------------------------------------------------------------

    def _check_own(self, session_id: str | None) -> None:
        """A session id must look like one the service gives (else no request is sent);
        with ``own_sessions_only``, it must be one this executor created."""
        if session_id and not _SESSION_ID.fullmatch(session_id):
            raise ToolCallError(
                f"{session_id[:100]!r} is not a session id: give one as create_session or "
                "list_sessions names it (letters, digits, '_' and '-'), or omit session_id"
            )
        if self.own_sessions_only and session_id and session_id not in self.created:
            raise ToolCallError(
                f"unknown session {session_id!r}: use a session created in this connection"
                + (f" ({', '.join(self.created)})" if self.created else "")
                + ", or omit session_id"
            )

    def _session(self, session_id: str | None) -> Generator[Step, Any, str]:
        """The session to act on: the given one, the current one, or a new one."""
        if session_id:
            self._check_own(session_id)
            return session_id
        if self.session_id is None:
            info: SessionInfo = yield proto.create_session(idle_timeout_s=self.idle_timeout_s)
            self.session_id = info.id
            self.created.append(info.id)
        return self.session_id

    def _tool_create_session(self, from_session: str | None = None) -> _Steps:
        self._check_own(from_session)
        info: SessionInfo = yield proto.create_session(
            idle_timeout_s=self.idle_timeout_s, from_session=from_session
        )
        self.session_id = info.id
        self.created.append(info.id)
        text = f"Created session {info.id}" + (
            "; it is now the current session." if self.keeps_current else "."
        )
        if info.rebuild is not None:
            text += f" Rebuilt from {info.rebuild.source}: " + info.rebuild.summary()
        return ToolResult([TextPart(text)])

    def _tool_list_sessions(self) -> _Steps:
        # Open ones only: a key's closed sessions stay on record for good, and listing
        # them all grew the model's text without end.
        sessions: list[SessionInfo] = yield proto.list_sessions("open")
        if self.own_sessions_only:
            sessions = [s for s in sessions if s.id in self.created]
        if not sessions:
            return ToolResult([TextPart("No open sessions; run_code creates one.")])
        lines = []
        for s in sessions:
            mark = "  (current)" if s.id == self.session_id else ""
            lines.append(
                f"{s.id}  {s.status}  {s.execution_count} executions  "
                f"created {s.created_at.isoformat(timespec='seconds')}{mark}"
            )
        return ToolResult([TextPart("\n".join(lines))])

    def _tool_close_session(self, session_id: str | None = None) -> _Steps:
        sid = session_id or self.session_id
        if sid is None:
            return error_result("There is no current session to close; give a session_id.")
        self._check_own(sid)
        yield proto.delete_session(sid)
        if sid == self.session_id:
            self.session_id = None
            after = " The next run_code without session_id starts a new session."
        else:
            after = ""
        return ToolResult(
            [
                TextPart(
                    f"Closed session {sid}: its kernel stopped and its variables are gone; "
                    f"its notebook stays readable with get_notebook.{after}"
                )
            ]
        )

    def _tool_restart(self, recover: bool = False, session_id: str | None = None) -> _Steps:
        sid = yield from self._session(session_id)
        info: SessionInfo = yield proto.restart(sid, recover=recover)
        text = f"Session {sid} restarted; variables and imports were cleared."
        if recover and info.rebuild is not None:
            text = f"Session {sid} restarted and rebuilt: " + info.rebuild.summary()
        return ToolResult([TextPart(text)])

    # -- code -----------------------------------------------------------------------------

    def _tool_run_code(
        self, code: str, session_id: str | None = None, timeout_s: float | None = None
    ) -> _Steps:
        sid = yield from self._session(session_id)
        note = ""
        try:
            execution: Execution = yield RunStep(sid, code, timeout_s)
        except (NotFoundError, ConflictError):
            if session_id or sid not in self.created:
                raise
            # The current session was culled or closed: carry on in a fresh one, and say so.
            self.session_id = None
            sid = yield from self._session(None)
            note = (
                f"Note: the previous session had ended, so this ran in a new session "
                f"{sid}; earlier variables are gone."
            )
            execution = yield RunStep(sid, code, timeout_s)
        parts: list[TextPart | ImagePart] = [TextPart(note)] if note else []
        parts.extend(TextPart(block) for block in render_execution(execution, limit=self.max_chars))
        left: list[tuple[int, ArtifactRef, str]] = []
        attached = 0
        for n, forms in enumerate(image_forms(execution), 1):
            if attached >= self.max_images:
                n_max = self.max_images
                why = f"at most {n_max} image{'s are' if n_max != 1 else ' is'} attached per result"
                left.append((n, forms[0], why))
                continue
            part, why = yield from _attachable(forms)
            if part is None:
                left.append((n, forms[0], why))
                continue
            parts.append(part)
            attached += 1
        if left:
            parts.append(TextPart(_images_left_note(left, attached)))
        return ToolResult(
            parts,
            structured=execution_data(execution, limit=self.max_chars),
            code_failed=execution.status != "ok",
        )

    # -- files ----------------------------------------------------------------------------

    def _tool_upload_file(
        self, path: str, content: str, encoding: str = "utf-8", session_id: str | None = None
    ) -> _Steps:
        if encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except ValueError as exc:
                return error_result(f"content is not valid base64: {exc}")
        else:
            data = content.encode("utf-8")
        if path.startswith("/") and path.strip("/"):
            return _absolute(path)
        sid = yield from self._session(session_id)
        yield proto.upload(sid, path, data)
        return ToolResult([TextPart(f"Wrote {len(data)} bytes to {path}.")])

    def _tool_read_file(
        self, path: str, max_chars: int = 20_000, session_id: str | None = None
    ) -> _Steps:
        if path.startswith("/") and path.strip("/"):
            return _absolute(path)
        sid = yield from self._session(session_id)
        mime = mimetypes.guess_type(path)[0] or ""
        image = mime in MODEL_IMAGE_MIMES
        # Only what can be shown is read: a file of gigabytes costs two small reads.
        head_chars = max_chars * 2 // 3
        first = FILE_IMAGE_BYTES if image else max(4 * max_chars, TEXT_SAMPLE_BYTES)
        data, total = yield from _file_part(sid, path, 0, first)
        if total == 0:
            return ToolResult([TextPart(f"{path} is empty.")])
        if image:
            if total > len(data):
                return ToolResult(
                    [
                        TextPart(
                            f"{path}: {mime}, {total} bytes: too large to show (at most "
                            f"{FILE_IMAGE_BYTES} bytes); make a smaller copy with run_code."
                        )
                    ]
                )
            checked = images.check(data)
            if checked.problem is not None or checked.mime is None:
                return ToolResult(
                    [
                        TextPart(
                            f"{path}: {mime}, {total:,} bytes: not shown, {checked.problem}; "
                            "make a smaller copy with run_code."
                        )
                    ]
                )
            shown = TextPart(f"{path}: {checked.mime}, {total:,} bytes")
            return ToolResult([shown, ImagePart(checked.mime, data)])
        if total == len(data):
            return _text_file(path, data, max_chars)
        if not _looks_like_text(data):
            return _binary(path, total)
        # Longer than can be shown: its head and its tail, as clip() shows a long text.
        tail_chars = max_chars - head_chars
        tail, _ = yield from _file_part(sid, path, max(total - 4 * tail_chars, len(data)), None)
        head_text, _, head_used = artifact_text(data, at_start=True)
        tail_text = artifact_text(tail, at_start=False)[0]
        head_text = head_text[:head_chars]
        tail_text = tail_text[-tail_chars:] if tail_chars else ""
        cut = (
            total
            - len(head_text.encode("utf-8", "surrogatepass"))
            - len(tail_text.encode("utf-8", "surrogatepass"))
        )
        label = ""
        bad = _first_invalid(data[:head_used])
        if bad is not None:
            label = (
                f"not valid UTF-8 (the first invalid byte is at offset {bad}); shown as UTF-8 "
                "with each invalid byte replaced by \ufffd.\n"
            )
        return ToolResult(
            [
                TextPart(
                    f"{path}: {total} bytes, shown in part.\n{label}{head_text}\n"
                    f"[... {cut} bytes omitted: read the rest with run_code ...]\n{tail_text}"
                )
            ]
        )

    def _tool_read_artifact(
        self,
        artifact: str,
        offset: int = 0,
        length: int = 20_000,
        session_id: str | None = None,
    ) -> _Steps:
        # Only an id or this service's artifact path: a URL elsewhere would get the API key.
        try:
            named, artifact_id = proto.parse_artifact_ref(artifact, self.base_url)
        except InvalidArgumentError as exc:
            return error_result(str(exc))
        if named is None:
            sid = yield from self._session(session_id)
        else:
            self._check_own(named)
            sid = named
        url = proto.artifact_url(sid, artifact_id)
        data, total = yield proto.artifact_range(url, offset, length)
        image = images.image_mime(data) if offset == 0 else None
        if image is not None:
            # An image that run_code did not attach: the whole image, not a byte range.
            why = images.too_large(total)
            if why is None and total != len(data):
                data = yield proto.artifact(url)
            checked = images.check(data) if why is None else None
            if checked is not None and checked.problem is None and checked.mime is not None:
                return ToolResult(
                    [
                        TextPart(f"[artifact {url}: {checked.mime}, {total:,} bytes]"),
                        ImagePart(checked.mime, data),
                    ]
                )
            why = why or (checked.problem if checked is not None else None)
            return ToolResult(
                [
                    TextPart(
                        f"[artifact {url}: {image}, {total:,} bytes: not shown, {why}; make "
                        "a smaller copy with run_code (e.g. save the figure at a lower dpi)]"
                    )
                ]
            )
        text, skipped, used = artifact_text(data, at_start=offset == 0)
        start = offset + skipped
        header = artifact_header(url, start, start + used, total)
        return ToolResult([TextPart(header + ("\n" + text if text else ""))])

    def _tool_list_files(self, path: str = "", session_id: str | None = None) -> _Steps:
        sid = yield from self._session(session_id)
        listing: FileList = yield proto.list_files(sid, path, limit=LIST_FILES_MOST)
        return ToolResult([TextPart(listing_text(listing, self.max_chars))])

    # -- notebook ---------------------------------------------------------------------------

    def _tool_rebuild_from_notebook(self, path: str, session_id: str | None = None) -> _Steps:
        if path.startswith("/") and path.strip("/"):
            return _absolute(path)
        sid = yield from self._session(session_id)
        data, total = yield from _file_part(sid, path, 0, NOTEBOOK_READ_BYTES)
        if total > len(data):
            return error_result(
                f"{path} is {total} bytes; rebuild_from_notebook reads a notebook of at most "
                f"{NOTEBOOK_READ_BYTES} bytes. Write a copy without its outputs with run_code "
                "(nbformat) and rebuild from that."
            )
        try:
            nb = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return error_result(
                f"{path} is not a notebook: it is not JSON ({exc}). Give the path of an "
                ".ipynb file in the workspace."
            )
        if not isinstance(nb, dict):
            return error_result(
                f"{path} is not a notebook: its JSON is not an object. Give the path of an "
                ".ipynb file in the workspace."
            )
        try:
            info: SessionInfo = yield proto.rebuild(sid, nb)
        except BadRequestError as exc:
            # The service names the body's field ("notebook is not ..."); the model knows
            # the file.
            return error_result(f"{path}: {exc.message}".replace(f"{path}: notebook ", f"{path} "))
        report = info.rebuild
        summary = report.summary() if report is not None else "no cells ran."
        return ToolResult([TextPart(f"Session {sid} rebuilt from {path}: {summary}")])

    def _tool_get_notebook(self, format: str = "text", session_id: str | None = None) -> _Steps:
        sid = yield from self._session(session_id)
        nb: dict[str, Any] = yield proto.notebook(sid)
        if format == "ipynb":
            return ToolResult([TextPart(json.dumps(_without_images(nb), indent=1))])
        return ToolResult([TextPart(clip(notebook_transcript(nb), self.max_chars * 2))])


#: What a session id the service gives looks like (its route pattern).
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
#: The largest workspace image read_file shows (what model APIs take per image is of this order).
FILE_IMAGE_BYTES = 20 << 20
#: Most entries list_files asks the service for; the text shows as many as max_chars holds.
LIST_FILES_MOST = 500
#: Characters list_files keeps for its last line, which says what was left out.
_LISTING_NOTE_CHARS = 300


def listing_text(listing: FileList, max_chars: int) -> str:
    """A directory listing for a model, within ``max_chars``: one line per entry, its name
    relative to the listed directory (which the first line names once), and a last line
    saying how many entries were left out and how to look at them all."""
    where = listing.path or "workspace root"
    if not listing.entries:
        return f"{where}: empty"
    lines = [f"{where}:"]
    budget = max_chars - len(lines[0]) - _LISTING_NOTE_CHARS
    for e in listing.entries:
        name = e.name + ("/" if e.type == "directory" else "")
        size = "" if e.type == "directory" else f"{e.size} bytes"
        when = e.modified_at.isoformat(timespec="seconds")
        line = f"{e.type:9}  {size:>14}  {when}  {name}"
        budget -= len(line) + 1
        if budget < 0:
            break
        lines.append(line)
    shown, fetched = len(lines) - 1, len(listing.entries)
    more = listing.next is not None
    if shown == fetched and not more:
        return "\n".join(lines)
    if shown == fetched:
        left = "more follow"
    else:
        left = f"{fetched - shown} more left out to keep this answer short"
        left += ", and more after them" if more else ""
    lines.append(
        f"(the first {shown} entries, directories first, then by name; {left}. To find or "
        "count files among them, use run_code: glob, os.scandir.)"
    )
    return "\n".join(lines)


#: Bytes read_file reads at least, to tell text from binary data.
TEXT_SAMPLE_BYTES = 64 << 10
#: The largest notebook rebuild_from_notebook reads (the service's own limit applies after:
#: max_notebook_body_bytes, 64 MiB by default).
NOTEBOOK_READ_BYTES = 64 << 20


def _attachable(forms: list[ArtifactRef]) -> Generator[Any, Any, tuple[ImagePart | None, str]]:
    """The first of a picture's ``forms`` (its types, the preferred first) that a model
    can take, as an image part; else None and why the first cannot be taken."""
    first_why = ""
    for ref in forms:
        why = images.too_large(ref.size)
        if why is None:
            data: bytes = yield proto.artifact(ref.url)
            checked = images.check(data)
            if checked.problem is None and checked.mime is not None:
                return ImagePart(checked.mime, data), ""
            why = checked.problem or ""
        first_why = first_why or why
    return None, first_why


def _images_left_note(left: list[tuple[int, ArtifactRef, str]], attached: int) -> str:
    """Which images of a result were not attached, why (once per reason), and their URLs."""
    shown = f"{attached} image{'' if attached == 1 else 's'} attached, in order"
    lines = [
        f"{shown}; not attached (read_artifact with the URL gives one, within the same "
        "bounds; make a smaller copy with run_code for one too large):"
    ]
    reasons: dict[str, list[str]] = {}
    for n, ref, why in left:
        reasons.setdefault(why, []).append(f"image {n} ({ref.mime}, {ref.size:,} bytes) {ref.url}")
    for why, named in reasons.items():
        lines.append(f"{why}:" if len(named) > 1 else f"{named.pop()}: {why}")
        lines += [f"  {line}" for line in named]
    return "\n".join(lines)


# A well-formed UTF-8 sequence of two to four bytes.
_UTF8_MULTIBYTE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}"
)
# Control bytes that text does not contain (not tab, newline, form feed, carriage return).
_BINARY_BYTES = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")


def _looks_like_text(data: bytes) -> bool:
    """Text in some 8-bit encoding rather than binary data: no NUL, hardly any control
    bytes in the first 64 KiB."""
    head = data[: 64 << 10]
    return b"\x00" not in head and len(_BINARY_BYTES.findall(head)) * 100 <= len(head)


def _not_utf8_text(data: bytes, bad: int) -> tuple[str, str]:
    """A text file that is not valid UTF-8 (first invalid byte at ``bad``): a label that
    says so, and its text. With no UTF-8 sequence in it at all it is most likely Latin-1
    or Windows-1252, and is decoded so; otherwise as UTF-8 with U+FFFD for each bad byte."""
    where = f"not valid UTF-8 (the first invalid byte is at offset {bad})"
    if _UTF8_MULTIBYTE.search(data) is None:
        return (
            f"{where}; shown decoded as Windows-1252 (Latin-1), which may not be its "
            "encoding. To load it in run_code, name the encoding, e.g. "
            "pd.read_csv(path, encoding='latin-1').",
            data.decode("cp1252", errors="replace"),
        )
    return (
        f"{where}; shown as UTF-8 with each invalid byte replaced by \ufffd.",
        data.decode("utf-8", errors="replace"),
    )


def artifact_text(data: bytes, *, at_start: bool) -> tuple[str, int, int]:
    """UTF-8 text of a byte range cut anywhere: continuation bytes of a character begun
    before the range are skipped, and one cut at its end is left for the next read.
    Returns the text, the bytes skipped at the start and the bytes decoded after them."""
    skip = 0
    if not at_start:
        while skip < min(len(data), 3) and 0x80 <= data[skip] < 0xC0:
            skip += 1
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = decoder.decode(data[skip:], final=False)
    pending = len(decoder.getstate()[0])
    return text, skip, len(data) - skip - pending


def artifact_header(url: str, offset: int, end: int, total: int) -> str:
    """``[artifact URL: bytes A-B of N; ...]``: where a read landed and how to go on."""
    size = f" of {total}" if total >= 0 else ""
    if end <= offset:
        return f"[artifact {url}: nothing at byte {offset}{size}]"
    head = f"[artifact {url}: bytes {offset}-{end - 1}{size}"
    if total < 0 or end < total:
        return head + f"; continue with offset={end}]"
    return head + "; the end]"


def _file_part(
    sid: str, path: str, offset: int, length: int | None
) -> Generator[Any, Any, tuple[bytes, int]]:
    """``length`` bytes of a workspace file from ``offset`` (the rest when None), and its
    size; an empty file is ``(b"", 0)`` (a range of it is answered 416)."""
    try:
        part: tuple[bytes, int] = yield proto.download_range(sid, path, offset, length)
    except APIError as exc:
        if exc.status != 416 or offset:
            raise
        return b"", 0
    return part


def _absolute(path: str) -> ToolResult:
    """The answer to a file tool given an absolute path: workspace paths are relative."""
    return error_result(
        f"{path[:200]!r} is an absolute path; give the path relative to the session's "
        "workspace, the kernel's working directory (os.getcwd() in run_code), such as "
        "'data.csv' or 'out/report.txt'."
    )


def _first_invalid(data: bytes) -> int | None:
    """The offset of the first byte of ``data`` that is not valid UTF-8, if any."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def _text_file(path: str, data: bytes, max_chars: int) -> ToolResult:
    """A whole text file as read_file shows it: clipped in the middle, its encoding named
    when it is not UTF-8."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not _looks_like_text(data):
            return _binary(path, len(data))
        label, text = _not_utf8_text(data, exc.start)
        return ToolResult([TextPart(f"{path}: {label}\n" + clip(text, max_chars))])
    return ToolResult([TextPart(clip(text, max_chars))])


def _binary(path: str, size: int) -> ToolResult:
    return ToolResult(
        [TextPart(f"{path} is a binary file of {size} bytes; inspect it with run_code.")]
    )


def _fail(message: str) -> _Steps:
    yield from ()  # a generator that asks for nothing
    return error_result(message)


def _without_images(nb: dict[str, Any]) -> dict[str, Any]:
    """A copy of a notebook without its binary image data: each image's MIME entry goes,
    and its ``text/plain`` says what was left out. A size note kept under the image's own
    type was not base64, so every renderer (JupyterLab, ``interp html``) showed a broken
    image."""
    copy: dict[str, Any] = json.loads(json.dumps(nb))
    for cell in copy.get("cells", []):
        for output in cell.get("outputs", []) or []:
            data = output.get("data") or {}
            notes = [
                f"[{mime} left out of this copy, {len(bundle_text(data.pop(mime)))} base64 "
                "characters: the service's notebook has it]"
                for mime in list(data)
                if is_image(mime) and mime != SVG_MIME
            ]
            if notes:
                plain = bundle_text(data.get("text/plain", ""))
                data["text/plain"] = "\n".join([*notes, plain] if plain else notes)
    return copy


def _rich_output_lines(data: dict[str, Any], limit: int) -> list[str]:
    """A display or result in a transcript: a chart's description instead of the figure's
    repr ("<Figure size ...>"), a table's summary before its text."""
    lines: list[str] = []
    chart = data.get(CHART_MIME)
    frame = data.get(DATAFRAME_MIME)
    if isinstance(chart, dict):
        lines.append("[chart]\n" + chart_summary(chart))
    elif isinstance(frame, dict):
        plain = data.get("text/plain")
        lines.append("[table] " + dataframe_summary(frame, bundle_text(plain) if plain else None))
    if "text/plain" in data and not isinstance(chart, dict):
        lines.append("[out]\n" + clip(bundle_text(data["text/plain"]), limit))
    images = [m for m in data if is_image(m)]
    if images:
        lines.append(f"[image: {', '.join(images)}]")
    return lines


def notebook_transcript(nb: dict[str, Any], *, limit: int = 2000) -> str:
    """A readable transcript of a notebook: each code cell, its status and text outputs."""
    lines: list[str] = []
    for cell in nb.get("cells", []):
        source = bundle_text(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            lines.append(source)
            continue
        if cell.get("cell_type") != "code":
            continue
        meta = (cell.get("metadata") or {}).get("interp") or {}
        status = meta.get("status", "")
        count = cell.get("execution_count")
        head = f"In [{count if count is not None else ' '}]" + (f" ({status})" if status else "")
        lines.append(f"{head}:\n{source}")
        for output in cell.get("outputs", []) or []:
            otype = output.get("output_type")
            if otype == "stream":
                lines.append(
                    f"[{output.get('name')}]\n"
                    + clip(strip_ansi(bundle_text(output.get("text", ""))), limit)
                )
            elif otype == "error":
                lines.append(f"[error] {output.get('ename')}: {output.get('evalue')}")
            else:
                lines.extend(_rich_output_lines(output.get("data") or {}, limit))
        lines.append("")
    return "\n".join(lines).strip() or "The notebook is empty: no code has run yet."
