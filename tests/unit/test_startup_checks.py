"""What ``interp serve`` checks before it serves: a data directory it can write in."""

from __future__ import annotations

import errno
import tempfile
from pathlib import Path
from typing import Any

import pytest

from interpreter.server import StartupFailed, prepare_data_dir


def test_a_missing_data_dir_is_created(tmp_path: Path) -> None:
    prepare_data_dir(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the write check leaves nothing


def test_a_file_is_not_a_data_dir(tmp_path: Path) -> None:
    # It ended in a FileExistsError traceback.
    (tmp_path / "afile").touch()
    with pytest.raises(StartupFailed) as failed:
        prepare_data_dir(tmp_path / "afile")
    assert str(failed.value) == (
        f"the data directory {tmp_path / 'afile'} (--data-dir or INTERP_DATA_DIR) is not a "
        "directory: give a directory, or a path to create."
    )
    with pytest.raises(StartupFailed, match=r"^cannot create the data directory .*Not a dir"):
        prepare_data_dir(tmp_path / "afile" / "data")


@pytest.mark.parametrize("missing", [False, True])
def test_a_read_only_data_dir_is_one_line(
    tmp_path: Path, missing: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a read-only filesystem it ended in sqlite3.OperationalError ("unable to open
    # database file") or OSError EROFS tracebacks; root ignores modes, so the filesystem's
    # answer is simulated here (scripts in the report mount a read-only tmpfs for real).
    def read_only(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, "Read-only file system")

    target = tmp_path / "data"
    if not missing:
        target.mkdir()
    monkeypatch.setattr(tempfile, "TemporaryFile", read_only)
    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(StartupFailed) as failed:
        prepare_data_dir(target)
    doing = "create" if missing else "write in"
    assert str(failed.value) == (
        f"cannot {doing} the data directory {target} (--data-dir or INTERP_DATA_DIR): "
        "Read-only file system; give a directory this user can write in, on a writable "
        "filesystem."
    )
