"""The async client: ``AsyncClient`` and its ``AsyncSession`` objects.

Same method names and arguments as the blocking client; methods are coroutines and
``stream`` is an async generator.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import anyio
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
from interpreter.client._results import AsyncArtifact, AsyncRunResult
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

AsyncStreamEvent = ProgressEvent | DoneEvent[AsyncRunResult]


class AsyncClient:
    """Async client for the interpreter service (asyncio or trio, through httpx).

    Args:
        base_url: Service URL. Defaults to ``$INTERP_URL``, else ``http://127.0.0.1:8700``.
        api_key: Bearer key. Defaults to ``$INTERP_API_KEY``; none is sent if unset.
        timeout: Seconds to wait for the service on ordinary calls. Calls that wait for user
            code (``run``, ``stream``, rebuilds) have no read timeout: give ``timeout_s``.
        transport: A custom httpx transport (tests use ``httpx.MockTransport``).
        headers: Extra headers sent with every request.
        max_retries: How many times a failed call is sent again; see :class:`Client`.
            Defaults to ``$INTERP_MAX_RETRIES``, else 2; 0 sends every call once.
        retry_backoff: Seconds before the first retry (default 0.5), doubling up to 8 s.

    Example:
        >>> async with AsyncClient() as client:  # doctest: +SKIP
        ...     async with client.create_session() as session:
        ...         result = await session.run("21 * 2")
        ...         print(result.text)
        42
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict[str, str] | None = None,
        max_retries: int | None = None,
        retry_backoff: float | None = None,
    ) -> None:
        self.base_url, all_headers = client_settings(base_url, api_key, headers)
        self.retry = retry_policy(max_retries, retry_backoff)
        self._timeout = httpx.Timeout(timeout)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=all_headers,
            timeout=self._timeout,
            transport=transport or httpx.AsyncHTTPTransport(socket_options=SOCKET_OPTIONS),
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
    ) -> PendingSession:
        """Start a session; see :meth:`Client.create_session` for the arguments.

        The answer can be awaited (``s = await client.create_session()``) or entered
        directly (``async with client.create_session() as s:``, deleted on exit).
        """
        call = proto.create_session(
            idle_timeout_s=idle_timeout_s,
            limits=limits,
            env=env,
            metadata=metadata,
            from_session=from_session,
            from_notebook=from_notebook,
            idempotency_key=idempotency_key,
        )

        async def start() -> AsyncSession:
            return AsyncSession(self, await self._call(call))

        return PendingSession(start)

    async def get_session(self, session_id: str) -> AsyncSession:
        """Attach to an existing session by id (raises NotFoundError if it is unknown)."""
        return AsyncSession(self, await self._call(proto.get_session(session_id)))

    async def list_sessions(self, state: str = "all") -> list[SessionInfo]:
        """The sessions of this API key, oldest first: ``all`` (closed ones still on
        record too), ``open`` (not closed) or ``closed``."""
        return await self._call(proto.list_sessions(state))

    async def delete_session(self, session_id: str) -> None:
        """Stop a session's kernel; its notebook and artifacts stay readable."""
        await self._call(proto.delete_session(session_id))

    async def info(self) -> ServiceInfo:
        """The service's backend, limits and kernel packages (``GET /v1/info``)."""
        return await self._call(proto.info())

    async def health(self) -> dict[str, Any]:
        """The service's liveness answer."""
        return await self._call(proto.health())

    async def list_approvals(
        self, status: str = "pending", *, wait_s: float | None = None
    ) -> list[Approval]:
        """Held executions (operator key); ``wait_s``: wait that long for one to appear."""
        return await self._call(approvals.list_approvals(status, wait_s))

    async def watch_approvals(
        self, status: str = "pending", *, wait_s: float = 30.0
    ) -> AsyncIterator[list[Approval]]:
        """The held executions now, then the whole list again each time it changes
        (operator key); see :meth:`Client.watch_approvals`."""
        etag: str | None = None
        while True:
            snapshot = await self._call(approvals.approvals_changed(etag, status, wait_s))
            if snapshot.approvals is not None:
                etag = snapshot.etag
                yield snapshot.approvals

    async def get_approval(self, approval_id: str) -> Approval:
        """One held execution and its decision, if made (operator key)."""
        return await self._call(approvals.get_approval(approval_id))

    async def approve(self, approval_id: str, comment: str | None = None) -> Approval:
        """Let a held execution run (operator key); the comment is recorded."""
        return await self._call(approvals.decide(approval_id, approve=True, comment=comment))

    async def deny(self, approval_id: str, comment: str | None = None) -> Approval:
        """Refuse a held execution (operator key): it ends ``denied``, never run."""
        return await self._call(approvals.decide(approval_id, approve=False, comment=comment))

    # -- plumbing -----------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connection pool. Sessions stay alive on the service."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncClient {self.base_url}>"

    async def _call(self, call: proto.Call[T]) -> T:
        """Send one call (again, while the retry policy allows) and parse its answer."""
        attempts = self.retry.start(call, self.base_url)
        body, headers = call.body(), call.request_headers()
        while True:
            try:
                resp = await self._http.request(
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
            await anyio.sleep(delay)

    @asynccontextmanager
    async def _stream(
        self, call: proto.Call[Any]
    ) -> AsyncIterator[tuple[AsyncIterator[ServerSentEvent], str | None]]:
        """Send a call asking for server-sent events; yield its events and execution id.

        Only the request is retried; once events flow, a break is the caller's to handle.
        """
        attempts = self.retry.start(call, self.base_url)
        body = call.body()
        headers = {**(call.request_headers() or {}), "Accept": proto.SSE_MEDIA_TYPE}
        while True:
            stack = AsyncExitStack()
            try:
                resp = await stack.enter_async_context(
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
                async with stack:
                    with self._mapped_errors():
                        await resp.aread()
                delay = attempts.after_response(resp)
            await anyio.sleep(delay)
        async with stack:
            with self._mapped_errors():
                events = EventSource(resp).aiter_sse()
                try:
                    yield events, resp.headers.get(proto.EXECUTION_ID_HEADER)
                finally:
                    await events.aclose()

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        try:
            yield
        except httpx.HTTPError as exc:
            raise connection_failed(self.base_url, exc) from exc


class PendingSession:
    """A session being created: await it, or use it as an async context manager."""

    def __init__(self, start: Callable[[], Coroutine[Any, Any, AsyncSession]]) -> None:
        self._start = start
        self._session: AsyncSession | None = None

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._start()
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()


class AsyncSession:
    """The async twin of :class:`~interpreter.client.Session`; methods are coroutines.

    Used as an async context manager, the session is deleted on exit.

    Example:
        >>> async with client.create_session() as s:  # doctest: +SKIP
        ...     await s.run("x = 2")
        ...     print((await s.run("x ** 10")).text)
        1024
    """

    def __init__(self, client: AsyncClient, info: SessionInfo) -> None:
        self.client = client
        self.id = info.id
        self.info = info

    # -- running code -------------------------------------------------------------------

    async def run(
        self,
        code: str,
        *,
        timeout_s: float | None = None,
        raise_on_error: bool = False,
        idempotency_key: str | None = None,
        on_disconnect: OnDisconnect | None = None,
        if_busy: IfBusy | None = None,
    ) -> AsyncRunResult:
        """Run code and wait for it; see :meth:`Session.run`."""
        call = proto.execute(
            self.id,
            code,
            timeout_s,
            idempotency_key,
            on_disconnect=on_disconnect,
            if_busy=if_busy,
        )
        execution = await self.client._call(call)
        result = self._wrap(execution)
        if raise_on_error and not result.ok:
            raise ExecutionError(execution)
        return result

    async def stream(
        self,
        code: str,
        *,
        timeout_s: float | None = None,
        idempotency_key: str | None = None,
        on_start: Callable[[str], object] | None = None,
        on_disconnect: OnDisconnect | None = None,
        if_busy: IfBusy | None = None,
    ) -> AsyncIterator[AsyncStreamEvent]:
        """Run code and yield events as they happen; the last one is a :class:`DoneEvent`.

        Example:
            >>> async for event in session.stream("print('hi')"):  # doctest: +SKIP
            ...     print(event)
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
            async with self.client._stream(call) as (events, execution_id):
                if on_start is not None and execution_id is not None:
                    on_start(execution_id)
                async for sse in events:
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
        async for resumed in self._resume(execution_id, last_id):
            yield resumed

    async def _resume(self, execution_id: str, last_id: int) -> AsyncIterator[AsyncStreamEvent]:
        """The events of ``execution_id`` after ``last_id``, reconnecting while the
        connection keeps breaking (a few times in a row at most). A service without the
        events endpoint is polled for the final record instead."""
        backoff = proto.Backoff()
        while True:
            try:
                call = proto.events_request(self.id, execution_id, last_id)
                async with self.client._stream(call) as (events, _):
                    async for sse in events:
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
                execution = await self._await_execution(execution_id)
                yield DoneEvent(execution, self._wrap(execution))
                return
            except ConnectionFailed:
                if backoff.failures_exhausted():
                    raise
            await anyio.sleep(backoff.next_delay())

    async def _await_execution(self, execution_id: str) -> Execution:
        polls = proto.Backoff()
        while True:
            try:
                execution = await self.client._call(proto.get_execution(self.id, execution_id))
            except ConnectionFailed:
                if polls.failures_exhausted():
                    raise
            else:
                polls.reset_failures()
                if execution.status in TERMINAL_STATUSES:
                    return execution
            await anyio.sleep(polls.next_delay())

    async def execution(self, execution_id: str) -> AsyncRunResult:
        """Fetch an execution of this session by id (also while it is still running)."""
        return self._wrap(await self.client._call(proto.get_execution(self.id, execution_id)))

    async def interrupt(
        self, *, generation: int | None = None, execution_id: str | None = None
    ) -> SessionInfo:
        """Interrupt the code that is running (like Ctrl-C); state is kept. See
        :meth:`Session.interrupt`."""
        self.info = await self.client._call(proto.interrupt(self.id, generation, execution_id))
        return self.info

    async def restart(self, *, recover: bool = False, generation: int | None = None) -> SessionInfo:
        """Restart the kernel; with ``recover=True`` rebuild state from the good cells."""
        call = proto.restart(self.id, recover=recover, generation=generation)
        self.info = await self.client._call(call)
        return self.info

    async def rebuild(
        self, notebook: dict[str, Any], *, generation: int | None = None
    ) -> SessionInfo:
        """Rebuild state from an nbformat v4 notebook (a JSON dict) by re-running its good
        cells in this session, on top of its current state; upload the files it reads
        first. ``info.rebuild`` reports the cells that ran and failed (see
        :meth:`Session.rebuild <interpreter.client.Session.rebuild>`)."""
        call = proto.rebuild(self.id, notebook, generation=generation)
        self.info = await self.client._call(call)
        return self.info

    async def fork(self, **options: Any) -> AsyncSession:
        """A new session rebuilt from this one's notebook, with a copy of its files."""
        return await self.client.create_session(from_session=self.id, **options)

    # -- files --------------------------------------------------------------------------

    async def upload(self, path: str, data: bytes | str | IO[bytes]) -> None:
        """Write a file into the session's workspace (text is stored as UTF-8).

        ``path`` is relative to the workspace: a path with ``.`` or ``..`` components is
        refused by the service (:class:`BadRequestError`, ``path_not_allowed``), and so is
        one ending in ``/``, which names a directory (``BadRequestError``: give the file's
        name); an empty or absolute one raises :class:`InvalidArgumentError`.
        """
        if isinstance(data, str):
            payload = data.encode("utf-8")
        elif isinstance(data, bytes):
            payload = data
        else:
            payload = await anyio.to_thread.run_sync(data.read)
        await self.client._call(proto.upload(self.id, path, payload))

    async def upload_file(self, local_path: str | os.PathLike[str], path: str | None = None) -> str:
        """Upload a local file; returns its workspace path (its own name unless ``path``)."""
        local = Path(local_path)
        target = path or local.name
        payload = await anyio.to_thread.run_sync(local.read_bytes)
        await self.client._call(proto.upload(self.id, target, payload))
        return target

    async def download(
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
            data = (await self.client._call(proto.download_range(self.id, path, offset, length)))[0]
        else:
            data = await self.client._call(proto.download(self.id, path))
        if dest is not None:
            await anyio.to_thread.run_sync(Path(dest).write_bytes, data)
        return data

    async def list_files(
        self, path: str = "", *, limit: int | None = None, after: str | None = None
    ) -> FileList:
        """List a workspace directory (the workspace root by default): all of it, or a
        page of at most ``limit`` entries after ``after`` (the ``next`` of the page
        before; ``next`` is None on the last page)."""
        return await self.client._call(proto.list_files(self.id, path, limit=limit, after=after))

    async def list(self, path: str = "") -> FileList:
        """The same as :meth:`list_files` (the older name)."""
        return await self.list_files(path)

    async def delete_file(self, path: str) -> None:
        """Delete a workspace file, or a directory with everything in it."""
        await self.client._call(proto.delete_file(self.id, path))

    # -- records ------------------------------------------------------------------------

    async def notebook(self) -> dict[str, Any]:
        """The session as an nbformat v4 notebook (JSON dict), plots included."""
        return await self.client._call(proto.notebook(self.id))

    async def artifact(self, ref: ArtifactRef | str) -> bytes:
        """The bytes of an artifact, given its reference, its URL or its id; see
        :meth:`read_artifact` for which URLs are accepted."""
        url = self._artifact_path(ref)
        return await self.client._call(proto.artifact(url))

    async def read_artifact(
        self, ref: ArtifactRef | AsyncArtifact | str, offset: int = 0, length: int | None = None
    ) -> bytes:
        """``length`` bytes of an artifact from byte ``offset`` (to its end when None): a
        large output that was cut is read piece by piece.

        ``ref`` is a reference, the artifact id in this session, or its URL: the path
        ``/v1/sessions/<session_id>/artifacts/<artifact_id>`` (``ArtifactRef.url``), also
        as an absolute URL on the client's ``base_url``. Any other URL raises
        :class:`InvalidArgumentError` and nothing is sent (the API key would go with it).
        """
        url = self._artifact_path(ref)
        return (await self.client._call(proto.artifact_range(url, offset, length)))[0]

    def _artifact_path(self, ref: ArtifactRef | AsyncArtifact | str) -> str:
        text = ref if isinstance(ref, str) else ref.url
        return proto.artifact_path(text, self.client.base_url, self.id)

    async def refresh(self) -> SessionInfo:
        """Fetch the session's current record (status, counts)."""
        self.info = await self.client._call(proto.get_session(self.id))
        return self.info

    async def close(self) -> None:
        """Delete the session (stop its kernel); a session already gone is not an error."""
        with suppress(NotFoundError, ConflictError):
            await self.client.delete_session(self.id)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncSession {self.id} {self.info.status}>"

    def _wrap(self, execution: Execution) -> AsyncRunResult:
        return AsyncRunResult(execution, self._artifact)

    def _artifact(self, ref: ArtifactRef) -> AsyncArtifact:
        return AsyncArtifact(ref, lambda: self.artifact(ref))
