"""What a tool returns to a model: text parts and image parts, in each API's shape."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

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
    reads it and fixes the code; ``code_failed`` says so, for protocols (MCP) that flag it.
    ``structured`` is the same result as JSON data, for tools that declare an output
    schema (``run_code``: :data:`interpreter.tools.structured.RUN_CODE_OUTPUT_SCHEMA`).
    """

    parts: list[TextPart | ImagePart] = field(default_factory=list)
    is_error: bool = False
    call_id: str | None = None
    structured: dict[str, Any] | None = None
    code_failed: bool = False

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

    def to_openai_responses(self) -> dict[str, Any]:
        """A ``function_call_output`` input item for the OpenAI Responses API: the text, or
        the text and the images as ``input_text`` and ``input_image`` parts."""
        return {
            "type": "function_call_output",
            "call_id": self.call_id,
            "output": _responses_output(self),
        }

    def to_openai(self) -> list[dict[str, Any]]:
        """Chat Completions messages: the ``tool`` message, then a ``user`` message that
        carries the images (tool messages may only hold text).

        For an assistant turn with several tool calls, use :func:`openai_messages` on all
        their results: Chat Completions refuses a ``user`` message between the ``tool``
        messages of one turn.
        """
        return openai_messages([self])


def openai_messages(results: list[ToolResult]) -> list[dict[str, Any]]:
    """The Chat Completions answer to one assistant turn's tool calls: a ``tool`` message
    per result, in order, then one ``user`` message with every result's images (each
    introduced by its call's id), if any have images.

    Chat Completions requires all ``tool`` messages answering a turn to follow it
    directly, so appending each result's :meth:`ToolResult.to_openai` in turn gave an
    invalid request as soon as one of several parallel calls drew a plot.
    """
    messages: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": r.call_id, "content": r.text} for r in results
    ]
    parts: list[dict[str, Any]] = []
    for result in results:
        if result.images:
            parts.append(
                {"type": "text", "text": f"Images returned by tool call {result.call_id}:"}
            )
            parts.extend(
                {"type": "image_url", "image_url": {"url": f"data:{img.mime};base64,{img.base64}"}}
                for img in result.images
            )
    if parts:
        messages.append({"role": "user", "content": parts})
    return messages


def _responses_output(result: ToolResult) -> str | list[dict[str, Any]]:
    if not result.images:
        return result.text
    items: list[dict[str, Any]] = [{"type": "input_text", "text": result.text}]
    items.extend(
        {"type": "input_image", "image_url": f"data:{img.mime};base64,{img.base64}"}
        for img in result.images
    )
    return items


def error_result(message: str) -> ToolResult:
    return ToolResult([TextPart(f"Error: {message}")], is_error=True)
