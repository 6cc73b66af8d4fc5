"""One session's kernel: start, attach, restart, interrupt, stop, and its message readers.

A :class:`Kernel` wraps jupyter_client's ``AsyncKernelManager`` (whose provisioner is the
backend) and one ``AsyncKernelClient``. Two reader tasks (iopub, shell) hand every message
to the ``on_message`` callback its owner supplied; the kernel does not interpret them. A
message that fails its signature or does not parse is hostile input: it is counted, logged
sparingly and dropped (docs/security.md H-34).

Every wait is bounded with ``asyncio.timeout`` (on Python 3.11, ``asyncio.wait_for`` can
swallow a cancellation, which left a closing session waiting forever). Restarts are
budgeted (docs/security.md R-03): automatic restarts beyond ``limit`` within
``window_s`` are refused, so a kernel that crashes at every start cannot loop forever;
requested restarts never count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from collections import deque
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.manager import AsyncKernelManager

from interpreter import iopub_watch
from interpreter.backends import Backend
from interpreter.backends.base import LAUNCH_KWARG, LaunchOptions
from interpreter.channel_reader import ChannelReader
from interpreter.channels import stop_channels
from interpreter.errors import KernelStartFailed
from interpreter.heartbeat import Heartbeat, hb_url
from interpreter.kernel_manager import KernelManager
from interpreter.kernelspecs import kernel_spec_manager
from interpreter.models import KernelInfo
from interpreter.readiness import wait_ready, wait_subscribed
from interpreter.wire import BrokerSession
from interpreter.zmqctx import Context

log = logging.getLogger(__name__)

#: Largest single ZMQ message the broker accepts from a kernel (H-33).
MAX_ZMQ_MESSAGE = 128 << 20
#: Messages of one kernel the broker's sockets hold before it reads them.
RECEIVE_QUEUE_MESSAGES = 4
#: Kernels tried for one session start before giving up.
START_ATTEMPTS = 2
#: Seconds allowed for a kernel's ``kernel_info`` reply once its channels are up.
KERNEL_INFO_TIMEOUT_S = 10
#: Seconds a message-mode kernel gets to acknowledge an interrupt.
INTERRUPT_ACK_TIMEOUT_S = 10.0
#: Seconds of one poll of the control channel while a reply is awaited.
CONTROL_POLL_S = 0.25
#: Seconds between two looks for a message a channel holds unnoticed while no cell's wait
#: looks (late output of a background thread on an idle session).
RECHECK_S = 1.0

#: The exit reason of a kernel that stopped answering its heartbeat but has not exited.
UNRESPONSIVE = "kernel_unresponsive"

#: ``await on_message(channel, msg)`` for every message read from iopub or shell, in order:
#: a channel's next message is read once the callback returned.
MessageCallback = Callable[[str, dict[str, Any]], Awaitable[None]]


def _release_manager_context(km: AsyncKernelManager) -> None:
    """Close the ZMQ context jupyter_client's manager made for its control socket, if it
    made one, with no linger. Left to the garbage collector, the context's ``__del__``
    waits (``term``, in C, on whichever thread lets go of it last: the event loop) until
    every socket made in it has sent what it holds; one holding a request for a kernel
    that is gone never does, and the broker would hang there."""
    with contextlib.suppress(Exception):
        km._close_control_socket()
    made = km._trait_values.get("context")
    if isinstance(made, zmq.Context) and not made.closed:
        made.destroy(linger=0)


async def _ignore(channel: str, msg: dict[str, Any]) -> None:
    """The message callback of a closed kernel: nobody listens any more."""


async def control_request(kc: Any, msg_type: str, within_s: float) -> dict[str, Any] | None:
    """Send ``msg_type`` on ``kc``'s control channel and return its reply, or None when
    none came within ``within_s`` seconds. ipykernel serves the control channel from a
    thread of its own, so it answers while a cell runs. ``kc`` is an
    ``AsyncKernelClient`` with its channels started; nothing else may read its control
    channel meanwhile.

    A channel closed meanwhile (the kernel died and is being replaced) is no reply:
    pyzmq then cancels the read, which is not this task being cancelled.
    """
    msg = kc.session.msg(msg_type, content={})
    kc.control_channel.send(msg)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    task = asyncio.current_task()
    while (remaining := deadline - loop.time()) > 0:
        try:
            # Polled a quarter second at a time: each poll looks at the socket afresh, so a
            # wake-up pyzmq missed (interpreter/channel_reader.py) costs that, not the wait.
            reply: dict[str, Any] = await kc.get_control_msg(timeout=min(remaining, CONTROL_POLL_S))
        except queue.Empty:
            continue
        except asyncio.CancelledError:
            if task is not None and task.cancelling():
                raise
            return None
        except Exception:  # a bad message on the control channel: not ours (H-34)
            if not kc.control_channel.is_alive():
                return None
            continue
        if (reply.get("parent_header") or {}).get("msg_id") == msg["header"]["msg_id"]:
            return reply
    return None


async def send_interrupt(kc: Any, ack_within: float = INTERRUPT_ACK_TIMEOUT_S) -> bool:
    """Send ``interrupt_request`` on ``kc``'s control channel; wait for its reply.

    The reply means the kernel has raised SIGINT on itself. Whoever sends the next cell
    only after that reply knows the interrupt cannot reach that cell: an interrupt that
    lands between cells is ignored (ipykernel ignores SIGINT outside a request). Without
    waiting, an interrupt delayed in the control queue (seen under load) hits whatever
    runs when it is finally handled: the next cell. Returns False when no reply came
    within ``ack_within`` seconds.
    """
    return await control_request(kc, "interrupt_request", ack_within) is not None


async def _control_kernel_info(kc: Any, timeout_s: float) -> dict[str, Any]:
    """``kernel_info`` over the control channel (answered even while a cell runs)."""
    reply = await control_request(kc, "kernel_info_request", timeout_s)
    if reply is None:
        raise TimeoutError(f"no kernel_info reply on the control channel in {timeout_s:g} s")
    return reply


class RestartBudget:
    """At most ``limit`` automatic restarts within any ``window_s`` seconds (R-03)."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self._times: deque[float] = deque()

    def allow(self, now: float) -> bool:
        """Whether one more restart at loop time ``now`` fits; if it does, it is counted."""
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True

    def refund(self) -> None:
        """Give back the last restart counted: it never got to start a kernel (the
        Docker engine did not answer), so it says nothing of the kernel crash-looping."""
        if self._times:
            self._times.pop()


class Restart(Enum):
    """How a restart ended."""

    DONE = "done"
    #: Refused by the restart budget: the session should give up.
    OVER_BUDGET = "over_budget"
    #: The new kernel did not start.
    FAILED = "failed"
    #: No new kernel could start because the backend does not answer (the Docker engine):
    #: not counted in the restart budget.
    BACKEND_DOWN = "backend_down"
    #: The kernel was stopped for good (its session closed): none was started.
    STOPPED = "stopped"


class Kernel:
    """The kernel of one session.

    Args:
        name: the session id (log context, task names).
        backend: where the kernel runs.
        options: the launch options the backend gets at every (re)start.
        start_timeout_s: how long a start or restart may take.
        budget: the automatic-restart budget.
        on_message: receives every iopub and shell message, on the event loop.
        heartbeat_s: seconds between heartbeat pings; 0 turns the heartbeat off.
        heartbeat_misses: unanswered pings in a row after which the kernel is lost.
        on_unresponsive: called (on the event loop) when the heartbeat gives up.
    """

    def __init__(
        self,
        *,
        name: str,
        backend: Backend,
        options: LaunchOptions,
        start_timeout_s: float,
        budget: RestartBudget,
        on_message: MessageCallback,
        heartbeat_s: float = 0.0,
        heartbeat_misses: int = 5,
        on_unresponsive: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.backend = backend
        self.options = options
        self.start_timeout_s = start_timeout_s
        self.budget = budget
        self.on_message = on_message
        self.info = KernelInfo()
        #: ``language_info`` of the kernel's last ``kernel_info`` reply.
        self.language_info: dict[str, Any] = {}
        self.restarts = 0
        self.km: AsyncKernelManager | None = None
        self.kc: Any = None
        self._ctx: zmq.asyncio.Context | None = None
        self._readers: list[asyncio.Task[None]] = []
        #: The channels the reader tasks read, by name (``iopub``, ``shell``).
        self._channels: dict[str, ChannelReader] = {}
        #: Held while the kernel is replaced; a stop waits for it.
        self._lock = asyncio.Lock()
        #: Set by :meth:`stop`: no kernel is started again.
        self._stopped = False
        #: Held while an interrupt is on its way, so that no cell is sent meanwhile.
        self._interrupting = asyncio.Lock()
        self._bad_messages = 0
        #: Shell requests of :meth:`settle` awaiting their reply, by msg_id.
        self._probes: dict[str, asyncio.Future[None]] = {}
        self.heartbeat_s = heartbeat_s
        self.heartbeat_misses = heartbeat_misses
        self.on_unresponsive = on_unresponsive
        self._heartbeat: Heartbeat | None = None
        #: Largest message accepted from the kernel (``max_kernel_message_bytes``).
        self.max_message_bytes = MAX_ZMQ_MESSAGE
        #: The msg_id of the last execute request (told when its output was dropped).
        self._last_execute: str | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, launched: Callable[[], None] | None = None) -> None:
        """Start a kernel and connect to it. Raises KernelStartFailed.

        A kernel that dies before it answers is replaced once by a fresh one: under heavy
        load a start was seen to fail that way and the next attempt to work. (The cause
        found, a Docker runtime directory shut to the kernel for an instant while it read
        its connection file, is fixed in ``ipc.lock_runtime_dir``.) What the failed kernel
        said is logged either way. ``launched`` is called each time a kernel
        is launched (its process or container is up), before the handshake.

        A :meth:`stop` called meanwhile (the session deleted while it starts) waits for
        the start to end, then stops what it started: stopping the kernel under its
        handshake cut the handshake short with a ``CancelledError`` and could leave a
        container running. A kernel already stopped is not started.
        """
        async with self._lock:
            if self.stopped:
                raise KernelStartFailed("The session was closed before its kernel started.")
            for attempt in range(1, START_ATTEMPTS + 1):
                try:
                    await self._start_once(launched)
                    return
                except RuntimeError as exc:  # jupyter_client: the kernel died before replying
                    if attempt < START_ATTEMPTS and not self.stopped:
                        log.warning("session %s: %s; starting a fresh kernel", self.name, exc)
                        continue
                    raise _start_failed(exc) from exc
                except KernelStartFailed:
                    raise
                except Exception as exc:
                    raise _start_failed(exc) from exc

    async def _start_once(self, launched: Callable[[], None] | None = None) -> None:
        if self.km is not None:
            _release_manager_context(self.km)  # an earlier attempt's, or generation's
        self.km = self._new_manager()
        try:
            async with asyncio.timeout(self.start_timeout_s):
                await self.km.start_kernel(**{LAUNCH_KWARG: self.options})
            if launched is not None:
                launched()
            await self._connect()
        except Exception as exc:
            await self._log_start_failure(exc)
            await self._shutdown()
            raise

    async def attach(self, connection: dict[str, Any], provisioner: dict[str, Any]) -> None:
        """Connect to a kernel that outlived an earlier broker process (R-07).

        The handshake goes over the control channel, which ipykernel serves from its own
        thread: a kernel still busy with a cell of the earlier broker answers at once
        (on the shell channel it would answer only once that cell ends).
        """
        km = self._new_manager()
        conn = dict(connection)
        if isinstance(conn.get("key"), str):
            conn["key"] = conn["key"].encode()
        # The connection info is stored once, in its own column; the provisioner wants it too.
        await self.backend.reattach(km, {**provisioner, "connection_info": conn}, self.options)
        self.km = km
        await self._connect(busy_ok=True)

    async def settle(self) -> None:
        """Return once the kernel has finished every request sent before this call,
        including a cell an earlier broker left running: a ``kernel_info_request`` on the
        shell channel, which the kernel answers in order, after them."""
        msg = self.kc.session.msg("kernel_info_request", content={})
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._probes[msg["header"]["msg_id"]] = waiter
        try:
            self.kc.shell_channel.send(msg)
            await waiter
        finally:
            self._probes.pop(msg["header"]["msg_id"], None)

    async def restart(self, *, automatic: bool) -> Restart:
        """Replace the kernel with a fresh one (a new process or container).

        Automatic restarts (deaths, timeouts, ``exit()``) are subject to the budget. A
        fresh kernel that dies before it answers is replaced once more, as at start (seen
        once in CI right after an out-of-memory death, under load).
        """
        assert self.km is not None
        async with self._lock:
            if self.stopped:
                return Restart.STOPPED
            if automatic and not self.budget.allow(asyncio.get_running_loop().time()):
                return Restart.OVER_BUDGET
            self.restarts += 1
            for attempt in range(1, START_ATTEMPTS + 1):
                await self._disconnect()
                try:
                    async with asyncio.timeout(self.start_timeout_s):
                        await self.km.restart_kernel(now=True)
                    await self._connect()
                    return Restart.DONE
                except Exception as exc:
                    # Why the fresh kernel did not answer (its exit reason, its output).
                    await self._log_start_failure(exc)
                    if attempt < START_ATTEMPTS:
                        # It died before replying, or its container went while it started
                        # (removed, killed): one more fresh kernel, as at start.
                        continue
                    if not await self.backend.reachable(fresh=True):
                        log.warning(
                            "session %s: no kernel restart: the Docker engine does not answer",
                            self.name,
                        )
                        self.budget.refund()
                        return Restart.BACKEND_DOWN
                    log.exception("session %s: kernel restart failed", self.name)
                    return Restart.FAILED
            return Restart.FAILED

    async def stop(self) -> None:
        """Stop the kernel (its process or container) for good; never raises.

        A restart under way is let finish first (stopping the kernel under it left its
        sockets and a half-started kernel behind), and none starts afterwards.
        """
        self._stopped = True
        async with self._lock:
            await self._shutdown()

    async def _shutdown(self) -> None:
        await self._disconnect()
        if self.km is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(30):
                await self.km.shutdown_kernel(now=True)

    async def detach(self) -> None:
        """Stop reading and release the sockets; the kernel keeps running."""
        await self._disconnect()

    def close(self) -> None:
        """Release the ZMQ context (after :meth:`stop` or :meth:`detach`) and let go of
        the owner's callbacks. They are bound methods of the session, which holds this
        kernel: kept, they would make the closed session (its notebook, its executions'
        output) a reference cycle that only the cyclic collector frees, long after."""
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
            self._ctx = None
        if self.km is not None:
            _release_manager_context(self.km)
        self.on_message = _ignore
        self.on_unresponsive = None

    # ------------------------------------------------------------------ queries and requests

    @property
    def started(self) -> bool:
        return self.km is not None

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called: this kernel is never started again."""
        return self._stopped

    @property
    def unresponsive(self) -> bool:
        """The heartbeat gave up on this kernel: it is frozen or gone."""
        return self._heartbeat is not None and self._heartbeat.lost

    async def is_alive(self) -> bool:
        """Whether the kernel runs and answers its heartbeat (a frozen kernel is not)."""
        if self.unresponsive:
            return False
        return self.km is not None and bool(await self.km.is_alive())

    async def execute(self, code: str, msg_id: str) -> str:
        """Send ``code`` for execution as request ``msg_id`` (the execution's id, so that
        a later broker can still tell its output apart); returns ``msg_id``. Waits for an
        interrupt on its way to arrive first, so that it cannot hit this cell."""
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": False,
        }
        msg = self.kc.session.msg("execute_request", content)
        msg["header"]["msg_id"] = msg["msg_id"] = msg_id
        async with self._interrupting:
            self.kc.shell_channel.send(msg)
        self._last_execute = msg_id
        return msg_id

    async def interrupt(self, ack_within: float = INTERRUPT_ACK_TIMEOUT_S) -> None:
        """Interrupt whatever the kernel runs (state is kept); returns once the interrupt
        has reached the kernel.

        A signal-mode kernel (local) is signalled directly, which delivers at once. A
        message-mode kernel (docker) gets ``interrupt_request`` and must acknowledge it
        (:func:`send_interrupt`); no cell is sent to the kernel until it has.
        """
        if self.km is None:
            return
        async with self._interrupting:
            spec = self.km.kernel_spec
            if spec is not None and spec.interrupt_mode == "message" and self.kc is not None:
                if not await send_interrupt(self.kc, ack_within):
                    log.warning(
                        "session %s: the kernel did not acknowledge an interrupt", self.name
                    )
            else:
                await self.km.interrupt_kernel()

    async def record(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """What finds this kernel again: (connection info, provisioner info)."""
        assert self.km is not None
        raw = self.km.get_connection_info()
        conn = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in raw.items()}
        info: dict[str, Any] = {}
        if self.km.provisioner is not None:
            info = dict(await self.km.provisioner.get_provisioner_info())
        info.pop("connection_info", None)  # kept (once) with the connection
        info["kernel_id"] = self.km.kernel_id
        return conn, info

    async def exit_reason(self) -> str:
        """Why the kernel is gone: the backend's reason, a signal or exit code,
        ``kernel_unresponsive`` (it still exists but stopped answering its heartbeat:
        frozen), or ``unresponsive``."""
        assert self.km is not None
        prov = self.km.provisioner
        exit_reason = getattr(prov, "exit_reason", None)
        if exit_reason is not None:
            with contextlib.suppress(Exception):
                reason = await exit_reason()
                if reason:
                    return str(reason)
        code = None
        if prov is not None:
            with contextlib.suppress(Exception):
                code = await prov.poll()
        if isinstance(code, int):
            return f"signal:{-code}" if code < 0 else f"exit:{code}"
        return UNRESPONSIVE if self.unresponsive else "unresponsive"

    # ------------------------------------------------------------------ connection

    def _new_manager(self) -> AsyncKernelManager:
        km = KernelManager(
            kernel_name=self.backend.kernel_name, kernel_spec_manager=kernel_spec_manager()
        )
        km.connection_file = str(self.options.session_dir / "connection.json")
        self.backend.configure(km, self.options)
        return km

    async def _connect(self, *, busy_ok: bool = False) -> None:
        assert self.km is not None
        if self._ctx is None:
            ctx = Context()
            # Hold few messages here: under a flood the rest wait in the kernel, whose send
            # queue then holds the printing code up rather than drop or pile up messages
            # (interpreter_kernel.backpressure), not in the broker's memory (issue 12).
            ctx.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE_MESSAGES)
            ctx.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
            ctx.setsockopt(zmq.LINGER, 0)
            self._ctx = ctx
        # A fresh jupyter Session per client: same key, new id. Every client of one manager
        # would otherwise share a ZMQ identity, and a lingering socket of an earlier client
        # can hold it on the kernel's ROUTER so the new client's requests go unanswered.
        # BrokerSession reads messages as checked but cheaper (interpreter/wire.py).
        session = BrokerSession(
            key=self.km.session.key, signature_scheme=self.km.session.signature_scheme
        )
        kc = self.km.client(context=self._ctx, session=session)
        # No heartbeat channel (a thread per client; the broker has its own heartbeat,
        # interpreter/heartbeat.py) and no stdin channel (requests never allow stdin).
        # ``kc.is_alive()`` asks the manager, the client's parent, not the heartbeat.
        kc.start_channels(hb=False, stdin=False)
        # A reply past MAXMSGSIZE cuts the shell connection; a send on it then waited for a
        # peer for ever, on the event loop (a cell raising a 30 MB error froze the broker).
        # Never blocking: such a send fails, and the cell's end is found another way.
        kc.shell_channel.socket.setsockopt(zmq.SNDTIMEO, 0)
        # A kernel a pool readied has answered kernel_info already (its reply came with
        # the claim): the new client waits only for its IOPub subscription to take.
        readied = None if busy_ok else getattr(self.km.provisioner, "ready_reply", None)
        try:
            if busy_ok:
                reply = await _control_kernel_info(kc, KERNEL_INFO_TIMEOUT_S)
            elif readied is not None and await wait_subscribed(kc):
                reply = readied
            else:
                reply = await wait_ready(kc, self.start_timeout_s)
        except Exception:
            stop_channels(kc)
            raise
        content = reply.get("content", {})
        lang = content.get("language_info") or {}
        self.language_info = dict(lang)
        self.info = KernelInfo(
            language=str(lang.get("name", "python")), version=str(lang.get("version", ""))
        )
        self.kc = kc
        self._channels = {name: ChannelReader(kc, name) for name in ("iopub", "shell")}
        self._readers = [
            asyncio.create_task(
                self._read(self._channels["iopub"].receive, "iopub"), name=f"iopub-{self.name}"
            ),
            asyncio.create_task(
                self._read(self._channels["shell"].receive, "shell"), name=f"shell-{self.name}"
            ),
            asyncio.create_task(self._watch_iopub(kc), name=f"iopub-watch-{self.name}"),
            asyncio.create_task(self._recheck_every(RECHECK_S), name=f"recheck-{self.name}"),
        ]
        if self.heartbeat_s > 0:
            self._heartbeat = Heartbeat(
                name=self.name,
                ctx=self._ctx,
                url=hb_url(self.km.get_connection_info()),
                interval_s=self.heartbeat_s,
                misses=self.heartbeat_misses,
                on_lost=self.on_unresponsive,
            )
            self._heartbeat.start()

    async def _watch_iopub(self, kc: Any) -> None:
        """Renew the iopub channel whenever its connection is cut (a message over the size
        limit: see :mod:`interpreter.iopub_watch`) and tell the running cell."""

        async def reconnected(detail: str) -> None:
            log.warning("session %s: output may be missing (%s)", self.name, detail)
            if self._last_execute is not None:
                notice = iopub_watch.dropped_notice(
                    self._last_execute, self.max_message_bytes, reconnected=True
                )
                await self.on_message("iopub", notice)

        while True:
            detail = await iopub_watch.cut(kc.iopub_channel.socket, reconnected)
            if kc is not self.kc:
                return
            reader = self._readers[0]
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
            iopub_watch.renew_channel(kc)
            self._channels["iopub"] = ChannelReader(kc, "iopub")
            self._readers[0] = asyncio.create_task(
                self._read(self._channels["iopub"].receive, "iopub"), name=f"iopub-{self.name}"
            )
            log.warning(
                "session %s: the kernel's output link was cut (%s, last message size limit "
                "%d bytes); renewed it",
                self.name,
                detail,
                self.max_message_bytes,
            )
            if self._last_execute is not None and await self.is_alive():
                notice = iopub_watch.dropped_notice(self._last_execute, self.max_message_bytes)
                await self.on_message("iopub", notice)

    async def _disconnect(self) -> None:
        if self._heartbeat is not None:
            await self._heartbeat.stop()
            self._heartbeat = None
        for task in self._readers:
            task.cancel()
        for task in self._readers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._readers = []
        self._channels = {}
        if self.kc is not None:
            with contextlib.suppress(Exception):
                stop_channels(self.kc)
            self.kc = None

    def recheck(self) -> None:
        """Read a message a channel holds without its reader having been woken
        (:mod:`interpreter.channel_reader`): called by a cell's wait when it wakes with
        nothing new, and every :data:`RECHECK_S` whatever runs."""
        for reader in self._channels.values():
            if reader.recheck():
                log.info(
                    "session %s: a %s message was waiting unnoticed (%d so far); read it",
                    self.name,
                    reader.channel,
                    reader.rechecked,
                )

    async def _recheck_every(self, interval_s: float) -> None:
        """Recheck the channels every ``interval_s``: a message pyzmq was not woken for
        otherwise waits for the kernel's next one, which an idle kernel may never send.
        One look at each socket's queue; 200 idle sessions cost a few milliseconds a
        second."""
        while True:
            await asyncio.sleep(interval_s)
            self.recheck()

    async def _read(self, receive: Callable[[], Any], channel: str) -> None:
        while True:
            try:
                msg = await receive()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # bad signature, bad JSON: hostile input (H-34)
                self._note_bad_message(exc)
                if channel == "iopub" and self._last_execute is not None:
                    # Likely the running cell's output: its result says some is missing.
                    notice = iopub_watch.unreadable_notice(self._last_execute, exc)
                    with contextlib.suppress(Exception):
                        await self.on_message(channel, notice)
                continue
            parent_id = msg["parent_header"].get("msg_id")  # an object (interpreter/wire.py)
            probe = self._probes.get(parent_id) if isinstance(parent_id, str) else None
            if probe is not None and channel == "shell":
                if not probe.done():
                    probe.set_result(None)
                continue
            try:
                await self.on_message(channel, msg)
            except Exception:
                log.exception("session %s: could not apply a %s message", self.name, channel)

    def _note_bad_message(self, exc: Exception) -> None:
        self._bad_messages += 1
        if self._bad_messages <= 5 or self._bad_messages % 1000 == 0:
            log.warning(
                "session %s: dropped a bad kernel message (%s, %d so far)",
                self.name,
                type(exc).__name__,
                self._bad_messages,
            )

    async def _log_start_failure(self, exc: Exception) -> None:
        """Say why a kernel did not start: its exit reason and last output, when known."""
        reason, tail = "unknown", ""
        if self.km is not None and self.km.provisioner is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    reason = await self.exit_reason()
            logs_tail = getattr(self.km.provisioner, "logs_tail", None)
            if logs_tail is not None:
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(10):
                        tail = await logs_tail()
        log.warning(
            "session %s: kernel start failed (%s: %s); kernel state %s; last output:\n%s",
            self.name,
            type(exc).__name__,
            exc,
            reason,
            tail or "(none)",
        )


def _start_failed(exc: Exception) -> KernelStartFailed:
    msg = str(exc) if isinstance(exc, RuntimeError) else ""
    return KernelStartFailed(
        "The kernel did not start"
        + (f": {msg}" if msg else "")
        + ". Try again; if it keeps failing, check the service logs."
    )
