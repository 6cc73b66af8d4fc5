"""The heartbeat against a real ZMQ echo (the kernel side of ``hb_port``) that can be
silenced: answered pings keep it alive, silence past ``misses`` pings declares it lost."""

from __future__ import annotations

import asyncio
import contextlib

import zmq
import zmq.asyncio

from interpreter.heartbeat import Heartbeat, echoes, hb_url


class Echo:
    """A REP socket that echoes while ``answering`` is set, as ipykernel's hb thread does."""

    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.sock = ctx.socket(zmq.ROUTER)  # ROUTER: a silenced echo may drop requests
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.answering = True
        self.echoes = 0
        self.echoed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            frames = await self.sock.recv_multipart()
            if self.answering:
                await self.sock.send_multipart(frames)
                self.echoes += 1
                self.echoed.set()

    async def wait_echoes(self, n: int) -> None:
        """Wait until ``n`` more pings were answered."""
        target = self.echoes + n
        async with asyncio.timeout(10):
            while self.echoes < target:
                self.echoed.clear()
                await self.echoed.wait()

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.sock.close(linger=0)


def test_hb_url_for_tcp_and_ipc() -> None:
    assert hb_url({"transport": "tcp", "ip": "127.0.0.1", "hb_port": 5}) == "tcp://127.0.0.1:5"
    assert hb_url({"transport": "ipc", "ip": "/r/kernel", "hb_port": 5}) == "ipc:///r/kernel-5"


def test_answered_pings_keep_it_alive_and_silence_loses_it() -> None:
    async def main() -> None:
        ctx = zmq.asyncio.Context()
        echo = Echo(ctx)
        lost = asyncio.Event()
        hb = Heartbeat(
            name="s",
            ctx=ctx,
            url=f"tcp://127.0.0.1:{echo.port}",
            interval_s=0.1,
            misses=3,
            on_lost=lost.set,
        )
        hb.start()
        try:
            await echo.wait_echoes(10)  # ten intervals: three misses would have lost it
            assert not hb.lost and not lost.is_set()
            echo.answering = False
            async with asyncio.timeout(10):
                await lost.wait()
            assert hb.lost
        finally:
            await hb.stop()
            await echo.close()
            ctx.destroy(linger=0)

    asyncio.run(main())


def test_one_late_echo_resets_the_count() -> None:
    async def main() -> None:
        ctx = zmq.asyncio.Context()
        echo = Echo(ctx)
        hb = Heartbeat(
            name="s", ctx=ctx, url=f"tcp://127.0.0.1:{echo.port}", interval_s=0.1, misses=6
        )
        hb.start()
        try:
            for _ in range(3):  # two or three misses, then an answer, three times over
                echo.answering = False
                await asyncio.sleep(0.2)
                echo.answering = True
                await echo.wait_echoes(1)
            assert not hb.lost
        finally:
            await hb.stop()
            await echo.close()
            ctx.destroy(linger=0)

    asyncio.run(main())


def test_one_ping_proves_an_echoing_kernel_and_not_a_silent_or_absent_one() -> None:
    async def main() -> None:
        ctx = zmq.asyncio.Context()
        echo = Echo(ctx)
        url = f"tcp://127.0.0.1:{echo.port}"
        try:
            assert await echoes(ctx, url, 2.0)
            echo.answering = False
            assert not await echoes(ctx, url, 0.2)
            echo.answering = True
            assert await echoes(ctx, url, 2.0)  # each ping has a socket of its own
        finally:
            await echo.close()
        # Nothing listening at all (a dead kernel's socket): no echo, no hang.
        assert not await echoes(ctx, "ipc:///nonexistent/interp-kernel-hb", 0.2)
        ctx.destroy(linger=0)

    asyncio.run(main())
