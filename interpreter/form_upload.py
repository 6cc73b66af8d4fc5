"""A ``multipart/form-data`` upload of one or more files, streamed part by part to disk.

The body is parsed as it arrives (python-multipart's streaming parser): each file part goes
to its own :class:`~interpreter.upload.Upload` (a temporary file in the workspace), so no
part is ever whole in memory. Nothing becomes visible until :meth:`FormUpload.commit`, after
the closing boundary: a body that breaks off or fails half-way leaves no file behind.

Which parts are files follows E2B's envd: a part named ``file`` or carrying a file name.
Its path is the request's fixed path (``?path=``) when there is one, else the part's file
name; two parts for one path are refused (400), as envd refuses them, and so are two parts
of which one would be a directory of the other (``w`` and ``w/r``). At the commit every
part's target is checked against the workspace before anything is renamed or any directory
made, so a body refused there writes nothing either. Other parts are read
and discarded (they still count against the size limit). Everything here is synchronous; the
API calls it through ``asyncio.to_thread``, one piece at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from interpreter.errors import BadRequest, InterpreterError, PayloadTooLarge
from interpreter.models import FileEntry
from interpreter.upload import Upload
from interpreter.workspace import Workspace

#: Most header bytes of one part kept while parsing it.
MAX_PART_HEADERS = 16 << 10
#: Most file parts in one request.
MAX_FILE_PARTS = 1000


def boundary_of(content_type: str) -> bytes:
    """The boundary of a ``multipart/form-data`` content type (400 without one)."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary", b"")
    if not boundary:
        raise BadRequest("A multipart/form-data body needs a boundary in its Content-Type.")
    return boundary


class FormUpload:
    """One multipart body being received: :meth:`write` pieces, then :meth:`commit`.

    Args:
        workspace: where the files go.
        content_type: the request's ``Content-Type`` (with its boundary).
        limit: bytes of body accepted at most (all parts together).
        target: maps a part's path (the fixed path or its file name) to a workspace path;
            raises for a path the service refuses.
        fixed_path: the path every file part is written to (``?path=``), if any.
    """

    def __init__(
        self,
        workspace: Workspace,
        content_type: str,
        limit: int,
        target: Callable[[str], str],
        fixed_path: str | None = None,
    ) -> None:
        self.limit = limit
        self.size = 0
        self._workspace = workspace
        self._target = target
        self._fixed = fixed_path
        self._uploads: list[Upload] = []
        self._current: Upload | None = None
        self._headers: list[tuple[bytes, bytes]] = []
        self._field = b""
        self._value = b""
        self._header_bytes = 0
        self._ended = False
        self._lock = threading.Lock()
        workspace.gate.register(self)
        try:
            self._parser = MultipartParser(
                boundary_of(content_type),
                {
                    "on_part_begin": self._part_begin,
                    "on_header_field": self._header_field,
                    "on_header_value": self._header_value,
                    "on_header_end": self._header_end,
                    "on_headers_finished": self._headers_finished,
                    "on_part_data": self._part_data,
                    "on_part_end": self._part_end,
                    "on_end": self._end,
                },
            )
        except InterpreterError:
            self.abort()
            raise
        except Exception as exc:  # python-multipart refuses a malformed boundary
            self.abort()
            raise BadRequest(f"The multipart boundary is not usable: {exc}") from None

    @property
    def temp_name(self) -> str:
        """None of its own: each file part is an :class:`Upload`, registered by itself."""
        return ""

    # -- feeding -------------------------------------------------------------------------

    def write(self, chunk: bytes) -> None:
        """Parse ``chunk`` and write the file bytes in it; past the limit nothing more is."""
        self.size += len(chunk)
        if self.size > self.limit:
            raise PayloadTooLarge(f"Upload exceeds the limit of {self.limit} bytes.")
        self._workspace.gate.check()
        try:
            self._parser.write(chunk)
        except MultipartParseError as exc:
            raise BadRequest(f"The multipart body is malformed: {exc}.") from None

    def commit(self) -> list[FileEntry]:
        """Make every file part visible under its path; their entries, in body order.
        Whatever happens, no temporary file is left behind."""
        try:
            self._workspace.gate.check()
            if not self._ended:
                raise BadRequest(
                    "The multipart body ended before its closing boundary; nothing was written."
                )
            if not self._uploads:
                raise BadRequest(
                    "The multipart body holds no file part (a part named 'file' or with a "
                    "filename)."
                )
            for upload in self._uploads:  # all of them before any is renamed or made
                try:
                    upload.check()
                except InterpreterError as exc:
                    raise type(exc)(
                        f"{exc.message} Nothing was written.", retry_after=exc.retry_after
                    ) from exc
            return [upload.commit() for upload in self._uploads]
        finally:
            self.abort()

    def abort(self) -> None:
        """Remove every temporary file not yet committed (idempotent; safe from another
        thread, a session closing)."""
        with self._lock:
            current, self._current = self._current, None
            uploads = list(self._uploads)
        for upload in uploads:
            upload.abort()
        if current is not None:
            current.abort()
        self._workspace.gate.unregister(self)

    # -- parser callbacks ----------------------------------------------------------------

    def _part_begin(self) -> None:
        self._headers = []
        self._field = self._value = b""
        self._header_bytes = 0

    def _count_header(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_PART_HEADERS:
            raise BadRequest(f"A multipart part has more than {MAX_PART_HEADERS} header bytes.")

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_header(end - start)
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers.append((self._field.strip().lower(), self._value.strip()))
        self._field = self._value = b""

    def _headers_finished(self) -> None:
        disposition = next((v for k, v in self._headers if k == b"content-disposition"), b"")
        _, params = parse_options_header(disposition)
        name = params.get(b"name", b"")
        filename = params.get(b"filename")
        if name != b"file" and filename is None:
            return  # a form field, not a file: read past it
        raw = self._fixed
        if raw is None:
            try:
                raw = (filename or b"").decode("utf-8")
            except UnicodeDecodeError:
                raise BadRequest("A part's file name is not valid UTF-8.") from None
            if not raw:
                raise BadRequest(
                    "A file part has no file name: name it (filename=...) or send ?path=."
                )
        path = self._target(raw)
        if len(self._uploads) >= MAX_FILE_PARTS:
            raise BadRequest(f"At most {MAX_FILE_PARTS} files can be sent in one request.")
        try:
            upload = Upload(self._workspace, path, self.limit)
        except InterpreterError as exc:
            raise type(exc)(
                f"{exc.message} Nothing was written.", retry_after=exc.retry_after
            ) from exc
        try:
            for other in self._uploads:
                _check_apart(other.parts, upload.parts)
        except BadRequest:
            upload.abort()
            raise
        with self._lock:
            self._current = upload

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._current is not None:
            self._current.write(data[start:end])

    def _part_end(self) -> None:
        with self._lock:
            if self._current is not None:
                self._uploads.append(self._current)
                self._current = None

    def _end(self) -> None:
        self._ended = True


def _check_apart(first: list[str], second: list[str]) -> None:
    """400 unless two parts' paths can both be files: not the same, and neither a parent
    directory of the other."""
    a, b = "/".join(first), "/".join(second)
    if first == second:
        raise BadRequest(
            f"Several file parts go to '{a}': send one file per path in one request (with "
            "?path=, send a single file). Nothing was written."
        )
    shorter, longer = (first, second) if len(first) < len(second) else (second, first)
    if longer[: len(shorter)] == shorter:
        raise BadRequest(
            f"File parts go to '{a}' and to '{b}': '{'/'.join(shorter)}' cannot be both a "
            "file and a directory. Nothing was written."
        )
