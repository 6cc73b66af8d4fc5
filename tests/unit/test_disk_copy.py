"""A copy of a live data directory (``cp -a``): its workspaces' files are in the plain
directories a quota is mounted on, and the images are copied too. Releasing (a closed
session: :func:`quota.sweep`) or mounting again (a revived one: :func:`quota.attach`)
merges them once, losing no file, with one warning. Real loop mounts; no kernel."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from interpreter import quota
from interpreter.workspace import copy_tree_safely
from tests.adversarial.conftest import mounts_under
from tests.conftest import require_quotas


def _copied_live(root: Path) -> tuple[Path, Path]:
    """A session directory as ``cp -a`` of a running broker's leaves it: the image holds
    the workspace's files, and so does the (unmounted) directory, which has one file the
    image had not yet got and one whose content changed since."""
    require_quotas()  # skipped without loop mounts; failed in CI
    session_dir = root / "sessions" / "s_copy"
    workspace = session_dir / "workspace"
    quota.attach(session_dir, workspace, 8)
    (workspace / "same.txt").write_text("same")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "changed.txt").write_text("old")
    (workspace / "only-in-image.txt").write_text("image")
    plain = root / "plain"
    subprocess.run(["cp", "-a", str(workspace), str(plain)], check=True)
    # The image copy of a mounted filesystem can be behind it: here it still has the
    # lost+found that attach removed.
    subprocess.run(["mklost+found"], cwd=workspace, check=True, capture_output=True)
    subprocess.run(["umount", str(workspace)], check=True)
    (plain / "sub" / "changed.txt").write_text("new")
    (plain / "only-in-copy.txt").write_text("copy")
    (plain / "only-in-image.txt").unlink()
    workspace.rmdir()
    plain.rename(workspace)
    return session_dir, workspace


def _files(workspace: Path) -> dict[str, str]:
    return {
        str(p.relative_to(workspace)): p.read_text()
        for p in sorted(workspace.rglob("*"))
        if p.is_file()
    }


MERGED = {
    "same.txt": "same",
    "only-in-copy.txt": "copy",
    "only-in-image.txt": "image",
    "sub/changed.txt": "new",
    "sub/changed.txt.from-image": "old",
}


def test_releasing_a_copied_workspace_merges_its_image_and_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    session_dir, workspace = _copied_live(tmp_path)
    with caplog.at_level(logging.WARNING, logger="interpreter.quota"):
        done = quota.sweep(session_dir.parent, set(), copy=copy_tree_safely)
    assert done == ["s_copy"]
    assert _files(workspace) == MERGED and not (workspace / "lost+found").exists()
    assert sorted(p.name for p in session_dir.iterdir()) == ["workspace"]  # no image, no copy
    assert mounts_under(session_dir) == []
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and not any(r.exc_info for r in warnings)
    assert "sub/changed.txt.from-image" in warnings[0].getMessage()
    # Once: a second start finds nothing to do.
    caplog.clear()
    assert quota.sweep(session_dir.parent, set(), copy=copy_tree_safely) == []
    assert caplog.records == []


def test_mounting_a_copied_workspace_again_keeps_every_file_in_the_quota(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A revived session of the copy: its quota is mounted with all the files in it, none
    hidden under the mount."""
    session_dir, workspace = _copied_live(tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="interpreter.quota"):
            quota.attach(session_dir, workspace, 8)
        assert quota.is_mounted(workspace)
        assert _files(workspace) == MERGED
        assert mounts_under(session_dir) == [str(workspace.resolve())]
        assert not any(r.exc_info for r in caplog.records)
    finally:
        quota.detach(session_dir, workspace, copy=copy_tree_safely)
    assert _files(workspace) == MERGED
    assert sorted(p.name for p in session_dir.iterdir()) == ["workspace"]
