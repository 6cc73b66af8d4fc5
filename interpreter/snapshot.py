"""What a running execution has produced so far, in its API form (pure).

``GET .../executions/{id}`` of a running execution answers with it: the stdout and stderr
written so far (cut to the output budget as a finished execution's are, and ending with
what the cell printed last even past the in-memory limit), the rich outputs
already captured, in order, and the error if the cell has raised. A finished execution is
its own final record.
"""

from __future__ import annotations

from interpreter.execution import cut_around, cut_middle
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
    # A stream an earlier broker had cut (a cell left running across a restart) counts
    # what that cut left out, and is cut again as parts, that count kept.
    lost = rec.cut_before
    truncated = bool(rec.overflowing or rec.rich_dropped or lost)
    # Past the in-memory limit the text goes to the spill, which keeps its last part: the
    # output so far ends with what the cell printed last, not where memory stopped.
    spilled = handle.spill
    tail_out = spilled.tail("stdout") if spilled is not None else None
    tail_err = spilled.tail("stderr") if spilled is not None else None
    total_out = len(stdout) + (tail_out[1] if tail_out else 0)
    total_err = len(stderr) + (tail_err[1] if tail_err else 0)
    if lost:
        total_out, total_err = rec.stream_size("stdout"), rec.stream_size("stderr")
    if total_out + total_err > output_bytes:
        truncated = True
        share_out, share_err = stream_shares(total_out, total_err, output_bytes)
        if "stdout" in lost:
            stdout = rec.stream_cut("stdout", rec.cut_share("stdout", share_out))
        elif tail_out:
            stdout = cut_around(stdout, tail_out[0], total_out, share_out)
        else:
            stdout = cut_middle(stdout, share_out)
        if "stderr" in lost:
            stderr = rec.stream_cut("stderr", rec.cut_share("stderr", share_err))
        elif tail_err:
            stderr = cut_around(stderr, tail_err[0], total_err, share_err)
        else:
            stderr = cut_middle(stderr, share_err)
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
