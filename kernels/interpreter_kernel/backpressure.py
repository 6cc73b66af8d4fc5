"""Output that waits for a slow reader instead of piling up in the kernel's memory.

The broker must never lose a line, so the IOPub socket may not drop messages at its
high-water mark, as a stock PUB socket does. Queued without a limit, though, a cell that
prints faster than the broker reads fills the kernel's memory with messages nobody has
read yet: with a reader that had stopped, a 200 MiB flood was queued in the kernel whole
(``tests/integration/test_kernel_launch.py``), and a container's memory limit ends that
with the kernel killed and the session's state lost.

So the output waits instead, in two places:

* the IOPub socket holds at most :data:`IOPUB_SEND_QUEUE_MESSAGES` unread messages per
  subscriber and then *blocks* the sender (``ZMQ_XPUB_NODROP``) until the broker has read
  some, rather than dropping them or queueing more;
* :class:`BoundedOutStream` (``sys.stdout``/``sys.stderr``) flushes a writer's text once
  :data:`FLUSH_AT_CHARS` of it wait in its buffer, and ``flush`` waits for the IOPub thread,
  so the code printing is held up while the socket is. A stock stream only ever appends to
  its buffer between the periodic flushes.

A display waits as well, from any thread: publishing one flushes the streams first, and
that flush waits for the IOPub thread to get through what was queued before it. Every
other message sent from user code (the comm messages of widgets, above all) waits once
:data:`PENDING_MESSAGES` of them are queued for the IOPub thread
(:class:`BoundedIOPubThread`): a loop that sets a slider's value 300,000 times used to
queue them all, 166 MB of the kernel's memory, while the broker read them. A cell's code
held up this way still takes an interrupt: the wait is an interruptible
``threading.Event.wait`` in the main thread. ipykernel's own threads (IOPub, shell channel,
control) never wait: the IOPub thread would wait for itself, and the others must answer
while a cell is held.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from io import StringIO
from typing import Any

import ipykernel.kernelapp
import zmq
from ipykernel.iostream import IOPubThread, OutStream
from ipykernel.thread import CONTROL_THREAD_NAME, SHELL_CHANNEL_THREAD_NAME

#: Unread messages the IOPub socket holds per subscriber before a send waits.
IOPUB_SEND_QUEUE_MESSAGES = 16
#: Characters of a stream's text buffered before the writer flushes and waits.
FLUSH_AT_CHARS = 1 << 20
#: ipykernel's own threads, whose flushes never wait for the IOPub thread.
KERNEL_THREADS = frozenset({CONTROL_THREAD_NAME, SHELL_CHANNEL_THREAD_NAME})
#: Messages queued for the IOPub thread before a sender in user code waits for it.
PENDING_MESSAGES = 256
#: How often a held sender checks that the IOPub thread still runs.
ALIVE_CHECK_S = 1.0


def waiting_iopub_options(context: zmq.Context[Any]) -> dict[int, Any]:
    """Make the next socket ``context`` creates hold few messages and wait when full.

    Returns the context's earlier default options, for :func:`restore_options` once the
    IOPub socket exists. The options go on the context because the socket is created and
    bound inside ipykernel, and a high-water mark must be set before ``bind``: libzmq copies
    a socket's options into its listener when it binds.
    """
    earlier = dict(context.sockopts)
    context.setsockopt(zmq.SNDHWM, IOPUB_SEND_QUEUE_MESSAGES)
    context.setsockopt(zmq.XPUB_NODROP, 1)
    return earlier


def restore_options(context: zmq.Context[Any], earlier: Mapping[int, Any]) -> None:
    """Put back the context's default socket options saved by :func:`waiting_iopub_options`.

    Sockets the kernel creates later (the IOPub thread's per-thread wake-up pipes) keep no
    send limit, as they had before: a wake-up pipe that filled up would block whichever
    thread hands the IOPub thread work, the control thread included.
    """
    context.sockopts.clear()
    context.sockopts.update(earlier)
    context.setsockopt(zmq.SNDHWM, 0)


class BoundedOutStream(OutStream):
    """ipykernel's ``OutStream`` that holds its writer up while its text waits unsent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        #: Characters written since the buffers were last taken for sending. Updated
        #: without a lock: a lost update only moves the next flush a little.
        self._unsent_chars = 0

    def write(self, string: str) -> int | None:  # type: ignore[override]
        written: int | None = super().write(string)
        self._unsent_chars += len(string)
        if self._unsent_chars >= FLUSH_AT_CHARS:
            # Waits until the IOPub thread has taken the text (and so until the socket
            # took the message before it), or ipykernel's flush_timeout.
            self.flush()
        return written

    def flush(self) -> None:
        """Send the buffered text; from user code, wait until the IOPub thread took it.

        ipykernel's control thread flushes both streams after every control request, and
        the reply to an ``interrupt_request`` goes out only after that: waiting there on a
        held socket delayed the reply by ``flush_timeout`` (10 s) per stream, past the
        broker's wait for it. Its flush is queued instead; the IOPub thread runs its queue
        in order, so the text still goes out before the control request's ``idle``.
        """
        pub = self.pub_thread
        if (
            threading.current_thread().name in KERNEL_THREADS
            and pub is not None
            and pub.thread.is_alive()
        ):
            pub.schedule(self._flush)
            return
        super().flush()  # type: ignore[no-untyped-call]

    def _rotate_buffers(self) -> dict[Any, StringIO]:
        buffers: dict[Any, StringIO] = super()._rotate_buffers()  # type: ignore[no-untyped-call]
        self._unsent_chars = 0
        return buffers


class BoundedIOPubThread(IOPubThread):
    """ipykernel's IOPub thread, whose queue of messages to send does not grow without
    bound: a sender in user code waits once :data:`PENDING_MESSAGES` wait to be sent."""

    def send_multipart(self, *args: Any, **kwargs: Any) -> None:
        super().send_multipart(*args, **kwargs)  # type: ignore[no-untyped-call]
        if len(self._events) >= PENDING_MESSAGES and self._may_wait():
            self._drain()

    def _may_wait(self) -> bool:
        current = threading.current_thread()
        return (
            current is not self.thread
            and current.name not in KERNEL_THREADS
            and self.thread.is_alive()
        )

    def _drain(self) -> None:
        """Wait until the IOPub thread has sent what was queued so far (it waits, in turn,
        for the broker to read: the socket holds few messages)."""
        sent = threading.Event()
        self.schedule(sent.set)  # type: ignore[no-untyped-call]
        while not sent.wait(ALIVE_CHECK_S):
            if not self.thread.is_alive():
                return


@contextmanager
def bounded_iopub_thread() -> Iterator[None]:
    """Make the IOPub thread ipykernel creates in the block a :class:`BoundedIOPubThread`."""
    stock = ipykernel.kernelapp.IOPubThread  # type: ignore[attr-defined]
    ipykernel.kernelapp.IOPubThread = BoundedIOPubThread  # type: ignore[attr-defined]
    try:
        yield
    finally:
        ipykernel.kernelapp.IOPubThread = stock  # type: ignore[attr-defined]
