"""The kernel launcher: ipykernel's ``IPKernelApp`` with the interpreter's setup applied.

Run as ``python -m interpreter_kernel -f {connection_file}`` (both kernelspecs do). Compared
with a stock ipykernel, the kernel:

* never drops IOPub messages under a flood, and never piles them up in its memory either:
  output, displays and comm messages wait while the broker is behind
  (:mod:`interpreter_kernel.backpressure`);
* runs no IPython profile startup files, config files or ``PYTHONSTARTUP`` that user code
  could have planted in the writable home or workspace: IPython gets a fresh, empty
  ``IPYTHONDIR`` of its own each start (:mod:`interpreter_kernel.ipythondir`), whatever
  the environment says, and startup files are skipped outright;
* ends a cell on interrupt even when it is blocked in a call such as ``time.sleep``: only
  the main thread takes SIGINT, and it is woken after an interrupt
  (:mod:`interpreter_kernel.interrupts`);
* reads EOF from standard input, and ``input()``/``getpass()`` fail at once
  (:class:`~interpreter_kernel.kernel.InterpreterKernel`);
* prints no console banner, keeps no on-disk input history;
* sends any text user code writes, lone surrogates and invalid UTF-8 included (as U+FFFD),
  instead of losing the rest of the cell's output (:mod:`interpreter_kernel.textsafe`);
* starts without ipykernel's debugger, which neither kernelspec offers
  (:mod:`interpreter_kernel.nodebugger`);
* calls :func:`interpreter_kernel.configure.setup` on its shell before any user code runs;
* ends itself when no broker has looked after it for a while, if asked to
  (:mod:`interpreter_kernel.watchdog`);
* writes the stacks of all its threads to its stderr (the kernel log) on ``SIGUSR1``
  (:data:`STACKS_SIGNAL`), for a kernel that hangs where nothing else would say why.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
from typing import Any

import zmq
from ipykernel.kernelapp import IPKernelApp
from traitlets import DottedObjectName, Type
from traitlets.config import Config

from .backpressure import bounded_iopub_thread, restore_options, waiting_iopub_options
from .configure import setup
from .interrupts import block_sigint, install_wake
from .ipythondir import private_ipython_dir
from .kernel import InterpreterKernel
from .nodebugger import debugger_hidden
from .textsafe import install
from .warmup import warm_up
from .watchdog import start_from_environment

#: The signal that has the kernel write its threads' stacks to stderr (faulthandler).
STACKS_SIGNAL = signal.SIGUSR1

#: Longest wait for the control thread to finish at shutdown (its flush takes milliseconds).
CONTROL_JOIN_TIMEOUT_S = 5.0


class InterpreterKernelApp(IPKernelApp):
    """``IPKernelApp`` hardened and configured for the interpreter (see the module docs)."""

    name = "interpreter-kernel"

    kernel_class = Type(
        "interpreter_kernel.kernel.InterpreterKernel",
        klass="ipykernel.kernelbase.Kernel",
        help="The kernel class; the default one refuses interactive input.",
    ).tag(config=True)

    outstream_class = DottedObjectName(
        "interpreter_kernel.backpressure.BoundedOutStream",
        help="The class of sys.stdout and sys.stderr: ipykernel's, waiting while the broker "
        "is behind.",
    ).tag(config=True)

    def init_iopub(self, context: zmq.Context[Any]) -> None:
        """Create the IOPub socket: it drops no message, and waits when its reader is behind.

        At the default mark (1000 messages) a PUB socket silently drops whatever a slow
        subscriber has not taken yet, which would lose output lines and even the final
        ``status: idle``; with no mark at all the unread messages fill the kernel's memory
        (:mod:`interpreter_kernel.backpressure`). Sockets created before this point (shell,
        stdin, control) keep the default mark; those created after it have none.
        """
        earlier = waiting_iopub_options(context)
        try:
            with bounded_iopub_thread():
                super().init_iopub(context)  # type: ignore[no-untyped-call]
        finally:
            restore_options(context, earlier)

    def init_signal(self) -> None:
        """ipykernel's SIGINT setup, and the handler of the signal that wakes the main
        thread after an interrupt (:mod:`interpreter_kernel.interrupts`)."""
        super().init_signal()  # type: ignore[no-untyped-call]
        install_wake()

    def init_kernel(self) -> None:
        """ipykernel's kernel, which then starts waking its main thread after a SIGINT
        (:mod:`interpreter_kernel.interrupts`); made without the debugger
        (:mod:`interpreter_kernel.nodebugger`)."""
        with debugger_hidden():
            super().init_kernel()  # type: ignore[no-untyped-call]
        kernel = self.kernel
        if isinstance(kernel, InterpreterKernel):
            kernel.watch_interrupts()

    def init_io(self) -> None:
        """ipykernel's streams, with messages that survive any text the user's code writes
        (lone surrogates, invalid UTF-8 through ``sys.stdout.buffer``): see
        :mod:`interpreter_kernel.textsafe`."""
        super().init_io()  # type: ignore[no-untyped-call]
        install(self.session, [sys.stdout, sys.stderr])

    def start(self) -> None:
        """Run the kernel until it shuts down, then let the control thread finish first.

        After a ``shutdown_request`` the control thread flushes ``sys.stdout`` through the
        IOPub thread and waits for that flush (ipykernel's ``flush_timeout``, 10 s). The
        main thread meanwhile returned from here into the exit handlers, the first of which
        stops the IOPub thread: the flush then waited out its timeout, and a client's
        graceful shutdown gave up and sent SIGTERM (measured: 4 shutdowns in 10 took 3.4 s
        instead of 0.2 s). Joined here, the control thread ends while IOPub still runs.
        """
        super().start()  # type: ignore[no-untyped-call]
        control = self.control_thread
        if control is not None and control.is_alive():
            control.stop()
            control.join(timeout=CONTROL_JOIN_TIMEOUT_S)

    def log_connection_info(self) -> None:
        """Record the ports without printing the console hints.

        Without a parent handle ipykernel prints a Ctrl-C note and an ``--existing`` hint
        straight to the process's stdout; under a broker that is only noise in the kernel
        log. Raising the log level for the call suppresses both (the hints are info-level).
        """
        level = self.log_level
        self.log_level = logging.CRITICAL
        try:
            super().log_connection_info()  # type: ignore[no-untyped-call]
        finally:
            self.log_level = level

    def _run_startup_files(self) -> None:
        """Run no startup files at all.

        The home directory and the workspace are writable by user code, so a file in a
        profile's ``startup/`` directory, or one named by ``PYTHONSTARTUP``, would run again
        on every kernel restart. The private ``IPYTHONDIR`` (see :func:`main`) already holds
        none; this also covers the system-wide startup directories and the environment.
        """

    def init_path(self) -> None:
        """Make the working directory importable without letting it shadow installed code.

        Under ``python -P`` (or ``PYTHONSAFEPATH``) IPython leaves the working directory off
        ``sys.path`` entirely; put it at the end so the user's own modules still import but a
        planted ``pandas.py`` cannot replace the real one. Otherwise IPython's behaviour is
        kept.
        """
        if not sys.flags.safe_path:
            super().init_path()  # type: ignore[no-untyped-call]
            return
        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.append(cwd)

    def init_code(self) -> None:
        """Set the shell up, run the configured ``exec_lines``/``exec_files`` (if any),
        then do the first cell's one-time work before any client waits for a cell
        (:mod:`interpreter_kernel.warmup`)."""
        try:
            if self.shell is not None:
                setup(self.shell)
        except Exception:
            # A kernel without rich capture is still far more useful than no kernel.
            self.log.exception("interpreter setup failed; continuing without it")
        super().init_code()  # type: ignore[no-untyped-call]
        if self.shell is not None:
            warm_up(self.shell)


def main(argv: list[str] | None = None) -> None:
    """Start the kernel; blocks until it shuts down.

    Args:
        argv: command-line arguments without the program name (default ``sys.argv[1:]``),
            normally ``["-f", connection_file]``.
    """
    # Before any thread starts: the kernel's threads then all block SIGINT, and the main
    # thread alone takes an interrupt (interpreter_kernel.interrupts).
    block_sigint()
    faulthandler.register(STACKS_SIGNAL, all_threads=True)
    private_ipython_dir()
    _stdin_from_devnull()
    start_from_environment()
    InterpreterKernelApp.launch_instance(argv, config=_config())


def _config() -> Config:
    config = Config()
    # Input history would be an sqlite file written on every cell; nothing reads it back.
    config.HistoryManager.enabled = False
    config.InteractiveShellApp.exec_PYTHONSTARTUP = False
    config.ZMQInteractiveShell.banner1 = f"Python {sys.version.split()[0]} (interp kernel)\n"
    return config


def _stdin_from_devnull() -> None:
    """Give the process (and subprocesses it starts) an empty standard input.

    The launcher's stdin is a pipe that nobody writes to, so a ``sys.stdin.read()`` or a
    child reading its stdin would hang until the execution timeout; EOF ends it at once.
    """
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
    finally:
        os.close(devnull)
    if sys.stdin is None:
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - lives as long as the process
