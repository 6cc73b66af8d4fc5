"""A broker killed during an upload left its part in the workspace for good: listed, in
the kernel's view, counted in the quota (found by an outside operations tester). The next
broker removes the temporary files uploads make, and nothing else."""

from __future__ import annotations

import os
from pathlib import Path

from interpreter.upload import remove_leftovers


def test_only_upload_temporaries_in_the_top_directory_are_removed(tmp_path: Path) -> None:
    ws = tmp_path / "workspace"
    (ws / "sub").mkdir(parents=True)
    part = ws / ".upload-1cf76847198e192d.tmp"
    part.write_bytes(b"x" * 1000)
    kept = [
        ws / ".upload-notes.tmp",  # not a name an upload makes
        ws / "sub" / ".upload-0123456789abcdef.tmp",  # uploads write in the top directory
        ws / "data.csv",
    ]
    for path in kept:
        path.write_text("mine")
    outside = tmp_path / "outside.txt"
    outside.write_text("host")
    os.symlink(outside, ws / ".upload-fedcba9876543210.tmp")
    (ws / ".upload-aaaaaaaaaaaaaaaa.tmp").mkdir()
    assert remove_leftovers(ws) == 1
    assert not part.exists()
    assert all(p.read_text() == "mine" for p in kept)
    assert outside.read_text() == "host" and (ws / ".upload-fedcba9876543210.tmp").is_symlink()
    assert (ws / ".upload-aaaaaaaaaaaaaaaa.tmp").is_dir()
    assert remove_leftovers(tmp_path / "gone") == 0
