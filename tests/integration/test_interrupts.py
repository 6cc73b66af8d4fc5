"""Interrupt delivery with a real kernel: acknowledged, once, and never reaching another cell."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
from jupyter_client.manager import AsyncKernelManager

from interpreter.kernel import send_interrupt
from interpreter.kernelspecs import kernel_spec_manager
from tests.conftest import over_ipc

pytestmark = pytest.mark.slow


@pytest.fixture
async def kernel() -> AsyncIterator[Any]:
    km = over_ipc(
        AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_spec_manager())
    )
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)
    try:
        yield kc
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


async def until(kc: Any, msg_id: str, msg_type: str) -> dict[str, Any]:
    while True:
        msg: dict[str, Any] = await kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == msg_type:
            return msg


async def result_of(kc: Any, code: str) -> str:
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "execute_result":
            out.append(msg["content"]["data"]["text/plain"])

    reply = await kc.execute_interactive(code, timeout=30, output_hook=hook, stop_on_error=False)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


async def test_an_acknowledged_interrupt_ends_its_cell_and_no_other(kernel: Any) -> None:
    await result_of(kernel, "x = 42")
    for _ in range(5):
        # stop_on_error=False, as the broker sends it (else ipykernel may answer the next
        # request "aborted" after this cell's KeyboardInterrupt).
        cell = kernel.execute(
            "import time; print('running', flush=True); time.sleep(30)", stop_on_error=False
        )
        # The cell's own output: its code runs. execute_input is not enough, ipykernel
        # announces the cell before it runs it, and a SIGINT in between reaches
        # ipykernel's request handling, which then sends no reply at all (seen in CI).
        await until(kernel, cell, "stream")
        assert await send_interrupt(kernel)
        reply = await kernel.get_shell_msg(timeout=30)
        assert reply["parent_header"]["msg_id"] == cell
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert await result_of(kernel, "x") == "42"


#: Forces the second gap of :mod:`interpreter_kernel.interrupts`: ipykernel's control
#: thread sends SIGINT (through ``os.killpg``) only once the main thread is on its way into
#: ``time.sleep``, and the kernel's threads share one CPU, so the main thread is often
#: preempted between releasing the GIL and starting the sleep, and the signal lands there.
#: Without the kernel's wakes, 15 of 30 such interrupts left the sleep running to its end.
GAP = """
import os, threading, time
_real_killpg = os.killpg
_in_killpg, _entering = threading.Event(), threading.Event()
def _killpg(pgid, sig):
    _in_killpg.set()
    _entering.wait(5)
    _real_killpg(pgid, sig)
os.killpg = _killpg
_cpu = min(os.sched_getaffinity(0))
for _tid in os.listdir("/proc/self/task"):
    os.sched_setaffinity(int(_tid), {_cpu})
"""
INTO_THE_GAP = (
    "_in_killpg.clear(); _entering.clear(); print('running', flush=True); "
    "_in_killpg.wait(30); _entering.set(); time.sleep(600)"
)


async def reply_to(kc: Any, msg_id: str) -> dict[str, Any]:
    while True:
        reply: dict[str, Any] = await kc.get_shell_msg(timeout=30)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


async def test_an_interrupt_landing_as_the_cell_enters_a_blocking_call_ends_it(
    kernel: Any,
) -> None:
    await result_of(kernel, "x = 42")
    await result_of(kernel, GAP)
    for _ in range(12):
        cell = kernel.execute(INTO_THE_GAP, stop_on_error=False)
        await until(kernel, cell, "stream")
        assert await send_interrupt(kernel)
        # The sleep lasts 600 s: a reply at all means the interrupt ended it.
        reply = await reply_to(kernel, cell)
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        await until(kernel, cell, "status")
    assert await result_of(kernel, "x") == "42"


#: The same gap with a SIGINT from elsewhere (the local backend's broker signals the
#: process group; anyone may): a thread of the cell's own sends it, process-directed, once
#: the main thread is on its way into the sleep.
SENDER = """
import os, signal, threading, time
_at_the_gap = threading.Event()
def _send_at_the_gap():
    _at_the_gap.wait(30)
    os.kill(os.getpid(), signal.SIGINT)
_cpu = min(os.sched_getaffinity(0))
for _tid in os.listdir("/proc/self/task"):
    os.sched_setaffinity(int(_tid), {_cpu})
"""
SENT_INTO_THE_GAP = (
    "_at_the_gap.clear(); threading.Thread(target=_send_at_the_gap).start(); "
    "_at_the_gap.set(); time.sleep(600)"
)


async def test_a_sigint_from_anyone_landing_as_the_cell_enters_a_blocking_call_ends_it(
    kernel: Any,
) -> None:
    await result_of(kernel, SENDER)
    for _ in range(12):
        cell = kernel.execute(SENT_INTO_THE_GAP, stop_on_error=False)
        reply = await reply_to(kernel, cell)  # the sleep lasts 600 s
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        await until(kernel, cell, "status")


async def test_the_wakes_leave_a_cell_that_outlives_its_interrupt_undisturbed(
    kernel: Any,
) -> None:
    """A cell that catches the interrupt and sleeps on through the wakes (0.02, 0.25 and
    1 s after it) sleeps its whole time: each wake breaks the sleep off, finds no SIGINT
    pending, and Python resumes the sleep."""
    counted = (
        "import signal, time, interpreter_kernel.interrupts as wake\n"
        "woken = []\n"
        "def count(signum, frame):\n"
        "    woken.append(signum)\n"
        "wake._do_nothing = count\n"
        "signal.signal(wake.WAKE_SIGNAL, count)\n"
    )
    await result_of(kernel, counted)
    cell = kernel.execute(
        "try:\n"
        "    print('running', flush=True); time.sleep(600)\n"
        "except KeyboardInterrupt:\n"
        "    began = time.monotonic(); time.sleep(1.5); slept = time.monotonic() - began\n",
        stop_on_error=False,
    )
    await until(kernel, cell, "stream")
    assert await send_interrupt(kernel)
    assert (await reply_to(kernel, cell))["content"]["status"] == "ok"
    assert await result_of(kernel, "len(woken) >= 1 and slept >= 1.5") == "True"


async def test_a_wake_signal_handler_of_the_users_own_is_never_called(kernel: Any) -> None:
    await result_of(
        kernel,
        "import signal, time\n"
        "theirs = []\n"
        "_ = signal.signal(signal.SIGURG, lambda signum, frame: theirs.append(signum))\n",
    )
    # A busy loop: the interrupt ends it without a wake. Then the cell runs on past the
    # times the wakes would come.
    cell = kernel.execute(
        "try:\n"
        "    print('running', flush=True)\n"
        "    while True:\n"
        "        pass\n"
        "except KeyboardInterrupt:\n"
        "    time.sleep(1.5)\n",
        stop_on_error=False,
    )
    await until(kernel, cell, "stream")
    assert await send_interrupt(kernel)
    assert (await reply_to(kernel, cell))["content"]["status"] == "ok"
    assert await result_of(kernel, "theirs") == "[]"


#: The threads of the kernel process that do not block SIGINT, by name, and whether the
#: main thread does.
SIGINT_OPEN = """
import os, signal, threading
def _sigint_blocked(tid):
    with open(f"/proc/self/task/{tid}/status") as f:
        mask = next(l for l in f if l.startswith("SigBlk:")).split()[1]
    return bool(int(mask, 16) >> (signal.SIGINT - 1) & 1)
_main = threading.main_thread().native_id
_names = {t.native_id: t.name for t in threading.enumerate()}
_open = sorted(
    _names.get(int(tid), tid)
    for tid in os.listdir("/proc/self/task")
    if int(tid) != _main and not _sigint_blocked(tid)
)
(_open, _sigint_blocked(_main))
"""


async def test_only_the_main_thread_can_take_an_interrupt(kernel: Any) -> None:
    """A SIGINT taken by another thread never breaks off a call the main thread is blocked
    in (CPython flags only the main thread, and only from the main thread); a control
    thread that started a thread right after sending one took it that way. Every thread
    the kernel starts (control, IOPub, heartbeat, the output pipes' watchers, libzmq's)
    blocks it; the main thread, running a cell, does not."""
    assert await result_of(kernel, SIGINT_OPEN) == "([], False)"


async def test_a_forked_child_reports_its_signals_to_no_pipe_of_the_kernel(kernel: Any) -> None:
    """multiprocessing forks the kernel: a child's signals must not reach the kernel's
    watcher, nor its pipe stay open in the child."""
    code = (
        "import os, signal\n"
        "_fds = set(os.listdir('/proc/self/fd'))\n"
        "_pid = os.fork()\n"
        "if _pid == 0:\n"
        "    _kept = _fds & set(os.listdir('/proc/self/fd'))\n"
        "    os._exit(0 if signal.set_wakeup_fd(-1) == -1 and len(_kept) < len(_fds) else 1)\n"
        "os.waitstatus_to_exitcode(os.waitpid(_pid, 0)[1])"
    )
    assert await result_of(kernel, code) == "0"


async def test_an_interrupt_whose_channel_closes_meanwhile_is_unanswered_not_an_error(
    kernel: Any,
) -> None:
    """The broker replaces a dead kernel's client while an interrupt waits for its answer:
    pyzmq cancels that wait, which is no answer (was: CancelledError, and HTTP 500). The
    kernel is stopped (SIGSTOP) so that it cannot answer first."""
    pid = kernel.parent.provisioner.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        # Cancelling the waiting task itself still cancels it.
        cancelled = asyncio.create_task(send_interrupt(kernel, ack_within=60))
        await asyncio.sleep(0)  # the request is sent and its answer awaited
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        # The channel closing under it is no answer.
        waiting = asyncio.create_task(send_interrupt(kernel, ack_within=60))
        await asyncio.sleep(0)
        kernel.control_channel.close()
        assert await asyncio.wait_for(waiting, 30) is False
    finally:
        os.kill(pid, signal.SIGCONT)


async def test_an_interrupt_between_cells_is_acknowledged_and_harmless(kernel: Any) -> None:
    await result_of(kernel, "y = 7")
    # Nothing runs: ipykernel ignores SIGINT between requests.
    for _ in range(5):
        assert await send_interrupt(kernel)
    assert await result_of(kernel, "y * 6") == "42"


#: A callback IPython runs before the cell's code (``event``); once armed, it holds the
#: next cell there (printing a marker first) as a slow callback would.
BEFORE_CODE_CALLBACK = """
import time
armed = []
def hold_before_code(*args):
    if armed:
        armed.clear()
        print('in the callback', flush=True)
        time.sleep(600)
get_ipython().events.register({event!r}, hold_before_code)
"""


async def stream_text(kc: Any, msg_id: str) -> str:
    msg = await until(kc, msg_id, "stream")
    text: str = msg["content"]["text"]
    return text


@pytest.mark.parametrize("event", ["pre_execute", "pre_run_cell"])
async def test_an_interrupt_in_a_callback_before_the_cells_code_ends_the_cell(
    kernel: Any, event: str
) -> None:
    """IPython catches ``KeyboardInterrupt`` from event callbacks and goes on: the cell's
    code then ran to its end as if never interrupted (1 in 15 under load, where the
    broker's SIGINT came just after ``execute_input``). The interrupt ends the cell."""
    await result_of(kernel, BEFORE_CODE_CALLBACK.format(event=event))
    await result_of(kernel, "armed.append(1)")
    cell = kernel.execute("print('the code ran', flush=True); time.sleep(600)", stop_on_error=False)
    assert await stream_text(kernel, cell) == "in the callback\n"
    assert await send_interrupt(kernel)
    reply = await reply_to(kernel, cell)  # both sleeps last 600 s
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    status = await until(kernel, cell, "status")
    assert status["content"]["execution_state"] == "idle"
    # The code never ran, and the kernel goes on.
    assert await result_of(kernel, "armed.append(1) or 'the code ran' not in _ih[-2]") == "True"


async def test_a_callback_before_the_cells_code_that_fails_still_lets_the_code_run(
    kernel: Any,
) -> None:
    """Other errors in those callbacks keep IPython's handling: reported, and the cell runs."""
    await result_of(
        kernel,
        "def broken(*args):\n"
        "    raise ValueError('broken callback')\n"
        "get_ipython().events.register('pre_execute', broken)",
    )
    assert await result_of(kernel, "6 * 7") == "42"
    await result_of(kernel, "get_ipython().events.unregister('pre_execute', broken)")


async def test_an_interrupt_while_a_shell_command_runs_ends_the_cell(kernel: Any) -> None:
    # IPython stops the command, prints ^C and used to run the rest of the cell, which
    # the broker then reported interrupted.
    for code in (
        "!echo started; sleep 30\nafter = 1",
        "out = !echo started >&2; sleep 30\nafter = 1",
    ):
        cell = kernel.execute(code, stop_on_error=False)
        if code.startswith("!"):
            await until(kernel, cell, "stream")  # the command runs
        else:
            await until(kernel, cell, "execute_input")
            await asyncio.sleep(1.0)
        assert await send_interrupt(kernel)
        reply = await reply_to(kernel, cell)
        assert reply["content"]["ename"] == "KeyboardInterrupt", reply["content"]
        assert await result_of(kernel, "'after' in globals()") == "False"
    # A command that is not interrupted is as before.
    assert await result_of(kernel, "x = !echo fine\nx") == "['fine']"
