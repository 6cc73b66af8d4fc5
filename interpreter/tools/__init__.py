"""Tools for function-calling models: definitions, parsing, results and executors.

The same tools (:data:`TOOL_NAMES`) back ``interp tools``, the MCP server and any agent loop
built on the SDK. Definitions are written for a model to read. An executor takes a tool call
exactly as a model emits it (OpenAI or Anthropic shape), runs it against the service through
the public SDK and returns the result as text and images.

Example:
    >>> from interpreter.client import Client
    >>> from interpreter.tools import ToolExecutor, tool_definitions
    >>> tools = tool_definitions("anthropic")  # pass to the model
    >>> executor = ToolExecutor(Client())  # doctest: +SKIP
    >>> call = {"type": "tool_use", "id": "t1", "name": "run_code", "input": {"code": "1+1"}}
    >>> executor.execute(call).text  # doctest: +SKIP
    'status: ok (In [1], 4 ms)\\n\\nresult:\\n2'
"""

from __future__ import annotations

from interpreter.tools.calls import ToolCall, ToolCallError, parse_tool_call, validate_arguments
from interpreter.tools.executors import AsyncToolExecutor, ToolExecutor
from interpreter.tools.logic import RunStep, notebook_transcript
from interpreter.tools.results import ImagePart, TextPart, ToolResult, openai_messages
from interpreter.tools.specs import TOOL_NAMES, TOOLS, ToolFormat, ToolSpec, tool_definitions
from interpreter.tools.structured import RUN_CODE_OUTPUT_SCHEMA, execution_data

__all__ = [
    "RUN_CODE_OUTPUT_SCHEMA",
    "TOOLS",
    "TOOL_NAMES",
    "AsyncToolExecutor",
    "ImagePart",
    "RunStep",
    "TextPart",
    "ToolCall",
    "ToolCallError",
    "ToolExecutor",
    "ToolFormat",
    "ToolResult",
    "ToolSpec",
    "execution_data",
    "notebook_transcript",
    "openai_messages",
    "parse_tool_call",
    "tool_definitions",
    "validate_arguments",
]
