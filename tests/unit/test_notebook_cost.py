"""The notebook's save path: each cell is serialised once, so a save's cost does not grow
with the session's length; the text written is exactly the whole notebook; cells are
recorded while a write syncs; a failed write marks the notebook degraded until one works."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest

from interpreter import notebook
from interpreter.notebook import LiveNotebook, NotebookRecorder

PLOT = base64.b64encode(bytes(range(256)) * 16).decode()  # a 4 KiB "image"


def outputs_for(i: int) -> list[dict[str, object]]:
    if i % 10 == 0:
        return [
            {
                "output_type": "display_data",
                "data": {"image/png": PLOT, "text/plain": "<Figure>"},
                "metadata": {},
            }
        ]
    return [{"output_type": "stream", "name": "stdout", "text": f"{i}\n"}]


def meta(i: int) -> dict[str, object]:
    return {
        "execution_id": f"ex_{i:06d}",
        "execution_count": i,
        "status": "ok",
        "started_at": datetime(2026, 1, 1, tzinfo=UTC),
        "duration_ms": 1.0,
        "state_lost": False,
        "reason": None,
    }


def add(rec: NotebookRecorder, i: int) -> None:
    rec.add_cell(f"print({i})", outputs_for(i), **meta(i))  # type: ignore[arg-type]


def recorder(tmp_path: Path) -> NotebookRecorder:
    return NotebookRecorder.create(
        tmp_path / "notebook.ipynb", session_id="s1", kernel_name="python3", backend="local"
    )


def test_serialised_bytes_per_cell_do_not_grow_with_the_session(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    per_cell: list[int] = []
    for i in range(1, 1001):
        add(rec, i)
        before = rec.serialised_cell_bytes
        rec.to_json()  # what every save serialises
        per_cell.append(rec.serialised_cell_bytes - before)
    early, late = sum(per_cell[:50]), sum(per_cell[950:])
    # Each window holds five plots; only the new cell is serialised, once.
    assert late <= 1.2 * early, (early, late)
    assert late < 5 * len(PLOT) + 50 * 1_000
    assert rec.serialised_cell_bytes == sum(len(json.dumps(c)) for c in rec.nb.cells)


def test_text_is_exactly_the_whole_notebook_and_saves_are_valid(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    for i in range(1, 31):
        add(rec, i)
        if i % 7 == 0:
            rec.save()
    rec.set_kernel_info({"name": "python", "version": "3.11.0"}, {})
    assert rec.to_json() == json.dumps(rec.nb, ensure_ascii=False, allow_nan=False) + "\n"
    rec.save()
    on_disk = nbformat.read(str(rec.path), as_version=4)
    nbformat.validate(on_disk)
    assert [c.execution_count for c in on_disk.cells] == list(range(1, 31))
    assert on_disk.metadata["language_info"]["version"] == "3.11.0"


def test_a_cell_changed_in_place_is_serialised_again(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    for i in range(1, 4):
        add(rec, i)
    rec.to_json()
    cell = rec.nb.cells[1]
    cell.outputs = [nbformat.from_dict(o) for o in outputs_for(10)]
    rec.cell_changed(cell)
    assert rec.to_json() == json.dumps(rec.nb, ensure_ascii=False, allow_nan=False) + "\n"
    assert PLOT in rec.to_json()


def test_cells_dropped_from_the_notebook_leave_the_cache(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    for i in range(1, 6):
        add(rec, i)
    rec.to_json()
    del rec.nb.cells[:3]
    text = rec.to_json()
    assert [c["execution_count"] for c in json.loads(text)["cells"]] == [4, 5]
    assert len(rec._cell_json) == 2


async def test_cells_are_recorded_while_the_file_is_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The disk is slow: the first write waits (in its worker thread) until released.
    writing, release = threading.Event(), threading.Event()
    real_write = notebook.atomic_write_parts

    def slow_write(path: Path, parts: list[str]) -> os.stat_result:
        writing.set()
        release.wait(30)
        return real_write(path, parts)

    monkeypatch.setattr(notebook, "atomic_write_parts", slow_write)
    live = LiveNotebook(recorder(tmp_path), "s1")
    await live.add_cell("print(1)", outputs_for(1), **meta(1))
    assert await asyncio.to_thread(writing.wait, 30)
    # The next cell (and so its execution's answer) does not wait for the sync.
    await asyncio.wait_for(live.add_cell("print(2)", outputs_for(2), **meta(2)), 10)
    assert len(json.loads(await live.to_json())["cells"]) == 2
    release.set()
    assert await live.flush()
    on_disk = nbformat.read(str(live.path), as_version=4)
    assert [c.execution_count for c in on_disk.cells] == [1, 2]


async def test_a_failed_write_degrades_until_a_write_succeeds(tmp_path: Path) -> None:
    rec = NotebookRecorder.create(
        tmp_path / "gone" / "notebook.ipynb", session_id="s1", kernel_name="k", backend="local"
    )
    live = LiveNotebook(rec, "s1")
    await live.add_cell("print(1)", outputs_for(1), **meta(1))
    assert not await live.flush()
    assert live.degraded
    (tmp_path / "gone").mkdir()
    assert await live.save()
    assert not live.degraded
    assert [c.execution_count for c in nbformat.read(str(rec.path), as_version=4).cells] == [1]


@pytest.mark.parametrize("meanwhile", ["removed", "replaced"])
async def test_a_file_removed_right_after_it_was_written_leaves_the_write_a_success(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    meanwhile: str,
) -> None:
    """Someone removes or replaces the file between the rename that wrote it and anything
    the broker does next: that save worked (it is not degraded), and the next save notices
    the change and rewrites the file from memory."""
    real_replace = os.replace

    def replace_then_interfere(src: str, dst: Path) -> None:
        real_replace(src, dst)
        if Path(dst).name == "notebook.ipynb":
            Path(dst).unlink()
            if meanwhile == "replaced":
                Path(dst).mkdir()

    live = LiveNotebook(recorder(tmp_path), "s1")
    await live.add_cell("print(1)", outputs_for(1), **meta(1))
    monkeypatch.setattr(notebook.os, "replace", replace_then_interfere)
    assert await live.save()
    assert not live.degraded
    monkeypatch.setattr(notebook.os, "replace", real_replace)
    if meanwhile == "replaced":
        live.recorder.path.rmdir()
    await live.add_cell("print(2)", outputs_for(2), **meta(2))
    assert await live.save()
    assert [c.execution_count for c in nbformat.read(str(live.path), as_version=4).cells] == [1, 2]
    assert "was removed outside the broker" in caplog.text


async def test_flush_writes_at_once_while_a_paced_save_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notebook, "SAVE_PACE", 1e9)
    monkeypatch.setattr(notebook, "SAVE_MAX_DELAY_S", 600.0)
    live = LiveNotebook(recorder(tmp_path), "s1")
    await live.add_cell("print(1)", outputs_for(1), **meta(1))
    assert await live.flush()
    # The next background save now waits its turn (ten minutes here) ...
    await live.add_cell("print(2)", outputs_for(2), **meta(2))
    await asyncio.sleep(0)
    on_disk = nbformat.read(str(live.path), as_version=4)
    assert [c.execution_count for c in on_disk.cells] == [1]
    # ... and a flush does not wait for it.
    assert await asyncio.wait_for(live.flush(), 30)
    on_disk = nbformat.read(str(live.path), as_version=4)
    assert [c.execution_count for c in on_disk.cells] == [1, 2]


def test_a_short_write_is_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``writev`` may write less than asked (a signal, a nearly full disk): the rest follows,
    in order, and the file is whole."""
    real_writev = os.writev
    monkeypatch.setattr(notebook.os, "writev", lambda fd, bufs: real_writev(fd, [bufs[0][:3]]))
    monkeypatch.setattr(notebook, "IOV_MAX", 4)
    parts = [f"part {i};".encode() for i in range(10)] + ["é and the end".encode()]
    notebook.atomic_write_parts(tmp_path / "f", parts)
    assert (tmp_path / "f").read_bytes() == b"".join(parts)


def test_bytes_written_per_cell_do_not_grow_with_the_session() -> None:
    """The save rule (``enough_to_save``), cells of one size, no time passing: whatever the
    session's length, a new cell costs at most 25 cells' worth of rewriting (1/SAVE_NEW_SHARE
    plus the sawtooth), where a save after every cell would cost the whole notebook
    (1,000 cells' worth at cell 1,000)."""
    cell = 2_300  # bytes: 1,000 such cells make the benchmark's 2.3 MB notebook
    cells = 2_000
    written = [0] * (cells + 1)
    pending = saved = 0
    for n in range(1, cells + 1):
        pending += 1
        if notebook.enough_to_save(pending, saved):
            written[n] = n * cell
            pending, saved = 0, n
    assert all(written[1:21])  # a short notebook is written after every cell
    for start in (1, 101, 401, 901, 1901):
        per_cell = sum(written[start : start + 100]) / 100
        assert per_cell <= 25 * cell, (start, per_cell / cell)


async def _saved(live: LiveNotebook, count: int) -> None:
    """Wait (bounded) until the file holds ``count`` cells."""
    for _ in range(600):
        if live.path.exists() and len(nbformat.read(str(live.path), 4).cells) == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the file never held {count} cells")


async def _long_notebook(tmp_path: Path, cells: int) -> LiveNotebook:
    rec = recorder(tmp_path)
    for i in range(1, cells + 1):
        add(rec, i)
    live = LiveNotebook(rec, "s1")
    assert await live.save()
    return live


async def test_a_long_notebook_is_rewritten_once_enough_of_it_is_new(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notebook, "SAVE_MAX_LAG_S", 600.0)
    monkeypatch.setattr(notebook, "SAVE_MIN_DELAY_S", 0.0)
    live = await _long_notebook(tmp_path, 100)  # 5% of it: 5 cells
    for i in range(101, 105):
        await live.add_cell(f"print({i})", outputs_for(i), **meta(i))
    await asyncio.sleep(0.3)
    assert len(nbformat.read(str(live.path), 4).cells) == 100
    await live.add_cell("print(105)", outputs_for(105), **meta(105))
    await _saved(live, 105)
    # A flush writes what is pending at once.
    await live.add_cell("print(106)", outputs_for(106), **meta(106))
    assert await live.flush()
    assert len(nbformat.read(str(live.path), 4).cells) == 106


async def test_a_change_reaches_the_file_within_the_lag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notebook, "SAVE_MAX_LAG_S", 0.2)
    live = await _long_notebook(tmp_path, 100)
    await live.add_cell("print(101)", outputs_for(101), **meta(101))
    await _saved(live, 101)
