"""Workspace bounds without a server: names, streamed uploads, sparse downloads, listings
that race with vanishing files, and the connection cap's arithmetic."""

from __future__ import annotations

import os
import re
import resource
from pathlib import Path

import pytest

from interpreter.api.connections import connection_cap
from interpreter.errors import PathNotAllowed, PayloadTooLarge
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
