"""The workspace's stat, make_dir and rename (the E2B surface's Stat, MakeDir and Move):
inside the workspace only, never through a symlink."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interpreter.errors import BadRequest, FileNotFoundInWorkspace, PathNotAllowed
from interpreter.workspace import Workspace


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


def test_stat_describes_without_following(ws: Workspace, tmp_path: Path) -> None:
    ws.write("d/f.txt", [b"abc"])
    entry = ws.stat("d/f.txt")
    assert (entry.name, entry.path, entry.type, entry.size) == ("f.txt", "d/f.txt", "file", 3)
    assert ws.stat("d").type == "directory"
    assert (ws.stat("").type, ws.stat("").path) == ("directory", "")
    os.symlink(tmp_path, ws.root / "link")
    assert ws.stat("link").type == "other"
    with pytest.raises(PathNotAllowed):
        ws.stat("link/ws")
    with pytest.raises(FileNotFoundInWorkspace):
        ws.stat("d/missing")


def test_make_dir_creates_parents_once(ws: Workspace, tmp_path: Path) -> None:
    assert ws.make_dir("a/b/c") is True
    assert (ws.root / "a/b/c").is_dir()
    assert ws.make_dir("a/b/c") is False
    ws.write("a/file", [b"x"])
    with pytest.raises(BadRequest, match="not a directory"):
        ws.make_dir("a/file")
    os.symlink(tmp_path, ws.root / "link")
    with pytest.raises(PathNotAllowed):
        ws.make_dir("link/escaped")
    assert not (tmp_path / "escaped").exists()


def test_rename_moves_inside_the_workspace(ws: Workspace, tmp_path: Path) -> None:
    ws.write("src.txt", [b"data"])
    ws.rename("src.txt", "new/dir/dst.txt")
    assert (ws.root / "new/dir/dst.txt").read_bytes() == b"data"
    assert not (ws.root / "src.txt").exists()
    ws.rename("new", "moved")  # a directory, with what it holds
    assert (ws.root / "moved/dir/dst.txt").is_file()
    with pytest.raises(BadRequest, match="into itself"):
        ws.rename("moved", "moved/dir/inner")
    with pytest.raises(FileNotFoundInWorkspace):
        ws.rename("missing", "other")
    ws.write("full/x", [b"x"])
    with pytest.raises(BadRequest, match="not empty"):
        ws.rename("moved", "full")
    # A symlinked directory is never walked through, on either side.
    os.symlink(tmp_path, ws.root / "link")
    with pytest.raises(PathNotAllowed):
        ws.rename("full/x", "link/escaped")
    with pytest.raises(PathNotAllowed):
        ws.rename("link/ws", "here")
    assert not (tmp_path / "escaped").exists() and (ws.root / "full/x").is_file()
    # The link itself may be moved (it stays a link; nothing is followed).
    ws.rename("link", "link2")
    assert (ws.root / "link2").is_symlink()
