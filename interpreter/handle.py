"""An execution while it is queued or running, and the typed events its watchers receive.

The session publishes what happens to an execution as typed events (stream text, a rich
output, a cleared output area, an error, the end); the API layer decides how to encode
them (SSE frames, or nothing but the final JSON). Nothing here knows about HTTP.

A watcher subscribes before it starts reading, so it cannot miss an event; a watcher that
subscribes after the end gets the final :class:`Done` at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from interpreter.execution import ExecutionRecorder
from interpreter.models import Approval, ErrorInfo, Execution, Output
from interpreter.policy.approvals import PendingApproval


@dataclass(frozen=True)
class StreamText:
    """A chunk of stdout or stderr, as the kernel sent it."""

    name: Literal["stdout", "stderr"]
    text: str


@dataclass(frozen=True)
class OutputAdded:
    """A rich output in its API form (binaries already moved to artifacts)."""

    output: Output


@dataclass(frozen=True)
class OutputCleared:
    """The cell cleared its output area (``clear_output``); ``wait`` as the kernel said."""

    wait: bool


@dataclass(frozen=True)
class ErrorRaised:
    """The cell raised; the traceback carries no ANSI colour codes."""

    error: ErrorInfo


@dataclass(frozen=True)
class ApprovalRequired:
    """The execution waits for a person's approval (policy decision ``approve``)."""

    approval: Approval


@dataclass(frozen=True)
class Done:
    """The last event: the execution as finally recorded."""

    execution: Execution


Event = StreamText | OutputAdded | OutputCleared | ErrorRaised | ApprovalRequired | Done
#: What a subscription yields: events, then ``None`` once the execution is done.
Subscription = asyncio.Queue[Event | None]


@dataclass
class ExecutionHandle:
    """One execution from submission to its final record.

    Attributes:
        execution: the API record, updated in place as the execution runs.
        seq: its position in the session's execution log (0 until first stored).
        timeout_s: the deadline it runs under.
        extra_meta: extra notebook cell metadata (rebuilds mark replayed cells).
        finished: set once the final record is published.
        changed: set whenever a kernel message for it was applied (the session's waiter
            clears it).
        recorder: the message translator, once the code was sent to the kernel.
        api_outputs: rich outputs already captured, by recorder index.
        interrupt_requested: a client asked to interrupt it (or a restart cut it short).
        last_iopub_at: loop time of the last iopub message for it.
        stream: the subscription made at submission for a streaming request.
        request_id: the ``X-Request-Id`` of the HTTP request that submitted it, if any.
        resumed: an earlier broker sent it to the kernel; this one only awaits its end.
        notebook_sha256: the digest of its notebook cell (``interpreter/audit.py``).
        approval: the approval it waits for before it may run (policy ``approve``).
    """

    execution: Execution
    seq: int
    timeout_s: float
    extra_meta: dict[str, Any] = field(default_factory=dict)
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    recorder: ExecutionRecorder | None = None
    api_outputs: dict[int, Output] = field(default_factory=dict)
    interrupt_requested: bool = False
    last_iopub_at: float = 0.0
    stream: Subscription | None = None
    request_id: str | None = None
    resumed: bool = False
    #: Digest of its notebook cell, once written (the audit chain covers it).
    notebook_sha256: str | None = None
    approval: PendingApproval | None = None
    _subscribers: list[Subscription] = field(default_factory=list)

    @classmethod
    def finished_with(cls, execution: Execution) -> ExecutionHandle:
        """A handle for an execution that is already final (e.g. read back from the store)."""
        handle = cls(execution=execution, seq=0, timeout_s=0)
        handle.finished.set()
        return handle

    def subscribe(self) -> Subscription:
        """A queue of this execution's events from now on; ``None`` after :class:`Done`."""
        queue: Subscription = asyncio.Queue()
        if self.finished.is_set():
            queue.put_nowait(Done(self.execution))
            queue.put_nowait(None)
        else:
            self._subscribers.append(queue)
        return queue

    def publish(self, event: Event) -> None:
        for queue in self._subscribers:
            queue.put_nowait(event)

    def finish(self) -> None:
        """Publish the final record and end every subscription."""
        self.publish(Done(self.execution))
        for queue in self._subscribers:
            queue.put_nowait(None)
        self._subscribers.clear()
        self.finished.set()
