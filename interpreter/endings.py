"""The last output of a notebook cell the broker ended: one error that says how it ended.

The broker, not the kernel, ends a cell at its ``timeout_s`` (``ExecutionTimeout``), when
its kernel dies (``KernelDied``), when a restart is asked for while it runs
(``KernelRestarted``), when its session is closed or the service stops
(``SessionClosed``), and when it fails itself while it handles the cell's outputs (status
``error``: ``BrokerError``, ``StorageFull``). An interrupt on request that reached the
kernel outside the cell's code gets no traceback from it; the broker's
``KeyboardInterrupt`` then says what happened (:func:`interrupted_silently`). The API
reports that error; the notebook, which a reviewer opens in JupyterLab or renders with
nbconvert, must say the same. Both show an error output by its traceback alone, not by its
``ename`` and ``evalue``, so such a cell ends with one error output whose traceback is the
kernel's lines, if it sent any (the ``KeyboardInterrupt`` of an interrupted timeout),
followed by the broker's own line, ``ename: evalue`` as IPython ends a traceback. Without
that line, a timeout read as a bare ``KeyboardInterrupt``, a dead kernel and a broker
failure as an empty error; a restart on request showed no error at all.

The cell's form is built from the execution's record alone (:func:`error_output`), so the
cells that a restarted broker writes back from the store (``restore_cells``) are those
the broker wrote, and verify against the digests it recorded. Brokers before this one
wrote the error with the kernel's traceback alone, and none for a restart on request:
:func:`older_error_output` gives that form, for their records.
"""

from __future__ import annotations

from typing import Any

from interpreter.models import ErrorInfo, Execution

#: Statuses the broker gives a cell it ended (with its own error).
ENDED_STATUSES = frozenset({"timeout", "kernel_died"})
#: Reasons of an ``interrupted`` cell that the broker ended: a restart on request, the
#: session's close, the service's stop.
ENDED_REASONS = frozenset({"restarted", "session_closed", "broker_shutdown"})
#: Reasons of an ``error`` cell whose error is the broker's own failure (its outputs could
#: not be kept: ``storage_floor.failure_reason``), not the kernel's.
FAILED_REASONS = frozenset({"broker_error", "storage_full"})


def ended_by_broker(status: str, reason: str | None, error: ErrorInfo | None = None) -> bool:
    """Whether a cell of this status and reason (and ``error``) was ended by the broker,
    whose error it then carries (not the kernel's)."""
    return (
        status in ENDED_STATUSES
        or (status == "interrupted" and reason in ENDED_REASONS)
        or interrupted_silently(status, reason, error)
    )


def interrupted_silently(status: str, reason: str | None, error: ErrorInfo | None) -> bool:
    """Whether a cell interrupted on request carries the broker's word for it: the kernel
    sent no traceback (the SIGINT reached ipykernel outside the cell's code), so the error
    is the broker's; a kernel's ``KeyboardInterrupt`` always has a traceback. Its notebook
    cell showed no error at all."""
    return (
        status == "interrupted"
        and reason == "interrupted"
        and error is not None
        and not error.traceback
    )


def said_by_broker(status: str, reason: str | None, error: ErrorInfo | None = None) -> bool:
    """Whether the error of a cell of this status and reason is the broker's: it ended
    the cell (:func:`ended_by_broker`), or failed while it handled the cell's outputs."""
    return ended_by_broker(status, reason, error) or (
        status == "error" and reason in FAILED_REASONS
    )


def broker_line(error: ErrorInfo) -> str:
    """The traceback line that says what the broker did: ``ename: evalue``."""
    return f"{error.ename}: {error.evalue}"


def error_output(error: ErrorInfo) -> dict[str, Any]:
    """The notebook error output of the broker's ``error``: its traceback is the kernel's
    lines it carries, then :func:`broker_line` (never empty: it renders)."""
    return {
        "output_type": "error",
        "ename": error.ename,
        "evalue": error.evalue,
        "traceback": [*error.traceback, broker_line(error)],
    }


def ended_outputs(outputs: list[dict[str, Any]], error: ErrorInfo) -> list[dict[str, Any]]:
    """A broker-ended cell's notebook ``outputs`` (the kernel's, in its order) with the
    kernel's error outputs left out, ending with the broker's :func:`error_output`: the
    kernel's traceback, if any, is in it."""
    kept = [o for o in outputs if o.get("output_type") != "error"]
    return [*kept, error_output(error)]


def older_error_output(ex: Execution) -> dict[str, Any] | None:
    """The error output a broker before this module wrote for ``ex`` (whose error is the
    broker's, :func:`said_by_broker`): the error with the kernel's traceback alone (none
    for a broker failure), and no output for a restart on request or a silent interrupt."""
    if ex.error is None or (ex.status == "interrupted" and ex.reason == "restarted"):
        return None
    if interrupted_silently(ex.status, ex.reason, ex.error):
        return None
    return {
        "output_type": "error",
        "ename": ex.error.ename,
        "evalue": ex.error.evalue,
        "traceback": list(ex.error.traceback),
    }
