"""The workspace path resolver: the one audited place where client paths meet the disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interpreter.errors import BadRequest, FileNotFoundInWorkspace, PathNotAllowed
from interpreter.workspace import Workspace, copy_tree_safely, split_path


@pytest.mark.parametrize(
    "path",
    [
        "",
        "/",
        "/etc/passwd",
        "..",
        "a/..",
        "a/../b",
        "./a",
        "a//b",
        "a\\b",
        "a\x00b",
        "\uff0e\uff0e/x",
        "\u2024\u2024/x",
        "x" * 300,
        "a/" * 600,
    ],
)
def test_refused_paths(path: str) -> None:
    with pytest.raises(PathNotAllowed):
        split_path(path)


def test_accepted_paths() -> None:
    assert split_path("a/b.csv") == ["a", "b.csv"]
    assert split_path("a/b/") == ["a", "b"]
    assert split_path("", allow_root=True) == []
    assert split_path("\uff44ata.csv") == ["data.csv"]  # NFKC first, then checks


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside.txt").write_text("host secret")
    return Workspace(root)


def test_round_trip(ws: Workspace) -> None:
    assert ws.write("d/e/f.txt", [b"ab", b"cd"]) == 4
    fh, size = ws.open_read("d/e/f.txt")
    with fh:
        assert fh.read() == b"abcd" and size == 4
    assert [e.path for e in ws.listing("d/e").entries] == ["d/e/f.txt"]
    ws.write("d/e/f.txt", [b"new"])
    with ws.open_read("d/e/f.txt")[0] as fh:
        assert fh.read() == b"new"
    ws.delete("d")
    assert ws.listing().entries == []
    with pytest.raises(FileNotFoundInWorkspace):
        ws.open_read("d/e/f.txt")


def test_symlinks_are_never_followed(ws: Workspace, tmp_path: Path) -> None:
    os.symlink(tmp_path / "outside.txt", ws.root / "link")
    os.symlink(tmp_path, ws.root / "dirlink")
    for path in ("link", "dirlink/outside.txt"):
        with pytest.raises(PathNotAllowed):
            ws.open_read(path)
    with pytest.raises(PathNotAllowed):
        ws.write("dirlink/new.txt", [b"x"])
    assert not (tmp_path / "new.txt").exists()
    with pytest.raises(PathNotAllowed):
        ws.listing("dirlink")
    # Deleting the link removes the link, never its target.
    ws.delete("link")
    assert (tmp_path / "outside.txt").read_text() == "host secret"
    # Overwriting a link replaces the link itself.
    os.symlink(tmp_path / "outside.txt", ws.root / "link2")
    ws.write("link2", [b"mine"])
    assert (tmp_path / "outside.txt").read_text() == "host secret"


def test_special_files_and_directories(ws: Workspace) -> None:
    os.mkfifo(ws.root / "fifo")
    with pytest.raises(PathNotAllowed):
        ws.open_read("fifo")
    (ws.root / "dir").mkdir()
    with pytest.raises(BadRequest):
        ws.open_read("dir")
    with pytest.raises(BadRequest):
        ws.write("dir", [b"x"])


def test_listing_a_file_says_it_is_a_file(ws: Workspace) -> None:
    """It said 'a parent is not a directory' (404) for a path that exists."""
    (ws.root / "sub").mkdir()
    (ws.root / "sub" / "data.csv").write_bytes(b"a,b\n")
    with pytest.raises(BadRequest, match=r"'sub/data\.csv' is a file, not a directory"):
        ws.listing("sub/data.csv")
    with pytest.raises(FileNotFoundInWorkspace, match="a parent is not a directory"):
        ws.listing("sub/data.csv/deeper")


def test_fork_copy_skips_links_and_specials(ws: Workspace, tmp_path: Path) -> None:
    ws.write("a/b.txt", [b"data"])
    os.symlink(tmp_path / "outside.txt", ws.root / "link")
    os.mkfifo(ws.root / "fifo")
    dst = tmp_path / "copy"
    assert copy_tree_safely(ws.root, dst) == 1
    assert (dst / "a" / "b.txt").read_bytes() == b"data"
    assert not (dst / "link").exists() and not (dst / "fifo").exists()


def test_copies_keep_holes_so_a_sparse_giant_costs_what_it_occupies(tmp_path: Path) -> None:
    """A kernel's ``truncate(1 << 40)`` must not become a terabyte of zeros on the host
    when its workspace is copied (a fork, a quota released at close)."""
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "sparse.bin", "wb") as fh:
        fh.write(b"head")
        fh.seek(1 << 40)
        fh.write(b"tail")
    (src / "dense.bin").write_bytes(bytes(range(256)) * 4096)
    assert copy_tree_safely(src, tmp_path / "dst") == 2
    copied = tmp_path / "dst" / "sparse.bin"
    assert copied.stat().st_size == (1 << 40) + 4
    assert copied.stat().st_blocks * 512 < 1 << 20
    with open(copied, "rb") as fh:
        assert fh.read(4) == b"head"
        fh.seek(1 << 40)
        assert fh.read() == b"tail"
    assert (tmp_path / "dst" / "dense.bin").read_bytes() == bytes(range(256)) * 4096


def test_a_move_through_a_link_names_the_path_that_has_it(ws: Workspace, tmp_path: Path) -> None:
    """A move into a linked directory named the source: "'plain.txt' goes through a
    symbolic link" (found by an outside security tester)."""
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", ws.root / "etclink")
    ws.write("plain.txt", [b"x"])
    with pytest.raises(PathNotAllowed, match=r"^'etclink/plain\.txt' goes through a symbolic"):
        ws.rename("plain.txt", "etclink/plain.txt")
    assert not (tmp_path / "elsewhere" / "plain.txt").exists()
    with pytest.raises(PathNotAllowed, match=r"^'etclink/x' goes through a symbolic"):
        ws.rename("etclink/x", "y.txt")
    with pytest.raises(FileNotFoundInWorkspace, match=r"No file 'nothing\.txt'"):
        ws.rename("nothing.txt", "etclink/z.txt")
