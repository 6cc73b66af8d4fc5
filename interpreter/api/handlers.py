"""Route handlers of HTTP API v1 (thin: parse, call the broker, answer)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import unicodedata
from typing import Any, Literal, cast
from urllib.parse import quote

from tornado.iostream import StreamClosedError

from interpreter import storage_floor
from interpreter.api.approvals import (
    ApprovalHandler,
    ApprovalsHandler,
    DecideHandler,
    DenyHandler,
    PolicyHandler,
)
from interpreter.api.base import BaseHandler
from interpreter.api.events import resume_after, send_events
from interpreter.api.info import service_info
from interpreter.api.packages import PackagesHandler
from interpreter.api.uploads import UploadReceiver
from interpreter.errors import InterpreterError, UnsupportedEncoding, ValidationFailed
from interpreter.handle import ExecutionHandle
from interpreter.mime import EXTENSIONS
from interpreter.models import (
    CreateSessionRequest,
    ExecuteRequest,
    InterruptRequest,
    RebuildRequest,
    RestartRequest,
    SessionList,
)
from interpreter.openapi import openapi_document
from interpreter.upload import Upload

log = logging.getLogger(__name__)

#: Set on answers that repeat an earlier request's result (same Idempotency-Key).
REPLAYED_HEADER = "Idempotent-Replayed"


class SessionsHandler(BaseHandler):
    body_limit_attr = "max_notebook_body_bytes"  # a creation can carry from_notebook

    async def post(self) -> None:
        req = await self.parse_large(CreateSessionRequest, optional=True)
        key = self.idempotency_key()
        if key is None:
            session = await self.broker.create(self.owner, req)
        else:
            session, replayed = await self.broker.create_once(self.owner, req, key)
            if replayed:
                self.set_header(REPLAYED_HEADER, "true")
        self.set_header("Location", f"/v1/sessions/{session.id}")
        self.send_json(session, 201)

    async def get(self) -> None:
        """The key's sessions, oldest first: ``?state=open|closed|all`` (all), and pages
        of ``?limit=N``, each next one ``?after=`` the id the previous one gave as
        ``next``."""
        state = self.get_query_argument("state", "all")
        if state not in ("open", "closed", "all"):
            raise ValidationFailed("state must be open (not closed), closed or all.")
        raw = self.get_query_argument("limit", None)
        limit = None if raw is None else _limit(raw)
        sessions, following = await self.broker.list_for(
            self.owner,
            state=cast(Literal["open", "closed", "all"], state),
            after=self.get_query_argument("after", None) or None,
            limit=limit,
        )
        self.send_json(SessionList(sessions=sessions, next=following))


class SessionHandler(BaseHandler):
    async def get(self, session_id: str) -> None:
        self.send_json(await self.broker.get(self.owner, session_id))

    async def delete(self, session_id: str) -> None:
        await self.broker.delete(self.owner, session_id, generation=self.generation())
        self.set_status(204)
        self.finish()


class ExecuteHandler(BaseHandler):
    """Runs code; answers the Execution as JSON, or streams it as server-sent events.

    Either way the ``X-Execution-Id`` header goes out as soon as the execution is queued,
    so a client that gives up can poll it. A client that goes away leaves it running,
    unless it asked ``on_disconnect: interrupt``.
    """

    handle: ExecutionHandle | None = None
    interrupt_on_close = False
    _stopping: asyncio.Task[None] | None = None

    async def post(self, session_id: str) -> None:
        req = self.parse(ExecuteRequest)
        stream = "text/event-stream" in self.request.headers.get("Accept", "")
        key = self.idempotency_key()
        replayed = False
        reject = req.if_busy == "reject"
        if key is None:
            handle = await self.broker.execute(
                self.owner,
                session_id,
                req.code,
                req.timeout_s,
                stream=stream,
                request_id=self.request_id,
                reject_if_busy=reject,
            )
        else:
            handle, replayed = await self.broker.execute_once(
                self.owner,
                session_id,
                req.code,
                req.timeout_s,
                key,
                stream=stream,
                request_id=self.request_id,
                reject_if_busy=reject,
            )
        self.handle = handle
        self.interrupt_on_close = req.on_disconnect == "interrupt"
        self.set_header("X-Execution-Id", handle.execution.id)
        if replayed:
            self.set_header(REPLAYED_HEADER, "true")
        if not stream:
            self.set_header("Content-Type", "application/json; charset=utf-8")
            with contextlib.suppress(StreamClosedError):
                await self.flush()  # the headers, with the id, before the result
            await handle.finished.wait()
            with contextlib.suppress(StreamClosedError):
                self.finish(handle.told.model_dump_json())
            return
        # A replay is the first request's stream again: from its first event still kept
        # (or after the Last-Event-ID it gives), so a retry of a request whose answer was
        # lost loses none of its events; its final `done` event is complete. The own
        # stream was subscribed before the execution was queued: its first event is 1.
        if replayed:
            after = resume_after(self)
            first_id, queue = handle.watch(
                handle.first_kept_event() - 1 if after is None else after
            )
        else:
            assert handle.stream is not None
            first_id, queue = 1, handle.stream
        await send_events(self, queue, first_id)

    def on_connection_close(self) -> None:
        super().on_connection_close()
        handle = self.handle
        if self.interrupt_on_close and handle is not None and not handle.finished.is_set():
            self._stopping = asyncio.create_task(self._interrupt(handle))

    async def _interrupt(self, handle: ExecutionHandle) -> None:
        """``on_disconnect: interrupt``: stop exactly this execution (cancelled if queued)."""
        ex = handle.execution
        try:
            await self.broker.interrupt(self.owner, ex.session_id, execution_id=ex.id)
        except InterpreterError as exc:  # the session ended meanwhile: nothing runs
            log.info("no interrupt after a disconnect from %s: %s", ex.id, exc.message)


class ExecutionHandler(BaseHandler):
    async def get(self, session_id: str, execution_id: str) -> None:
        self.send_json(await self.broker.execution(self.owner, session_id, execution_id))


class ExecutionEventsHandler(BaseHandler):
    """An execution's events as server-sent events: those after ``?after=N`` (or the
    ``Last-Event-ID`` header) first, then the rest live; all of them when neither is
    given. A client whose stream broke resumes here without losing or repeating one."""

    async def get(self, session_id: str, execution_id: str) -> None:
        after = resume_after(self)
        handle = await self.broker.execution_handle(self.owner, session_id, execution_id)
        first_id, queue = handle.watch(0 if after is None else after)
        self.set_header("X-Execution-Id", execution_id)
        await send_events(self, queue, first_id)


class InterruptHandler(BaseHandler):
    async def post(self, session_id: str) -> None:
        try:
            self.parse(InterruptRequest, optional=True)
        except ValidationFailed as exc:
            raise ValidationFailed(
                f"{exc.message.rstrip('.')}. Interrupt takes no body: choose what to "
                "interrupt with the query parameters ?execution_id= and ?generation=."
            ) from exc
        self.send_json(
            await self.broker.interrupt(
                self.owner,
                session_id,
                generation=self.generation(),
                execution_id=self.execution_filter(),
            )
        )


class RestartHandler(BaseHandler):
    async def post(self, session_id: str) -> None:
        req = self.parse(RestartRequest, optional=True)
        self.send_json(
            await self.broker.restart(
                self.owner,
                session_id,
                recover=req.recover,
                generation=self.generation(),
                keep_queued=req.recover if req.keep_queued is None else req.keep_queued,
            )
        )


class RebuildHandler(BaseHandler):
    """Re-runs a notebook's good cells in the session; answers the Session with its
    ``rebuild`` report once they ran (semantics: ``SessionBroker.rebuild``)."""

    body_limit_attr = "max_notebook_body_bytes"

    async def post(self, session_id: str) -> None:
        req = await self.parse_large(RebuildRequest)
        self.send_json(
            await self.broker.rebuild(
                self.owner, session_id, req.notebook, generation=self.generation()
            )
        )


class FilesHandler(BaseHandler):
    async def get(self, session_id: str) -> None:
        """The directory ``?path=`` (the workspace's top by default), whole, or in pages
        of ``?limit=N``, each next one ``?after=`` the ``next`` the previous one gave."""
        workspace = await self.broker.workspace(self.owner, session_id)
        path = self.get_query_argument("path", "")
        raw = self.get_query_argument("limit", None)
        limit = None if raw is None else _limit(raw, MAX_FILES_LIMIT, "entries")
        after = self.get_query_argument("after", None) or None

        def listed() -> str:
            # Serialised here too: a directory of 100,000 files is a JSON of tens of MB,
            # which held the event loop (and /healthz) for most of a second.
            return workspace.listing(path, after=after, limit=limit).model_dump_json()

        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(await asyncio.to_thread(listed))


class FileHandler(UploadReceiver[Upload]):
    async def open_upload(self) -> Upload:
        content_type = self.request.headers.get("Content-Type", "")
        if content_type.lower().lstrip().startswith("multipart/"):
            # Stored as it came, the file would be the form's envelope, not its part.
            raise UnsupportedEncoding(
                "A PUT body is the file's bytes, sent as they are (application/octet-stream): "
                f"a {content_type.split(';')[0].strip()[:60]} body is not unpacked here."
            )
        if content_type.lower().lstrip().startswith("application/x-www-form-urlencoded"):
            # What ``curl -d @file`` sends, the file's line breaks taken out: a CSV became
            # one line, stored with 201 (``--data-binary`` sends the same type, intact).
            raise UnsupportedEncoding(
                "A PUT body is the file's bytes, sent as they are (application/octet-stream), "
                "not a form (application/x-www-form-urlencoded): curl -d takes the line "
                "breaks out of a file. Send it with curl -T FILE URL, or --data-binary @FILE "
                "with -H 'Content-Type: application/octet-stream'."
            )
        workspace = await self.broker.workspace(self.owner, self.path_kwargs["session_id"])
        return await asyncio.to_thread(Upload, workspace, self.path_kwargs["path"], self.body_limit)

    async def get(self, session_id: str, path: str) -> None:
        """The file's bytes, or the one byte range a ``Range`` header asks for (206): a
        part of a file over ``max_download_bytes`` can be read. A workspace file has no
        validator, so a request with ``If-Range`` gets the whole file."""
        workspace = await self.broker.workspace(self.owner, session_id)
        headers = self.request.headers
        range_header = None if "If-Range" in headers else headers.get("Range")
        limit = self.conf.max_download_bytes
        # With a range, the limit applies to the part asked for (checked once it is known).
        fh, size = await asyncio.to_thread(
            workspace.open_read, path, None if range_header else limit
        )
        self.set_header("Content-Disposition", _attachment(path.rsplit("/", 1)[-1]))
        self.set_header("Accept-Ranges", "bytes")
        await self.send_file_range(fh, size, None, range_header, what="file", limit=limit)

    async def head(self, session_id: str, path: str) -> None:
        """The headers ``get`` would send (size, range, or its refusal), no bytes."""
        await self.get(session_id, path)

    async def put(self, session_id: str, path: str) -> None:
        storage_floor.check(self.conf.data_dir, self.conf.min_free_mb)
        # The body is already in a temporary file beside the target (api/uploads.py).
        entry = await asyncio.to_thread(self.take_upload().commit)
        self.send_json(entry, 201)

    async def delete(self, session_id: str, path: str) -> None:
        workspace = await self.broker.workspace(self.owner, session_id)
        await asyncio.to_thread(workspace.delete, path)
        self.set_status(204)
        self.finish()


class NotebookHandler(BaseHandler):
    async def get(self, session_id: str) -> None:
        text = await self.broker.notebook_json(self.owner, session_id)
        self.set_header("Content-Type", "application/x-ipynb+json; charset=utf-8")
        self.finish(text)


class ArtifactHandler(BaseHandler):
    """An artifact's bytes. Its id is the SHA-256 of its content, so the id is its strong
    ``ETag``: ``If-None-Match`` gets 304, and ``If-Range`` keeps a range only when it
    names this id."""

    async def head(self, session_id: str, artifact_id: str) -> None:
        _, mime, size = await self.broker.artifact(self.owner, session_id, artifact_id)
        self._artifact_headers(artifact_id, mime)
        if self._not_modified():
            return
        self.set_header("Content-Length", str(size))
        self.finish()

    async def get(self, session_id: str, artifact_id: str) -> None:
        path, mime, size = await self.broker.artifact(self.owner, session_id, artifact_id)
        self._artifact_headers(artifact_id, mime)
        if self._not_modified():
            return
        range_header = self.request.headers.get("Range")
        if_range = self.request.headers.get("If-Range")
        if if_range is not None and if_range.strip() != _etag(artifact_id):
            range_header = None  # the client's copy is another artifact: send it whole
        fh = await asyncio.to_thread(path.open, "rb")
        await self.send_file_range(fh, size, mime, range_header, what="artifact")

    def _not_modified(self) -> bool:
        """Answer 304 if ``If-None-Match`` names this artifact's ETag (or is ``*``)."""
        if not self.check_etag_header():
            return False
        self.set_status(304)
        self.finish()
        return True

    def _artifact_headers(self, artifact_id: str, mime: str) -> None:
        self.set_header("ETag", _etag(artifact_id))
        # Served inert: never rendered on the API origin (docs/security.md H-53).
        self.set_header("Content-Type", mime)
        self.set_header("Accept-Ranges", "bytes")
        self.set_header("Content-Security-Policy", "sandbox; default-src 'none'")
        self.set_header("Content-Disposition", _attachment(artifact_id + _extension(mime)))
        self.set_header("Cache-Control", "private, max-age=31536000, immutable")


class HealthHandler(BaseHandler):
    def check_auth(self) -> None:
        """Liveness is public; it reveals nothing about sessions."""

    async def head(self) -> None:
        """A load balancer's probe: the status of ``get`` (tornado sends no body)."""
        await self.get()

    async def get(self) -> None:
        degraded = sum(1 for s in self.broker.live.values() if s.audit_degraded)
        # Below the floor every creation, upload and cell is refused (507): it was "ok".
        low = await asyncio.to_thread(
            storage_floor.below, self.conf.data_dir, self.conf.min_free_mb
        )
        reachable = await self.broker.backend.reachable()
        status = "degraded" if degraded or low or not reachable else "ok"
        code = 200
        if self.broker.closing:
            # Shutting down: load balancers stop sending work; new work gets 503 anyway.
            status, code = "draining", 503
            self.designed_error = True  # a draining broker's normal answer: INFO, not ERROR
            self.set_header("Retry-After", "5")
        self.send_json(
            {
                "status": status,
                "backend": self.broker.backend.name,
                "audit_degraded_sessions": degraded,
                "storage": "low" if low else "ok",
                # The Docker engine does not answer: no kernel can start (503s).
                "backend_reachable": reachable,
                "reattaching_sessions": self.broker.reattaching,
                "recovery": "done" if self.broker.recovery_done else "running",
            },
            code,
        )


class InfoHandler(BaseHandler):
    async def get(self) -> None:
        self.send_json(await service_info(self.broker.backend, self.conf))


class MetricsHandler(BaseHandler):
    def check_auth(self) -> None:
        """Only the operator's key when ``metrics_key`` is set."""
        self.check_operator_auth()

    async def get(self) -> None:
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.finish(await self.broker.metrics.scrape())


class OpenAPIHandler(BaseHandler):
    def check_auth(self) -> None:
        """The API description is public."""

    async def get(self) -> None:
        self.send_json(openapi_document())


#: Most sessions one page lists.
MAX_LIST_LIMIT = 1000
#: Most entries one page of a directory lists.
MAX_FILES_LIMIT = 10_000


def _limit(raw: str, most: int = MAX_LIST_LIMIT, what: str = "sessions") -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= most:
        raise ValidationFailed(
            f"limit must be a whole number from 1 to {most} (the most {what} one page lists)."
        )
    return value


def _etag(artifact_id: str) -> str:
    return f'"{artifact_id}"'


#: Longest ``filename`` fallback (``filename*`` carries the whole name).
FALLBACK_NAME_CHARS = 100


def _attachment(name: str) -> str:
    """``Content-Disposition`` of a download named ``name`` (RFC 6266): the exact name as
    ``filename*`` (RFC 8187, UTF-8 percent-encoded), and for clients that read only
    ``filename`` an ASCII stand-in: accents dropped (``café`` -> ``cafe``), compatibility
    forms folded (fullwidth ``A`` -> ``A``), any other character ``_``, the extension kept."""
    folded = unicodedata.normalize("NFKD", name)
    fallback = "".join(
        c if c.isascii() and (c.isalnum() or c in "._-") else "_"
        for c in folded
        if not unicodedata.combining(c)
    )
    if len(fallback) > FALLBACK_NAME_CHARS:
        stem, dot, ext = fallback.rpartition(".")
        ext = ext[:20] if dot else ""
        fallback = (stem if dot else fallback)[: FALLBACK_NAME_CHARS - len(ext) - 1] + dot + ext
    return f"attachment; filename=\"{fallback or 'file'}\"; filename*=UTF-8''{quote(name, safe='')}"


def _extension(mime: str) -> str:
    return EXTENSIONS.get(mime, "")


#: Each route's template (the ``route`` of logs and metrics) and handler. ``{name}`` is a
#: path parameter matched by ``PARAMS``; templates marked with a trailing ``/?`` also match
#: with a trailing slash.
ROUTES: list[tuple[str, type[BaseHandler]]] = [
    ("/healthz", HealthHandler),
    ("/metrics", MetricsHandler),
    ("/v1/openapi.json", OpenAPIHandler),
    ("/v1/info", InfoHandler),
    ("/v1/sessions/?", SessionsHandler),
    ("/v1/sessions/{session_id}", SessionHandler),
    ("/v1/sessions/{session_id}/execute", ExecuteHandler),
    ("/v1/sessions/{session_id}/executions/{execution_id}", ExecutionHandler),
    ("/v1/sessions/{session_id}/executions/{execution_id}/events", ExecutionEventsHandler),
    ("/v1/sessions/{session_id}/interrupt", InterruptHandler),
    ("/v1/sessions/{session_id}/restart", RestartHandler),
    ("/v1/sessions/{session_id}/rebuild", RebuildHandler),
    ("/v1/sessions/{session_id}/files/?", FilesHandler),
    ("/v1/sessions/{session_id}/files/{path}", FileHandler),
    ("/v1/sessions/{session_id}/notebook", NotebookHandler),
    ("/v1/sessions/{session_id}/packages", PackagesHandler),
    ("/v1/sessions/{session_id}/artifacts/{artifact_id}", ArtifactHandler),
    ("/v1/approvals/?", ApprovalsHandler),
    ("/v1/approvals/{approval_id}", ApprovalHandler),
    ("/v1/approvals/{approval_id}/approve", DecideHandler),
    ("/v1/approvals/{approval_id}/deny", DenyHandler),
    ("/v1/policy", PolicyHandler),
]
PARAMS = {
    "session_id": r"[A-Za-z0-9_-]{1,100}",
    "execution_id": r"[A-Za-z0-9_-]{1,100}",
    "path": r".+",
    "artifact_id": r"[^/]{1,100}",
    "approval_id": r"[A-Za-z0-9_-]{1,100}",
}


def _pattern(template: str) -> str:
    """The URL regex of a route template."""
    optional_slash = template.endswith("/?")
    parts = re.split(r"\{(\w+)\}", template.removesuffix("/?"))
    regex = "".join(
        f"(?P<{part}>{PARAMS[part]})" if i % 2 else re.escape(part) for i, part in enumerate(parts)
    )
    return regex + ("/?" if optional_slash else "")


def route_table(deps: dict[str, Any]) -> list[tuple[str, type[BaseHandler], dict[str, Any]]]:
    return [
        (_pattern(template), handler, {**deps, "route": template.removesuffix("/?")})
        for template, handler in ROUTES
    ]
