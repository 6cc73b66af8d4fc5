"""Typed events yielded by ``Session.stream()`` while code runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from interpreter.models import Approval, ErrorInfo, Execution, Output

R = TypeVar("R")


@dataclass(frozen=True)
class StdoutEvent:
    """A chunk of text the code wrote to standard output."""

    text: str
    name: ClassVar[str] = "stdout"


@dataclass(frozen=True)
class StderrEvent:
    """A chunk of text the code wrote to standard error."""

    text: str
    name: ClassVar[str] = "stderr"


@dataclass(frozen=True)
class OutputEvent:
    """A rich output (display or result): a MIME bundle, images as artifact references."""

    output: Output
    name: ClassVar[str] = "output"


@dataclass(frozen=True)
class ClearOutputEvent:
    """The code cleared its outputs so far (``IPython.display.clear_output``)."""

    wait: bool = False
    name: ClassVar[str] = "clear"


@dataclass(frozen=True)
class ErrorEvent:
    """The code raised: exception name, message and traceback (no colour codes)."""

    error: ErrorInfo
    name: ClassVar[str] = "error"


@dataclass(frozen=True)
class ApprovalRequiredEvent:
    """The service's policy holds the code for a person's approval; it runs (or is
    denied) once an operator decides, or is denied when the approval expires."""

    approval: Approval
    name: ClassVar[str] = "approval_required"


@dataclass(frozen=True)
class DoneEvent(Generic[R]):
    """The last event: the finished execution, and the same wrapped as a run result."""

    execution: Execution
    result: R
    name: ClassVar[str] = "done"


ProgressEvent = (
    StdoutEvent | StderrEvent | OutputEvent | ClearOutputEvent | ErrorEvent | ApprovalRequiredEvent
)
"""Every event but the final ``DoneEvent``."""
