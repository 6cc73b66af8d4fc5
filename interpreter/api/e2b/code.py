"""The code endpoints of E2B's code interpreter: ``/execute`` (NDJSON) and ``/contexts``.

An execution is submitted to the broker like any ``/v1`` execution (same queue, limits,
timeout, output budget, notebook and record), with ``origin: e2b`` in its cell metadata.
Unlike ``/v1``, and like E2B, a client that goes away while its code runs interrupts that
run (and only it), so the sandbox is free for the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tornado.http1connection import HTTP1Connection
from tornado.iostream import StreamClosedError

from interpreter.api.e2b import envs, results
from interpreter.api.e2b.base import E2BHandler
from interpreter.api.e2b.sandboxes import E2BSandbox
from interpreter.api.json_body import describe_validation
from interpreter.errors import BadRequest, InterpreterError, ValidationFailed
from interpreter.handle import Done, ErrorRaised, Event, ExecutionHandle, OutputAdded, StreamText
from interpreter.models import ErrorInfo, ExecuteRequest, Execution
from interpreter.policy.explain import policy_text

#: Longest silence on an execution stream; E2B's SDK expects a line at least every 5 s.
KEEPALIVE_S = 4.0
LANGUAGES = ("python",)
#: Where E2B's code contexts start; ours start in the session's workspace (same files).
DEFAULT_CWD = "/home/user"
ORIGIN = {"origin": "e2b"}


class ExecuteBody(BaseModel):
    """Body of ``POST /execute``, as E2B's SDK sends it (unknown fields are ignored)."""

    model_config = ConfigDict(extra="ignore")
    code: str
    context_id: str | None = Field(None, max_length=100)
    language: str | None = Field(None, max_length=100)
    env_vars: dict[str, str] | None = None


class ContextBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    language: str | None = Field(None, max_length=100)
    cwd: str | None = Field(None, max_length=4096)


def check_language(language: str | None) -> None:
    """Python only (for now): anything else is a 400 naming what is supported."""
    if language is None or language.strip().lower() in LANGUAGES:
        return
    raise BadRequest(
        f"Language {language[:100]!r} is not supported: this service runs Python only "
        "(pass language='python' or none)."
    )


def context_json(context_id: str, cwd: str | None = None) -> dict[str, Any]:
    return {"id": context_id, "language": "python", "cwd": cwd or DEFAULT_CWD}


class ExecuteHandler(E2BHandler):
    _handle: ExecutionHandle | None = None
    _session_id = ""
    _tasks: set[asyncio.Task[Any]]
    #: Characters of each stream sent live.
    _streamed: dict[str, int]
    _sandbox: E2BSandbox

    async def post(self) -> None:
        self._streamed = {"stdout": 0, "stderr": 0}
        body = self.parse(ExecuteBody)
        try:
            code = ExecuteRequest(code=body.code).code
        except ValidationError as exc:
            raise ValidationFailed(describe_validation(exc)) from exc
        check_language(body.language)
        env = envs.checked(body.env_vars) if body.env_vars else {}
        sandbox = self._sandbox = await self.sandbox()
        self._session_id = sandbox.session_of(body.context_id)
        await self._touch_sandbox()
        if env:
            await self._submit(envs.setup_code(env), role="env_vars")
        handle = await self._submit(code, stream=True)
        self._handle = handle
        if env:
            await self._submit(envs.restore_code(), role="env_vars")
        assert handle.stream is not None
        await self._stream(handle, handle.stream)

    async def _submit(self, code: str, *, stream: bool = False, role: str = "") -> ExecutionHandle:
        meta = {**ORIGIN, "e2b_role": role} if role else dict(ORIGIN)
        return await self.broker.execute(
            self.owner,
            self._session_id,
            code,
            None,
            stream=stream,
            request_id=self.request_id,
            extra_meta=meta,
        )

    async def _stream(self, handle: ExecutionHandle, queue: asyncio.Queue[Event | None]) -> None:
        self.set_header("Content-Type", "application/x-ndjson; charset=utf-8")
        self.set_header("X-Accel-Buffering", "no")
        self.set_header("X-Execution-Id", handle.execution.id)
        error_sent = False
        try:
            replaced, self._sandbox.replaced = self._sandbox.replaced, None
            if replaced is not None:
                self.write(results.line(results.stream_item("stderr", replaced)))
            await self.flush()
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_S):
                        event = await queue.get()
                except TimeoutError:
                    self.write(results.line(results.KEEPALIVE))
                    await self.flush()
                    await self._touch_sandbox()
                    continue
                if event is None:
                    break
                if isinstance(event, Done):
                    await self._touch_sandbox()
                if isinstance(event, Done) and self._sandbox_gone(event.execution):
                    await self.flush()
                    self._cut()
                    return
                for item in await self._items(event, error_sent):
                    error_sent = error_sent or item["type"] == "error"
                    self.write(results.line(item))
                if queue.empty():
                    await self.flush()
        except StreamClosedError:
            self._interrupt()
            return
        with contextlib.suppress(StreamClosedError):
            self.finish()

    async def _touch_sandbox(self) -> None:
        """Code running in a context of the sandbox is the sandbox's activity too: its
        idle timeout is its default context's session's, which the run does not touch
        (the sandbox, and the context with it, ended mid-work)."""
        if self._session_id == self._sandbox.id:
            return  # the run touches that session itself
        with contextlib.suppress(InterpreterError):
            (await self.broker.require_live(self.owner, self._sandbox.id)).touch()

    def _sandbox_gone(self, ex: Execution) -> bool:
        """The run did not complete, and its sandbox is no longer running: it was stopped
        by the sandbox's end (killed, timed out, its session closed), running or queued."""
        return ex.status not in ("ok", "error") and not self.sandboxes.running(self._sandbox)

    def _cut(self) -> None:
        """Close the connection with the body unfinished (no ``end_of_execution``, no last
        chunk), as E2B's does when its sandbox goes away mid-run: for a sandbox that is not
        running, both SDKs then raise "The sandbox was killed while the request was in
        progress" (``TimeoutException``; ``TimeoutError`` in JS)."""
        self.error_type = "sandbox_not_running"  # the access line says why it was cut
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.close()

    async def _items(self, event: Event, error_sent: bool) -> list[dict[str, Any]]:
        if isinstance(event, StreamText):
            self._streamed[event.name] += len(event.text)
            return [results.stream_item(event.name, event.text)]
        if isinstance(event, OutputAdded):
            return [await results.result_item(event.output, self._read_artifact)]
        if isinstance(event, ErrorRaised):
            if event.error.ename == "KeyboardInterrupt":
                # Said with the run's end, as what stopped it: a timeout's interrupt is the
                # service's ExecutionTimeout (its limit named), not a bare KeyboardInterrupt.
                return []
            return [results.error_item(event.error)]
        if isinstance(event, Done):
            ex = event.execution
            items = self._unstreamed(ex)
            if ex.error is not None and not error_sent:
                items.append(results.error_item(ex.error))
            elif ex.status == "denied" and ex.policy is not None:
                # E2B has no such status: the policy's answer arrives as the run's error.
                why = ErrorInfo(ename="PolicyDenied", evalue=policy_text(ex))
                items.append(results.error_item(why))
            count = results.count_item(ex)
            if count is not None:
                items.append(count)
            return [*items, results.END]
        return []  # a cleared output area: E2B's stream has no such item

    def _unstreamed(self, ex: Execution) -> list[dict[str, Any]]:
        """The end of what the run printed, when text stopped streaming at the broker's
        in-memory limit (it went on to disk): each stream's mark naming its artifact and
        its tail, and the limit's notice, as ``/v1``'s record ends (else E2B's client would
        see the output stop with no word of why)."""
        handle = self._handle
        notice = handle.recorder.streams.notice if handle and handle.recorder else ""
        stderr = ex.stderr.removesuffix(notice) if notice else ex.stderr
        items = []
        for name, final in (("stdout", ex.stdout), ("stderr", stderr)):
            rest = results.unstreamed(final, self._streamed[name])
            if name == "stderr":
                rest += notice
            if rest:
                items.append(results.stream_item(name, rest))
        return items

    async def _read_artifact(self, artifact_id: str) -> bytes:
        path, _, _ = await self.broker.artifact(self.owner, self._session_id, artifact_id)
        return await asyncio.to_thread(path.read_bytes)

    def on_connection_close(self) -> None:
        """The client went away: interrupt its run (E2B's behaviour; /v1 keeps running)."""
        super().on_connection_close()
        self._interrupt()

    def _interrupt(self) -> None:
        handle = self._handle
        if handle is None or handle.finished.is_set():
            return
        if not hasattr(self, "_tasks"):
            self._tasks = set()
        task = asyncio.ensure_future(
            self.broker.interrupt(self.owner, self._session_id, execution_id=handle.execution.id)
        )
        self._tasks.add(task)
        task.add_done_callback(self._interrupted)

    def _interrupted(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            # The session may have closed meanwhile: then there is nothing to interrupt.
            task.exception()


class ContextsHandler(E2BHandler):
    async def post(self) -> None:
        body = self.parse(ContextBody, optional=True)
        check_language(body.language)
        sandbox = await self.sandbox()
        context_id = await self.sandboxes.add_context(sandbox)
        if body.cwd:
            sandbox.cwds[context_id] = body.cwd
        self.send_json(context_json(context_id, body.cwd))

    async def get(self) -> None:
        sandbox = await self.sandbox()
        ids = [sandbox.id, *sandbox.contexts]
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps([context_json(i, sandbox.cwds.get(i)) for i in ids]))


class ContextHandler(E2BHandler):
    async def delete(self, context_id: str) -> None:
        sandbox = await self.sandbox()
        await self.sandboxes.remove_context(sandbox, context_id)
        self.set_status(204)
        self.finish()


class ContextRestartHandler(E2BHandler):
    async def post(self, context_id: str) -> None:
        self.raw_body()
        sandbox = await self.sandbox()
        session_id = sandbox.session_of(context_id)
        await self.broker.restart(self.owner, session_id, recover=False)
        self.set_status(204)
        self.finish()
