"""A fresh client is ready once ``kernel_info`` is answered on shell and seen on IOPub
(``interpreter/readiness.py``): the first output is not lost, a dead kernel is an error."""

from __future__ import annotations

import queue
from collections.abc import AsyncIterator

import pytest
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from interpreter.kernelspecs import kernel_spec_manager
from interpreter.readiness import wait_ready
from tests.conftest import over_ipc


@pytest.fixture
async def kernel() -> AsyncIterator[tuple[AsyncKernelManager, AsyncKernelClient]]:
    km = over_ipc(
        AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_spec_manager())
    )
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


async def test_ready_without_draining_and_the_first_output_arrives(
    kernel: tuple[AsyncKernelManager, AsyncKernelClient],
) -> None:
    _, kc = kernel
    reply = await wait_ready(kc, 60)
    assert reply["msg_type"] == "kernel_info_reply"
    assert reply["content"]["language_info"]["name"] == "python"
    # IOPub is subscribed: the first cell's output is not lost.
    msg_id = kc.execute("print('first')")
    texts = []
    while True:
        msg = await kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            texts.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert "".join(t for t in texts if t) == "first\n"


async def test_a_dead_kernel_is_an_error_not_a_hang(
    kernel: tuple[AsyncKernelManager, AsyncKernelClient],
) -> None:
    km, kc = kernel
    await km.shutdown_kernel(now=True)
    with pytest.raises(RuntimeError, match=r"died|respond"):
        await wait_ready(kc, 5)
    with pytest.raises(queue.Empty):
        await kc.get_shell_msg(timeout=0.1)
