"""An execution while it is queued or running, and the typed events its watchers receive.

The session publishes what happens to an execution as typed events (stream text, a rich
output, a cleared output area, an error, the end); the API layer decides how to encode
them (SSE frames, or nothing but the final JSON). Nothing here knows about HTTP.

A watcher subscribes before it starts reading, so it cannot miss an event; a watcher that
subscribes after the end gets the final :class:`Done` at once.

Every event is also kept in the handle's log, numbered from 1 in the order published (the
SSE ``id:``; a cell taken over from an earlier broker numbers on past every id that broker
could have given, :meth:`ExecutionHandle.continue_ids`, so an id is never reused across
restarts), so a watcher that lost its connection can resume after the last id it saw:
:meth:`ExecutionHandle.watch` replays the logged events after that id, then continues live.
The log of an old finished execution is released (:meth:`ExecutionHandle.release_log`);
a resume then gets its final :class:`Done`, which holds the complete record. The log is
bounded (:data:`LOG_BUDGET_CHARS` of stream text, oldest events dropped first), so a flood
costs the broker a bounded amount; a resume from before what is kept raises
:class:`~interpreter.errors.EventsExpired` (the client then reads the execution instead).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from interpreter.errors import EventIdAhead, EventsExpired
from interpreter.execution import ExecutionRecorder
from interpreter.models import Approval, ErrorInfo, Execution, Output
from interpreter.notebook_budget import value_size
from interpreter.policy.approvals import PendingApproval
from interpreter.spill import StreamSpill

#: Characters of stream text an execution's event log keeps for resumes (other events
#: count :data:`EVENT_CHARS` each).
LOG_BUDGET_CHARS = 1 << 20
EVENT_CHARS = 1024


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


class Saved(NamedTuple):
    """An execution as it was when a write of it was issued, and its notebook cell's digest:
    a snapshot that the event loop does not change while the writer's thread saves it. It
    is kept as the execution's JSON, which the store saves anyway: dumping it takes a tenth
    of the loop's time that a deep copy of the model did (2.6 against 23 us for a ``1+1``,
    two per execution)."""

    execution_json: str
    notebook_sha256: str | None
    cell_layout: str | None = None
    cell_meta: str | None = None

    @property
    def execution(self) -> Execution:
        """The execution as it was (parsed anew on each call)."""
        return Execution.model_validate_json(self.execution_json)


#: Characters of output (:func:`held_chars`) the finished handles one holder keeps (for
#: lookups, late output, later display updates) hold in all at most; past it the oldest
#: are let go (the newest stays, whatever its size). Counted only, 64 cells of small
#: displays, each answer 67 MB, held 4 GB of the broker's memory per session.
KEPT_CHARS = 64 << 20


def held_chars(execution: Execution) -> int:
    """Characters an execution's record holds in memory: its stdout and stderr, and its
    outputs' inline values and metadata (artifacts are on disk)."""
    size = len(execution.stdout) + len(execution.stderr)
    for out in execution.outputs:
        size += sum(value_size(value) for value in out.data.values())
        size += value_size(out.metadata) if out.metadata else 0
    return size


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
        spill: where its stream text past the in-memory limit goes, while it runs.
        running_write: the store write of its running state, once the worker issued it.
        to_save: the copy each waiting keyed write saves, by key (the copy issued last:
            a write of the same key issued while one waits joins it).
        answer: what its clients are told when that differs from its record: set while
            the record waits for disk space (``LiveSession._record_final``).
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
    #: An interrupt's watch for code that ignores it was started (one per execution).
    ignored_told: bool = False
    last_iopub_at: float = 0.0
    #: Its :func:`held_chars` as it ended, while its queue keeps its event log.
    logged_chars: int = 0
    stream: Subscription | None = None
    request_id: str | None = None
    resumed: bool = False
    #: Digest of its notebook cell, once written (the audit chain covers it).
    notebook_sha256: str | None = None
    #: The order of its notebook cell's outputs, once written (``restore_cells``).
    cell_layout: str | None = None
    approval: PendingApproval | None = None
    spill: StreamSpill | None = None
    #: The write of its running state, issued by the worker as it sends the code.
    running_write: concurrent.futures.Future[None] | None = None
    to_save: dict[str, Saved] = field(default_factory=dict)
    answer: Execution | None = None
    _subscribers: list[Subscription] = field(default_factory=list)
    _log: deque[Event] | None = field(default_factory=deque)
    #: Id of the oldest event still in the log, and the log's size in characters.
    _log_first: int = 1
    _log_chars: int = 0
    _published: int = 0
    #: The ids up to this one were an earlier broker's (see :meth:`continue_ids`).
    _taken_over_at: int = 0

    def saved(self) -> Saved:
        """The execution as it is now, as a snapshot (the loop goes on changing it)."""
        meta = json.dumps(self.extra_meta) if self.extra_meta else None
        return Saved(self.execution.model_dump_json(), self.notebook_sha256, self.cell_layout, meta)

    @classmethod
    def finished_with(cls, execution: Execution) -> ExecutionHandle:
        """A handle for an execution that is already final (e.g. read back from the store)."""
        handle = cls(execution=execution, seq=0, timeout_s=0)
        handle.finished.set()
        return handle

    def continue_ids(self, after: int) -> None:
        """Number this handle's events from ``after + 1``: the execution was taken over
        from an earlier broker, which may have given out ids up to ``after``. A watcher
        resuming after any of those ids gets every event of this handle (what the
        earlier broker sent after it is gone with that broker)."""
        self._published = self._taken_over_at = after
        self._log_first = after + 1

    def subscribe(self) -> Subscription:
        """A queue of this execution's events from now on; ``None`` after :class:`Done`."""
        return self.watch()[1]

    def first_kept_event(self) -> int:
        """The id of the oldest event still kept for watchers (a flood's log is bounded)."""
        return self._log_first

    def watch(self, after: int | None = None) -> tuple[int, Subscription]:
        """A queue of this execution's events after event id ``after`` (from now on when
        None), then live; ``None`` after :class:`Done`. Returns the id of the first event
        the queue will hold (the ids that follow count up by one). Raises EventsExpired
        when events after ``after`` are no longer kept."""
        queue: Subscription = asyncio.Queue()
        log = self._log
        if self.finished.is_set() and (log is None or not log):
            # Read back from the store, or its log released: the final record only.
            queue.put_nowait(Done(self.told))
            queue.put_nowait(None)
            return max(self._published, 1), queue
        assert log is not None
        last = self._published
        if after is not None and after > last and not self.finished.is_set():
            # Numbered from `last + 1`, its next events would repeat the ids it gave.
            raise EventIdAhead(
                f"Event id {after} is past the last event of execution "
                f"'{self.execution.id}' ({last}): resume after an id its stream gave, or "
                "give none for all of its events."
            )
        if after is not None:
            after = max(after, self._taken_over_at)
        start = last + 1 if after is None else min(max(after, 0) + 1, last + 1)
        if self.finished.is_set():
            start = min(start, last)  # the final Done is always delivered
        if start < self._log_first:
            raise EventsExpired(
                f"Events after {after} of execution '{self.execution.id}' are no longer "
                "kept (its output was large); GET the execution for its output so far."
            )
        for index in range(start - self._log_first, len(log)):
            queue.put_nowait(log[index])
        if self.finished.is_set():
            queue.put_nowait(None)
        else:
            self._subscribers.append(queue)
        return start, queue

    def release_log(self) -> None:
        """Forget the logged events of a finished execution (a resume gets ``Done``)."""
        if self.finished.is_set():
            self._log = None

    def publish(self, event: Event) -> None:
        self._published += 1
        log = self._log
        if log is not None:
            log.append(event)
            self._log_chars += _chars(event)
            while self._log_chars > LOG_BUDGET_CHARS and len(log) > 1:
                self._log_chars -= _chars(log.popleft())
                self._log_first += 1
        for queue in self._subscribers:
            queue.put_nowait(event)

    @property
    def told(self) -> Execution:
        """The execution as its clients are told once it is finished."""
        return self.answer or self.execution

    def finish(self) -> None:
        """Publish the final record (or :attr:`answer`) and end every subscription."""
        self.publish(Done(self.told))
        for queue in self._subscribers:
            queue.put_nowait(None)
        self._subscribers.clear()
        self.finished.set()


def _chars(event: Event) -> int:
    return len(event.text) if isinstance(event, StreamText) else EVENT_CHARS
