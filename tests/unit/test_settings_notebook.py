"""Settings from the environment, and the notebook's atomic, validated writes."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from interpreter.cells import plan
from interpreter.client._config import API_KEY_ENV
from interpreter.notebook import NotebookRecorder, atomic_write_text
from interpreter.settings import Settings
from tests.unit.test_notebook_repair import unrepairable_cell


def test_api_keys_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # One name on both sides: the variable the SDK sends is the one the server reads.
    monkeypatch.setenv(API_KEY_ENV, "alpha, beta,,")
    assert Settings().api_keys == ["alpha", "beta"]
    assert Settings(api_keys=["gamma"]).api_keys == ["gamma"]
    monkeypatch.setenv("INTERP_MAX_SESSIONS", "3")
    assert Settings().max_sessions == 3
    monkeypatch.setenv("INTERP_NOT_A_SETTING", "1")  # the CLI reports these (test_cli_settings)
    Settings()


def test_atomic_write_keeps_old_file_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "nb.ipynb"
    atomic_write_text(target, "old")
    # A write that fails half-way (here: a non-text payload) leaves the old file whole.
    with pytest.raises(TypeError):
        atomic_write_text(target, object())  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["nb.ipynb"]


def test_recorder_writes_valid_notebooks(tmp_path: Path) -> None:
    rec = NotebookRecorder.create(
        tmp_path / "n.ipynb", session_id="s_1", kernel_name="python3", backend="local"
    )
    rec.add_cell(
        "print(1)",
        [{"output_type": "stream", "name": "stdout", "text": "1\n"}],
        execution_id="ex_1",
        execution_count=1,
        status="ok",
        started_at=None,
        duration_ms=3.0,
        state_lost=False,
        reason=None,
    )
    rec.add_cell(
        "1/0",
        [{"output_type": "error", "ename": "ZeroDivisionError", "evalue": "x", "traceback": []}],
        execution_id="ex_2",
        execution_count=2,
        status="error",
        started_at=None,
        duration_ms=1.0,
        state_lost=False,
        reason=None,
    )
    rec.save()
    nb = nbformat.read(tmp_path / "n.ipynb", as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["interp"]["session_id"] == "s_1"
    # A cell that raised an error ran up to it: re-run too (interpreter.cells.plan).
    assert [c.source for c in plan(json.loads(rec.to_json())) if c.rerun] == ["print(1)", "1/0"]
    # An output that cannot validate is repaired (kept in metadata), not refused ...
    rec.add_cell(
        "bad",
        [{"output_type": "nonsense"}],
        execution_id="ex_3",
        execution_count=3,
        status="ok",
        started_at=None,
        duration_ms=None,
        state_lost=False,
        reason=None,
    )
    rec.save()
    written = nbformat.read(tmp_path / "n.ipynb", as_version=4)
    nbformat.validate(written)
    assert written.cells[2].outputs[0]["name"] == "stderr"
    # ... and a cell no repair fixes is refused before anything is written.
    rec.nb.cells.append(unrepairable_cell())
    with pytest.raises(nbformat.ValidationError):
        rec.save()
    assert len(nbformat.read(tmp_path / "n.ipynb", as_version=4).cells) == 3


def test_a_relative_data_dir_is_made_absolute_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(data_dir=Path(".data"))
    assert settings.data_dir == tmp_path / ".data"
    assert settings.session_dir("s_x").is_absolute()
