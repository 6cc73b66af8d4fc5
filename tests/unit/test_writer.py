"""The store's writer: writes run in order on one thread; a keyed write still waiting in
the queue is joined by a later one with the same key, never run twice, never skipped."""

from __future__ import annotations

import asyncio
import threading

from interpreter.store import Writer


def test_a_waiting_keyed_write_is_joined_and_reads_the_latest_state() -> None:
    async def main() -> None:
        writer = Writer()
        gate = threading.Event()
        state = {"status": "queued"}
        saved: list[str] = []
        try:
            writer.later(gate.wait)  # holds the thread: what follows waits in the queue
            first = asyncio.ensure_future(
                writer.run(lambda: saved.append(state["status"]), key="ex_1")
            )
            await asyncio.sleep(0)
            state["status"] = "running"
            writer.later(lambda: saved.append(state["status"]), key="ex_1")
            other = asyncio.ensure_future(writer.run(lambda: saved.append("other"), key="ex_2"))
            gate.set()
            await asyncio.gather(first, other)
            # Joined: one write for ex_1, which saw the later state, in its queue place.
            assert saved == ["running", "other"]
            # Once a keyed write has started, a new one with the key queues anew.
            state["status"] = "ok"
            await writer.run(lambda: saved.append(state["status"]), key="ex_1")
            assert saved == ["running", "other", "ok"]
        finally:
            writer.close()

    asyncio.run(main())


def test_a_started_keyed_write_does_not_swallow_a_later_one() -> None:
    async def main() -> None:
        writer = Writer()
        started, release = threading.Event(), threading.Event()
        saved: list[str] = []
        state = {"status": "queued"}

        def slow() -> None:
            started.set()
            snapshot = state["status"]
            release.wait()
            saved.append(snapshot)

        try:
            first = asyncio.ensure_future(writer.run(slow, key="ex_1"))
            await asyncio.to_thread(started.wait)
            state["status"] = "ok"  # changed after the first write read its state
            second = asyncio.ensure_future(
                writer.run(lambda: saved.append(state["status"]), key="ex_1")
            )
            release.set()
            await asyncio.gather(first, second)
            assert saved == ["queued", "ok"]
        finally:
            writer.close()

    asyncio.run(main())


def test_unkeyed_writes_are_never_joined() -> None:
    async def main() -> None:
        writer = Writer()
        saved: list[int] = []
        try:
            await asyncio.gather(*(writer.run(lambda i=i: saved.append(i)) for i in range(5)))
            assert saved == [0, 1, 2, 3, 4]
        finally:
            writer.close()

    asyncio.run(main())
