"""``run_code``'s result as JSON data, and the JSON schema that describes it.

Protocols that carry structured tool results (MCP's ``structuredContent`` with the tool's
``outputSchema``) hand this to the host beside the text a model reads: the printed text,
the value of the last expression, table summaries, chart data and artifact ids, each in
its own field.
"""

from __future__ import annotations

from typing import Any, get_args

from interpreter.client.render import bundle_text, clean, clip, output_text
from interpreter.mime import CHART_MIME, DATAFRAME_MIME
from interpreter.models import Execution, ExecutionStatus

_NULLABLE_OBJECT: dict[str, Any] = {"type": ["object", "null"]}
_IDS = {"type": "array", "items": {"type": "string"}}

RUN_CODE_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string", "description": "The session the code ran in."},
        "status": {
            "type": "string",
            "enum": list(get_args(ExecutionStatus)),
            "description": "'ok' when the code ran to its end; anything else is a failure.",
        },
        "execution_count": {"type": ["integer", "null"]},
        "duration_ms": {"type": ["number", "null"]},
        "stdout": {"type": "string", "description": "What the code printed (long text cut)."},
        "stderr": {"type": "string"},
        "truncated": {"type": "boolean", "description": "The service cut stdout or stderr."},
        "state_lost": {
            "type": "boolean",
            "description": "The kernel was restarted: every variable is gone.",
        },
        "result": {
            "type": ["string", "null"],
            "description": "Text of the value of the last expression, if there was one.",
        },
        "outputs": {
            "type": "array",
            "description": "Displayed and returned values, in order.",
            "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": ["execute_result", "display_data"]},
                    "text": {"type": "string", "description": "What a reader sees of it."},
                    "dataframe": {
                        **_NULLABLE_OBJECT,
                        "description": "Summary of a pandas DataFrame or Series: shape, "
                        "columns with dtypes and null counts, first rows.",
                    },
                    "chart": {
                        **_NULLABLE_OBJECT,
                        "description": "Data of a matplotlib figure: kind, title, axis "
                        "labels and series per Axes.",
                    },
                    "artifact_ids": _IDS,
                },
                "required": ["type", "text", "artifact_ids"],
            },
        },
        "error": {
            "type": ["object", "null"],
            "properties": {
                "ename": {"type": "string"},
                "evalue": {"type": "string"},
                "traceback": {"type": "string"},
            },
        },
        "reason": {"type": ["string", "null"]},
        "policy": {
            **_NULLABLE_OBJECT,
            "description": "The service policy's decision: decision (allow, deny, approve), "
            "rule, message (what to change), facts, and a person's approval if one was asked.",
        },
        "artifact_ids": {
            **_IDS,
            "description": "Every artifact of the run: images, large outputs, full texts.",
        },
    },
    "required": ["session_id", "status", "stdout", "stderr", "outputs", "artifact_ids"],
}


#: An output's text past the result's budget (its data and artifacts are still given).
NOT_SHOWN = (
    "[not shown: the outputs before it took this result's room for text; its dataframe, "
    "chart and artifact ids are still here]"
)


def execution_data(execution: Execution, *, limit: int = 20_000) -> dict[str, Any]:
    """The JSON form of a finished execution, valid against :data:`RUN_CODE_OUTPUT_SCHEMA`.

    Long texts are cut to ``limit`` characters (head and tail).
    """
    outputs: list[dict[str, Any]] = []
    result: str | None = None
    artifact_ids: list[str] = []
    # The outputs' texts share a budget as in the model's text (render_execution).
    printed = min(len(execution.stdout) + len(execution.stderr), 2 * limit)
    room = max(limit, 2 * limit - printed) if limit > 0 else None
    for output in execution.outputs:
        ids = [ref.id for ref in output.artifacts]
        artifact_ids.extend(ids)
        data = output.data
        frame = data.get(DATAFRAME_MIME)
        chart = data.get(CHART_MIME)
        text = output_text(output, limit)
        if room is not None:
            if outputs and len(text) > room:
                text, room = NOT_SHOWN, 0
            else:
                room -= len(text)
        outputs.append(
            {
                "type": output.type,
                "text": text,
                "dataframe": frame if isinstance(frame, dict) else None,
                "chart": chart if isinstance(chart, dict) else None,
                "artifact_ids": ids,
            }
        )
        if output.type == "execute_result" and "text/plain" in data:
            result = clip(clean(bundle_text(data["text/plain"])), limit)
    artifact_ids.extend(ref.id for ref in execution.artifacts)
    error = None
    if execution.error is not None:
        err = execution.error
        error = {
            "ename": err.ename,
            "evalue": clean(err.evalue),
            "traceback": clip(clean("\n".join(err.traceback)), limit),
        }
    return {
        "session_id": execution.session_id,
        "status": execution.status,
        "execution_count": execution.execution_count,
        "duration_ms": execution.duration_ms,
        "stdout": clip(clean(execution.stdout), limit),
        "stderr": clip(clean(execution.stderr), limit),
        "truncated": execution.truncated,
        "state_lost": execution.state_lost,
        "result": result,
        "outputs": outputs,
        "error": error,
        "reason": execution.reason,
        "policy": execution.policy.model_dump(mode="json") if execution.policy else None,
        "artifact_ids": artifact_ids,
    }
