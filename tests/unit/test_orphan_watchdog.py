"""The orphan watchdog's arithmetic and the broker's stamps (real files, no kernel)."""

from __future__ import annotations

import os
from pathlib import Path

from interpreter.backends.docker.config import BROKER_STAMP
from interpreter.backends.docker.stamps import runtime_dirs, stamp_all, stamp_interval
from interpreter_kernel.watchdog import stale_for


def test_staleness_counts_from_the_last_stamp_or_the_start(tmp_path: Path) -> None:
    stamp = tmp_path / BROKER_STAMP
    assert stale_for(str(stamp), started=100.0, now=130.0) == 30.0  # never stamped
    stamp.touch()
    os.utime(stamp, (500.0, 500.0))
    assert stale_for(str(stamp), started=100.0, now=530.0) == 30.0
    # A stamp older than the kernel's start does not count against it.
    assert stale_for(str(stamp), started=600.0, now=610.0) == 10.0


def test_stamps_reach_every_kernel_directory_and_never_follow_links(tmp_path: Path) -> None:
    root = tmp_path / "run"
    (root / "aaa").mkdir(parents=True)
    (root / "ccc").symlink_to(tmp_path, target_is_directory=True)  # not followed
    victim = tmp_path / "victim"
    victim.write_text("x")
    os.utime(victim, (1.0, 1.0))
    planted = root / "bbb"
    planted.mkdir()
    (planted / BROKER_STAMP).symlink_to(victim)
    assert sorted(Path(p).name for p in runtime_dirs(root)) == ["aaa", "bbb"]
    assert stamp_all(root) == 2
    assert (root / "aaa" / BROKER_STAMP).is_file()
    assert victim.stat().st_mtime == 1.0  # the link itself was touched, not its target
    assert stamp_all(tmp_path / "missing") == 0


def test_stamps_come_often_enough() -> None:
    assert stamp_interval(1800) == 60
    assert stamp_interval(3) == 0.75
    assert stamp_interval(0.1) == 0.5
