"""What a running execution has produced so far, in its API form (pure).

``GET .../executions/{id}`` of a running execution answers with it: the stdout and stderr
written so far (cut to the output budget as a finished execution's are), the rich outputs
already captured, in order, and the error if the cell has raised. A finished execution is
its own final record.
"""

from __future__ import annotations

from interpreter.execution import cut_middle
from interpreter.handle import ExecutionHandle
from interpreter.models import ErrorInfo, Execution
from interpreter.outputs import stream_shares


def output_so_far(handle: ExecutionHandle, *, output_bytes: int) -> Execution:
    """A copy of ``handle``'s execution holding its output so far; the record itself once
    finished (or while the code was not yet sent to the kernel)."""
    rec = handle.recorder
    ex = handle.execution
    if handle.finished.is_set() or rec is None:
        return ex
    stdout, stderr = rec.stream_text("stdout"), rec.stream_text("stderr")
    truncated = bool(rec.overflowing or rec.rich_dropped)
    if len(stdout) + len(stderr) > output_bytes:
        truncated = True
        share_out, share_err = stream_shares(len(stdout), len(stderr), output_bytes)
        stdout, stderr = cut_middle(stdout, share_out), cut_middle(stderr, share_err)
    outputs = [handle.api_outputs[i] for i in rec.rich_indexes() if i in handle.api_outputs]
    error = None
    if rec.error is not None:
        error = ErrorInfo(
            ename=rec.error.ename, evalue=rec.error.evalue, traceback=rec.error.traceback
        )
    return ex.model_copy(
        update={
            "stdout": stdout,
            "stderr": stderr,
            "outputs": outputs,
            "error": ex.error or error,
            "truncated": ex.truncated or truncated,
        }
    )
