"""Whole workspace trees (copy, removal) at any depth, and writes into a closing workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interpreter import tree
from interpreter.errors import BadRequest, SessionClosed
from interpreter.form_upload import FormUpload
from interpreter.upload import Upload
from interpreter.workspace import Workspace, copy_tree_safely
from interpreter.write_gate import WriteGate, refusal


def chain(root: Path, depth: int) -> None:
    """``root/d/d/.../d/leaf.txt`` with ``depth`` directories (made without long paths)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"deep")
        os.close(leaf)
    finally:
        os.close(fd)


def test_copies_and_removals_of_trees_deeper_than_the_recursion_limit(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    chain(src, 1500)
    (src / "top.txt").write_bytes(b"top")
    (src / ".upload-0123456789abcdef.tmp").write_bytes(b"half")  # an upload in progress
    with pytest.raises(tree.TreeTooDeep):
        copy_tree_safely(src, tmp_path / "strict", skip_too_deep=False)
    assert copy_tree_safely(src, tmp_path / "kept") == 1  # top.txt; the deep leaf left out
    assert sorted(os.listdir(tmp_path / "kept")) == ["d", "top.txt"]
    shallow = tmp_path / "shallow"
    shallow.mkdir()
    chain(shallow, tree.MAX_COPY_DEPTH - 1)
    assert copy_tree_safely(shallow, tmp_path / "shallow-copy", skip_too_deep=False) == 1
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("src", "kept", "strict", "shallow", "shallow-copy"):
            tree.remove_tree(fd, name)
    finally:
        os.close(fd)
    assert os.listdir(tmp_path) == []


def test_closing_the_gate_aborts_uploads_and_refuses_every_later_write(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, WriteGate())
    (tmp_path / "old.txt").write_bytes(b"old")
    up = Upload(ws, "dir/new.bin", limit=100)
    up.write(b"half")
    assert ws.gate.uploads == 1
    ws.gate.close(refusal("s_1", "deleted"))
    assert sorted(os.listdir(tmp_path)) == ["old.txt"]  # no temporary file, no directory
    assert ws.gate.uploads == 0
    with pytest.raises(SessionClosed, match="read-only"):
        up.write(b"rest")
    with pytest.raises(SessionClosed):
        up.commit()
    with pytest.raises(SessionClosed):
        Upload(ws, "other.bin", limit=100)
    with pytest.raises(SessionClosed):
        ws.delete("old.txt")
    assert ws.listing("").entries[0].name == "old.txt"  # reads still work


def test_a_multipart_body_is_checked_whole_before_anything_is_written(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    body = (
        b'--BB\r\nContent-Disposition: form-data; name="file"; filename="a/one"\r\n\r\n1\r\n'
        b'--BB\r\nContent-Disposition: form-data; name="file"; filename="two"\r\n\r\n2\r\n'
        b"--BB--\r\n"
    )
    form = FormUpload(ws, "multipart/form-data; boundary=BB", 1000, lambda p: p)
    form.write(body)
    (tmp_path / "two").mkdir()  # made (by the kernel) while the body arrived
    with pytest.raises(BadRequest, match=r"is a directory\. Nothing was written"):
        form.commit()
    assert sorted(os.listdir(tmp_path)) == ["two"]  # neither a/one nor the directory a


def test_hard_links_are_copied_as_links_not_once_per_name(tmp_path: Path) -> None:
    """A kernel that links one big file many times (cheap inside its quota) must not make
    a copy (a closed session's files leaving its quota filesystem, a fork) write the file
    once per name onto the host's disk."""
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    big = src / "big.bin"
    big.write_bytes(os.urandom(1 << 20))
    names = [src / f"link{i}" for i in range(10)]
    names += [src / "a" / "b" / f"deep{i}" for i in range(10)]
    for name in names:
        os.link(big, name)
    (src / "a" / "solo.txt").write_bytes(b"solo")
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "link3").write_bytes(b"an older file of that name")  # a copy into a kept tree
    assert copy_tree_safely(src, dst) == 22
    inodes = {os.stat(dst / p.relative_to(src)).st_ino for p in [big, *names]}
    assert len(inodes) == 1
    assert os.stat(dst / "big.bin").st_nlink == 21
    assert (dst / "a" / "b" / "deep9").read_bytes() == big.read_bytes()
    assert (dst / "a" / "solo.txt").read_bytes() == b"solo"
    blocks = {(s.st_ino, s.st_blocks) for s in (os.stat(p) for p in dst.rglob("*"))}
    assert sum(b for _, b in blocks) * 512 < 2 * (1 << 20)  # one copy's blocks on the disk


def test_hard_links_deep_under_long_names_are_links_too(tmp_path: Path) -> None:
    src = tmp_path / "src"
    deep = src.joinpath(*(c * 250 for c in "abcde"))  # a path past tree.MAX_LINK_PATH
    deep.mkdir(parents=True)
    (deep / "first.bin").write_bytes(os.urandom(1 << 16))
    for i in range(5):
        os.link(deep / "first.bin", deep / f"again{i}")
    dst = tmp_path / "dst"
    assert copy_tree_safely(src, dst) == 6
    copy = dst / deep.relative_to(src)
    assert len(str(copy.relative_to(dst))) > tree.MAX_LINK_PATH
    inodes = {os.stat(copy / n).st_ino for n in os.listdir(copy)}
    assert inodes == {os.stat(copy / "first.bin").st_ino}
    assert os.listdir(dst) == ["a" * 250]  # no holding directory left


def test_a_copied_tree_keeps_its_files_and_directories_modification_times(
    tmp_path: Path,
) -> None:
    """A closed session's workspace is copied out of its quota filesystem: every file was
    then listed as modified at the close (an operator's finding, on both backends)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.csv").write_text("a")
    (src / "sub" / "deeper" / "b.txt").write_text("b")
    then = 1_600_000_000_123_456_789
    for path in (
        src / "a.csv",
        src / "sub" / "deeper" / "b.txt",
        src / "sub" / "deeper",
        src / "sub",
    ):
        os.utime(path, ns=(then, then))
    tree.copy_tree(src, dst, None, skip_too_deep=False)
    for rel in ("a.csv", "sub/deeper/b.txt", "sub/deeper", "sub"):
        assert (dst / rel).stat().st_mtime_ns == then, rel
