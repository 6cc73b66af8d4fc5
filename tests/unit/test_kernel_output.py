"""A local kernel's own output, read from a real pipe: one log record per line, lines cut
at their bound, at most LOGGED_LINES logged (then said once), the last lines kept."""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from interpreter.backends import kernel_output
from interpreter.backends.kernel_output import LINE_CHARS, LOGGED_LINES, TAIL_LINES


async def _relay(*chunks: bytes) -> kernel_output.KernelOutput:
    read_fd, write_fd = os.pipe()
    reader = await kernel_output.follow(os.fdopen(read_fd, "rb", buffering=0), "s_test")
    for chunk in chunks:
        os.write(write_fd, chunk)
        await asyncio.sleep(0)  # the pieces arrive apart, as from a process
    os.close(write_fd)
    await asyncio.wait_for(reader.closed, 10)
    return reader


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "interpreter.kernel_output"]


async def test_each_line_is_one_record_with_the_session(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    await _relay(
        b"[IPKernelApp] WARNING | over", b" TCP\r\n\n", "caf\xc3".encode("latin-1"), b"\xa9"
    )
    records = _records(caplog)
    assert [r.getMessage() for r in records] == [
        "session s_test: the kernel wrote: [IPKernelApp] WARNING | over TCP",
        "session s_test: the kernel wrote: café",  # the last line, without a newline
    ]
    assert all(r.__dict__["session_id"] == "s_test" for r in records)
    assert all(r.__dict__["event"] == "kernel_output" for r in records)


async def test_a_long_line_is_cut_and_its_rest_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    reader = await _relay(b"x" * (LINE_CHARS * 5), b"y" * 100, b"\nnext\n")
    lines = [r.getMessage().split(": ", 1)[1] for r in _records(caplog)]
    assert lines == ["the kernel wrote: " + "x" * LINE_CHARS, "the kernel wrote: next"]
    assert reader.tail() == "x" * LINE_CHARS + "\nnext"


async def test_a_kernel_writing_without_end_is_logged_within_bounds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    total = LOGGED_LINES * 3
    reader = await _relay(*(f"line {i}\n".encode() for i in range(total)))
    records = _records(caplog)
    assert len(records) == LOGGED_LINES + 1
    assert (
        records[-1]
        .getMessage()
        .endswith(f"more than {LOGGED_LINES} lines; the rest are not logged")
    )
    assert reader.lines == total
    assert reader.tail().splitlines() == [f"line {i}" for i in range(total - TAIL_LINES, total)]
