"""Executors: run a model's tool call against the service, with a sync or async client."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from interpreter.client import (
    APIError,
    AsyncClient,
    Client,
    ClientError,
    InvalidArgumentError,
)
from interpreter.models import Execution
from interpreter.tools.calls import ToolCall, ToolCallError, parse_tool_call
from interpreter.tools.logic import RunStep, Step, _ToolLogic
from interpreter.tools.results import ToolResult, error_result

C = TypeVar("C", Client, AsyncClient)


class _ExecutorBase(Generic[C]):
    """What both executors share: the client, the limits and the current session."""

    def __init__(
        self,
        client: C,
        *,
        session_id: str | None = None,
        max_chars: int = 20_000,
        max_images: int = 4,
        own_sessions_only: bool = False,
        keeps_current: bool = True,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.client: C = client
        self._logic = _ToolLogic(
            max_chars=max_chars,
            max_images=max_images,
            own_sessions_only=own_sessions_only,
            base_url=client.base_url,
            keeps_current=keeps_current,
            idle_timeout_s=idle_timeout_s,
        )
        self._logic.session_id = session_id

    @property
    def session_id(self) -> str | None:
        """The current session, if one exists yet."""
        return self._logic.session_id

    @property
    def created(self) -> list[str]:
        """The sessions this executor created, oldest first."""
        return list(self._logic.created)

    def adopt(self, session_ids: list[str]) -> None:
        """Count these sessions as created here (``close`` deletes them)."""
        self._logic.created.extend(s for s in session_ids if s not in self._logic.created)


class ToolExecutor(_ExecutorBase[Client]):
    """Runs tool calls against the service with the blocking client.

    It keeps a *current session*: ``run_code`` and friends use it when the model passes
    no ``session_id``; it is created on first use, and replaced by ``create_session``.

    Args:
        client: The SDK client to use.
        session_id: Start with this session as the current one.
        max_chars: Characters kept of each long text in a result.
        max_images: Images attached to one ``run_code`` result at most.
        own_sessions_only: Accept only session ids this executor created (for a server
            that shares one API key among several clients).
        keeps_current: Whether a later call uses the current session (False when each
            call stands alone, as stateless MCP requests do: results then promise none).
        idle_timeout_s: The sessions this executor creates close after this many seconds
            without activity (default: the service's idle timeout).

    Example:
        >>> executor = ToolExecutor(Client())  # doctest: +SKIP
        >>> result = executor.execute(tool_call_from_model)  # doctest: +SKIP
        >>> messages.append({"role": "user", "content": [result.to_anthropic()]})
    """

    def execute(self, call: dict[str, Any] | ToolCall) -> ToolResult:
        """Run one tool call (as the model emitted it) and return its result.

        Never raises for a bad call, an argument the SDK refuses (an empty path, an
        artifact URL that is not this service's) or a refusal of the service: those come
        back as a result with ``is_error=True`` that the model can read. Connection
        failures raise.
        """
        try:
            parsed = parse_tool_call(call)
        except ToolCallError as exc:
            return error_result(str(exc))
        steps = self._logic.steps(parsed)
        try:
            request = next(steps)
            while True:
                try:
                    value = self._send(request)
                except ClientError as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(value)
        except StopIteration as stop:
            result: ToolResult = stop.value
        except APIError as exc:
            result = error_result(api_error_text(exc))
        except (ToolCallError, InvalidArgumentError) as exc:
            result = error_result(str(exc))
        result.call_id = parsed.id
        return result

    def _send(self, request: Step) -> Any:
        return self.client._call(request.call() if isinstance(request, RunStep) else request)

    def close(self) -> None:
        """Delete the sessions this executor created."""
        for sid in self._logic.created:
            try:
                self.client.delete_session(sid)
            except APIError:
                continue
        self._logic.created.clear()
        self._logic.session_id = None


#: What a model is told to do when the service's session cap is reached.
TOO_MANY_SESSIONS_HINT = (
    " Close one you no longer need with close_session (list_sessions names them)."
)


#: Words of the service's errors, and the tools' words for them (a model lists its sessions
#: with ``list_sessions``, not an HTTP route; it reads a file with ``read_file``).
_IN_TOOL_WORDS = (
    ("with GET /v1/sessions", "with the list_sessions tool"),
    (
        "read it as a file, or list its directory.",
        "read it with read_file, or list its directory with list_files.",
    ),
    ("list its files instead.", "list its files with list_files instead."),
)


def api_error_text(exc: APIError) -> str:
    """The service's error as a tool says it: its message, in the tools' words where the
    message says what to do (:data:`_IN_TOOL_WORDS`)."""
    message = exc.message
    for said, meant in _IN_TOOL_WORDS:
        message = message.replace(said, meant)
    if exc.code == "too_many_sessions":
        message += TOO_MANY_SESSIONS_HINT
    return f"{message} ({exc.code})"


class AsyncToolExecutor(_ExecutorBase[AsyncClient]):
    """The async twin of :class:`ToolExecutor` (used by the MCP server)."""

    async def execute(self, call: dict[str, Any] | ToolCall) -> ToolResult:
        """Run one tool call; see :meth:`ToolExecutor.execute`."""
        try:
            parsed = parse_tool_call(call)
        except ToolCallError as exc:
            return error_result(str(exc))
        steps = self._logic.steps(parsed)
        try:
            request = next(steps)
            while True:
                try:
                    value = await self._send(request)
                except ClientError as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(value)
        except StopIteration as stop:
            result: ToolResult = stop.value
        except APIError as exc:
            result = error_result(api_error_text(exc))
        except (ToolCallError, InvalidArgumentError) as exc:
            result = error_result(str(exc))
        result.call_id = parsed.id
        return result

    async def _send(self, request: Step) -> Any:
        if isinstance(request, RunStep):
            return await self.run(request)
        return await self.client._call(request)

    async def run(self, step: RunStep) -> Execution:
        """Run code and wait for its execution; subclasses may stream it instead."""
        return await self.client._call(step.call())

    async def close(self) -> None:
        """Delete the sessions this executor created."""
        for sid in self._logic.created:
            try:
                await self.client.delete_session(sid)
            except APIError:
                continue
        self._logic.created.clear()
        self._logic.session_id = None
