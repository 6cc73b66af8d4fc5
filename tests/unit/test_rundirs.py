"""Where docker kernels' runtime directories go: private, per data directory, swept safely
(real files; docs/security.md H-30)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interpreter.backends.docker import rundirs


def test_each_data_directory_has_its_own_private_directory_named_for_no_path(
    tmp_path: Path,
) -> None:
    root = tmp_path / "rt"
    alice = tmp_path / "home" / "alice" / "data"
    mine = rundirs.broker_dir(root, alice)
    assert mine.parent == root and mine == rundirs.broker_dir(root, alice)  # found again
    assert len(mine.name) == rundirs.BROKER_NAME_HEX and "alice" not in str(mine)
    other = rundirs.broker_dir(root, tmp_path / "other")
    assert other != mine
    for path in (root, mine, other):
        assert os.stat(path).st_mode & 0o777 == 0o700
    kernel = rundirs.new_kernel_dir(mine)
    assert kernel.parent == mine and len(kernel.name) == rundirs.KERNEL_NAME_HEX
    assert kernel != rundirs.new_kernel_dir(mine)


def test_a_root_another_user_could_have_planted_is_refused(tmp_path: Path) -> None:
    open_root = tmp_path / "open"
    open_root.mkdir(mode=0o777)
    open_root.chmod(0o777)
    with pytest.raises(rundirs.RuntimeRootUnusable, match="written by other users"):
        rundirs.broker_dir(open_root, tmp_path / "data")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(rundirs.RuntimeRootUnusable, match="--runtime-dir"):
        rundirs.broker_dir(link, tmp_path / "data")
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 12345, 12345)
        with pytest.raises(rundirs.RuntimeRootUnusable, match="belongs to uid 12345"):
            rundirs.broker_dir(theirs, tmp_path / "data")


def test_the_sweep_keeps_what_is_mounted_or_handed_out_and_what_came_after_the_listing(
    tmp_path: Path,
) -> None:
    mine = rundirs.broker_dir(tmp_path / "rt", tmp_path / "data")
    stale, mounted, handed = (rundirs.new_kernel_dir(mine) for _ in range(3))
    for path in (stale, mounted, handed):
        path.mkdir()
        (path / "k-1").write_text("")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("")
    (mine / "planted").symlink_to(outside, target_is_directory=True)
    listed = rundirs.entries(mine)
    later = rundirs.new_kernel_dir(mine)
    later.mkdir()
    removed = rundirs.sweep(listed, {str(mounted), str(handed)})
    assert sorted(removed) == sorted([str(stale), str(mine / "planted")])
    assert mounted.is_dir() and handed.is_dir() and later.is_dir() and not stale.exists()
    assert (outside / "keep").exists()  # a link is removed, never followed
    assert rundirs.owns(mine, str(later)) and not rundirs.owns(mine, str(outside / "keep"))
