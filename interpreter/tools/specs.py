"""The eleven tools as a model reads them: names, descriptions and JSON schemas, rendered
for OpenAI or Anthropic function calling."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

ToolFormat = Literal["openai", "openai-responses", "anthropic"]

#: Packages worth naming to a model, in this order, when the kernel has them.
NOTABLE_PACKAGES = (
    "numpy",
    "pandas",
    "matplotlib",
    "scipy",
    "scikit-learn",
    "statsmodels",
    "seaborn",
    "plotly",
    "polars",
    "pyarrow",
    "sympy",
    "networkx",
    "pillow",
    "openpyxl",
    "xlrd",
    "tabulate",
    "tqdm",
    "ipywidgets",
    "requests",
)


def packages_sentence(packages: Mapping[str, str]) -> str:
    """The kernel's main packages with versions, from its package list (the service's
    ``/v1/info`` ``packages``), as ``Packages: numpy 2.3.4, ..., and 54 more.``"""
    if not packages:
        return ""
    known = {k.lower(): (k, v) for k, v in packages.items()}
    shown = [f"{known[n][0]} {known[n][1]}" for n in NOTABLE_PACKAGES if n in known]
    more = len(packages) - len(shown)
    text = "Packages: " + (", ".join(shown) if shown else "")
    if more > 0:
        text += (", and " if shown else "") + f"{more} more"
    return text + "."


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
        "first use, or the last one made by create_session); an empty string counts as "
        "omitted."
    ),
}

#: What run_code says about state between calls (a stateless MCP client is told otherwise:
#: :mod:`interpreter.mcp_sessions`).
RUN_CODE_STATE = (
    "State persists between calls: variables, imports and loaded data stay defined, so "
    "build on earlier results instead of recomputing them, and split work into steps. "
)

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "run_code",
        "Run Python code in a persistent Jupyter (IPython) kernel and get back what it "
        "printed, the value of its last expression, displayed tables and plots, and any error "
        "with its traceback.\n\n" + RUN_CODE_STATE + "The working directory is the session "
        "workspace: files added with upload_file are "
        "there, and files the code writes there can be read back with read_file.\n"
        "A pandas DataFrame or Series left as the last expression comes back as a table plus "
        "its shape, column dtypes and null counts; a matplotlib, seaborn or plotly figure "
        "comes back as an image with a text description of what was drawn (its values, or "
        "their statistics for long series). Printing a huge object wastes context: show "
        "df.head() or summaries instead.\n"
        "To see every package installed in the kernel, with its version, run %pip list.\n"
        "If the code raises, the error and traceback are returned and the state from before "
        "the failing line is kept: read the error, fix the code and run only the corrected "
        "part again. Code running past timeout_s is interrupted; if the kernel has to be "
        "restarted the result says that all state was lost. The kernel may have no network "
        "access: do not rely on downloading data or installing packages. IPython magics "
        "(%timeit) and shell escapes (!ls) work, unless the service's policy forbids them: "
        "a result with status denied did not run; its message says what the policy allows "
        "instead, so rewrite the code accordingly.",
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
                    "description": "Wall-clock limit in seconds, counted from when the code "
                    "starts (the service default if omitted; time waiting for a person's "
                    "approval does not count). Raise it for long computations.",
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
        "from_session to fork: the new session re-runs the cells the source session ran "
        "and copies its files, so you can try something risky without touching the original. "
        "Returns the new session id.",
        {
            "type": "object",
            "properties": {
                "from_session": {
                    "type": "string",
                    "description": "Optional id of a session to fork (state rebuilt by "
                    "re-running the cells it ran, files copied).",
                },
            },
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "list_sessions",
        "List your open sessions with their id, status (idle, busy, dead), number of "
        "executions and creation time, and which one is current.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ),
    ToolSpec(
        "close_session",
        "Close a session you no longer need: its kernel stops and its place is freed (the "
        "service caps how many sessions are open at once). Its notebook stays readable with "
        "get_notebook. Closing the current session makes the next run_code without "
        "session_id start a new, empty one.",
        {
            "type": "object",
            "properties": {
                "session_id": {
                    "type": "string",
                    "description": "Session to close; omit it (or give an empty string) to "
                    "close the current session.",
                },
            },
            "additionalProperties": False,
        },
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
                    "description": "Path relative to the workspace, e.g. 'data/input.csv'.",
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
        "to see more; a text file that is not UTF-8 comes decoded as Latin-1 or with "
        "replacement characters, and says so); PNG, JPEG, GIF and WebP images are "
        "returned as images. For large or "
        "binary data, load and summarise it with run_code instead.",
        {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Path relative to the workspace, e.g. 'out/report.csv'.",
                },
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
        "read_artifact",
        "Read part of an artifact: the full text of an output that was too long to show. "
        "When run_code cuts stdout, stderr or a long value, its result names the artifact "
        "that holds the whole text (a URL such as /v1/sessions/.../artifacts/<id>); read it "
        "here piece by piece with offset and length (in bytes). The answer says which bytes "
        "it holds, the artifact's size and the offset to continue from. An image artifact "
        "(one run_code did not attach, past its limit of images) is returned as the image.",
        {
            "type": "object",
            "properties": {
                "artifact": {
                    "type": "string",
                    "description": (
                        "The artifact's URL as the result gave it (/v1/sessions/<session>/"
                        "artifacts/<id>), or its id. Other URLs are refused."
                    ),
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "First byte to read (default 0).",
                },
                "length": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 1_000_000,
                    "description": "Bytes to read at most (default 20000).",
                },
                "session_id": _SESSION_ID,
            },
            "required": ["artifact"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "list_files",
        "List a directory of the session workspace: each entry's type, size in bytes, "
        "modification time and name (directories end in /). A long listing is cut short "
        "and says how many entries were left out; use run_code (glob, os.scandir) to search "
        "or count a large directory.",
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
        "cells the session ran, and the result says how many ran and which failed.",
        {
            "type": "object",
            "properties": {
                "recover": {
                    "type": "boolean",
                    "description": "Rebuild the state by re-running the cells the session ran.",
                },
                "session_id": _SESSION_ID,
            },
            "additionalProperties": False,
        },
    ),
    ToolSpec(
        "rebuild_from_notebook",
        "Bring back the state of an earlier analysis: re-run the code cells of a "
        "Jupyter notebook (.ipynb) that is in the session workspace, in order, on top of the "
        "current state, so its variables, imports and loaded data exist again. Put the "
        "notebook and the files it reads in the workspace first (upload_file). A cell that "
        "raised an error is re-run (raising it again is as recorded); cells stopped when "
        "recorded (timeout, interrupted) are skipped; the result says how many ran and which "
        "did not end as recorded. Nothing else may run in the session meanwhile.",
        {
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The notebook's path relative to the workspace, e.g. "
                    "'analysis.ipynb'.",
                },
                "session_id": _SESSION_ID,
            },
            "required": ["path"],
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
TOOLS_BY_NAME = {t.name: t for t in TOOLS}


def tool_definitions(
    format: ToolFormat = "openai",
    names: Iterable[str] | None = None,
    packages: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Tool definitions ready to pass to a model API.

    Args:
        format: ``openai`` (Chat Completions ``tools`` entries), ``openai-responses``
            (Responses API ``tools`` entries) or ``anthropic`` (Messages API ``tools``
            entries).
        names: Only these tools (default: all of them).
        packages: The kernel's package list (``client.info().packages``); ``run_code``'s
            description then names the main ones with their versions.

    Returns:
        A list of JSON-serialisable dicts.
    """
    chosen = [TOOLS_BY_NAME[n] for n in names] if names is not None else list(TOOLS)
    sentence = packages_sentence(packages or {})
    if sentence:
        chosen = [
            replace(t, description=f"{t.description}\n\n{sentence}") if t.name == "run_code" else t
            for t in chosen
        ]
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
    if format == "openai-responses":
        return [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": False,  # optional arguments stay optional
            }
            for t in chosen
        ]
    if format == "anthropic":
        return [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in chosen
        ]
    raise ValueError(
        f"unknown tool format {format!r}; use 'openai', 'openai-responses' or 'anthropic'"
    )
