"""Tools for function-calling models: definitions, renderers, and an executor.

The same eight tools back ``interp tools``, the MCP server and any agent loop built on the
SDK. Definitions are written for a model to read. An executor takes a tool call exactly as
a model emits it (OpenAI or Anthropic shape), runs it against the service and returns the
result as text and images.

Example:
    >>> from interpreter.client import Client
    >>> from interpreter.tools import ToolExecutor, tool_definitions
    >>> tools = tool_definitions("anthropic")  # pass to the model
    >>> executor = ToolExecutor(Client())  # doctest: +SKIP
    >>> call = {"type": "tool_use", "id": "t1", "name": "run_code", "input": {"code": "1+1"}}
    >>> executor.execute(call).text  # doctest: +SKIP
    'status: ok (cell 1, 4 ms)\\n\\nresult:\\n2'
"""

from __future__ import annotations

import base64
import json
import mimetypes
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from interpreter.client import _protocol as proto
from interpreter.client._async import AsyncClient
from interpreter.client._errors import APIError, ClientError, ConflictError, NotFoundError
from interpreter.client._render import bundle_text, clip, render_execution, strip_ansi
from interpreter.client._sync import Client
from interpreter.models import Execution, FileList
from interpreter.models import Session as SessionInfo

C = TypeVar("C", Client, AsyncClient)

ToolFormat = Literal["openai", "anthropic"]

#: Image types that model APIs accept as image input.
MODEL_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what a model should know about it, and its JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


_SESSION_ID = {
    "type": "string",
    "description": (
        "Session to use. Omit it to use the current session (created automatically on "
        "first use, or the last one made by create_session)."
    ),
}

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "run_code",
        "Run Python code in a persistent Jupyter (IPython) kernel and get back what it "
        "printed, the value of its last expression, displayed tables and plots, and any error "
        "with its traceback.\n\n"
        "State persists between calls: variables, imports and loaded data stay defined, so "
        "build on earlier results instead of recomputing them, and split work into steps. "
        "The working directory is the session workspace: files added with upload_file are "
        "there, and files the code writes there can be read back with read_file.\n"
        "A pandas DataFrame or Series left as the last expression comes back as a table plus "
        "its shape, column dtypes and null counts; a matplotlib figure (call plt.show()) "
        "comes back as an image with a text description of what was drawn. Printing a huge "
        "object wastes context: show df.head() or summaries instead.\n"
        "If the code raises, the error and traceback are returned and the state from before "
        "the failing line is kept: read the error, fix the code and run only the corrected "
        "part again. Code running past timeout_s is interrupted; if the kernel has to be "
        "restarted the result says that all state was lost. The kernel may have no network "
        "access: do not rely on downloading data or installing packages. IPython magics "
        "(%timeit) and shell escapes (!ls) work.",
        {
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "Python source to run, as in a notebook cell.",
                },
                "session_id": _SESSION_ID,
                "timeout_s": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Wall-clock limit in seconds (the service default if "
                    "omitted). Raise it for long computations.",
                },
            },
            "required": ["code"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "create_session",
        "Start a new, empty Python session (its own kernel and workspace) and make it the "
        "current one for the other tools. Use it to start over with a clean state, or with "
        "from_session to fork: the new session re-runs the source session's successful cells "
        "and copies its files, so you can try something risky without touching the original. "
        "Returns the new session id.",
        {
            "type": "object",
            "properties": {
                "from_session": {
                    "type": "string",
                    "description": "Optional id of a session to fork (state rebuilt by "
                    "re-running its successful cells, files copied).",
                },
            },
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "list_sessions",
        "List your sessions with their id, status (idle, busy, dead, closed), number of "
        "executions and creation time, and which one is current.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ),
    ToolSpec(
        "upload_file",
        "Write a file into the session workspace so code can open it by its relative path "
        "(e.g. pd.read_csv('data/sales.csv')). Parent directories are created. Text is "
        "written as UTF-8; for binary files pass base64 and set encoding to 'base64'. An "
        "existing file is replaced.",
        {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Path inside the workspace, e.g. 'data/input.csv'.",
                },
                "content": {"type": "string", "description": "The file content."},
                "encoding": {
                    "type": "string",
                    "enum": ["utf-8", "base64"],
                    "description": "How content is encoded; 'utf-8' (default) for text.",
                },
                "session_id": _SESSION_ID,
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "read_file",
        "Read a file from the session workspace, such as a CSV or report the code wrote. "
        "Text files are returned as text (long files are cut in the middle; use max_chars "
        "to see more); PNG, JPEG, GIF and WebP images are returned as images. For large or "
        "binary data, load and summarise it with run_code instead.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path inside the workspace."},
                "max_chars": {
                    "type": "integer",
                    "minimum": 100,
                    "description": "Characters of text to return at most (default 20000).",
                },
                "session_id": _SESSION_ID,
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "list_files",
        "List a directory of the session workspace: each entry's type, size in bytes, "
        "modification time and path.",
        {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Directory inside the workspace; the workspace root if omitted.",
                },
                "session_id": _SESSION_ID,
            },
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "restart",
        "Restart the session's kernel: stops anything running and clears all variables and "
        "imports (workspace files stay). Use it when the kernel is stuck, out of memory or in "
        "a bad state. With recover=true the state is rebuilt afterwards by re-running the "
        "session's successful cells, and the result says how many ran and which failed.",
        {
            "type": "object",
            "properties": {
                "recover": {
                    "type": "boolean",
                    "description": "Rebuild the state by re-running the successful cells.",
                },
                "session_id": _SESSION_ID,
            },
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "get_notebook",
        "Get the session's history as a notebook: every cell that ran, in order, with its "
        "status and outputs. 'text' (default) is a readable transcript for reviewing what "
        "was done; 'ipynb' is the nbformat v4 JSON (images left out) to hand to a person or "
        "save.",
        {
            "type": "object",
            "properties": {
                "format": {
                    "type": "string",
                    "enum": ["text", "ipynb"],
                    "description": "'text' (default) or 'ipynb'.",
                },
                "session_id": _SESSION_ID,
            },
            "additionalProperties": False,
        },
    ),
)

TOOL_NAMES: tuple[str, ...] = tuple(t.name for t in TOOLS)
_BY_NAME = {t.name: t for t in TOOLS}


def tool_definitions(
    format: ToolFormat = "openai", names: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Tool definitions ready to pass to a model API.

    Args:
        format: ``openai`` (Chat Completions ``tools`` entries) or ``anthropic`` (Messages
            API ``tools`` entries).
        names: Only these tools (default: all eight).

    Returns:
        A list of JSON-serialisable dicts.
    """
    chosen = [_BY_NAME[n] for n in names] if names is not None else list(TOOLS)
    if format == "openai":
        return [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in chosen
        ]
    if format == "anthropic":
        return [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in chosen
        ]
    raise ValueError(f"unknown tool format {format!r}; use 'openai' or 'anthropic'")


# ------------------------------------------------------------------------ tool calls


@dataclass(frozen=True)
class ToolCall:
    """A tool call in neutral form: id (if the model gave one), name and arguments."""

    name: str
    arguments: dict[str, Any]
    id: str | None = None


class ToolCallError(ValueError):
    """A tool call that cannot be understood: unknown tool or invalid arguments."""


def parse_tool_call(call: dict[str, Any] | ToolCall) -> ToolCall:
    """Read a tool call in any of the shapes models emit.

    Accepted: OpenAI Chat Completions (``{"id", "type": "function", "function": {"name",
    "arguments": "<json>"}}``), OpenAI Responses (``{"type": "function_call", "call_id",
    "name", "arguments"}``), Anthropic (``{"type": "tool_use", "id", "name", "input"}``),
    and plain ``{"name", "arguments"}``.
    """
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, dict):
        raise ToolCallError("a tool call must be a JSON object")
    function = call.get("function")
    body: dict[str, Any] = function if isinstance(function, dict) else call
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ToolCallError("the tool call has no name")
    raw = body.get("arguments", body.get("input", call.get("input", {})))
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise ToolCallError(f"arguments of {name} are not valid JSON: {exc}") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ToolCallError(f"arguments of {name} must be a JSON object")
    call_id = call.get("id") or call.get("call_id") or body.get("id")
    return ToolCall(name=name, arguments=raw, id=str(call_id) if call_id else None)


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "object": (dict,),
}


def validate_arguments(spec: ToolSpec, args: dict[str, Any]) -> None:
    """Check arguments against the tool's (flat) schema; raise ToolCallError if wrong."""
    props: dict[str, Any] = spec.parameters.get("properties", {})
    for key in spec.parameters.get("required", []):
        if key not in args:
            raise ToolCallError(f"{spec.name}: missing required argument {key!r}")
    for key, value in args.items():
        if key not in props:
            allowed = ", ".join(props) or "none"
            raise ToolCallError(f"{spec.name}: unknown argument {key!r} (allowed: {allowed})")
        schema = props[key]
        kinds = _JSON_TYPES[schema["type"]]
        if not isinstance(value, kinds) or (
            schema["type"] != "boolean" and isinstance(value, bool)
        ):
            raise ToolCallError(f"{spec.name}: {key!r} must be a {schema['type']}")
        if "enum" in schema and value not in schema["enum"]:
            raise ToolCallError(f"{spec.name}: {key!r} must be one of {schema['enum']}")
        if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
            raise ToolCallError(f"{spec.name}: {key!r} must be > {schema['exclusiveMinimum']}")
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolCallError(f"{spec.name}: {key!r} must be >= {schema['minimum']}")


# ---------------------------------------------------------------------- tool results


@dataclass(frozen=True)
class TextPart:
    """A block of text in a tool result."""

    text: str


@dataclass(frozen=True)
class ImagePart:
    """An image in a tool result."""

    mime: str
    data: bytes

    @property
    def base64(self) -> str:
        """The image as base64 text, as model APIs want it."""
        return base64.b64encode(self.data).decode("ascii")


@dataclass
class ToolResult:
    """What a tool returns to the model: text and image parts in order, and an error flag.

    ``is_error`` marks a call that failed as a call (bad arguments, the service refused).
    Code that raised is a *successful* call whose text shows the traceback, so the model
    reads it and fixes the code.
    """

    parts: list[TextPart | ImagePart] = field(default_factory=list)
    is_error: bool = False
    call_id: str | None = None

    @property
    def text(self) -> str:
        """All text parts joined by blank lines."""
        return "\n\n".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def images(self) -> list[ImagePart]:
        """The image parts."""
        return [p for p in self.parts if isinstance(p, ImagePart)]

    def to_anthropic(self) -> dict[str, Any]:
        """A ``tool_result`` content block for the Anthropic Messages API."""
        content: list[dict[str, Any]] = []
        for part in self.parts:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            else:
                content.append(
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": part.mime, "data": part.base64},
                    }
                )
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": self.call_id,
            "content": content,
        }
        if self.is_error:
            block["is_error"] = True
        return block

    def to_openai(self) -> list[dict[str, Any]]:
        """Chat Completions messages: the ``tool`` message, then a ``user`` message that
        carries the images (tool messages may only hold text)."""
        messages: list[dict[str, Any]] = [
            {"role": "tool", "tool_call_id": self.call_id, "content": self.text}
        ]
        if self.images:
            parts: list[dict[str, Any]] = [
                {"type": "text", "text": f"Images returned by tool call {self.call_id}:"}
            ]
            parts.extend(
                {"type": "image_url", "image_url": {"url": f"data:{img.mime};base64,{img.base64}"}}
                for img in self.images
            )
            messages.append({"role": "user", "content": parts})
        return messages


def _error_result(message: str) -> ToolResult:
    return ToolResult([TextPart(f"Error: {message}")], is_error=True)


# ------------------------------------------------------------------------- executors

# Each tool is a generator that yields API calls and receives their results, so the sync and
# async executors share one implementation and differ only in how they send a call.
_Steps = Generator[proto.Call[Any], Any, ToolResult]


class _ToolLogic:
    """What each tool does, written once as a sequence of API calls."""

    def __init__(self, *, max_chars: int, max_images: int) -> None:
        self.max_chars = max_chars
        self.max_images = max_images
        self.session_id: str | None = None
        self.created: list[str] = []

    def steps(self, call: ToolCall) -> _Steps:
        spec = _BY_NAME.get(call.name)
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

    def _session(self, session_id: str | None) -> Generator[proto.Call[Any], Any, str]:
        """The session to act on: the given one, the current one, or a new one."""
        if session_id:
            return session_id
        if self.session_id is None:
            info: SessionInfo = yield proto.create_session()
            self.session_id = info.id
            self.created.append(info.id)
        return self.session_id

    def _tool_create_session(self, from_session: str | None = None) -> _Steps:
        info: SessionInfo = yield proto.create_session(from_session=from_session)
        self.session_id = info.id
        self.created.append(info.id)
        text = f"Created session {info.id}; it is now the current session."
        if info.rebuild is not None:
            rb = info.rebuild
            text += f" Rebuilt from {rb.source}: {rb.cells_ran} of {rb.cells_total} cells ran"
            text += f", cells {rb.failed} failed." if rb.failed else ", none failed."
        return ToolResult([TextPart(text)])

    def _tool_list_sessions(self) -> _Steps:
        sessions: list[SessionInfo] = yield proto.list_sessions()
        if not sessions:
            return ToolResult([TextPart("No sessions yet; run_code creates one.")])
        lines = []
        for s in sessions:
            mark = "  (current)" if s.id == self.session_id else ""
            lines.append(
                f"{s.id}  {s.status}  {s.execution_count} executions  "
                f"created {s.created_at.isoformat(timespec='seconds')}{mark}"
            )
        return ToolResult([TextPart("\n".join(lines))])

    def _tool_restart(self, recover: bool = False, session_id: str | None = None) -> _Steps:
        sid = yield from self._session(session_id)
        info: SessionInfo = yield proto.restart(sid, recover=recover)
        text = f"Session {sid} restarted; variables and imports were cleared."
        if recover and info.rebuild is not None:
            rb = info.rebuild
            text = (
                f"Session {sid} restarted and rebuilt: {rb.cells_ran} of "
                f"{rb.cells_total} cells re-ran"
            )
            text += f"; cells {rb.failed} failed." if rb.failed else "; none failed."
        return ToolResult([TextPart(text)])

    # -- code -----------------------------------------------------------------------------

    def _tool_run_code(
        self, code: str, session_id: str | None = None, timeout_s: float | None = None
    ) -> _Steps:
        sid = yield from self._session(session_id)
        note = ""
        try:
            execution: Execution = yield proto.execute(sid, code, timeout_s)
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
            execution = yield proto.execute(sid, code, timeout_s)
        parts: list[TextPart | ImagePart] = [TextPart(note)] if note else []
        parts.extend(TextPart(block) for block in render_execution(execution, limit=self.max_chars))
        shown = 0
        for output in execution.outputs:
            for ref in output.artifacts:
                if ref.mime in MODEL_IMAGE_TYPES and shown < self.max_images:
                    data: bytes = yield proto.artifact(ref.url)
                    parts.append(ImagePart(ref.mime, data))
                    shown += 1
        return ToolResult(parts)

    # -- files ----------------------------------------------------------------------------

    def _tool_upload_file(
        self, path: str, content: str, encoding: str = "utf-8", session_id: str | None = None
    ) -> _Steps:
        if encoding == "base64":
            try:
                data = base64.b64decode(content, validate=True)
            except ValueError as exc:
                return _error_result(f"content is not valid base64: {exc}")
        else:
            data = content.encode("utf-8")
        sid = yield from self._session(session_id)
        yield proto.upload(sid, path, data)
        return ToolResult([TextPart(f"Wrote {len(data)} bytes to {path}.")])

    def _tool_read_file(
        self, path: str, max_chars: int = 20_000, session_id: str | None = None
    ) -> _Steps:
        sid = yield from self._session(session_id)
        data: bytes = yield proto.download(sid, path)
        mime = mimetypes.guess_type(path)[0] or ""
        if mime in MODEL_IMAGE_TYPES:
            return ToolResult(
                [TextPart(f"{path}: {mime}, {len(data)} bytes"), ImagePart(mime, data)]
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ToolResult(
                [
                    TextPart(
                        f"{path} is a binary file of {len(data)} bytes; inspect it with run_code."
                    )
                ]
            )
        return ToolResult([TextPart(clip(text, max_chars) if text else f"{path} is empty.")])

    def _tool_list_files(self, path: str = "", session_id: str | None = None) -> _Steps:
        sid = yield from self._session(session_id)
        listing: FileList = yield proto.list_files(sid, path)
        where = listing.path or "workspace root"
        if not listing.entries:
            return ToolResult([TextPart(f"{where}: empty")])
        lines = [f"{where}:"]
        for e in listing.entries:
            size = "" if e.type == "directory" else f"{e.size} bytes"
            when = e.modified_at.isoformat(timespec="seconds")
            lines.append(f"{e.type:9}  {size:>14}  {when}  {e.path}")
        return ToolResult([TextPart("\n".join(lines))])

    # -- notebook ---------------------------------------------------------------------------

    def _tool_get_notebook(self, format: str = "text", session_id: str | None = None) -> _Steps:
        sid = yield from self._session(session_id)
        nb: dict[str, Any] = yield proto.notebook(sid)
        if format == "ipynb":
            return ToolResult([TextPart(json.dumps(_without_images(nb), indent=1))])
        return ToolResult([TextPart(clip(notebook_transcript(nb), self.max_chars * 2))])


def _fail(message: str) -> _Steps:
    yield from ()  # a generator that asks for nothing
    return _error_result(message)


def _without_images(nb: dict[str, Any]) -> dict[str, Any]:
    """A copy of a notebook whose binary image data is replaced by a size note."""
    copy: dict[str, Any] = json.loads(json.dumps(nb))
    for cell in copy.get("cells", []):
        for output in cell.get("outputs", []) or []:
            data = output.get("data") or {}
            for mime in list(data):
                if mime.startswith("image/") and mime != "image/svg+xml":
                    data[mime] = f"<{mime} omitted, {len(bundle_text(data[mime]))} base64 chars>"
    return copy


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
                data = output.get("data") or {}
                if "text/plain" in data:
                    lines.append("[out]\n" + clip(bundle_text(data["text/plain"]), limit))
                images = [m for m in data if m.startswith("image/")]
                if images:
                    lines.append(f"[image: {', '.join(images)}]")
        lines.append("")
    return "\n".join(lines).strip() or "The notebook is empty: no code has run yet."


class _ExecutorBase(Generic[C]):
    """What both executors share: the client, the limits and the current session."""

    def __init__(
        self,
        client: C,
        *,
        session_id: str | None = None,
        max_chars: int = 20_000,
        max_images: int = 4,
    ) -> None:
        self.client: C = client
        self._logic = _ToolLogic(max_chars=max_chars, max_images=max_images)
        self._logic.session_id = session_id

    @property
    def session_id(self) -> str | None:
        """The current session, if one exists yet."""
        return self._logic.session_id


class ToolExecutor(_ExecutorBase[Client]):
    """Runs tool calls against the service with the blocking client.

    It keeps a *current session*: ``run_code`` and friends use it when the model passes
    no ``session_id``; it is created on first use, and replaced by ``create_session``.

    Args:
        client: The SDK client to use.
        session_id: Start with this session as the current one.
        max_chars: Characters kept of each long text in a result.
        max_images: Images attached to one ``run_code`` result at most.

    Example:
        >>> executor = ToolExecutor(Client())  # doctest: +SKIP
        >>> result = executor.execute(tool_call_from_model)  # doctest: +SKIP
        >>> messages.append({"role": "user", "content": [result.to_anthropic()]})
    """

    def execute(self, call: dict[str, Any] | ToolCall) -> ToolResult:
        """Run one tool call (as the model emitted it) and return its result.

        Never raises for a bad call or a refusal of the service: those come back as a
        result with ``is_error=True`` that the model can read. Connection failures raise.
        """
        try:
            parsed = parse_tool_call(call)
        except ToolCallError as exc:
            return _error_result(str(exc))
        steps = self._logic.steps(parsed)
        try:
            request = next(steps)
            while True:
                try:
                    value = self.client._call(request)
                except ClientError as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(value)
        except StopIteration as stop:
            result: ToolResult = stop.value
        except APIError as exc:
            result = _error_result(exc.message + f" ({exc.code})")
        result.call_id = parsed.id
        return result

    def close(self) -> None:
        """Delete the sessions this executor created."""
        for sid in self._logic.created:
            try:
                self.client.delete_session(sid)
            except APIError:
                continue
        self._logic.created.clear()
        self._logic.session_id = None


class AsyncToolExecutor(_ExecutorBase[AsyncClient]):
    """The async twin of :class:`ToolExecutor` (used by the MCP server)."""

    async def execute(self, call: dict[str, Any] | ToolCall) -> ToolResult:
        """Run one tool call; see :meth:`ToolExecutor.execute`."""
        try:
            parsed = parse_tool_call(call)
        except ToolCallError as exc:
            return _error_result(str(exc))
        steps = self._logic.steps(parsed)
        try:
            request = next(steps)
            while True:
                try:
                    value = await self.client._call(request)
                except ClientError as exc:
                    request = steps.throw(exc)
                else:
                    request = steps.send(value)
        except StopIteration as stop:
            result: ToolResult = stop.value
        except APIError as exc:
            result = _error_result(exc.message + f" ({exc.code})")
        result.call_id = parsed.id
        return result

    async def close(self) -> None:
        """Delete the sessions this executor created."""
        for sid in self._logic.created:
            try:
                await self.client.delete_session(sid)
            except APIError:
                continue
        self._logic.created.clear()
        self._logic.session_id = None
