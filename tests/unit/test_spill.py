"""Stream text past the in-memory limit: the spill files, their bounds, and the artifact
built from them (no kernel; kernel messages are written as dicts)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interpreter.artifacts import CHUNK_BYTES, ArtifactStore, remove_temporaries
from interpreter.execution import ExecutionRecorder
from interpreter.models import Execution
from interpreter.outputs import OutputCapture
from interpreter.spill import PREFIX, StreamSpill, _Tail
from tests.conftest import skip_or_fail


def stream(name: str, text: str, parent: str = "m") -> dict[str, Any]:
    return {
        "header": {"msg_type": "stream"},
        "parent_header": {"msg_id": parent},
        "content": {"name": name, "text": text},
    }


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob(".*")) if directory.exists() else []


# ---------------------------------------------------------------- the spill itself


async def test_text_is_written_per_stream_in_order_and_counted(tmp_path: Path) -> None:
    spill = StreamSpill(tmp_path, limit=1 << 20, flush_bytes=12)
    spill.write("stdout", "one\n")
    spill.write("stderr", "é€\n")
    assert not spill.full
    spill.write("stdout", "two\r")  # kept as written: no overwrite applied on disk
    assert spill.full
    await spill.flush()
    assert not spill.full
    spill.write("stdout", "three\n")
    done = await spill.close()
    assert done.stopped is None and done.dropped == 0
    assert done.files["stdout"].read_bytes() == b"one\ntwo\rthree\n"
    assert done.files["stderr"].read_bytes() == "é€\n".encode()
    assert done.chars == {"stdout": 14, "stderr": 3}
    assert all(p.name.startswith(PREFIX) for p in done.files.values())
    await spill.discard()
    assert temporaries(tmp_path) == []


async def test_nothing_written_means_no_file(tmp_path: Path) -> None:
    spill = StreamSpill(tmp_path / "artifacts", limit=100)
    done = await spill.close()
    assert done.files == {} and done.dropped == 0
    assert not (tmp_path / "artifacts").exists()
    await spill.discard()


async def test_the_limit_cuts_between_characters_and_counts_what_it_drops(
    tmp_path: Path,
) -> None:
    spill = StreamSpill(tmp_path, limit=10)
    spill.write("stdout", "abcdefgh")  # 8 bytes
    spill.write("stdout", "€€")  # 3 bytes each: neither fits in the 2 left
    spill.write("stderr", "more")
    done = await spill.close()
    assert done.files["stdout"].read_text() == "abcdefgh"
    assert done.dropped == 2 + 4 and done.stopped == "limit"
    assert "stderr" not in done.files
    await spill.discard()

    spill = StreamSpill(tmp_path, limit=10)
    spill.write("stdout", "abcdefg€€")  # 7 + 3 fits exactly, the second € does not
    done = await spill.close()
    assert done.files["stdout"].read_text() == "abcdefg€"
    assert (done.chars["stdout"], done.dropped) == (8, 1)
    await spill.discard()
    assert temporaries(tmp_path) == []


async def test_clear_drops_what_was_spilled_so_far(tmp_path: Path) -> None:
    spill = StreamSpill(tmp_path, limit=100)
    spill.write("stdout", "before the clear\n")
    await spill.flush()
    spill.write("stderr", "queued, then cleared\n")
    spill.clear()
    spill.write("stdout", "after\n")
    done = await spill.close()
    assert done.files["stdout"].read_text() == "after\n"
    assert "stderr" not in done.files and done.chars == {"stdout": 6}
    await spill.discard()
    assert temporaries(tmp_path) == []


async def test_discard_removes_the_files_is_idempotent_and_later_text_is_dropped(
    tmp_path: Path,
) -> None:
    spill = StreamSpill(tmp_path, limit=100)
    spill.write("stdout", "x" * 10)
    await spill.flush()
    assert len(temporaries(tmp_path)) == 1
    await spill.discard()
    await spill.discard()
    assert temporaries(tmp_path) == []
    spill.write("stdout", "late")  # after the end: counted, never written
    done = await spill.close()
    assert done.files == {} and done.dropped == 4
    assert temporaries(tmp_path) == []


async def test_a_cancelled_flush_loses_nothing_and_keeps_the_order(tmp_path: Path) -> None:
    spill = StreamSpill(tmp_path, limit=1 << 30, flush_bytes=1)
    expected = []
    for i in range(200):
        line = f"{i:04d}\n" * 1000
        expected.append(line)
        spill.write("stdout", line)
        task = asyncio.ensure_future(spill.flush())
        if i % 3 == 0:
            await asyncio.sleep(0)
            task.cancel()  # the reader was cancelled (a restart): its thread runs on
        else:
            await task
    done = await spill.close()
    assert done.files["stdout"].read_text() == "".join(expected)
    await spill.discard()


async def test_below_the_data_disk_floor_nothing_is_written(tmp_path: Path) -> None:
    spill = StreamSpill(tmp_path, limit=1 << 20, min_free_mb=1 << 40)
    spill.write("stdout", "x" * 100)
    await spill.flush()
    spill.write("stdout", "y" * 50)
    done = await spill.close()
    assert done.stopped == "floor" and done.dropped == 150 and done.files == {}
    await spill.discard()
    assert temporaries(tmp_path) == []


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: writes past it fail with ENOSPC (root only)."""
    if os.geteuid() != 0:
        skip_or_fail("mounting a tmpfs needs root", "The full-disk test")
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        skip_or_fail(f"cannot mount a tmpfs: {done.stderr.decode()[:200]}", "The full-disk test")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


async def test_a_full_disk_stops_spilling_and_keeps_what_was_written(tiny_disk: Path) -> None:
    spill = StreamSpill(tiny_disk, limit=1 << 30, flush_bytes=1)
    chunk = "z" * 100_000
    for _ in range(30):  # 3 MB into 1 MiB
        spill.write("stdout", chunk)
        await spill.flush()  # never raises
    done = await spill.close()
    assert done.stopped == "disk_full"
    kept = done.files["stdout"].read_text()
    # Whole writes only, and every character given is either kept or counted as dropped.
    assert kept == chunk * (len(kept) // len(chunk)) and 0 < len(kept) < 1 << 20
    assert done.chars["stdout"] == len(kept) and done.dropped == 30 * len(chunk) - len(kept)
    await spill.discard()
    assert temporaries(tiny_disk) == []


# ---------------------------------------------------------------- the artifact


def test_put_file_stores_head_and_file_in_chunks_and_consumes_it(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "s_1")
    source = tmp_path / "elsewhere.bin"
    body = os.urandom(CHUNK_BYTES * 2 + 17)
    source.write_bytes(body)
    ref = store.put_file(source, "text/plain", head=b"head:")
    assert ref.id == hashlib.sha256(b"head:" + body).hexdigest()
    assert ref.size == len(body) + 5 and ref.url.endswith(ref.id)
    path, mime, size = store.open(ref.id)
    assert path.read_bytes() == b"head:" + body and (mime, size) == ("text/plain", ref.size)
    assert not source.exists() and temporaries(store.root) == []

    # Without a head, a file of the store's own directory is moved into place.
    inside = store.root / ".spill-x.tmp"
    inside.write_bytes(body)
    moved = store.put_file(inside, "text/plain")
    assert moved.id == hashlib.sha256(body).hexdigest() and not inside.exists()
    # Stored twice, it is one artifact, and the second source is consumed all the same.
    again = store.root / ".spill-y.tmp"
    again.write_bytes(body)
    assert store.put_file(again, "text/plain") == moved and not again.exists()
    assert store.put(body, "text/plain") == moved
    assert temporaries(store.root) == []


def test_remove_temporaries_leaves_the_artifacts(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, "s_1")
    ref = store.put(b"kept", "text/plain")
    (tmp_path / ".spill-abc.tmp").write_text("half")
    (tmp_path / f".put-{ref.id}.tmp").write_text("half")
    assert remove_temporaries(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [ref.id, f"{ref.id}.json"]
    assert remove_temporaries(tmp_path / "missing") == 0


# ---------------------------------------------------------------- recorder and capture


def spilling(
    tmp_path: Path, *, hard: int, spill_limit: int
) -> tuple[ExecutionRecorder, StreamSpill]:
    spill = StreamSpill(tmp_path / "artifacts", limit=spill_limit, flush_bytes=64)
    return ExecutionRecorder("m", hard_limit=hard, overflow=spill), spill


async def feed(rec: ExecutionRecorder, spill: StreamSpill, msgs: list[dict[str, Any]]) -> None:
    """As the session routes messages: feed, then flush when the spill is full."""
    for msg in msgs:
        rec.feed_iopub(msg)
        if spill.full:
            await spill.flush()


async def finish(
    tmp_path: Path, rec: ExecutionRecorder, spill: StreamSpill | None
) -> tuple[Execution, OutputCapture]:
    cap = OutputCapture(
        ArtifactStore(tmp_path / "artifacts", "s_test"), inline_bytes=1000, output_bytes=1000
    )
    ex = Execution(id="ex_1", session_id="s_test", status="ok")
    await cap.finish(ex, rec, {}, spill=spill)
    return ex, cap


def artifact_text(cap: OutputCapture, artifact_id: str) -> str:
    path, mime, _ = cap.artifacts.open(artifact_id)
    assert mime == "text/plain"
    return path.read_bytes().decode("utf-8")  # not read_text: it would turn \r into \n


async def test_text_past_the_limit_reaches_the_artifact_after_the_kept_text(
    tmp_path: Path,
) -> None:
    rec, spill = spilling(tmp_path, hard=1000, spill_limit=1 << 20)
    lines = [f"{i:04d} {'x' * 44}\n" for i in range(400)]  # 50 characters each
    msgs = [stream("stdout", "".join(lines[i : i + 7])) for i in range(0, 400, 7)]
    msgs.insert(1, stream("stderr", "progress 1%\rprogress 9%\n"))  # in memory: overwritten
    msgs.append(stream("stderr", "late 1%\rlate 2%\n"))  # spilled: kept as written
    await feed(rec, spill, msgs)
    assert rec.streams.kept == 1000 and rec.overflowing
    ex, cap = await finish(tmp_path, rec, spill)
    out, err = ex.artifacts
    assert artifact_text(cap, out.id) == "".join(lines)
    assert artifact_text(cap, err.id) == "progress 9%\nlate 1%\rlate 2%\n"
    assert ex.truncated and ex.stdout == "".join(lines)[:988]
    assert ex.stderr.endswith(
        "[output limit reached: the text past the broker's in-memory limit was kept on disk; "
        f"all 20000 characters of stdout are in the artifact {out.url}; "
        f"all 28 characters of stderr are in the artifact {err.url}]\n"
    )
    assert temporaries(cap.artifacts.root) == []
    assert rec.overflow is None  # detached: late output is counted, never written


async def test_the_spill_limit_drops_with_a_notice_that_counts_it(tmp_path: Path) -> None:
    rec, spill = spilling(tmp_path, hard=1000, spill_limit=5000)
    await feed(rec, spill, [stream("stdout", "y" * 100) for _ in range(100)])  # 10,000
    ex, cap = await finish(tmp_path, rec, spill)
    (out,) = ex.artifacts
    assert artifact_text(cap, out.id) == "y" * 6000 and out.size == 6000
    assert ex.stderr.endswith(
        "[output limit reached: 4000 more characters were produced and dropped (past "
        "max_output_spill_bytes, the text kept on disk per execution); the first 6000 "
        f"characters of stdout are in the artifact {out.url}]\n"
    )
    # Output that arrives after the end changes the text, not the notice or the artifact.
    rec.feed_iopub(stream("stderr", "late\n"))
    cap.late_streams(ex, rec)
    assert ex.artifacts == [out] and ex.stderr.endswith(rec.streams.notice)
    assert rec.streams.dropped == 5 and temporaries(cap.artifacts.root) == []


async def test_without_a_spill_text_past_the_limit_is_dropped_as_before(tmp_path: Path) -> None:
    rec = ExecutionRecorder("m", hard_limit=1000)
    for _ in range(30):
        rec.feed_iopub(stream("stdout", "w" * 100))
    ex, cap = await finish(tmp_path, rec, None)
    (out,) = ex.artifacts
    assert artifact_text(cap, out.id) == "w" * 1000
    assert "2000 more characters were produced and dropped (past max_output_hard_bytes, " in (
        ex.stderr
    )
    assert f"the first 1000 characters of stdout are in the artifact {out.url}]" in ex.stderr


async def test_a_clear_after_the_limit_clears_the_spilled_text_too(tmp_path: Path) -> None:
    rec, spill = spilling(tmp_path, hard=100, spill_limit=1 << 20)
    clear = {"header": {"msg_type": "clear_output"}, "content": {"wait": False}}
    await feed(rec, spill, [stream("stdout", "a" * 500), clear, stream("stdout", "after\n")])
    ex, cap = await finish(tmp_path, rec, spill)
    (out,) = ex.artifacts
    assert artifact_text(cap, out.id) == "after\n"
    assert temporaries(cap.artifacts.root) == []


async def test_a_spill_the_disk_refused_says_so(tmp_path: Path) -> None:
    rec = ExecutionRecorder("m", hard_limit=100)
    spill = StreamSpill(tmp_path / "artifacts", limit=1 << 20, min_free_mb=1 << 40)
    rec.overflow = spill
    await feed(rec, spill, [stream("stdout", "q" * 300)])
    ex, cap = await finish(tmp_path, rec, spill)
    (out,) = ex.artifacts
    assert artifact_text(cap, out.id) == "q" * 100
    assert "200 more characters were produced and dropped (the data disk is below" in ex.stderr
    assert ex.status == "ok" and temporaries(cap.artifacts.root) == []


async def test_a_spill_the_disk_cannot_copy_into_its_artifact_keeps_the_kept_text(
    tiny_disk: Path,
) -> None:
    rec, spill = spilling(tiny_disk, hard=1000, spill_limit=1 << 20)
    await feed(rec, spill, [stream("stdout", "k" * 1000), stream("stdout", "s" * 600_000)])
    ex, cap = await finish(tiny_disk, rec, spill)  # 1 MiB: the spill fits, its copy does not
    (out,) = ex.artifacts
    assert artifact_text(cap, out.id) == "k" * 1000
    assert ex.stderr.endswith(
        "[output limit reached: 600000 more characters were produced and dropped (the data "
        f"disk is full); the first 1000 characters of stdout are in the artifact {out.url}]\n"
    )
    assert ex.status == "ok" and temporaries(cap.artifacts.root) == []


def test_the_tail_of_each_stream_is_its_last_characters_however_it_came() -> None:
    tail = _Tail(1000)
    text = "".join(f"{i}\n" for i in range(100_000))
    for start in range(0, len(text), 7):  # a flood of small messages
        tail.add(text[start : start + 7])
    assert tail.text() == text[-1000:] and tail.given == len(text)
    tail.add("y" * 5000)  # one message larger than the window
    assert tail.text() == "y" * 1000
    tail.add("end")
    assert tail.text() == "y" * 997 + "end"


async def test_a_spill_reports_the_tail_and_count_of_what_each_stream_was_given(
    tmp_path: Path,
) -> None:
    spill = StreamSpill(tmp_path, limit=100, tail_chars=10)
    spill.write("stdout", "a" * 80)
    spill.write("stderr", "e" * 5)
    spill.write("stdout", "b" * 50 + "last")  # past the limit: dropped, still in the tail
    spilled = await spill.close()
    assert spilled.tails == {"stdout": "bbbbbblast", "stderr": "eeeee"}
    assert spilled.given == {"stdout": 134, "stderr": 5}
    await spill.discard()
