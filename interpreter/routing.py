"""Where a kernel message goes: the running cell, an earlier cell, or nowhere.

:class:`MessageRouting` is a part of :class:`~interpreter.session.LiveSession` (a base
class, so that the session module stays about queueing and running cells). Every message
the kernel's readers take is routed by the ``msg_id`` the broker issued (the execution's
id): to the running execution; stream output of a recently finished cell to that cell
(late output); a display update to the earlier cell that showed it. Anything else is
ignored (docs/security.md H-34). Finishing a cell writes its notebook cell (with its audit
digest) before anyone is told it is done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from interpreter import endings, logs, memory, restore_cells, storage_floor
from interpreter.displays import EarlierDisplays
from interpreter.execution import ExecutionRecorder
from interpreter.fifo import ExecutionQueue
from interpreter.handle import ExecutionHandle
from interpreter.late import LateWrites
from interpreter.metrics import Metrics
from interpreter.models import SessionStatus
from interpreter.notebook import LiveNotebook
from interpreter.outputs import OutputCapture
from interpreter.store import Activity, Writer

#: Said once, on stderr, when text a finished cell printed went past its output limit.
LATE_LIMIT_NOTICE = (
    "\n[output limit reached: text printed after the cell ended, past the execution's "
    "in-memory limit (max_output_hard_bytes), was dropped]\n"
)


class MessageRouting:
    """Mixed into LiveSession, whose attributes and methods these are."""

    owner: str
    status: SessionStatus
    executions: ExecutionQueue
    capture: OutputCapture
    displays: EarlierDisplays
    notebook: LiveNotebook
    writer: Writer
    metrics: Metrics
    #: Finished cells changed since they were written (late output, display updates).
    late: LateWrites
    #: Stream text this session's cells spilled to disk (``max_session_spill_bytes``).
    spilled_bytes: int

    def touch(self) -> None:
        raise NotImplementedError

    def _save_keyed(self, handle: ExecutionHandle, key: str) -> tuple[Callable[[], None], str]:
        raise NotImplementedError

    def _activity(self, status: SessionStatus) -> Activity:
        raise NotImplementedError

    async def _write_note(self) -> None:
        raise NotImplementedError

    async def _record_final(self, handle: ExecutionHandle, activity: Activity | None) -> bool:
        raise NotImplementedError

    async def _on_message(self, channel: str, msg: dict[str, Any]) -> None:
        """Route one kernel message to the running execution, by the broker's msg_id."""
        parent = msg.get("parent_header") or {}
        parent_id = parent.get("msg_id") if isinstance(parent, dict) else None
        if not isinstance(parent_id, str):
            parent_id = None  # forged (an id is text): routed nowhere
        handle = self.executions.current
        if handle is None or handle.recorder is None or parent_id != handle.recorder.msg_id:
            if channel != "iopub":
                return
            if handle is not None and handle.recorder is not None:
                # Iopub is not quiet: the running cell's own idle may be queued behind
                # these (an earlier cell's late output), so its grace starts after them.
                handle.last_iopub_at = asyncio.get_running_loop().time()
            finished = self.capture.finished_cell(parent_id)
            if finished is not None:
                await self._late_output(finished, msg)
            return
        rec = handle.recorder
        if channel == "iopub":
            handle.last_iopub_at = asyncio.get_running_loop().time()
            events = rec.feed_iopub(msg)
            await self._update_earlier_displays(msg, handle)
        elif (msg.get("header") or {}).get("msg_type") == "execute_reply":
            events = rec.feed_reply(msg)
        else:
            return
        try:
            await self.capture.publish(handle, rec, events)
            spill = handle.spill
            if spill is not None and spill.full:
                # Off the loop, and the next message waits for it: a flood is paced by
                # the disk, and the queued text stays within the spill's buffer.
                await spill.flush()
        finally:
            handle.changed.set()

    async def _update_earlier_displays(self, msg: dict[str, Any], current: ExecutionHandle) -> None:
        """A display id shown by an earlier cell, updated now: update that cell too (its
        record and notebook cell are written by :attr:`late`, at most once an interval)."""
        for earlier, _ in await self.displays.apply(msg, current):
            self.late.changed(earlier, streams=False)

    async def _late_output(self, handle: ExecutionHandle, msg: dict[str, Any]) -> None:
        """Output of a finished cell (a background thread printing while no cell runs):
        record it under that cell, in the execution and the notebook (docs/security.md
        decision 4). Applied to its recorder now, within the cell's output limits; written
        by :attr:`late`, at most once an interval, so a flood costs little per message."""
        rec = handle.recorder
        header = msg.get("header") or {}
        if rec is None or not isinstance(header, dict) or header.get("msg_type") != "stream":
            return
        streams = rec.streams
        dropped = streams.dropped
        fed = bool(rec.feed_iopub(msg))
        if streams.dropped > dropped and not streams.dropped_late:
            # Past the cell's in-memory limit (a finished cell spills no more): dropped,
            # and said once.
            streams.dropped_late = True
            streams.notice += LATE_LIMIT_NOTICE
            fed = True
        if fed:
            self.late.changed(handle, streams=True)

    async def _write_late(self, handle: ExecutionHandle, streams: bool) -> None:
        """Write a finished cell that changed since it was written (:attr:`late`): its
        notebook cell, with its new digest, and its record (a link of the audit chain)."""
        ex, rec = handle.execution, handle.recorder
        if rec is None:
            return
        if streams:
            self.capture.late_streams(ex, rec)
        outputs = self.capture.notebook_form(ex, rec)
        if rec.streams.dropped_late:
            notice = {"output_type": "stream", "name": "stderr", "text": LATE_LIMIT_NOTICE}
            # Before the broker's error of a cell it ended, which stays its last output.
            ended = ex.error is not None and endings.ended_by_broker(ex.status, ex.reason, ex.error)
            outputs.insert(len(outputs) - 1 if ended else len(outputs), notice)
        handle.notebook_sha256 = self.notebook.cell_digest(ex.code, outputs, handle.extra_meta)
        handle.cell_layout = restore_cells.layout_of(outputs)
        await self.notebook.replace_outputs(ex.id, outputs, audit_sha256=handle.notebook_sha256)
        self.writer.later(*self._save_keyed(handle, f"{ex.id}/late"))

    async def _finalize(self, handle: ExecutionHandle, rec: ExecutionRecorder) -> None:
        ex = handle.execution
        spill = handle.spill
        if spill is not None:
            self.spilled_bytes += spill.accepted  # counted whatever becomes of them
        nb_outputs = await self.capture.finish(ex, rec, handle.api_outputs, spill=spill)
        handle.spill = None  # discarded by finish (and by _abandon if finish was cut short)
        handle.notebook_sha256 = self.notebook.cell_digest(ex.code, nb_outputs, handle.extra_meta)
        handle.cell_layout = restore_cells.layout_of(nb_outputs)
        self.touch()
        # The cell is in the in-memory notebook (which the API serves) before anyone is
        # told the execution is done; the file follows in the background.
        await self._add_cell(handle, rec, nb_outputs, handle.notebook_sha256)
        await self._write_note()
        # On record before anyone is told: a broker killed right after an answer must not
        # turn it into `unknown`. On a full disk the record waits in memory and the client
        # is told so (the answer says the code ran; no new code runs until it is written).
        if not await self._record_final(handle, self._activity(self.status)):
            handle.answer = storage_floor.unrecorded_answer(ex)
        handle.finish()
        # Counted and logged once finished (a failed write is reported by the abandon that
        # follows, once), and after the answer is on its way: the log line, formatted on the
        # log thread while the record was written, held that write up by 0.2-0.3 ms.
        self._report(handle)
        self.capture.remember(rec.msg_id, handle)
        if rec.streams.seen >= memory.TRIM_AFTER_BYTES:
            memory.trim_soon()  # a flood's freed memory goes back now
        self.displays.remember(handle)

    async def _add_cell(
        self,
        handle: ExecutionHandle,
        rec: ExecutionRecorder,
        outputs: list[dict[str, Any]],
        digest: str,
    ) -> None:
        """Put ``handle``'s execution in the notebook as a cell of ``outputs`` whose digest
        (:meth:`LiveNotebook.cell_digest`) is ``digest``."""
        ex = handle.execution
        await self.notebook.add_cell(
            ex.code,
            outputs,
            replace=handle.resumed,
            execution_id=ex.id,
            execution_count=ex.execution_count,
            status=ex.status,
            started_at=ex.started_at,
            duration_ms=ex.duration_ms,
            state_lost=ex.state_lost,
            reason=ex.reason,
            extra={**handle.extra_meta, "audit_sha256": digest},
            timing=rec.timing,
        )

    def _report(self, handle: ExecutionHandle) -> None:
        """Count a finished execution and log its one line (the key by its owner id)."""
        ex = handle.execution
        self.metrics.execution_finished(ex.status, ex.duration_ms)
        logs.execution_finished(ex, key_id=self.owner, request_id=handle.request_id)
