"""Workspace bounds without a server: names, streamed uploads, sparse downloads, listings
that race with vanishing files, and the connection cap's arithmetic."""

from __future__ import annotations

import os
import re
import resource
import shutil
import threading
from collections import Counter
from pathlib import Path

import pytest

from interpreter.api.connections import connection_cap
from interpreter.errors import PathNotAllowed, PayloadTooLarge, WorkspaceChanged
from interpreter.upload import TEMP_PREFIX, Upload
from interpreter.workspace import Workspace, split_path


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("a\rb", "U+000D"),
        ("a\nb", "U+000A"),
        ("x\x7f", "U+007F"),
        ("x\x85", "U+0085"),
        ("gpj.\u202eexe", "U+202E"),
        ("a\u2067b", "U+2067"),
        ("a\u200fb", "U+200F"),
    ],
)
def test_control_and_bidi_characters_are_refused_by_name(path: str, code: str) -> None:
    with pytest.raises(PathNotAllowed, match=re.escape(code)):
        split_path(path)


def test_ordinary_unicode_names_pass_normalised() -> None:
    assert split_path("dir/cafe\u0301.txt") == ["dir", "caf\u00e9.txt"]


def test_upload_streams_to_a_temp_file_and_commits_under_the_normal_name(
    tmp_path: Path,
) -> None:
    ws = Workspace(tmp_path)
    up = Upload(ws, "sub/cafe\u0301.bin", limit=10)
    # In the top directory until committed: no directory is made for an upload that fails.
    temps = [p.name for p in tmp_path.iterdir()]
    assert len(temps) == 1 and temps[0].startswith(TEMP_PREFIX)
    up.write(b"12345")
    up.write(b"678")
    entry = up.commit()
    assert entry.path == "sub/caf\u00e9.bin" and entry.size == 8
    assert [p.name for p in tmp_path.iterdir()] == ["sub"]
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["caf\u00e9.bin"]
    assert (tmp_path / "sub" / "caf\u00e9.bin").read_bytes() == b"12345678"


def test_upload_past_its_limit_fails_and_abort_leaves_nothing(tmp_path: Path) -> None:
    up = Upload(Workspace(tmp_path), "big.bin", limit=4)
    with pytest.raises(PayloadTooLarge):
        up.write(b"12345")
    up.abort()
    assert list(tmp_path.iterdir()) == []


def test_sparse_and_oversized_files_are_not_opened_for_download(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    with open(tmp_path / "sparse", "wb") as fh:
        fh.truncate(1 << 30)
    with pytest.raises(PayloadTooLarge, match="sparse"):
        ws.open_read("sparse", 2 << 30)
    with pytest.raises(PayloadTooLarge, match="limited to 1000"):
        ws.open_read("sparse", 1000)
    (tmp_path / "dense").write_bytes(b"d" * 5000)
    fh, size = ws.open_read("dense", 2 << 30)
    with fh:
        assert size == 5000 and fh.read() == b"d" * 5000


def test_listing_skips_a_file_that_vanishes_while_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "stays").write_bytes(b"1")
    (tmp_path / ".upload-x.tmp").write_bytes(b"2")
    real_scandir = os.scandir

    class Vanishing:
        def __init__(self, fd: int) -> None:
            self.it = real_scandir(fd)

        def __enter__(self) -> Vanishing:
            return self

        def __exit__(self, *exc: object) -> None:
            self.it.close()

        def __iter__(self) -> Vanishing:
            return self

        def __next__(self) -> os.DirEntry[str]:
            entry = next(self.it)
            if entry.name.startswith(".upload-"):
                os.unlink(tmp_path / entry.name)  # another request renamed it away
            return entry

    monkeypatch.setattr(os, "scandir", Vanishing)
    names = [e.name for e in Workspace(tmp_path).listing("").entries]
    assert names == ["stays"]


def test_connection_cap_stays_under_half_the_descriptor_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(10) == 10
    if soft != resource.RLIM_INFINITY:
        assert connection_cap(10**9) == max(8, soft // 2)


def test_an_upload_whose_directory_code_keeps_removing_is_stored(tmp_path: Path) -> None:
    """A cell removing and making again the upload's directory, as fast as it can: every
    commit makes the directories again until its rename lands (it answered 404 "No file
    'd/e/u.txt'", for a path the upload was to create, about one time in three). Nothing
    but a store or 409 workspace_changed is ever the answer."""
    ws = Workspace(tmp_path)
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            shutil.rmtree(tmp_path / "d", ignore_errors=True)
            os.makedirs(tmp_path / "d", exist_ok=True)

    churner = threading.Thread(target=churn)
    churner.start()
    outcomes: Counter[str] = Counter()
    try:
        for _ in range(300):
            upload = Upload(ws, "d/e/u.txt", limit=100)
            upload.write(b"abc")
            try:
                entry = upload.commit()
            except WorkspaceChanged:
                outcomes["workspace_changed"] += 1
            else:
                # Its entry as stored, even when the churn removed it at once.
                assert (entry.path, entry.size) == ("d/e/u.txt", 3)
                outcomes["stored"] += 1
    finally:
        stop.set()
        churner.join()
    assert outcomes["stored"] >= 290, outcomes
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_an_upload_whose_temporary_file_code_removed_is_a_conflict(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    upload = Upload(ws, "sub/data.csv", limit=100)
    upload.write(b"a,b\n")
    # Listings (the user's files) leave out a file still arriving; the kernel sees it.
    assert ws.listing().entries == []
    (temp,) = [p for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)]
    temp.unlink()  # a cell cleaning the workspace
    with pytest.raises(WorkspaceChanged, match=r"'sub/data.csv' was not stored.*Upload it again"):
        upload.commit()
    assert list(tmp_path.iterdir()) == []
    (tmp_path / ".upload-0123456789abcdef.tmp").write_bytes(b"mine")  # the user's own
    assert [e.name for e in ws.listing().entries] == [".upload-0123456789abcdef.tmp"]
