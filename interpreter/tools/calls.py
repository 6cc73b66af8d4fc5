"""A tool call as a model emits it (OpenAI or Anthropic shape), parsed and validated
against its tool's schema before anything runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from interpreter.tools.specs import ToolSpec

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
            kind = schema["type"]
            article = "an" if str(kind)[:1] in "aeiou" else "a"
            raise ToolCallError(f"{spec.name}: {key!r} must be {article} {kind}")
        if "enum" in schema and value not in schema["enum"]:
            raise ToolCallError(f"{spec.name}: {key!r} must be one of {schema['enum']}")
        if "exclusiveMinimum" in schema and not value > schema["exclusiveMinimum"]:
            raise ToolCallError(f"{spec.name}: {key!r} must be > {schema['exclusiveMinimum']}")
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolCallError(f"{spec.name}: {key!r} must be >= {schema['minimum']}")
