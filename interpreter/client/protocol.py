"""Sans-I/O half of the SDK: what each API call sends and how its answer is read.

Every operation is a :class:`Call`: method, path, body and a ``parse`` function for the
response. ``Client`` sends calls with blocking httpx, ``AsyncClient`` with async httpx; neither
repeats the wire details, and tests can check a call without any network.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
from httpx_sse import ServerSentEvent
from pydantic import ValidationError

from interpreter.client._errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    BusyError,
    ConflictError,
    ConnectionFailed,
    InvalidArgumentError,
    NotFoundError,
    ServerError,
)
from interpreter.client._events import (
    ApprovalRequiredEvent,
    ClearOutputEvent,
    ErrorEvent,
    OutputEvent,
    ProgressEvent,
    StderrEvent,
    StdoutEvent,
)
from interpreter.models import (
    Approval,
    ClearEvent,
    ErrorInfo,
    Execution,
    FileList,
    Output,
    ServiceInfo,
    Session,
    SessionList,
    TextChunk,
)

T = TypeVar("T")

SSE_MEDIA_TYPE = "text/event-stream"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request of the API and the function that reads its successful answer.

    Attributes:
        method: HTTP method.
        url: Path relative to the service's base URL (or an absolute URL).
        parse: Turns a successful response (body already read) into the result.
        json: JSON body, if any.
        content: Raw body, if any (uploads).
        params: Query parameters.
        unbounded: The answer waits for user code, so no read timeout applies.
        headers: Extra request headers (``Idempotency-Key``).
        also_ok: Statuses besides 2xx that ``parse`` reads (304 for a conditional GET).
    """

    method: str
    url: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    content: bytes | None = None
    params: dict[str, str] | None = None
    unbounded: bool = False
    headers: dict[str, str] | None = None
    also_ok: tuple[int, ...] = ()

    def accepts(self, resp: httpx.Response) -> bool:
        """Whether ``resp`` is an answer for ``parse`` (else an error, or one to retry)."""
        return resp.is_success or resp.status_code in self.also_ok

    def body(self) -> bytes | None:
        """The bytes to send: ``content``, else ``json`` encoded (see :func:`encode_json`)."""
        return self.content if self.json is None else encode_json(self.json)

    def request_headers(self) -> dict[str, str] | None:
        """``headers``, with the JSON content type when the body is ``json``."""
        if self.json is None:
            return self.headers
        return {"Content-Type": "application/json", **(self.headers or {})}


def encode_json(value: Any) -> bytes:
    """A JSON request body in UTF-8.

    Text that UTF-8 cannot hold (a lone surrogate such as ``"\\ud800"``) is sent as JSON
    escapes instead, which is valid JSON: the service then answers with its own ``422``
    rather than the SDK failing to encode. NaN and infinities, which JSON cannot hold,
    raise :class:`InvalidArgumentError`.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:
        raise InvalidArgumentError(f"the request cannot be sent as JSON: {exc}") from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode("ascii")


# ------------------------------------------------------------------------------ paths


def _segment(text: str) -> str:
    """One path segment, percent-encoded. A ``.`` or ``..`` segment is encoded too
    (``%2E``): httpx would otherwise resolve it away before sending, and a path such as
    ``../../<other session>/files/x`` would reach another resource instead of being refused
    by the service (``400 path_not_allowed``). Text that UTF-8 cannot encode (a lone
    surrogate) is sent as such bytes, for the service to refuse."""
    quoted = quote(text, safe="", errors="surrogatepass")
    return "%2E" * len(quoted) if quoted in (".", "..") else quoted


def session_url(session_id: str, *rest: str) -> str:
    """Path of a session resource; every segment is percent-encoded."""
    return "/v1/sessions/" + "/".join(_segment(p) for p in (session_id, *rest))


def file_url(session_id: str, path: str) -> str:
    """Path of one workspace file; slashes separate directories, the rest is encoded.

    ``.`` and ``..`` segments are kept (encoded), so the service refuses a path that
    leaves the workspace; an empty or absolute path raises :class:`InvalidArgumentError`
    (an upload to ``/tmp/x.csv`` would land in the workspace's ``tmp/``, where the kernel
    does not look for it).
    """
    if path.startswith("/") and path.strip("/"):
        raise InvalidArgumentError(
            f"{path[:200]!r} is an absolute path: give the path relative to the session's "
            "workspace, the kernel's working directory, such as 'data.csv' or "
            "'out/report.txt'"
        )
    clean = path.lstrip("/")
    if not clean:
        raise InvalidArgumentError(
            f"a file path is required (got {path!r}): give a path inside the session's "
            "workspace, such as 'data.csv' or 'out/report.txt'"
        )
    return session_url(session_id) + "/files/" + "/".join(_segment(p) for p in clean.split("/"))


#: Session and artifact ids as the service makes them (its route patterns).
_ID = r"[A-Za-z0-9_-]{1,100}"
_ID_RE = re.compile(_ID)
_ARTIFACT_PATH_RE = re.compile(rf"/v1/sessions/(?P<session>{_ID})/artifacts/(?P<artifact>{_ID})")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def artifact_url(session_id: str, artifact_id: str) -> str:
    """Path of an artifact, as ``ArtifactRef.url`` holds it."""
    return session_url(session_id, "artifacts", artifact_id)


def parse_artifact_ref(ref: str, base_url: str) -> tuple[str | None, str]:
    """The session (None for a bare id) and the artifact id named by ``ref``.

    Accepted: an artifact id; the artifact's path ``/v1/sessions/{sid}/artifacts/{id}``
    (what ``ArtifactRef.url`` holds); or that path as an absolute URL on the client's own
    service (``base_url``: same scheme, host, port and path prefix). Anything else raises
    :class:`InvalidArgumentError` before any request: the client's API key would go
    wherever the URL points.
    """
    if _ID_RE.fullmatch(ref):
        return None, ref
    path: str | None = ref
    if "://" in ref or ref.startswith("//"):
        path = _path_on_service(ref, base_url)
    match = _ARTIFACT_PATH_RE.fullmatch(path) if path is not None else None
    if match is None:
        shown = ref if len(ref) <= 200 else ref[:200] + "..."
        raise InvalidArgumentError(
            f"{shown!r} is not an artifact of this service; give an artifact id, or its path "
            f"/v1/sessions/<session_id>/artifacts/<artifact_id> (also as a URL on {base_url}). "
            "Nothing was sent."
        )
    return match["session"], match["artifact"]


def artifact_path(ref: str, base_url: str, session_id: str) -> str:
    """The path of the artifact ``ref`` names (see :func:`parse_artifact_ref`); a bare id
    is an artifact of ``session_id``."""
    named, artifact_id = parse_artifact_ref(ref, base_url)
    return artifact_url(named or session_id, artifact_id)


def _path_on_service(url: str, base_url: str) -> str | None:
    """The path of ``url`` below ``base_url``, or None when it points anywhere else."""
    try:
        target, base = httpx.URL(url), httpx.URL(base_url)
    except httpx.InvalidURL:
        return None
    prefix = base.path.rstrip("/")
    same_origin = (
        target.scheme == base.scheme
        and target.host == base.host
        and (target.port or _DEFAULT_PORTS.get(target.scheme))
        == (base.port or _DEFAULT_PORTS.get(base.scheme))
    )
    if (
        not same_origin
        or target.userinfo
        or target.query
        or target.fragment
        or not target.path.startswith(prefix + "/")
    ):
        return None
    return target.path[len(prefix) :]


def _checked_artifact_path(url: str) -> str:
    """``url`` if it is an artifact path of the service, else InvalidArgumentError."""
    if _ARTIFACT_PATH_RE.fullmatch(url) is None:
        raise InvalidArgumentError(
            f"{url[:200]!r} is not an artifact path (/v1/sessions/<session_id>/artifacts/"
            "<artifact_id>); nothing was sent"
        )
    return url


# ---------------------------------------------------------------------------- parsers


def _model(model: type[Any]) -> Callable[[httpx.Response], Any]:
    def parse(resp: httpx.Response) -> Any:
        try:
            return model.model_validate_json(resp.content)
        except ValidationError as exc:
            raise ConnectionFailed(
                f"unexpected answer from {resp.request.method} {resp.request.url}: {exc}"
            ) from exc

    return parse


def _parse_session(resp: httpx.Response) -> Session:
    result: Session = _model(Session)(resp)
    return result


def _parse_execution(resp: httpx.Response) -> Execution:
    result: Execution = _model(Execution)(resp)
    return result


def _parse_session_list(resp: httpx.Response) -> list[Session]:
    result: SessionList = _model(SessionList)(resp)
    return result.sessions


def _parse_file_list(resp: httpx.Response) -> FileList:
    result: FileList = _model(FileList)(resp)
    return result


def _parse_json_object(resp: httpx.Response) -> dict[str, Any]:
    try:
        value = json.loads(resp.content)
    except ValueError as exc:
        raise ConnectionFailed(f"expected JSON from {resp.request.url}") from exc
    if not isinstance(value, dict):
        raise ConnectionFailed(f"expected a JSON object from {resp.request.url}")
    return value


def _parse_bytes(resp: httpx.Response) -> bytes:
    return resp.content


def _parse_nothing(resp: httpx.Response) -> None:
    return None


# ----------------------------------------------------------------------------- errors

_STATUS_CLASSES: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    410: ConflictError,
    413: BadRequestError,
    422: BadRequestError,
    429: BusyError,
}


#: What a 401 says to an SDK user when no key was sent: the service's own words are for
#: HTTP clients ("send 'Authorization: Bearer <key>'"), which the SDK writes itself.
NO_KEY_ADVICE = (
    "This service needs an API key and none was sent: pass api_key= to Client or "
    "AsyncClient, or set INTERP_API_KEY."
)


def _sent_no_key(resp: httpx.Response) -> bool:
    """Whether the request ``resp`` answers carried no Authorization header at all."""
    try:
        return "authorization" not in resp.request.headers
    except RuntimeError:  # a response built without its request
        return False


def error_from_response(resp: httpx.Response) -> APIError:
    """The exception for an error answer (body already read), with the service's message.

    A 401 to a request that carried no key says how an SDK user gives one instead
    (:data:`NO_KEY_ADVICE`), with ``details["api_key_sent"]`` False; ``interp`` says it in
    its own words.
    """
    code, message = "http_error", ""
    details: dict[str, Any] = {}
    try:
        detail = json.loads(resp.content)["error"]
        code = str(detail.get("type") or code)
        message = str(detail.get("message") or "")
        details = {k: v for k, v in detail.items() if k not in ("type", "message")}
    except (ValueError, KeyError, TypeError, AttributeError):
        # Not our error body (a proxy, or a crash before the handler): keep what there is.
        message = resp.text.strip()[:500]
    if not message:
        message = resp.reason_phrase or f"HTTP {resp.status_code}"
    if resp.status_code == 401 and _sent_no_key(resp):
        message = NO_KEY_ADVICE
        details["api_key_sent"] = False
    retry_after = parse_retry_after(resp.headers.get("retry-after"))
    if resp.status_code >= 500:
        cls: type[APIError] = ServerError
    else:
        cls = _STATUS_CLASSES.get(resp.status_code, BadRequestError)
    return cls(
        message, status=resp.status_code, code=code, retry_after=retry_after, details=details
    )


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delta seconds or an HTTP date.

    None when the header is absent or unreadable; a date in the past gives 0.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if 0 <= seconds < float("inf") else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # a "-0000" zone; HTTP dates are UTC
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def check_response(resp: httpx.Response) -> None:
    """Raise the matching :class:`APIError` unless the answer is a success."""
    if not resp.is_success:
        raise error_from_response(resp)


# ------------------------------------------------------------------------------ calls


def create_session(
    *,
    idle_timeout_s: float | None = None,
    limits: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    metadata: dict[str, Any] | None = None,
    from_session: str | None = None,
    from_notebook: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Call[Session]:
    body: dict[str, Any] = {}
    if idle_timeout_s is not None:
        body["idle_timeout_s"] = idle_timeout_s
    if limits:
        body["limits"] = limits
    if env:
        body["env"] = env
    if metadata:
        body["metadata"] = metadata
    if from_session is not None:
        body["from_session"] = from_session
    if from_notebook is not None:
        body["from_notebook"] = from_notebook
    # A rebuild replays cells, which takes as long as they take.
    rebuild = from_session is not None or from_notebook is not None
    return Call(
        "POST",
        "/v1/sessions",
        _parse_session,
        json=body,
        unbounded=rebuild,
        headers=_idempotency(idempotency_key),
    )


def new_idempotency_key() -> str:
    """A fresh key for one logical call; every retry of that call reuses it."""
    return str(uuid.uuid4())


#: What an ``Idempotency-Key`` may be: 1 to 255 visible ASCII characters (as the service
#: checks; an HTTP header cannot carry a line break or non-ASCII text at all).
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def _idempotency(key: str | None) -> dict[str, str]:
    """The caller's key, or a fresh one: a retry of the call can then never act twice.
    A key the service would refuse raises :class:`InvalidArgumentError` before sending."""
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidArgumentError(
            f"idempotency_key must be 1 to 255 visible ASCII characters (a UUID is a good "
            f"choice); got {key[:60]!r}"
        )
    return {IDEMPOTENCY_HEADER: key if key is not None else new_idempotency_key()}


def _fence(generation: int | None) -> dict[str, str] | None:
    return {"generation": str(generation)} if generation is not None else None


def list_sessions(state: str = "all") -> Call[list[Session]]:
    params = None if state == "all" else {"state": state}
    return Call("GET", "/v1/sessions", _parse_session_list, params=params)


def get_session(session_id: str) -> Call[Session]:
    return Call("GET", session_url(session_id), _parse_session)


def delete_session(session_id: str, generation: int | None = None) -> Call[None]:
    return Call("DELETE", session_url(session_id), _parse_nothing, params=_fence(generation))


#: What the service does with a run whose client goes away, and with one that would queue.
OnDisconnect = Literal["continue", "interrupt"]
IfBusy = Literal["queue", "reject"]


def execute(
    session_id: str,
    code: str,
    timeout_s: float | None = None,
    idempotency_key: str | None = None,
    *,
    on_disconnect: OnDisconnect | None = None,
    if_busy: IfBusy | None = None,
) -> Call[Execution]:
    body: dict[str, Any] = {"code": code}
    if timeout_s is not None:
        body["timeout_s"] = timeout_s
    if on_disconnect is not None:
        body["on_disconnect"] = on_disconnect
    if if_busy is not None:
        body["if_busy"] = if_busy
    return Call(
        "POST",
        session_url(session_id, "execute"),
        _parse_execution,
        json=body,
        unbounded=True,
        headers=_idempotency(idempotency_key),
    )


def get_execution(session_id: str, execution_id: str) -> Call[Execution]:
    return Call("GET", session_url(session_id, "executions", execution_id), _parse_execution)


def interrupt(
    session_id: str, generation: int | None = None, execution_id: str | None = None
) -> Call[Session]:
    params = _fence(generation) or {}
    if execution_id is not None:
        params["execution_id"] = execution_id
    return Call("POST", session_url(session_id, "interrupt"), _parse_session, params=params or None)


def restart(
    session_id: str, *, recover: bool = False, generation: int | None = None
) -> Call[Session]:
    body = {"recover": True} if recover else None
    return Call(
        "POST",
        session_url(session_id, "restart"),
        _parse_session,
        json=body,
        unbounded=recover,
        params=_fence(generation),
    )


def rebuild(
    session_id: str, notebook: dict[str, Any], *, generation: int | None = None
) -> Call[Session]:
    # The answer comes once the notebook's cells re-ran, which takes as long as they take.
    # No Idempotency-Key: the service keeps none for it, so a failed rebuild is not resent.
    return Call(
        "POST",
        session_url(session_id, "rebuild"),
        _parse_session,
        json={"notebook": notebook},
        unbounded=True,
        params=_fence(generation),
    )


def list_files(
    session_id: str, path: str = "", *, limit: int | None = None, after: str | None = None
) -> Call[FileList]:
    url = session_url(session_id, "files")
    query = []
    if path:
        # Encoded here rather than by httpx, which cannot encode a lone surrogate.
        query.append("path=" + quote(path, safe="/", errors="surrogatepass"))
    if limit is not None:
        query.append(f"limit={limit}")
    if after is not None:
        query.append("after=" + quote(after, safe="/", errors="surrogatepass"))
    if query:
        url += "?" + "&".join(query)
    return Call("GET", url, _parse_file_list)


def download(session_id: str, path: str) -> Call[bytes]:
    return Call("GET", file_url(session_id, path), _parse_bytes)


def upload(session_id: str, path: str, data: bytes) -> Call[None]:
    return Call("PUT", file_url(session_id, path), _parse_nothing, content=data)


def delete_file(session_id: str, path: str) -> Call[None]:
    return Call("DELETE", file_url(session_id, path), _parse_nothing)


def notebook(session_id: str) -> Call[dict[str, Any]]:
    return Call("GET", session_url(session_id, "notebook"), _parse_json_object)


def artifact(url: str) -> Call[bytes]:
    """Bytes behind an ``ArtifactRef.url``: the artifact's path on the service.

    Any other URL raises :class:`InvalidArgumentError` (see :func:`parse_artifact_ref`
    for turning ids and absolute URLs of the service into this path).
    """
    return Call("GET", _checked_artifact_path(url), _parse_bytes)


def artifact_range(url: str, offset: int = 0, length: int | None = None) -> Call[tuple[bytes, int]]:
    """``length`` bytes (all the rest when None) of an artifact from byte ``offset``, by an
    HTTP ``Range`` request, with the artifact's whole size; a server that sends the whole
    body is sliced here. ``url`` is the artifact's path, as for :func:`artifact`."""
    return _ranged(_checked_artifact_path(url), offset, length)


def download_range(
    session_id: str, path: str, offset: int = 0, length: int | None = None
) -> Call[tuple[bytes, int]]:
    """:func:`download` of ``length`` bytes (all the rest when None) from byte ``offset``,
    with the file's whole size: a large file is read in part."""
    return _ranged(file_url(session_id, path), offset, length)


def _ranged(path: str, offset: int, length: int | None) -> Call[tuple[bytes, int]]:
    if offset < 0 or (length is not None and length < 1):
        raise InvalidArgumentError(
            f"offset must be >= 0 and length >= 1 (got offset={offset}, length={length})"
        )
    last = "" if length is None else str(offset + length - 1)

    def parse(resp: httpx.Response) -> tuple[bytes, int]:
        if resp.status_code == 206:
            total = resp.headers.get("Content-Range", "").rpartition("/")[2]
            return resp.content, int(total) if total.isdigit() else -1
        end = None if length is None else offset + length
        return resp.content[offset:end], len(resp.content)

    return Call("GET", path, parse, headers={"Range": f"bytes={offset}-{last}"})


def _parse_service_info(resp: httpx.Response) -> ServiceInfo:
    result: ServiceInfo = _model(ServiceInfo)(resp)
    return result


def info() -> Call[ServiceInfo]:
    return Call("GET", "/v1/info", _parse_service_info)


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", _parse_json_object)


# ---------------------------------------------------------------------------- streams


def stream_request(
    session_id: str,
    code: str,
    timeout_s: float | None,
    idempotency_key: str | None = None,
    *,
    on_disconnect: OnDisconnect | None = None,
    if_busy: IfBusy | None = None,
) -> Call[None]:
    """The streaming form of :func:`execute`; the body is read as events, not parsed."""
    call = execute(
        session_id, code, timeout_s, idempotency_key, on_disconnect=on_disconnect, if_busy=if_busy
    )
    return Call(
        call.method,
        call.url,
        _parse_nothing,
        json=call.json,
        unbounded=True,
        headers=call.headers,
    )


def events_request(session_id: str, execution_id: str, after: int) -> Call[None]:
    """An execution's events after event id ``after`` as server-sent events, then live."""
    return Call(
        "GET",
        session_url(session_id, "executions", execution_id, "events"),
        _parse_nothing,
        params={"after": str(after)},
        unbounded=True,
    )


def event_id(sse: ServerSentEvent, last: int) -> int:
    """The ``id:`` of an event (the service numbers them from 1), else ``last``."""
    return int(sse.id) if sse.id and sse.id.isdigit() else last


def decode_event(sse: ServerSentEvent) -> ProgressEvent | Execution | None:
    """Turn one server-sent event into a typed event, or the final Execution for ``done``.

    Unknown event names give ``None``, so an older SDK keeps working with a newer service;
    so does an event without data (every event of the service carries a JSON object).
    """
    if not sse.data:
        return None
    try:
        data = json.loads(sse.data)
        if sse.event == "stdout":
            return StdoutEvent(TextChunk.model_validate(data).text)
        if sse.event == "stderr":
            return StderrEvent(TextChunk.model_validate(data).text)
        if sse.event == "output":
            return OutputEvent(Output.model_validate(data))
        if sse.event == "clear":
            return ClearOutputEvent(ClearEvent.model_validate(data).wait)
        if sse.event == "error":
            return ErrorEvent(ErrorInfo.model_validate(data))
        if sse.event == "approval_required":
            return ApprovalRequiredEvent(Approval.model_validate(data))
        if sse.event == "done":
            return Execution.model_validate(data)
    except (ValueError, ValidationError) as exc:
        raise ConnectionFailed(f"malformed {sse.event!r} event in the stream: {exc}") from exc
    return None


STREAM_ENDED_EARLY = "the event stream ended before the execution finished"

#: Response header naming the execution a request started (so a broken stream can resume).
EXECUTION_ID_HEADER = "X-Execution-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"


class Backoff:
    """Delays for polling an execution after its stream broke: 0.1 s doubling to 2 s;
    gives up after a few consecutive connection failures."""

    def __init__(self, *, first: float = 0.1, cap: float = 2.0, max_failures: int = 5) -> None:
        self._delay = first
        self._cap = cap
        self._failures = 0
        self._max_failures = max_failures

    def next_delay(self) -> float:
        delay = self._delay
        self._delay = min(self._delay * 2, self._cap)
        return delay

    def failures_exhausted(self) -> bool:
        self._failures += 1
        return self._failures >= self._max_failures

    def reset_failures(self) -> None:
        self._failures = 0
