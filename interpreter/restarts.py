"""How a session replaces its kernel, interrupts it, and gives up on it.

:class:`KernelLifecycle` is a part of :class:`~interpreter.session.LiveSession` (a base
class, so that the session module stays about queueing and running cells). Automatic
restarts (a death, a timeout, ``exit()``, a frozen kernel) are budgeted (R-03); a
requested restart never is, replaces the kernel exactly once, ends the running cell as
interrupted and cancels the cells queued behind it unless asked to keep them. A heartbeat
that stops while no cell runs replaces the kernel at once.

Requested restarts take turns (:meth:`KernelLifecycle.restarting`), each with its
recovery. One that comes while the kernel is already being replaced on the service's own
account (a timeout, a death, a frozen kernel) is that replacement: never a second one.
While a restart is requested, the worker does not replace the kernel on its own account
either (a timed-out cell then ends as restarted). After an automatic replacement the
next cell to run says that state was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

from interpreter import waiting
from interpreter.cells import RESTART_EVENT, note_event
from interpreter.errors import KernelStartFailed, SessionClosed, session_failed_message
from interpreter.execution import broker_notice
from interpreter.fifo import ExecutionQueue
from interpreter.handle import ExecutionHandle
from interpreter.kernel import Kernel, Restart
from interpreter.metrics import Metrics
from interpreter.models import ErrorInfo, ExecutionStatus, SessionStatus
from interpreter.notebook import LiveNotebook
from interpreter.notes import backend_down_note, replacement_failed_note, restart_note
from interpreter.settings import Settings
from interpreter.store import Store, Writer

log = logging.getLogger(__name__)

#: Seconds an interrupt waits for the kernel to start the running cell.
INTERRUPT_START_WAIT_S = 5
#: Seconds after an interrupt at which a cell still running is told it was not stopped.
INTERRUPT_IGNORED_S = 3.0


def interrupt_ignored_notice(after_s: float, timeout_s: float) -> str:
    """What a cell that an interrupt did not stop gets on its stderr."""
    return (
        f"\n[interp] This code is still running {after_s:g} s after an interrupt: it catches "
        "KeyboardInterrupt or ignores SIGINT. Interrupt it again, restart the session (its "
        f"variables are lost), or let its timeout ({timeout_s:g} s) end it.\n"
    )


class KernelLifecycle:
    """Mixed into LiveSession, whose attributes and methods these are."""

    id: str
    status: SessionStatus
    generation: int
    settings: Settings
    kernel: Kernel
    metrics: Metrics
    notebook: LiveNotebook
    store: Store
    writer: Writer
    executions: ExecutionQueue
    failed_reason: str | None
    on_failed: Callable[[Any], None] | None
    _replaced: asyncio.Event
    #: Why the kernel is being replaced right now (None: it is not).
    _replacing: str | None
    #: A requested restart is under way: the worker replaces no kernel on its own.
    _restart_requested: bool
    _restart_turn: asyncio.Lock
    #: Interrupts' watches for code that ignores them (:meth:`_tell_if_ignored`).
    _watches: set[asyncio.Task[None]]
    _note: str | None
    #: Why the kernel was restarted, for each restart :attr:`_note` tells of.
    _note_restarts: list[str]
    _recovery: asyncio.Task[None] | None
    _state_lost_pending: bool
    #: The last restart found the Docker engine not answering (said once per outage).
    backend_down: bool

    def touch(self) -> None:
        raise NotImplementedError

    @property
    def closed(self) -> bool:
        """The session was closed (also while an await was under way)."""
        return self.status == "closed"

    async def _persist_kernel(self) -> None:
        raise NotImplementedError

    async def _abandon(self, handle: ExecutionHandle, status: ExecutionStatus, reason: str) -> None:
        raise NotImplementedError

    async def _restart(self, reason: str) -> None:
        """Replace the kernel; the session keeps going. Automatic restarts (every reason
        but ``requested``) are budgeted: over the budget the session fails (R-03). A
        session closed meanwhile is left closed (its kernel is not started again)."""
        if self.failed_reason is not None or self.status == "closed":
            return
        self.status = "starting"
        self._replacing = reason
        self._replaced.clear()
        try:
            outcome = await self.kernel.restart(automatic=reason != "requested")
            if outcome is Restart.STOPPED or self.closed:
                return
            if outcome is Restart.OVER_BUDGET:
                await self._fail("restart_limit")
                return
            if outcome is Restart.BACKEND_DOWN:
                # Not a restart, not the kernel's doing: said once per outage.
                self.status = "dead"
                if not self.backend_down:
                    self.backend_down = True
                    await self.writer.run(partial(self.store.set_status, self.id, "dead"))
                    note = backend_down_note(reason)
                    self._note = note if self._note is None else f"{self._note}\n\n{note}"
                    self._note_restarts.append(reason)
                return
            self.backend_down = False
            self.metrics.restarts.labels(reason.split(":")[0]).inc()
            if outcome is Restart.FAILED:
                self.status = "dead"
                await self.writer.run(partial(self.store.set_status, self.id, "dead"))
                note = replacement_failed_note(reason)
                self._note = note if self._note is None else f"{self._note}\n\n{note}"
                self._note_restarts.append(reason)
                return
            self.notebook.set_kernel_info(self.kernel.language_info)
            self.status = "idle"
            self.generation += 1
            if reason != "requested":
                self._state_lost_pending = True  # the next cell runs on an empty kernel
            note = restart_note(reason, self.generation)
            self._note = note if self._note is None else f"{self._note}\n\n{note}"
            self._note_restarts.append(reason)
            self.touch()
            await self._persist_kernel()
        finally:
            self._replacing = None
            self._replaced.set()

    def _kernel_unresponsive(self) -> None:
        """The heartbeat gave up on the kernel (frozen or gone). A running cell's wait
        sees it as a death (``kernel_unresponsive``); an idle session replaces its kernel
        now, as for a death, and its next cell says that state was lost."""
        if self.executions.current is None and self.status == "idle":
            self._recovery = asyncio.create_task(self._recover_idle(), name=f"hb-{self.id}")

    async def _recover_idle(self) -> None:
        if self.executions.current is not None or not self.kernel.unresponsive:
            return  # the worker took a cell first: its run replaces the kernel
        self._state_lost_pending = True
        self._replaced.clear()  # no cell starts on the lost kernel meanwhile
        try:
            await self._restart(await self.kernel.exit_reason())
            # Its note now, before any next cell: written after that cell, it read as if
            # the cell had run on the kernel that died.
            await self._write_note()
        finally:
            self._replaced.set()

    async def _write_note(self) -> None:
        """Put the pending note (a restart) in the notebook: after the cell it happened in,
        or at once when no cell ran."""
        note, self._note = self._note, None
        reasons, self._note_restarts = self._note_restarts, []
        if note is not None:
            await self.add_note(note, note_event(RESTART_EVENT, reasons) if reasons else None)

    async def add_note(self, text: str, event: dict[str, Any] | None = None) -> None:
        """Put a note of the service in the notebook, chained in the store first
        (:meth:`Store.record_note`): ``interp audit verify`` then reports it removed, edited
        or moved, and a note it has no record of. A note the store cannot take (a full
        disk) is still written, and logged: verify will call it one with no record."""

        async def record(after: str | None) -> int | None:
            try:
                return await self.writer.run(
                    partial(self.store.record_note, self.id, text, event, after)
                )
            except Exception as exc:
                log.warning("session %s: a note could not be recorded: %r", self.id, exc)
                return None

        await self.notebook.add_markdown(text, event, record)

    async def _fail(self, reason: str) -> None:
        """Give up on the kernel: the session is dead and the broker will close it."""
        log.warning("session %s failed: %s", self.id, reason)
        self.failed_reason = reason
        self.status = "dead"
        self.metrics.restarts.labels("gave_up").inc()
        await self.writer.run(partial(self.store.set_status, self.id, "dead"))
        # The cells queued behind the failure never run: cancelled, saying why.
        for handle in self.executions.drain():
            await self._cancel_failed(handle)
        if self.on_failed is not None:
            self.on_failed(self)

    async def _cancel_failed(self, handle: ExecutionHandle) -> None:
        """Cancel a cell that was to run in a session that has failed (never sent)."""
        handle.execution.error = ErrorInfo(
            ename="Cancelled", evalue="Not run. " + self._failed_message()
        )
        await self._abandon(handle, "cancelled", self.failed_reason or "failed")

    def _failed_message(self) -> str:
        return session_failed_message(
            self.id,
            self.failed_reason or "failed",
            self.settings.restart_limit,
            self.settings.restart_window_s,
        )

    async def interrupt(self, execution_id: str | None = None) -> None:
        """Interrupt the running execution (state is kept). With ``execution_id``, only
        that one: interrupted if it runs, cancelled if it waits in the queue (it never
        runs), left alone if it finished or is not known here. One held for approval at
        the head of the queue has not reached the kernel: it is cancelled (its approval
        withdrawn), and the queue moves on."""
        if self.status == "closed" or not self.kernel.started:
            raise SessionClosed(f"Session '{self.id}' is closed.")
        held = self.executions.held()
        if execution_id is not None:
            target = self.executions.get(execution_id)
            if target is None or target.finished.is_set():
                return
            if target is held or (
                target is not self.executions.current and self.executions.withdraw(target)
            ):
                # Out of the queue before anything awaits: the worker, free at that moment
                # (its cell just ended), took it while it was being cancelled and ran it,
                # the client told "cancelled" about code that then ran.
                await self._abandon(target, "cancelled", "cancelled")  # it never ran
                return
            if target is not self.executions.current:
                return  # neither waiting nor running: it has ended
        elif held is not None:
            await self._abandon(held, "cancelled", "cancelled")
            return
        handle = self.executions.current
        if handle is not None:
            handle.interrupt_requested = True
            if not handle.resumed:
                await waiting.until_started(handle, INTERRUPT_START_WAIT_S)
            if handle.finished.is_set():
                return
        # Exactly one interrupt per request, acknowledged by the kernel before any other
        # cell is sent. Never resent: a second SIGINT that lands while the interrupted cell
        # winds down makes ipykernel drop that cell's reply (reproduced), and one that
        # lands later would reach the next cell. Code that catches KeyboardInterrupt keeps
        # running; the client may interrupt again, and a timeout still ends it.
        if self._replacing is not None:
            return  # the kernel is being replaced: its running cell ends with it
        try:
            await self.kernel.interrupt()
        except RuntimeError as exc:
            # jupyter_client's "No kernel is running": replaced or gone meanwhile (a
            # timeout's restart); what ran there has ended or ends with that.
            log.info("session %s: nothing to interrupt: %s", self.id, exc)
            return
        if handle is not None:
            self._tell_if_ignored(handle)

    def _tell_if_ignored(self, handle: ExecutionHandle) -> None:
        """Tell ``handle``'s stderr (its stream, the record, the notebook) when it still
        runs :data:`INTERRUPT_IGNORED_S` after an interrupt: otherwise nothing said why the
        interrupt had done nothing until the timeout ended the cell."""
        if handle.ignored_told:
            return
        handle.ignored_told = True

        async def watch() -> None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(INTERRUPT_IGNORED_S):
                    await handle.finished.wait()
            rec = handle.recorder
            if handle.finished.is_set() or rec is None or self.status == "closed":
                return
            if handle is not self.executions.current or self._replacing is not None:
                return  # being ended another way (a restart, a timeout's escalation)
            text = interrupt_ignored_notice(INTERRUPT_IGNORED_S, handle.timeout_s)
            await self.kernel.on_message("iopub", broker_notice(rec.msg_id, text))

        task = asyncio.create_task(watch(), name=f"interrupt-watch-{self.id}")
        self._watches.add(task)
        task.add_done_callback(self._watches.discard)

    @contextlib.asynccontextmanager
    async def restarting(self, *, recover: bool) -> AsyncIterator[None]:
        """One requested restart (and its recovery) at a time. With ``recover``, the
        queue is held meanwhile: only cells put first (the re-run cells) are taken, so
        that kept cells and cells other clients send wait for the whole recovery. A
        rebuild on request takes the same turn (``LiveSession.rebuilding``)."""
        async with self._restart_turn:
            if recover:
                self.executions.hold()
            try:
                yield
            finally:
                if recover:
                    self.executions.release()

    async def restart(self, *, keep_queued: bool = False) -> None:
        """Restart on request: a fresh kernel, state cleared, same session and notebook.

        The running cell ends ``interrupted`` (reason ``restarted``); cells queued behind
        it are cancelled, since they were written against the state the restart throws
        away, unless ``keep_queued``. One held for approval is cancelled whatever
        ``keep_queued`` says (its approval withdrawn): it never runs on the new kernel.
        Returns once the running cell is recorded (and the restart's note after it). Raises
        SessionClosed when the session is closed, also while it restarts, and
        KernelStartFailed when no new kernel came up.
        """
        if self.failed_reason is not None:
            raise SessionClosed(self._failed_message())
        if self.status == "closed" or not self.kernel.started:
            raise SessionClosed(f"Session '{self.id}' is closed; create a new session.")
        # Already being replaced on the service's own account: that is the new kernel.
        joined = self._replacing is not None and self._replacing != "requested"
        held = self.executions.held()
        running = self.executions.current if held is None else None
        self._restart_requested = True
        # No cell starts (nor an automatic restart) meanwhile: a cell the worker takes (one
        # kept, once the held one is cancelled) waits for the new kernel.
        self._replaced.clear()
        try:
            if running is not None and not joined:
                running.interrupt_requested = True
            dropped = [] if keep_queued else self.executions.drain()
            for handle in [held, *dropped] if held is not None else dropped:
                handle.execution.state_lost = True
                handle.execution.error = ErrorInfo(
                    ename="Cancelled",
                    evalue=(
                        "Not run: the kernel was restarted on request while this cell "
                        "waited, and its state is gone. Run it again if it still applies."
                    ),
                )
                await self._abandon(handle, "cancelled", "restarted")
            if joined:
                while self._replacing is not None:
                    await self._replaced.wait()
            else:
                await self._restart("requested")
        finally:
            self._restart_requested = False
            self._replaced.set()
        if running is not None and running.execution.started_at is not None:
            running.changed.set()  # its wait sees the new kernel at once
            await running.finished.wait()  # recorded before the note
        await self._write_note()
        self._raise_unless_restarted()
        self._state_lost_pending = False

    def _raise_unless_restarted(self) -> None:
        if self.closed:
            raise SessionClosed(f"Session '{self.id}' was closed while it restarted.")
        if self.failed_reason is not None:
            raise SessionClosed(self._failed_message())
        if self.status == "dead":
            # Not "delete the session": a cause that passes (an engine being restarted)
            # leaves it dead only until a restart succeeds.
            raise KernelStartFailed(
                "The kernel could not be restarted (the cause is in the service logs): the "
                "session has no kernel until a restart succeeds. Restart it again later, "
                "or delete it."
            )
