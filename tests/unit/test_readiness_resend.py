"""The start handshake when IOPub's subscription is late (``interpreter/readiness.py``).

A PUB socket drops what it publishes before the subscription reaches it, so the status of
the first ``kernel_info`` is often lost although its reply arrives. The handshake must ask
again soon, not wait out a long timeout for a message that will never come: measured on
this machine, one start in three paid 0.5 s for it. These kernel clients are made of
recorded message shapes; what they tally is the time the handshake asked to wait, not the
clock.
"""

from __future__ import annotations

import asyncio
import queue
from typing import Any

import pytest

from interpreter import readiness
from interpreter.readiness import wait_ready


def _msg(msg_type: str, parent: object, content: dict[str, Any]) -> dict[str, Any]:
    return {
        "header": {"msg_type": msg_type, "msg_id": f"k-{msg_type}"},
        "parent_header": {"msg_id": parent},
        "msg_type": msg_type,
        "content": content,
    }


class LateSubscriber:
    """A kernel client whose IOPub subscription lands after ``lost`` requests: their
    statuses were published to nobody. Every request is answered on shell."""

    def __init__(self, lost: int, late_status_of: int | None = None) -> None:
        self.lost = lost
        self.late_status_of = late_status_of
        self.sent: list[str] = []
        self.shell: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.iopub: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.waited_for_nothing = 0.0

    def kernel_info(self) -> str:
        msg_id = f"ki-{len(self.sent)}"
        self.sent.append(msg_id)
        reply = {"status": "ok", "language_info": {"name": "python"}}
        self.shell.put_nowait(_msg("kernel_info_reply", msg_id, reply))
        if len(self.sent) > self.lost:
            self.iopub.put_nowait(_msg("status", msg_id, {"execution_state": "busy"}))
        elif self.late_status_of is not None and len(self.sent) == 2:
            # The first request's status, delayed rather than lost.
            late = self.sent[self.late_status_of]
            self.iopub.put_nowait(_msg("status", late, {"execution_state": "idle"}))
        return msg_id

    async def get_shell_msg(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - its API
        return await self._get(self.shell, timeout)

    async def get_iopub_msg(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - its API
        return await self._get(self.iopub, timeout)

    async def _get(self, q: asyncio.Queue[dict[str, Any]], wait_s: float) -> dict[str, Any]:
        if q.empty():
            self.waited_for_nothing += wait_s
            await asyncio.sleep(wait_s)
            raise queue.Empty
        return q.get_nowait()

    async def is_alive(self) -> bool:
        return True


async def test_a_lost_status_is_asked_for_again_at_once() -> None:
    kc = LateSubscriber(lost=1)
    reply = await wait_ready(kc, 10)
    assert reply["msg_type"] == "kernel_info_reply"
    assert len(kc.sent) == 2
    # The old handshake waited 0.5 s here for the lost status.
    assert kc.waited_for_nothing <= readiness.IOPUB_RESEND_S


async def test_several_lost_statuses_cost_one_short_wait_each() -> None:
    kc = LateSubscriber(lost=4)
    await wait_ready(kc, 10)
    assert len(kc.sent) == 5
    assert kc.waited_for_nothing <= 4 * readiness.IOPUB_RESEND_S


async def test_a_late_status_of_an_earlier_request_counts() -> None:
    kc = LateSubscriber(lost=10, late_status_of=0)
    reply = await wait_ready(kc, 10)
    assert reply["parent_header"]["msg_id"] == "ki-0"
    assert len(kc.sent) == 2


async def test_a_forged_parent_is_not_an_answer_and_does_not_crash() -> None:
    kc = LateSubscriber(lost=1)
    kc.iopub.put_nowait(_msg("status", ["ki-0"], {"execution_state": "busy"}))
    kc.iopub.put_nowait(_msg("status", {"x": 1}, {"execution_state": "busy"}))
    await wait_ready(kc, 10)
    assert len(kc.sent) == 2


async def test_no_status_ever_is_a_timeout_not_a_hang() -> None:
    kc = LateSubscriber(lost=10**6)
    with pytest.raises(RuntimeError, match="respond"):
        await wait_ready(kc, 0.3)


class Silent(LateSubscriber):
    """A kernel that never answers (it died while starting), whose own client cannot tell:
    without a manager or a heartbeat channel, jupyter_client's ``is_alive`` says True."""

    def kernel_info(self) -> str:
        msg_id = f"ki-{len(self.sent)}"
        self.sent.append(msg_id)
        return msg_id

    async def is_alive(self) -> bool:
        raise AssertionError("the given liveness check is asked, not the client")


async def test_the_given_liveness_check_ends_the_wait_for_a_dead_kernel() -> None:
    kc = Silent(lost=0)
    asked: list[bool] = []

    async def alive() -> bool:
        asked.append(False)
        return False

    with pytest.raises(RuntimeError, match="died"):
        await wait_ready(kc, 600, alive=alive)
    # One unanswered attempt, then the check: not the 600 s the timeout allows.
    assert asked == [False] and len(kc.sent) == 1
    assert kc.waited_for_nothing <= readiness.SHELL_WAIT_S


class Welcoming:
    """A client of a kernel a pool readied: IOPub holds ``messages`` (the kernel's
    ``iopub_welcome`` among them, or not); it has no shell at all, so a request would fail."""

    def __init__(self, *messages: dict[str, Any] | Exception) -> None:
        self.messages = list(messages)
        self.waited_for_nothing = 0.0

    async def get_iopub_msg(self, timeout: float) -> dict[str, Any]:  # noqa: ASYNC109 - its API
        if not self.messages:
            self.waited_for_nothing += timeout
            await asyncio.sleep(0)
            raise queue.Empty
        item = self.messages.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


async def test_a_readied_kernels_new_client_waits_only_for_its_welcome() -> None:
    """What came before the welcome (a bad message, a stray status of the pool's warm-up)
    is passed over; nothing is asked of the kernel."""
    welcome = _msg("iopub_welcome", None, {"subscription": ""})
    stray = _msg("status", "warm-up", {"execution_state": "idle"})
    kc = Welcoming(ValueError("bad signature"), stray, welcome)
    assert await readiness.wait_subscribed(kc)
    assert kc.messages == [] and kc.waited_for_nothing == 0


async def test_without_a_welcome_the_wait_gives_up_at_its_bound() -> None:
    """An XPUB socket passes on only a subscription it does not hold yet: with another
    client of the same subscription still connected, no welcome comes. The caller then
    falls back to the whole handshake."""
    kc = Welcoming(_msg("status", "warm-up", {"execution_state": "idle"}))
    assert not await readiness.wait_subscribed(kc, wait_s=0.05)
    assert kc.waited_for_nothing == pytest.approx(0.05, abs=0.01)
