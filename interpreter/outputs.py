"""From a cell's recorded messages to what the API and the notebook keep.

:class:`~interpreter.execution.ExecutionRecorder` turns Jupyter messages into outputs;
this module decides what a client and a model see of them:

* a rich output's MIME values stay inline when they are text an agent reads without a
  second request (``text/plain``, the dataframe summary) or small; images and large values
  go to the session's content-addressed artifacts and are referenced by URL; a large
  ``text/plain`` is both stored whole and kept inline, cut in the middle;
* stdout and stderr share the output budget in proportion to their sizes; when either is
  cut, the whole text is kept as an artifact and the execution says ``truncated``;
* text past the recorder's in-memory limit was spilled to disk (:mod:`interpreter.spill`):
  each stream's artifact is then its kept text followed by its spill file, copied in
  chunks, and a notice on stderr names the artifacts and says what, if anything, was
  dropped (past ``max_output_spill_bytes``, refused by the disk, or with no room on it for
  that copy: the artifact then holds the kept text) and why;
* the notebook cell of an execution the broker ended (its timeout, its kernel's death, a
  restart on request, the session's close) ends with the broker's error, whose traceback
  says so (:mod:`interpreter.endings`; the kernel itself never reported it);
* once the session's notebook holds ``max_notebook_bytes`` of output, an output whose
  values do not fit is written to the notebook with those values set aside: only their
  artifacts or, for small values, the execution's record hold them, and a note in its
  ``text/plain`` names them (:mod:`interpreter.notebook_budget`). The finished cell's
  recorder then holds the notebook's form too, so the broker keeps no such value once its
  cell has ended.

Artifact writes run in a worker thread; everything else is plain computation.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any, Literal

from interpreter import storage_floor
from interpreter.artifacts import ArtifactBudgetSpent, ArtifactStore, decode_value
from interpreter.endings import ended_by_broker, ended_outputs
from interpreter.execution import (
    ClearEvent,
    ErrorEvent,
    ExecutionRecorder,
    RichEvent,
    StreamEvent,
    cut_around,
    cut_middle,
)
from interpreter.handle import (
    KEPT_CHARS,
    ErrorRaised,
    ExecutionHandle,
    OutputAdded,
    OutputCleared,
    StreamText,
    held_chars,
)
from interpreter.mime import INLINE_MIMES, is_binary, is_image
from interpreter.models import ArtifactRef, ErrorInfo, Execution, Output, StreamOffsets
from interpreter.notebook_budget import NotebookBudget, SetAside, budget_form, value_size
from interpreter.spill import Spilled, StopReason, StreamSpill

log = logging.getLogger(__name__)

#: Least share of the output budget either stream keeps when both are cut.
MIN_STREAM_SHARE = 1000
#: Finished cells kept for output that arrives after they ended (background threads).
LATE_OUTPUT_CELLS = 8
#: Executions with more text than fits inline that are finished at once (per event loop).
BIG_FINISHES = 2
_big_finishes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def big_finishes() -> asyncio.Semaphore:
    """The running loop's semaphore of :data:`BIG_FINISHES`."""
    loop = asyncio.get_running_loop()
    sem = _big_finishes.get(loop)
    if sem is None:
        sem = _big_finishes[loop] = asyncio.Semaphore(BIG_FINISHES)
    return sem


class Placement(Enum):
    """Where one MIME value of a rich output goes."""

    INLINE = "inline"
    ARTIFACT = "artifact"
    #: Stored whole as an artifact, and kept inline cut to the inline limit.
    BOTH = "both"


def placement(mime: str, value: object, inline_limit: int, size: int | None = None) -> Placement:
    """Where ``value`` of type ``mime`` goes, given the inline limit in characters (and
    the value's :func:`value_size`, when known)."""
    if is_image(mime) or is_binary(mime):
        return Placement.ARTIFACT
    if size is None:
        size = value_size(value)
    if size <= inline_limit or (mime in INLINE_MIMES and mime != "text/plain"):
        return Placement.INLINE
    return Placement.BOTH if mime == "text/plain" else Placement.ARTIFACT


def conclude(
    ex: Execution,
    rec: ExecutionRecorder,
    *,
    ending: str,
    reason: str | None,
    state_lost: bool,
    interrupted: bool,
    timeout_s: float,
    gave_up: str | None = None,
) -> None:
    """Set the status, reason, state loss and the broker's own error of a finished cell.

    Args:
        ending: how waiting ended: ``done``, ``timeout``, ``died`` or ``restarted``.
        reason: the kernel's exit reason when it died.
        state_lost: for a timeout, whether the kernel had to be restarted.
        interrupted: whether a client (or a restart) interrupted the cell.
        timeout_s: the cell's deadline, for the timeout message.
        gave_up: when the session gave up on its kernel instead of replacing it (restart
            limit), why and what to do (``errors.session_failed_message``).
    """
    if ending == "timeout":
        ex.status, ex.reason, ex.state_lost = "timeout", "timeout", state_lost
        if not state_lost:
            tail = "the kernel was interrupted: state kept."
        elif gave_up is None:
            tail = "the kernel was restarted: its state was lost."
        else:
            tail = f"the kernel did not stop and was not replaced. {gave_up}"
        ex.error = _broker_error(
            rec, "ExecutionTimeout", f"Execution exceeded timeout_s={timeout_s:g}; {tail}"
        )
    elif ending == "restarted":
        ex.status, ex.reason, ex.state_lost = "interrupted", "restarted", True
        ex.error = _broker_error(
            rec,
            "KernelRestarted",
            "The kernel was restarted on request while this cell ran; the session's "
            "variables are gone, re-run the setup code.",
        )
    elif ending == "died":
        ex.status, ex.reason, ex.state_lost = "kernel_died", reason, True
        if gave_up is None:
            then = (
                "A fresh kernel was started; the session's variables are gone, re-run the "
                "setup code."
            )
        else:
            then = f"No fresh kernel was started and the session is closed. {gave_up}"
        ex.error = _broker_error(rec, "KernelDied", f"The kernel died ({reason}). {then}")
    elif rec.asked_exit:
        ex.status, ex.reason, ex.state_lost = "ok", "exit", True
    elif rec.reply_status == "ok" or (
        # No reply came (waiting.py moved on after the idle): iopub said whether it failed.
        rec.reply_status is None and rec.error is None and not interrupted
    ):
        ex.status = "ok"
    elif interrupted:
        ex.status, ex.reason = "interrupted", "interrupted"
        if rec.error is None:
            # No reply and no traceback: the SIGINT reached ipykernel outside the cell's
            # code (see waiting.py), and the client is told the cell stopped all the same.
            ex.error = _broker_error(
                rec,
                "KeyboardInterrupt",
                "Interrupted on request. The kernel sent no traceback: the interrupt reached "
                "it outside the cell's own code, which may not have run, or run only in part.",
            )
    else:
        ex.status = "error"


def closed_while_running(ex: Execution, rec: ExecutionRecorder, reason: str) -> None:
    """Set the broker's error of a cell the session's close interrupted (``reason``:
    ``session_closed`` or ``broker_shutdown``), which the notebook shows as its last
    output: without it, the cell read as one that had finished."""
    why = (
        "The service shut down"
        if reason == "broker_shutdown"
        else "The session was closed (deleted, or past its lifetime)"
    )
    ex.error = _broker_error(
        rec, "SessionClosed", f"{why} while this cell ran: it was interrupted, unfinished."
    )


def _broker_error(rec: ExecutionRecorder, ename: str, evalue: str) -> ErrorInfo:
    """An error the broker reports, with whatever traceback the kernel had sent."""
    return ErrorInfo(ename=ename, evalue=evalue, traceback=rec.error.traceback if rec.error else [])


#: Why text given to the spill was dropped, for the notice.
_DROPPED_BECAUSE: dict[StopReason | None, str] = {
    "limit": "past max_output_spill_bytes, the text kept on disk per execution",
    "session_limit": "past max_session_spill_bytes, the text kept on disk per session",
    "disk_full": "the data disk is full",
    "disk_error": "the data disk refused the write",
    "floor": "the data disk is below its free-space floor, min_free_mb",
    None: "it arrived while the execution was being finished",
}
NO_SPILL = "past max_output_hard_bytes, and spilling to disk is off: max_output_spill_bytes=0"
#: Why, for a cell whose text an earlier broker had cut (its full text is lost anyway).
LOST_NO_SPILL = (
    "past max_output_hard_bytes; the service restarted while the cell ran, so no artifact "
    "can hold its full text and none of it is kept on disk"
)


def limit_notice(stored: dict[str, tuple[int, ArtifactRef]], dropped: int, why: str) -> str:
    """What stderr ends with when an execution's text went past the in-memory limit.

    Args:
        stored: per stream, the characters its artifact holds and the artifact.
        dropped: characters produced and kept nowhere.
        why: why they were dropped.
    """
    first = "the first " if dropped else "all "
    where = "; ".join(
        f"{first}{chars} characters of {name} are in the artifact {ref.url}"
        for name, (chars, ref) in stored.items()
    )
    if not dropped:
        return (
            "\n[output limit reached: the text past the broker's in-memory limit was kept on "
            f"disk; {where}]\n"
        )
    return (
        f"\n[output limit reached: {dropped} more characters were produced and dropped "
        f"({why}); {where or 'nothing of it is kept'}]\n"
    )


#: Characters of an output's values an event log may keep once a later output replaced
#: it (:func:`superseded`); the log counts such an event as about this much.
SUPERSEDED_CHARS = 1024


def superseded(out: Output) -> None:
    """Empty an output a later one replaced (``update_display_data``, ``clear_output``)
    of its inline values, when they are larger than :data:`SUPERSEDED_CHARS`.

    The execution's event log (kept for SSE resumes) and the queues of its watchers still
    hold the output as published, and count it as one small event: a redraw loop's frames,
    each as large as the cell's rich budget allows, would be held there all at once, when
    the recorder holds only the last. Emptied, a replaced output costs a few hundred
    characters there; its artifacts are still listed, and the output that replaced it
    follows it in the log. The output is changed in place: nothing else refers to it (the
    execution's outputs are the current ones)."""
    size = sum(value_size(value) for value in out.data.values()) + value_size(out.metadata)
    if size <= SUPERSEDED_CHARS:
        return
    out.data = {
        "text/plain": f"[replaced by a later output of this cell: its {size} characters of "
        "values and metadata are no longer kept here]"
    }
    out.metadata = {}


def stream_shares(stdout_len: int, stderr_len: int, limit: int) -> tuple[int, int]:
    """How many characters of stdout and of stderr to keep when both exceed ``limit``."""
    total = max(stdout_len + stderr_len, 1)
    share_out = max(limit * stdout_len // total, MIN_STREAM_SHARE)
    return share_out, max(limit - share_out, MIN_STREAM_SHARE)


class OutputCapture:
    """Builds the API and notebook forms of one session's outputs.

    Args:
        artifacts: the session's artifact store.
        inline_bytes: the largest MIME value kept inline (``settings.inline_rich_bytes``).
        output_bytes: the stdout+stderr budget of one execution (``max_output_bytes``).
        notebook_bytes: the output the session's notebook holds before large values are
            set aside (``max_notebook_bytes``; 0: no budget).
    """

    def __init__(
        self,
        artifacts: ArtifactStore,
        *,
        inline_bytes: int,
        output_bytes: int,
        notebook_bytes: int = 0,
    ) -> None:
        self.artifacts = artifacts
        self.inline_bytes = inline_bytes
        self.output_bytes = output_bytes
        #: What the session's notebook holds; load a notebook read back with its ``load``.
        self.budget = NotebookBudget(notebook_bytes)
        #: Recently finished cells by their request's msg_id (see :meth:`remember`).
        self._finished: dict[str, ExecutionHandle] = {}
        #: Their :func:`~interpreter.handle.held_chars` as they finished.
        self._finished_chars: dict[str, int] = {}

    async def output(self, rec: ExecutionRecorder, index: int) -> Output:
        """The API form of the rich output at ``index``: binaries and big values stored."""
        raw = rec.output(index)
        data: dict[str, Any] = {}
        refs: list[ArtifactRef] = []
        unstored: set[str] = set()
        for mime, value in raw["data"].items():
            where = placement(mime, value, self.inline_bytes)
            if where is not Placement.INLINE:
                try:
                    refs.append(await asyncio.to_thread(self._put, mime, value))
                except ArtifactBudgetSpent:
                    unstored.add(mime)
                    continue
            if where is Placement.INLINE:
                data[mime] = value
            elif where is Placement.BOTH:
                data[mime] = cut_middle(str(value), self.inline_bytes)
        if unstored:
            rec.unstored += len(unstored)
            rec.without(index, unstored)
        metadata = raw.get("metadata")
        return Output(
            type=raw["output_type"],
            data=data,
            artifacts=refs,
            display_id=raw.get("_display_id"),
            metadata=metadata if isinstance(metadata, dict) else {},
        )

    async def publish(
        self, handle: ExecutionHandle, rec: ExecutionRecorder, events: list[Any]
    ) -> None:
        """Tell the handle's watchers what the recorder's ``events`` mean, capturing each
        rich output once (binaries to artifacts) as it arrives."""
        for event in events:
            if isinstance(event, StreamEvent):
                name: Literal["stdout", "stderr"] = "stderr" if event.name == "stderr" else "stdout"
                handle.publish(StreamText(name, event.text))
            elif isinstance(event, RichEvent):
                out = await self.output(rec, event.index)
                before = handle.api_outputs.get(event.index)
                handle.api_outputs[event.index] = out
                handle.publish(OutputAdded(out))
                if before is not None and before is not out:
                    superseded(before)
                if rec.unstored and not rec.unstored_told:
                    rec.unstored_told = True
                    notice = unstored_notice(self.artifacts.budget_bytes)
                    await self.publish(handle, rec, rec.broker_stderr(notice))
            elif isinstance(event, ClearEvent):
                for before in handle.api_outputs.values():
                    superseded(before)
                handle.api_outputs.clear()
                handle.publish(OutputCleared(event.wait))
            elif isinstance(event, ErrorEvent):
                info = ErrorInfo(ename=event.ename, evalue=event.evalue, traceback=event.traceback)
                handle.publish(ErrorRaised(info))

    async def finish(
        self,
        ex: Execution,
        rec: ExecutionRecorder,
        known: dict[int, Output],
        *,
        spill: StreamSpill | None = None,
    ) -> list[dict[str, Any]]:
        """Complete ``ex`` from the recorder; returns the cell's notebook outputs.

        ``known`` holds the outputs already captured while the cell ran (by index); the
        rest are captured now. An error already set on ``ex`` (by the broker) wins over
        the kernel's. ``spill`` holds the text past the recorder's in-memory limit; it is
        detached from the recorder (later text is counted and dropped), built into the
        stream artifacts and discarded, whatever happens.
        """
        rec.overflow = None
        rec.ended = True
        rec.settle_notices()
        try:
            if rec.streams.kept > self.output_bytes:
                # Building a full-text artifact copies the text a few times: a few at a
                # time, so that many floods ending together cost a bounded amount of memory.
                async with big_finishes():
                    cut = await self._streams(ex, rec, spill)
            else:
                cut = await self._streams(ex, rec, spill)
        finally:
            if spill is not None:
                await spill.discard()
        if rec.rich_dropped or rec.messages_dropped or rec.error_cut:
            ex.truncated = True
        offsets = {} if cut else rec.stream_offsets()
        outputs = []
        for index in rec.rich_indexes():
            out = known.get(index)
            if out is None:
                out = await self.output(rec, index)
            where = offsets.get(index)
            if where is not None:
                out = out.model_copy(
                    update={"after": StreamOffsets(stdout=where[0], stderr=where[1])}
                )
            outputs.append(out)
        ex.outputs = outputs
        if ex.error is None and rec.error is not None:
            ex.error = ErrorInfo(
                ename=rec.error.ename, evalue=rec.error.evalue, traceback=rec.error.traceback
            )
        return self.notebook_form(ex, rec)

    def notebook_form(self, ex: Execution, rec: ExecutionRecorder) -> list[dict[str, Any]]:
        """The notebook outputs of a finished ``ex``: the kernel's, in its order, ending
        with the broker's own error when the broker ended it (:mod:`interpreter.endings`:
        a timeout, a dead kernel, a restart on request, a close); large values past the
        notebook's budget set aside. The cell is counted in the budget as returned."""
        self._within_budget(ex, rec)
        nb_outputs = rec.notebook_outputs(stream_limit=self.output_bytes)
        rec.compact(self.output_bytes)
        if ex.error is not None and ended_by_broker(ex.status, ex.reason, ex.error):
            nb_outputs = ended_outputs(nb_outputs, ex.error)
        self.budget.record(ex.id, nb_outputs)
        return nb_outputs

    def _within_budget(self, ex: Execution, rec: ExecutionRecorder) -> None:
        """Set aside, in ``rec``, the values of each output of a finished ``ex`` that do not
        fit in the notebook's budget (all of an output's or none; small ones too:
        :func:`~interpreter.notebook_budget.budget_form`). An output's decision is kept
        (``_kept``: the size kept; ``_set_aside``) until a display update replaces it."""
        indexes = rec.rich_indexes()
        if not self.budget.limit or len(indexes) != len(ex.outputs):
            return
        kept = 0
        for index, out in zip(indexes, ex.outputs, strict=True):
            item = rec.output(index)
            if item.get("_set_aside"):
                continue
            if "_kept" in item:
                kept += item["_kept"]
                continue
            stored = [
                mime
                for mime, value in item["data"].items()
                if placement(mime, value, self.inline_bytes) is not Placement.INLINE
            ]
            if len(stored) != len(out.artifacts):
                continue  # not the values its artifacts were made of: left as it is
            artifacts = {
                mime: SetAside.of(mime, ref)
                for mime, ref in zip(stored, out.artifacts, strict=True)
            }
            size, form = budget_form(item, artifacts)
            if form is None or self.budget.fits(ex.id, kept + size):
                item["_kept"] = size
                kept += size
                continue
            # New objects, not changes in place: the values may be shared with other
            # outputs of the same display id, and the old ones are freed with this.
            item["data"], item["metadata"] = form["data"], form["metadata"]
            item["_set_aside"] = True

    def remember(self, msg_id: str, handle: ExecutionHandle) -> None:
        """Keep a finished cell (by its request's msg_id) for output that arrives late: the
        last :data:`LATE_OUTPUT_CELLS`, as far as they hold :data:`KEPT_CHARS` (the newest
        whatever its size)."""
        self._finished.pop(msg_id, None)
        self._finished[msg_id] = handle
        self._finished_chars[msg_id] = held_chars(handle.execution)
        for key in list(self._finished):
            if (
                len(self._finished) <= LATE_OUTPUT_CELLS
                and sum(self._finished_chars.values()) <= KEPT_CHARS
            ):
                break
            if key != msg_id:
                del self._finished[key], self._finished_chars[key]

    def finished_cell(self, msg_id: str | None) -> ExecutionHandle | None:
        """A recently finished cell whose request had ``msg_id``, if kept."""
        return self._finished.get(msg_id) if msg_id is not None else None

    def late_streams(self, ex: Execution, rec: ExecutionRecorder) -> list[dict[str, Any]]:
        """Update a finished ``ex`` after stream output arrived late (a background thread
        printed after the cell ended); returns the cell's new notebook outputs.

        stdout and stderr take the form a finished cell's do: cut to the output budget,
        shared as :func:`stream_shares` shares it, each cut stream's notice counting every
        character left out (also those :meth:`ExecutionRecorder.compact` cut when the cell
        ended) and naming its full-text artifact. Artifacts never change (they are
        content-addressed): the late text is in none, and a notice of a stream with late
        text says so. The notebook cell's streams say the same. A cell that went past its
        in-memory limit takes no late text (it is dropped, and its notice says so): its
        text stays as it was finished."""
        limit = self.output_bytes
        if rec.streams.dropped_late:
            ex.truncated = True
        if rec.overflowing and rec.final_streams is not None:
            ex.stdout, stderr = rec.final_streams
            ex.stderr = stderr + rec.streams.notice
            return rec.notebook_outputs(stream_limit=limit)
        size_out, size_err = rec.stream_size("stdout"), rec.stream_size("stderr")
        if size_out + size_err > limit:
            ex.truncated = True
            share_out, share_err = stream_shares(size_out, size_err, limit)
            ex.stdout = rec.stream_cut("stdout", rec.cut_share("stdout", share_out))
            ex.stderr = rec.stream_cut("stderr", rec.cut_share("stderr", share_err))
            # The outputs' places in the text no longer hold.
            ex.outputs = [o.model_copy(update={"after": None}) for o in ex.outputs]
        else:
            ex.stdout, ex.stderr = rec.stream_text("stdout"), rec.stream_text("stderr")
        ex.stderr += rec.streams.notice
        return rec.notebook_outputs(stream_limit=limit)

    async def _streams(
        self, ex: Execution, rec: ExecutionRecorder, spill: StreamSpill | None
    ) -> bool:
        """Set ``ex.stdout`` and ``ex.stderr``; True when they were cut."""
        spilled = await spill.close() if spill is not None else None
        stdout, stderr = rec.stream_text("stdout"), rec.stream_text("stderr")
        # A stream an earlier broker had cut (a cell left running across a restart) is
        # cut already, and no artifact can hold its full text.
        lost = rec.cut_before
        cut = len(stdout) + len(stderr) > self.output_bytes or rec.overflowing or bool(lost)
        if cut:
            ex.truncated = True
            stored: dict[str, tuple[int, ArtifactRef]] = {}
            # Spilled text the disk had no room to copy into its artifact (characters), and
            # why (the disk was full, or refused the write).
            uncopied = 0
            uncopied_why: StopReason = "disk_full"
            for name, text in (("stdout", stdout), ("stderr", stderr)):
                path = spilled.files.get(name) if spilled is not None else None
                more = spilled.chars[name] if spilled is not None and path is not None else 0
                if (not text and path is None) or name in lost:
                    continue
                ref = await self._put_full_text(ex, name, text, path)
                if isinstance(ref, str) and path is not None:
                    # The copy failed: the kept text alone, and the notice says so.
                    uncopied, more = uncopied + more, 0
                    if ref == storage_floor.UNSTORED_REFUSED:
                        uncopied_why = "disk_error"
                    if text:
                        ref = await self._put_full_text(ex, name, text, None)
                if isinstance(ref, str):
                    # Not even that: its cut says that no artifact holds its full text.
                    rec.unstored_text[name] = ref
                    continue
                ex.artifacts.append(ref)
                stored[name] = (len(text) + more, ref)
                rec.stream_urls[name] = ref.url
            given = spilled.given if spilled is not None else {}
            tails = spilled.tails if spilled is not None else {}
            total_out = len(stdout) + given.get("stdout", 0)
            total_err = len(stderr) + given.get("stderr", 0)
            if lost:
                # Counted whole, with what the earlier cut left out.
                total_out, total_err = rec.stream_size("stdout"), rec.stream_size("stderr")
            share_out, share_err = stream_shares(total_out, total_err, self.output_bytes)
            # A stream that went past the in-memory limit ends inline with what the cell
            # printed last (the spill's tail), not with the end of the in-memory part.
            url_out, url_err = rec.stream_urls.get("stdout"), rec.stream_urls.get("stderr")
            notice_out = partial(rec.cut_notice, "stdout")
            notice_err = partial(rec.cut_notice, "stderr")
            if "stdout" in lost:
                stdout = rec.stream_cut("stdout", rec.cut_share("stdout", share_out))
            elif "stdout" in tails:
                stdout = cut_around(
                    stdout, tails["stdout"], total_out, share_out, url_out, notice_out
                )
            else:
                stdout = cut_middle(stdout, share_out, url_out, notice_out)
            if "stderr" in lost:
                stderr = rec.stream_cut("stderr", rec.cut_share("stderr", share_err))
            elif "stderr" in tails:
                stderr = cut_around(
                    stderr, tails["stderr"], total_err, share_err, url_err, notice_err
                )
            else:
                stderr = cut_middle(stderr, share_err, url_err, notice_err)
            rec.final_streams = (stdout, stderr)
            if rec.overflowing:
                rec.streams.notice = self._notice(rec, spilled, stored, uncopied, uncopied_why)
                stderr += rec.streams.notice
        ex.stdout, ex.stderr = stdout, stderr
        return cut

    @staticmethod
    def _notice(
        rec: ExecutionRecorder,
        spilled: Spilled | None,
        stored: dict[str, tuple[int, ArtifactRef]],
        uncopied: int,
        uncopied_why: StopReason,
    ) -> str:
        if spilled is None:
            why = LOST_NO_SPILL if rec.cut_before else NO_SPILL
            return limit_notice(stored, rec.streams.dropped, why)
        why = _DROPPED_BECAUSE[uncopied_why if uncopied else spilled.stopped]
        return limit_notice(stored, rec.streams.dropped + spilled.dropped + uncopied, why)

    async def _put_full_text(
        self, ex: Execution, name: str, text: str, spilled: Path | None
    ) -> ArtifactRef | str:
        """Store stream ``name``'s full-text artifact (:meth:`_put_text`); when the data disk
        has no room for it or refuses the write, why not (for the cut's notice): the cell
        ran, and its record and notebook cell are made without it (a failure there ended
        the cell as the broker's error, with no output in its record and a notebook cell
        naming an artifact that did not exist)."""
        try:
            return await asyncio.to_thread(self._put_text, text, spilled)
        except OSError as exc:
            if storage_floor.failure_reason(exc) == "storage_full":
                log.warning("no room for the %s artifact of %s on the data disk", name, ex.id)
                return storage_floor.UNSTORED_BECAUSE
            log.error("the %s artifact of %s could not be stored: %s", name, ex.id, exc)
            return storage_floor.UNSTORED_REFUSED

    def _put_text(self, text: str, spilled: Path | None) -> ArtifactRef:
        """Store a stream's kept text, followed by its spill file if it has one."""
        head = text.encode("utf-8")
        if spilled is None:
            return self.artifacts.put(head, "text/plain")
        return self.artifacts.put_file(spilled, "text/plain", head=head)

    def _put(self, mime: str, value: object) -> ArtifactRef:
        return self.artifacts.put(decode_value(mime, value), mime, budgeted=True)


def unstored_notice(budget_bytes: int) -> str:
    """The stderr notice of a cell whose plots or other large rich values were not stored."""
    return (
        f"\n[output not stored: this session's artifacts reached their limit of "
        f"{budget_bytes >> 20} MiB (max_session_artifact_bytes); this cell's new plots and "
        "other large rich values are left out. Save what you need to a workspace file, or "
        "continue in a new session (from_session rebuilds its state).]\n"
    )
