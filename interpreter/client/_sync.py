"""The blocking client: ``Client`` and its ``Session`` objects (no event loop involved)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import httpx
from httpx_sse import EventSource, ServerSentEvent

from interpreter.client import _approvals as approvals
from interpreter.client import protocol as proto
from interpreter.client._config import (
    SOCKET_OPTIONS,
    client_settings,
    request_timeout,
    retry_policy,
)
from interpreter.client._errors import (
    ConflictError,
    ConnectionFailed,
    ExecutionError,
    NotFoundError,
)
from interpreter.client._events import DoneEvent, ProgressEvent
from interpreter.client._results import Artifact, RunResult
from interpreter.client._retry import connection_failed
from interpreter.client.protocol import IfBusy, OnDisconnect
from interpreter.models import (
    TERMINAL_STATUSES,
    Approval,
    ArtifactRef,
    Execution,
    FileList,
    ServiceInfo,
)
from interpreter.models import Session as SessionInfo

T = TypeVar("T")

StreamEvent = ProgressEvent | DoneEvent[RunResult]


class Client:
    """Blocking client for the interpreter service.

    Args:
        base_url: Service URL. Defaults to ``$INTERP_URL``, else ``http://127.0.0.1:8700``.
        api_key: Bearer key. Defaults to ``$INTERP_API_KEY``; none is sent if unset.
        timeout: Seconds to wait for the service on ordinary calls. Calls that wait for user
            code (``run``, ``stream``, rebuilds) have no read timeout: give ``timeout_s``.
        transport: A custom httpx transport (tests use ``httpx.MockTransport``).
        headers: Extra headers sent with every request.
        max_retries: How many times a failed call is sent again (``429``, ``502``,
            ``503``, ``504``, connection failures; see ``interpreter.client._retry`` for
            which calls are safe to repeat). Defaults to ``$INTERP_MAX_RETRIES``, else 2;
            0 sends every call once. ``run``, ``stream`` and ``create_session`` carry an
            ``Idempotency-Key`` (one per call, the same on its retries), so a retried run
            never runs twice.
        retry_backoff: Seconds before the first retry (default 0.5), doubling up to 8 s,
            with jitter; a ``Retry-After`` from the service is used instead when given.

    Example:
        >>> from interpreter.client import Client
        >>> with Client("http://127.0.0.1:8700") as client:  # doctest: +SKIP
        ...     with client.create_session() as session:
        ...         print(session.run("21 * 2").text)
        42
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        headers: dict[str, str] | None = None,
        max_retries: int | None = None,
        retry_backoff: float | None = None,
    ) -> None:
        self.base_url, all_headers = client_settings(base_url, api_key, headers)
        self.retry = retry_policy(max_retries, retry_backoff)
        self._timeout = httpx.Timeout(timeout)
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=all_headers,
            timeout=self._timeout,
            transport=transport or httpx.HTTPTransport(socket_options=SOCKET_OPTIONS),
        )

    # -- sessions ---------------------------------------------------------------------

    def create_session(
        self,
        *,
        idle_timeout_s: float | None = None,
        limits: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        metadata: dict[str, Any] | None = None,
        from_session: str | None = None,
        from_notebook: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Session:
        """Start a session (a fresh kernel) and return it; use it as a context manager.

        Args:
            idle_timeout_s: Close the session after this many idle seconds; 0 never.
            limits: Resource limits, e.g. ``{"memory_mb": 512, "cpus": 1, "pids": 128}``.
            env: Extra environment variables for the kernel (reserved names, such as
                PATH or PYTHONBREAKPOINT, are refused with a 422 saying why).
            metadata: Free-form labels stored with the session.
            from_session: Rebuild the state of this session by re-running its good cells
                (a fork); its workspace files are copied.
            from_notebook: Rebuild state from this nbformat v4 notebook (JSON dict).

        Returns:
            The session. ``session.info.rebuild`` reports a rebuild (cells run, failed).

        Example:
            >>> with client.create_session(metadata={"task": "eda"}) as s:  # doctest: +SKIP
            ...     s.run("import pandas as pd")
        """
        info = self._call(
            proto.create_session(
                idle_timeout_s=idle_timeout_s,
                limits=limits,
                env=env,
                metadata=metadata,
                from_session=from_session,
                from_notebook=from_notebook,
                idempotency_key=idempotency_key,
            )
        )
        return Session(self, info)

    def get_session(self, session_id: str) -> Session:
        """Attach to an existing session by id (raises NotFoundError if it is unknown)."""
        return Session(self, self._call(proto.get_session(session_id)))

    def list_sessions(self, state: str = "all") -> list[SessionInfo]:
        """The sessions of this API key, oldest first: ``all`` (closed ones still on
        record too), ``open`` (not closed) or ``closed``."""
        return self._call(proto.list_sessions(state))

    def delete_session(self, session_id: str) -> None:
        """Stop a session's kernel; its notebook and artifacts stay readable."""
        self._call(proto.delete_session(session_id))

    def info(self) -> ServiceInfo:
        """The service's backend, limits and kernel packages (``GET /v1/info``)."""
        return self._call(proto.info())

    def health(self) -> dict[str, Any]:
        """The service's liveness answer."""
        return self._call(proto.health())

    def list_approvals(
        self, status: str = "pending", *, wait_s: float | None = None
    ) -> list[Approval]:
        """Held executions (operator key); ``wait_s``: wait that long for one to appear."""
        return self._call(approvals.list_approvals(status, wait_s))

    def watch_approvals(
        self, status: str = "pending", *, wait_s: float = 30.0
    ) -> Iterator[list[Approval]]:
        """The held executions now, then the whole list again each time it changes
        (operator key). Each question waits up to ``wait_s`` seconds on the service for a
        change (``If-None-Match``), so an idle watch costs one request per ``wait_s``. It
        never ends by itself: break out of the loop."""
        etag: str | None = None
        while True:
            snapshot = self._call(approvals.approvals_changed(etag, status, wait_s))
            if snapshot.approvals is not None:
                etag = snapshot.etag
                yield snapshot.approvals

    def get_approval(self, approval_id: str) -> Approval:
        """One held execution and its decision, if made (operator key)."""
        return self._call(approvals.get_approval(approval_id))

    def approve(self, approval_id: str, comment: str | None = None) -> Approval:
        """Let a held execution run (operator key); the comment is recorded."""
        return self._call(approvals.decide(approval_id, approve=True, comment=comment))

    def deny(self, approval_id: str, comment: str | None = None) -> Approval:
        """Refuse a held execution (operator key): it ends ``denied``, never run."""
        return self._call(approvals.decide(approval_id, approve=False, comment=comment))

    # -- plumbing -----------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection pool. Sessions stay alive on the service."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Client {self.base_url}>"

    def _call(self, call: proto.Call[T]) -> T:
        """Send one call (again, while the retry policy allows) and parse its answer."""
        attempts = self.retry.start(call, self.base_url)
        body, headers = call.body(), call.request_headers()
        while True:
            try:
                resp = self._http.request(
                    call.method,
                    call.url,
                    content=body,
                    params=call.params,
                    headers=headers,
                    timeout=request_timeout(self._timeout, call),
                )
            except httpx.HTTPError as exc:
                delay = attempts.after_error(exc)
            else:
                if call.accepts(resp):
                    return call.parse(resp)
                delay = attempts.after_response(resp)
            time.sleep(delay)

    @contextmanager
    def _stream(
        self, call: proto.Call[Any]
    ) -> Iterator[tuple[Iterator[ServerSentEvent], str | None]]:
        """Send a call asking for server-sent events; yield its events and execution id.

        Only the request is retried; once events flow, a break is the caller's to handle.
        """
        attempts = self.retry.start(call, self.base_url)
        body = call.body()
        headers = {**(call.request_headers() or {}), "Accept": proto.SSE_MEDIA_TYPE}
        while True:
            stack = ExitStack()
            try:
                resp = stack.enter_context(
                    self._http.stream(
                        call.method,
                        call.url,
                        content=body,
                        params=call.params,
                        headers=headers,
                        timeout=request_timeout(self._timeout, call),
                    )
                )
            except httpx.HTTPError as exc:
                delay = attempts.after_error(exc)
            else:
                if resp.is_success:
                    break
                with stack, self._mapped_errors():
                    resp.read()
                delay = attempts.after_response(resp)
            time.sleep(delay)
        with stack, self._mapped_errors():
            yield EventSource(resp).iter_sse(), resp.headers.get(proto.EXECUTION_ID_HEADER)

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        try:
            yield
        except httpx.HTTPError as exc:
            raise connection_failed(self.base_url, exc) from exc


class Session:
    """One interpreter session: a kernel whose state lasts from one ``run`` to the next.

    Obtain it from :meth:`Client.create_session` or :meth:`Client.get_session`. Used as a
    context manager, the session is deleted on exit.

    Attributes:
        id: Session id.
        info: The session record as last seen (status, backend, counts, rebuild report).

    Example:
        >>> with client.create_session() as s:  # doctest: +SKIP
        ...     s.run("import math")
        ...     r = s.run("math.sqrt(16)")
        ...     r.text
        '4.0'
    """

    def __init__(self, client: Client, info: SessionInfo) -> None:
        self.client = client
        self.id = info.id
        self.info = info

    # -- running code -------------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        timeout_s: float | None = None,
        raise_on_error: bool = False,
        idempotency_key: str | None = None,
        on_disconnect: OnDisconnect | None = None,
        if_busy: IfBusy | None = None,
    ) -> RunResult:
        """Run code in the session and wait for it to finish.

        Args:
            code: Python source; the value of a last expression becomes ``result.text``.
            timeout_s: Wall-clock limit. On expiry the kernel is interrupted (and restarted
                if it does not stop); the status is then ``timeout``.
            raise_on_error: Raise :class:`ExecutionError` unless the status is ``ok``.
                Otherwise an exception in the code is data: ``result.error``.
            idempotency_key: Makes a retry safe: the same key (with the same code) returns
                the first run's result instead of running the code again.
            on_disconnect: ``"interrupt"`` stops the run if this client goes away before
                its result (the service's default is to keep running).
            if_busy: ``"reject"`` refuses at once (``ConflictError`` with code
                ``session_running`` and ``details`` naming the running execution and its
                age) instead of queueing behind other code.

        Returns:
            The run's outputs, status and error; artifacts can be fetched from it.

        Example:
            >>> r = session.run("1/0")  # doctest: +SKIP
            >>> r.status, r.error.ename  # doctest: +SKIP
            ('error', 'ZeroDivisionError')
        """
        call = proto.execute(
            self.id,
            code,
            timeout_s,
            idempotency_key,
            on_disconnect=on_disconnect,
            if_busy=if_busy,
        )
        result = self._wrap(self.client._call(call))
        if raise_on_error and not result.ok:
            raise ExecutionError(result.execution)
        return result

    def stream(
        self,
        code: str,
        *,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        on_start: Callable[[str], object] | None = None,
        on_disconnect: OnDisconnect | None = None,
        if_busy: IfBusy | None = None,
    ) -> Iterator[StreamEvent]:
        """Run code and yield events as they happen; the last one is a :class:`DoneEvent`.

        ``on_start`` is called with the execution's id as soon as the service has accepted
        the run (before any event), e.g. to interrupt exactly this run later with
        ``interrupt(execution_id=...)``.

        Example:
            >>> for event in session.stream("for i in range(3): print(i)"):  # doctest: +SKIP
            ...     if isinstance(event, StdoutEvent):
            ...         print(event.text, end="")
            ...     elif isinstance(event, DoneEvent):
            ...         print(event.result.status)
        """
        call = proto.stream_request(
            self.id,
            code,
            timeout_s,
            idempotency_key,
            on_disconnect=on_disconnect,
            if_busy=if_busy,
        )
        execution_id: str | None = None
        last_id = 0
        try:
            with self.client._stream(call) as (events, execution_id):
                if on_start is not None and execution_id is not None:
                    on_start(execution_id)
                for sse in events:
                    last_id = proto.event_id(sse, last_id)
                    event = proto.decode_event(sse)
                    if isinstance(event, Execution):
                        yield DoneEvent(event, self._wrap(event))
                        return
                    if event is not None:
                        yield event
        except ConnectionFailed:
            if execution_id is None:
                raise
        if execution_id is None:
            raise ConnectionFailed(proto.STREAM_ENDED_EARLY)
        # The stream broke but the run goes on server-side: resume its events after the
        # last one seen, so that none is lost or repeated.
        yield from self._resume(execution_id, last_id)

    def _resume(self, execution_id: str, last_id: int) -> Iterator[StreamEvent]:
        """The events of ``execution_id`` after ``last_id``, reconnecting while the
        connection keeps breaking (a few times in a row at most). A service without the
        events endpoint is polled for the final record instead."""
        backoff = proto.Backoff()
        while True:
            try:
                call = proto.events_request(self.id, execution_id, last_id)
                with self.client._stream(call) as (events, _):
                    for sse in events:
                        last_id = proto.event_id(sse, last_id)
                        event = proto.decode_event(sse)
                        if isinstance(event, Execution):
                            yield DoneEvent(event, self._wrap(event))
                            return
                        if event is not None:
                            backoff.reset_failures()
                            yield event
                if backoff.failures_exhausted():
                    raise ConnectionFailed(proto.STREAM_ENDED_EARLY)
            except NotFoundError:
                execution = self._await_execution(execution_id)
                yield DoneEvent(execution, self._wrap(execution))
                return
            except ConnectionFailed:
                if backoff.failures_exhausted():
                    raise
            time.sleep(backoff.next_delay())

    def _await_execution(self, execution_id: str) -> Execution:
        polls = proto.Backoff()
        while True:
            try:
                execution = self.client._call(proto.get_execution(self.id, execution_id))
            except ConnectionFailed:
                if polls.failures_exhausted():
                    raise
            else:
                polls.reset_failures()
                if execution.status in TERMINAL_STATUSES:
                    return execution
            time.sleep(polls.next_delay())

    def execution(self, execution_id: str) -> RunResult:
        """Fetch an execution of this session by id (also while it is still running)."""
        return self._wrap(self.client._call(proto.get_execution(self.id, execution_id)))

    def interrupt(
        self, *, generation: int | None = None, execution_id: str | None = None
    ) -> SessionInfo:
        """Interrupt the code that is running (like Ctrl-C); state is kept.

        With ``generation`` (from ``info.generation``), only if the kernel was not
        restarted since: otherwise :class:`ConflictError` and nothing is interrupted.
        With ``execution_id``, only that execution: interrupted if it runs, cancelled if it
        is still queued (it never runs), nothing if it finished.
        """
        self.info = self.client._call(proto.interrupt(self.id, generation, execution_id))
        return self.info

    def restart(self, *, recover: bool = False, generation: int | None = None) -> SessionInfo:
        """Restart the kernel: a clean state, the same session and notebook.

        Args:
            recover: Rebuild the state afterwards by re-running the session's good cells;
                ``info.rebuild`` says how many ran and which failed.
        """
        call = proto.restart(self.id, recover=recover, generation=generation)
        self.info = self.client._call(call)
        return self.info

    def rebuild(self, notebook: dict[str, Any], *, generation: int | None = None) -> SessionInfo:
        """Rebuild state from a notebook by re-running its good cells in this session.

        The rebuild of ``create_session(from_notebook=...)``, in a session that already
        exists: upload the files the notebook reads first, then rebuild. The cells run on
        top of the current state (the kernel is not restarted). A second rebuild is
        allowed; its report replaces the first.

        Args:
            notebook: An nbformat v4 notebook as a JSON dict (e.g. ``json.load`` of an
                ``.ipynb`` file, or another session's ``notebook()``).
            generation: Rebuild only if the kernel is still this generation.

        Returns:
            The session's info; ``info.rebuild`` reports the cells that ran and failed
            (``info.rebuild.summary()`` says it in words).

        Raises:
            BadRequestError: The notebook is not a valid nbformat v4 notebook (422).
            ConflictError: Other code runs or waits in the session, or a restart or
                rebuild is under way (``session_running``): wait or interrupt, then retry;
                or the session is closed.
            ServerError: The service shut down while the cells re-ran (503
                ``shutting_down``): its message and, once the service is back, the
                session's ``rebuild`` report say which cells re-ran and which did not.

        Example:
            >>> session.upload_file("sales.csv")  # doctest: +SKIP
            >>> info = session.rebuild(json.load(open("analysis.ipynb")))  # doctest: +SKIP
            >>> info.rebuild.failed  # doctest: +SKIP
            []
        """
        self.info = self.client._call(proto.rebuild(self.id, notebook, generation=generation))
        return self.info

    def fork(self, **options: Any) -> Session:
        """A new session rebuilt from this one's notebook, with a copy of its files."""
        return self.client.create_session(from_session=self.id, **options)

    # -- files --------------------------------------------------------------------------

    def upload(self, path: str, data: bytes | str | IO[bytes]) -> None:
        """Write a file into the session's workspace (text is stored as UTF-8).

        ``path`` is relative to the workspace: a path with ``.`` or ``..`` components is
        refused by the service (:class:`BadRequestError`, ``path_not_allowed``), and so is
        one ending in ``/``, which names a directory (``BadRequestError``: give the file's
        name); an empty or absolute one raises :class:`InvalidArgumentError`.

        Example:
            >>> session.upload("data/sales.csv", open("sales.csv", "rb"))  # doctest: +SKIP
            >>> session.run("import pandas as pd; pd.read_csv('data/sales.csv').shape")
        """
        if isinstance(data, str):
            payload = data.encode("utf-8")
        elif isinstance(data, bytes):
            payload = data
        else:
            payload = data.read()
        self.client._call(proto.upload(self.id, path, payload))

    def upload_file(self, local_path: str | os.PathLike[str], path: str | None = None) -> str:
        """Upload a local file; returns its workspace path (its own name unless ``path``)."""
        local = Path(local_path)
        target = path or local.name
        self.client._call(proto.upload(self.id, target, local.read_bytes()))
        return target

    def download(
        self,
        path: str,
        dest: str | os.PathLike[str] | None = None,
        *,
        offset: int = 0,
        length: int | None = None,
    ) -> bytes:
        """Read a workspace file, or ``length`` bytes of it from byte ``offset`` (to its end
        when None); also write what was read to ``dest`` when given.

        ``path`` is relative to the workspace: a path with ``.`` or ``..`` components is
        refused by the service (:class:`BadRequestError`, ``path_not_allowed``), an empty
        or absolute one raises :class:`InvalidArgumentError`. A file
        over the service's download limit is read in parts.
        """
        if offset or length is not None:
            data = (self.client._call(proto.download_range(self.id, path, offset, length)))[0]
        else:
            data = self.client._call(proto.download(self.id, path))
        if dest is not None:
            Path(dest).write_bytes(data)
        return data

    def list_files(
        self, path: str = "", *, limit: int | None = None, after: str | None = None
    ) -> FileList:
        """List a workspace directory (the workspace root by default): all of it, or a
        page of at most ``limit`` entries after ``after`` (the ``next`` of the page
        before; ``next`` is None on the last page).

        Example:
            >>> [e.path for e in session.list_files().entries]  # doctest: +SKIP
            ['data', 'out.txt']
        """
        return self.client._call(proto.list_files(self.id, path, limit=limit, after=after))

    def list(self, path: str = "") -> FileList:
        """The same as :meth:`list_files` (the older name)."""
        return self.list_files(path)

    def delete_file(self, path: str) -> None:
        """Delete a workspace file, or a directory with everything in it."""
        self.client._call(proto.delete_file(self.id, path))

    # -- records ------------------------------------------------------------------------

    def notebook(self) -> dict[str, Any]:
        """The session as an nbformat v4 notebook (JSON dict), plots included."""
        return self.client._call(proto.notebook(self.id))

    def artifact(self, ref: ArtifactRef | str) -> bytes:
        """The bytes of an artifact, given its reference, its URL or its id; see
        :meth:`read_artifact` for which URLs are accepted."""
        url = self._artifact_path(ref)
        return self.client._call(proto.artifact(url))

    def read_artifact(
        self, ref: ArtifactRef | Artifact | str, offset: int = 0, length: int | None = None
    ) -> bytes:
        """``length`` bytes of an artifact from byte ``offset`` (to its end when None): a
        large output that was cut is read piece by piece.

        ``ref`` is a reference, the artifact id in this session, or its URL: the path
        ``/v1/sessions/<session_id>/artifacts/<artifact_id>`` (``ArtifactRef.url``), also
        as an absolute URL on the client's ``base_url``. Any other URL raises
        :class:`InvalidArgumentError` and nothing is sent (the API key would go with it).
        """
        url = self._artifact_path(ref)
        return (self.client._call(proto.artifact_range(url, offset, length)))[0]

    def _artifact_path(self, ref: ArtifactRef | Artifact | str) -> str:
        text = ref if isinstance(ref, str) else ref.url
        return proto.artifact_path(text, self.client.base_url, self.id)

    def refresh(self) -> SessionInfo:
        """Fetch the session's current record (status, counts)."""
        self.info = self.client._call(proto.get_session(self.id))
        return self.info

    def close(self) -> None:
        """Delete the session (stop its kernel); a session already gone is not an error."""
        with suppress(NotFoundError, ConflictError):
            self.client.delete_session(self.id)

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.info.status}>"

    def _wrap(self, execution: Execution) -> RunResult:
        return RunResult(execution, self._artifact)

    def _artifact(self, ref: ArtifactRef) -> Artifact:
        return Artifact(ref, lambda: self.artifact(ref))
