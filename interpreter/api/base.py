"""The handler base: auth before anything, strict bodies, and the one place errors become HTTP.

Every handler streams its request body (``stream_request_body``) so a body over the limit
is refused with 413 before it is buffered. Errors are ``{"error": {"type", "message"}}``;
unexpected exceptions are logged with their traceback and answered with a generic 500
that names no host path (docs/security.md H-41, H-43, I-6).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from typing import IO, Any, TypeVar

import tornado.web
from pydantic import BaseModel
from tornado.http1connection import HTTP1Connection
from tornado.iostream import StreamClosedError

from interpreter import storage_floor
from interpreter.api import access, browser_guard, json_body
from interpreter.api.connections import mark_authenticated
from interpreter.api.ranges import byte_range
from interpreter.body_encoding import IDENTITY
from interpreter.broker import SessionBroker, owner_of
from interpreter.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    InterpreterError,
    KeyLargeBodiesFull,
    LargeBodiesBusy,
    NotFound,
    PayloadTooLarge,
    RangeNotSatisfiable,
    StorageFull,
    Unauthorized,
    UnsupportedEncoding,
    ValidationFailed,
)
from interpreter.idempotency import HEADER as IDEMPOTENCY_HEADER
from interpreter.idempotency import check_key
from interpreter.settings import ENV_PREFIX, Settings

#: What an execution id the service hands out looks like (as in the route table).
EXECUTION_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
#: Bytes read from a file per write when sending one.
DOWNLOAD_CHUNK = 256 << 10

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
#: Bodies up to this size are read and discarded before an early error is answered.
DRAIN_LIMIT = 64 << 20


def ascii_number(text: str, *, cap: int = 10**18) -> int | None:
    """The value of ``text`` if it is ASCII digits only, else None. (``str.isdigit`` also
    takes superscripts, which ``int`` refuses, and other scripts' digits, which ``int``
    reads.) A number above ``cap``, of any length (``int`` refuses more than 4300
    digits), counts as ``cap``."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    digits = text.lstrip("0") or "0"
    return cap if len(digits) > len(str(cap)) else min(int(digits), cap)


@tornado.web.stream_request_body
class BaseHandler(tornado.web.RequestHandler):
    """Shared by every route; dependencies come in through ``initialize``."""

    body_limit_attr = "max_body_bytes"
    #: The id of the API key the request was authenticated with (its owner id); None
    #: until authenticated. Logged in place of the key.
    key_id: str | None = None
    #: The error type of an error answer, for the access line.
    error_type: str | None = None
    #: A 5xx that is the route's designed answer to a normal call (the E2B surface's 502
    #: health of a killed sandbox, its 501 for an unserved method): logged at INFO.
    designed_error = False

    def initialize(
        self, broker: SessionBroker, settings: Settings, route: str = access.UNMATCHED
    ) -> None:
        self.broker = broker
        self.conf = settings
        self.route = route
        self.owner = "anonymous"
        self._chunks: list[bytes] = []
        self._received = 0
        self._too_large = False
        self._rejected: InterpreterError | None = None

    # -- request plumbing -------------------------------------------------------------

    @property
    def body_limit(self) -> int:
        return int(getattr(self.conf, self.body_limit_attr))

    @property
    def body_limit_setting(self) -> str:
        """The environment variable that sets :attr:`body_limit` (named in a 413)."""
        return ENV_PREFIX + self.body_limit_attr.upper()

    @property
    def request_id(self) -> str:
        """The request's ``X-Request-Id``: the client's when reasonable, else generated."""
        rid: str | None = getattr(self, "_request_id", None)
        if rid is None:
            rid = self._request_id = access.request_id(self.request.headers.get(access.HEADER))
        return rid

    def set_default_headers(self) -> None:
        # Also called when an error clears the headers: every answer carries the id.
        self.set_header(access.HEADER, self.request_id)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "no-store")
        self.clear_header("Server")

    def check_auth(self) -> None:
        keys = self.conf.api_keys
        if not keys:
            # Without keys every client is one tenant, "anonymous", with a key's share.
            self.key_id = self.owner
            mark_authenticated(self.request, self.owner)
            return
        key = _matching(self.bearer_token(), keys)
        if key is None:
            raise Unauthorized("Invalid API key.")
        self.owner = self.key_id = owner_of(key)
        mark_authenticated(self.request, self.owner)

    def check_operator_auth(self) -> None:
        """Auth of operator routes (``/metrics``): with ``metrics_key`` set only that key
        passes and a tenant key gets 403; without it, the tenant rules apply."""
        operator = self.conf.metrics_key
        if operator is None:
            BaseHandler.check_auth(self)
            return
        token = self.bearer_token()
        if _matching(token, [operator]) is not None:
            self.key_id = owner_of(operator)
            return
        if _matching(token, self.conf.api_keys) is not None:
            raise Forbidden(
                "This route needs the operator key (INTERP_METRICS_KEY); an API key for "
                "sessions is not accepted here."
            )
        raise Unauthorized("Invalid API key.")

    def bearer_token(self) -> str:
        header = self.request.headers.get("Authorization", "").strip()
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if not header:
            raise Unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
        # What was sent is not repeated: without a scheme, the first word is the key.
        if scheme.lower() != "bearer":
            raise Unauthorized(
                "The Authorization header does not use the Bearer scheme: send "
                "'Authorization: Bearer <key>' (the word Bearer, a space, then the key)."
            )
        if not token:
            raise Unauthorized(
                "The Authorization header has no key after 'Bearer': send "
                "'Authorization: Bearer <key>'."
            )
        return token

    #: Set by :meth:`decode_argument` when a path segment is not UTF-8 (checked in prepare).
    _bad_path = False
    #: Whether :meth:`prepare` has begun: arguments decoded before that are path segments.
    _prepare_started = False

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        """Decode a path segment or query value; bad UTF-8 is a clear 400, never a reset.

        Path segments are decoded before :meth:`prepare`, where an error would make tornado
        answer before the body is read and drop the connection: the error is kept for
        :meth:`prepare` instead, which answers it the safe way.
        """
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            if not self._prepare_started:
                self._bad_path = True
                return value.decode("utf-8", "replace")
            raise BadRequest(
                f"Query parameter '{name}' is not valid UTF-8 once percent-decoded."
            ) from None

    def prepare(self) -> None:
        self._prepare_started = True
        try:
            if self._bad_path:
                raise BadRequest(
                    "The URL path is not valid UTF-8 once percent-decoded; percent-encode "
                    "the UTF-8 bytes of each path segment."
                )
            length = self.content_length()
            if not self.conf.api_keys:
                refused = browser_guard.refusal(self.request.headers)
                if refused is not None:
                    raise Forbidden(refused)
            self.check_auth()
            if length is not None and length > self.body_limit:
                self._too_large = True
                raise PayloadTooLarge(
                    f"Request body is {self.request.headers['Content-Length'][:40]} bytes; "
                    f"the limit here is {self.body_limit} ({self.body_limit_setting})."
                )
            if length is not None:
                self._hold_large(length)
        except InterpreterError as exc:
            self._reject_after_body(exc)

    def content_length(self) -> int | None:
        """The request's ``Content-Length`` (None without one); 400 unless it is ASCII
        digits (tornado then refuses the request too, but with no JSON answer)."""
        raw = self.request.headers.get("Content-Length")
        if raw is None:
            return None
        # A list of equal values (from a proxy that merged two headers) counts once, as
        # tornado reads it.
        values = {value.strip(" \t") for value in raw.split(",")}
        length = ascii_number(values.pop()) if len(values) == 1 else None
        if length is None:
            raise BadRequest(
                "Content-Length must be the body's size in bytes, in ASCII digits; "
                f"got {raw[:40]!r}."
            )
        return length

    def _reject_after_body(self, exc: InterpreterError) -> None:
        """Answer ``exc`` once the (discarded) body is in, or now if it is too big to drain.

        Answering before the body is read makes tornado close the connection, which
        clients still sending see as a reset instead of our error.
        """
        try:
            length = self.content_length() or 0
        except BadRequest:
            raise exc from None
        if length > DRAIN_LIMIT:
            raise exc
        self._rejected = exc

        async def answer(*args: Any, **kwargs: Any) -> None:
            raise exc

        # Tornado looks the method up after the body arrives: answer there instead.
        setattr(self, (self.request.method or "get").lower(), answer)

    def data_received(self, chunk: bytes) -> Any:
        if self._rejected is not None or self._too_large:
            self._drain_rejected(chunk)
            return None
        self._received += len(chunk)
        if self._received > self.body_limit:
            self.refuse_oversized_body()
            return None
        try:
            self._hold_large(self._received)
        except LargeBodiesBusy as exc:
            self.refuse_oversized_body(exc)
            return None
        self._chunks.append(chunk)
        return None

    # -- the budget of large bodies ----------------------------------------------------

    #: Whether this route's bodies are held in memory, and so count against the budget of
    #: large bodies (not so for uploads, which stream to disk).
    holds_body = True
    #: Bytes of this request's body counted against ``max_large_bodies_bytes``.
    _held_large = 0
    #: Whether the handler took the body (:meth:`raw_body`): it is held until the answer.
    _body_taken = False

    def _hold_large(self, size: int) -> None:
        """Count a body of ``size`` bytes (so far, or announced) against the broker's budget
        of large bodies and the key's share of it, if it is larger than ``max_body_bytes``;
        :class:`LargeBodiesBusy` (503, or 429 past the key's share) when it does not fit.
        Ordinary bodies are never counted; only a notebook's route takes larger ones.
        """
        more = size - self._held_large
        if not self.holds_body or size <= self.conf.max_body_bytes or more <= 0:
            return
        budget, conf = self.broker.metrics.large_bodies, self.conf
        refusal = budget.refusal(
            self.owner,
            more,
            most=conf.max_large_bodies_bytes,
            share=conf.max_large_bodies_bytes_per_key,
        )
        if refusal == "key":
            raise KeyLargeBodiesFull(
                f"This API key's requests already hold {budget.of(self.owner)} bytes of large "
                f"request bodies, and this one needs {more} more: past the key's share of "
                f"{conf.max_large_bodies_bytes_per_key} bytes "
                f"({ENV_PREFIX}MAX_LARGE_BODIES_BYTES_PER_KEY); retry once they are answered.",
                retry_after=2,
            )
        if refusal == "service":
            raise LargeBodiesBusy(
                f"The service already holds {budget.held} of the "
                f"{conf.max_large_bodies_bytes} bytes it takes in large request bodies at "
                f"once ({ENV_PREFIX}MAX_LARGE_BODIES_BYTES); retry shortly.",
                retry_after=2,
            )
        budget.take(self.owner, more)
        self._held_large += more

    def _release_large(self) -> None:
        if self._held_large:
            self.broker.metrics.large_bodies.give_back(self.owner, self._held_large)
            self._held_large = 0

    def on_finish(self) -> None:
        self._release_large()

    def on_connection_close(self) -> None:
        # A body the handler took stays in memory until it answers (on_finish).
        if not self._body_taken:
            self._release_large()
        super().on_connection_close()

    def refuse_oversized_body(self, exc: InterpreterError | None = None) -> None:
        """Refuse a body (chunked or not) that passed the limit: nothing more of it is kept.

        The answer (413 JSON) comes when the body ends, so that a client still sending
        reads it instead of a reset, unless more than :data:`DRAIN_LIMIT` bytes keep
        coming: then it is answered at once and tornado closes the connection.
        """
        self._too_large = True
        self._chunks.clear()
        self._release_large()
        if exc is None:
            exc = PayloadTooLarge(
                f"Request body exceeds the limit of {self.body_limit} bytes "
                f"({self.body_limit_setting}); refused as it arrived (nothing of it was kept)."
            )
        if self._rejected is None:
            self._rejected = exc
            error = exc

            async def answer(*args: Any, **kwargs: Any) -> None:
                raise error

            setattr(self, (self.request.method or "get").lower(), answer)

    def _drain_rejected(self, chunk: bytes) -> None:
        """Discard a refused body's bytes; past the drain window, answer now."""
        self._drained = getattr(self, "_drained", 0) + len(chunk)
        if self._drained > DRAIN_LIMIT and not self._finished and self._rejected is not None:
            exc = self._rejected
            self.send_error(exc.status, exc_info=(type(exc), exc, None))

    def raw_body(self) -> bytes:
        if self._too_large:
            raise PayloadTooLarge(f"Request body exceeds the limit of {self.body_limit} bytes.")
        self._body_taken = True
        return b"".join(self._chunks)

    def json_raw(self) -> bytes:
        """The body of a JSON route, sent as it is: 415 for a ``Content-Encoding`` (a gzip
        body was read as JSON and refused as malformed; another encoding was ignored)."""
        encoding = (self.request.headers.get("Content-Encoding") or "").strip().lower()
        if encoding not in IDENTITY:
            raise UnsupportedEncoding(
                f"Content-Encoding {encoding[:50]!r} is not accepted on this route; send the "
                "JSON body as it is (only file uploads may be gzip-compressed)."
            )
        return self.raw_body()

    def parse(self, model: type[M], *, optional: bool = False) -> M:
        """Validate the JSON body against ``model`` (422 on anything wrong)."""
        return json_body.decode(self.json_raw(), model, optional=optional)

    async def parse_large(self, model: type[M], *, optional: bool = False) -> M:
        """:meth:`parse` for a route whose body can be large (a notebook): a body over
        ``json_body.OFF_LOOP_BYTES`` is checked and parsed in a worker thread."""
        raw = self.json_raw()
        if len(raw) <= json_body.OFF_LOOP_BYTES:
            return json_body.decode(raw, model, optional=optional)
        self._chunks.clear()  # the joined copy is all that is left of it, until parsed
        return await asyncio.to_thread(json_body.decode, raw, model, optional=optional)

    # -- responses --------------------------------------------------------------------

    def generation(self) -> int | None:
        """The ``?generation=`` fence of interrupt, restart and delete (R-08), if given."""
        raw = self.get_query_argument("generation", None)
        if raw is None:
            return None
        if not raw.isascii() or not raw.isdigit() or len(raw) > 12:
            raise ValidationFailed(
                "generation must be a non-negative integer of at most 12 digits (the "
                "session's 'generation' field)."
            )
        return int(raw)

    def execution_filter(self) -> str | None:
        """The ``?execution_id=`` of interrupt: act on that execution only, if given."""
        raw = self.get_query_argument("execution_id", None)
        if raw is not None and not EXECUTION_ID.fullmatch(raw):
            raise ValidationFailed(
                "execution_id must be an execution's id as the service gave it (letters, "
                "digits, '_' and '-', at most 100)."
            )
        return raw

    def idempotency_key(self) -> str | None:
        """The request's ``Idempotency-Key`` header, checked; None when absent."""
        raw = self.request.headers.get(IDEMPOTENCY_HEADER)
        return None if raw is None else check_key(raw)

    async def send_file(self, fh: IO[bytes], size: int, mime: str | None = None) -> None:
        """Send an open file's bytes in chunks read off the loop, then finish; closes it.
        A client that goes away ends the sending quietly.

        ``size`` bytes are announced and never more are sent, even if the file grows
        meanwhile. If it shrinks before anything was sent, the answer is 409 (try again);
        once the headers are out the answer cannot be completed: the connection is closed
        (the client sees a body shorter than its ``Content-Length``) and one warning is
        logged.
        """
        left = size
        if self.request.method == "HEAD":  # what a GET would answer, without the bytes
            fh.close()
            self.set_header("Content-Type", mime or "application/octet-stream")
            self.set_header("Content-Length", str(size))
            self.finish()
            return
        try:
            self.set_header("Content-Type", mime or "application/octet-stream")
            self.set_header("Content-Length", str(size))
            while left > 0 and (
                chunk := await asyncio.to_thread(fh.read, min(DOWNLOAD_CHUNK, left))
            ):
                left -= len(chunk)
                self.write(chunk)
                await self.flush()
        except StreamClosedError:
            return
        finally:
            fh.close()
        if left > 0 and not self._headers_written:
            self.clear_header("Content-Length")
            raise Conflict("The file changed while it was being read; try again.")
        if left > 0:
            log.warning(
                "file changed while being sent: %s %s (request_id=%s) ended after %d of the "
                "%d bytes announced; connection closed",
                self.request.method,
                self.route,
                self.request_id,
                size - left,
                size,
            )
            connection = self.request.connection
            if isinstance(connection, HTTP1Connection):
                connection.close()  # finish() below then ends the request without sending
        self.finish()

    async def send_file_range(
        self,
        fh: IO[bytes],
        size: int,
        mime: str | None,
        range_header: str | None,
        *,
        what: str,
        limit: int | None = None,
    ) -> None:
        """Send an open file whole, or the one byte range ``range_header`` asks for (206
        with ``Content-Range``; 416 for a range past its end); closes it. ``limit``: the
        most bytes one answer sends (413 past it, with how to ask for a part)."""
        try:
            wanted = byte_range(range_header, size, what)
            sent = size if wanted is None else wanted[1] - wanted[0] + 1
            if limit is not None and sent > limit:
                raise PayloadTooLarge(
                    f"The {what} is {size} bytes; one download sends at most {limit} "
                    "(INTERP_MAX_DOWNLOAD_BYTES): ask for a part with a Range header."
                    if wanted is None
                    else f"The range asks for {sent} bytes; one download sends at most "
                    f"{limit} (INTERP_MAX_DOWNLOAD_BYTES)."
                )
        except RangeNotSatisfiable as exc:
            fh.close()
            # Answered here: the error path would drop the Content-Range header.
            self.error_type = exc.code
            self.set_header("Content-Range", f"bytes */{size}")
            self.send_json({"error": {"type": exc.code, "message": exc.message}}, exc.status)
            return
        except InterpreterError:
            fh.close()
            raise
        if wanted is not None:
            first, last = wanted
            await asyncio.to_thread(fh.seek, first)
            self.set_status(206)
            self.set_header("Content-Range", f"bytes {first}-{last}/{size}")
        await self.send_file(fh, sent, mime)

    def send_json(self, data: BaseModel | dict[str, Any], status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=utf-8")
        if isinstance(data, BaseModel):
            self.finish(data.model_dump_json())
        else:
            self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        details: dict[str, object] = {}
        if isinstance(exc, InterpreterError):
            self.designed_error = self.designed_error or exc.designed
            code, message, details = exc.code, exc.message, exc.details
            if exc.retry_after is not None:
                self.set_header("Retry-After", str(max(1, int(exc.retry_after))))
        elif isinstance(exc, tornado.web.HTTPError):
            code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
            message = (
                exc.log_message
                if exc.status_code in (404, 405) and exc.log_message
                else (self._reason or "Request failed.")
            )
            if exc.status_code == 405:
                message = f"Method {self.request.method} is not allowed on this path."
        else:
            code, message = "internal_error", "Internal error; the service logged the details."
        self.error_type = code
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps({"error": {"type": code, "message": message, **details}}))

    def send_error(self, status_code: int = 500, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if (
            exc is not None
            and not isinstance(exc, InterpreterError | tornado.web.HTTPError)
            and storage_floor.failure_reason(exc) == "storage_full"
        ):
            # The data disk ran out under the request (SQLite's "database or disk is
            # full", ENOSPC): what to do about it, not a 500. Nothing was changed.
            exc = StorageFull(
                "The service's data disk is full: this request could not be recorded, "
                "and nothing was changed. Retry once space is freed on it.",
                retry_after=30,
            )
            kwargs["exc_info"] = (type(exc), exc, None)
        if isinstance(exc, InterpreterError):
            status_code = exc.status
            self._reason = exc.code
        super().send_error(status_code, **kwargs)

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, InterpreterError | tornado.web.HTTPError):
            return  # an expected answer: the access line says it (status and error type)
        log.error(
            "uncaught exception in %s %s (request_id=%s)",
            self.request.method,
            self.route,
            self.request_id,
            exc_info=(typ, value, tb),
        )

    def log_access(self) -> None:
        """Count this answered request and write its access line (the Application's
        ``log_function``)."""
        method = access.method_label(self.request.method)
        status = self.get_status()
        seconds = self.request.request_time()
        self.broker.metrics.request_answered(self.route, method, status, seconds)
        access.log_request(
            request_id=self.request_id,
            method=method,
            route=self.route,
            # A method tornado does not route (FOO, PROPFIND) is refused before the path
            # is parsed: such a request has no path_kwargs.
            session_id=getattr(self, "path_kwargs", {}).get("session_id"),
            status=status,
            duration_ms=seconds * 1000,
            key_id=self.key_id,
            error=self.error_type,
            designed=self.designed_error,
        )


def _matching(token: str, keys: list[str]) -> str | None:
    """The key of ``keys`` equal to ``token`` (compared in constant time), if any."""
    found = None
    for key in keys:
        if hmac.compare_digest(token.encode(), key.encode()):
            found = key
    return found


class NotFoundHandler(BaseHandler):
    """Unknown paths: JSON 404 (after auth, so paths don't leak to the unauthenticated)."""

    def prepare(self) -> None:
        super().prepare()
        if self._rejected is None:
            self._reject_after_body(
                NotFound(f"No route {self.request.path}; see /v1/openapi.json.")
            )
