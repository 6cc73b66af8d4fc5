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


def test_the_default_is_the_users_runtime_directory_else_the_temporary_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert rundirs.default_root() == tmp_path / "interp"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert rundirs.default_root().name == f"interp-{os.geteuid()}"
    if os.geteuid() == 0:  # sudo passes on the invoking user's runtime directory
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 12345, 12345)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(theirs))
        assert rundirs.default_root().name == "interp-0"


def test_other_brokers_entries_go_only_when_unmounted_and_old(tmp_path: Path) -> None:
    root = tmp_path / "rt"
    mine = rundirs.broker_dir(root, tmp_path / "mine")
    gone = rundirs.broker_dir(root, tmp_path / "deleted")  # its data directory is gone
    live = rundirs.broker_dir(root, tmp_path / "live")
    old_unmounted, old_mounted = rundirs.new_kernel_dir(gone), rundirs.new_kernel_dir(live)
    fresh, my_old = rundirs.new_kernel_dir(live), rundirs.new_kernel_dir(mine)
    for path in (old_unmounted, old_mounted, fresh, my_old):
        path.mkdir()
    for path in (old_unmounted, old_mounted, my_old, gone):
        os.utime(path, (1.0, 1.0))
    count = rundirs.sweep_others(root, mine, {str(old_mounted)}, older_than_s=60)
    assert count == 1 and not old_unmounted.exists()
    assert old_mounted.exists() and fresh.exists()
    assert my_old.exists()  # its own entries are the sweep's (which knows what it handed out)
    os.utime(gone, (1.0, 1.0))  # emptied just now: goes at the next start
    rundirs.sweep_others(root, mine, set(), older_than_s=60)
    assert not gone.exists() and live.exists() and (root / rundirs.KEY_FILE).exists()
