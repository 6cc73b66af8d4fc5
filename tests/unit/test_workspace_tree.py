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
