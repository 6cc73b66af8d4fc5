"""The free-space floor, the choice of a session's disk quota, releasing a quota (no kernel)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from interpreter import backends, quota, storage_floor
from interpreter.errors import KernelStartFailed, StorageFull, ValidationFailed
from interpreter.launch import SessionFactory
from interpreter.metrics import Metrics
from interpreter.models import Limits
from interpreter.store import Store, Writer
from interpreter.workspace import copy_tree_safely
from tests.conftest import require_quotas
from tests.conftest import test_settings as settings_for


def test_the_floor_refuses_below_it_and_names_no_path(tmp_path: Path) -> None:
    free = storage_floor.free_mb(tmp_path)
    storage_floor.check(tmp_path, 0)
    storage_floor.check(tmp_path, max(1, free // 2))
    with pytest.raises(StorageFull) as caught:
        storage_floor.check(tmp_path, free + 1024)
    err = caught.value
    assert (err.code, err.status) == ("storage_full", 507)
    assert f"{free + 1024} MiB floor" in err.message and str(tmp_path) not in err.message
    storage_floor.check(tmp_path / "not-yet", 1 << 40)  # nothing there to protect yet


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[SessionFactory]:
    settings = settings_for(tmp_path, default_disk_mb=64, max_disk_mb=128)
    writer = Writer()
    yield SessionFactory(
        settings,
        backends.create("local", settings),
        Store(settings.db_path),
        writer,
        Metrics(lambda: {}),
        "test-broker",
    )
    writer.close()


def test_disk_mb_is_the_default_or_asked_within_the_maximum(factory: SessionFactory) -> None:
    why_not = quota.unavailable_reason()
    if why_not is not None:  # no quotas here: none by default, and asking is refused with why
        assert factory.launch_options("s_1", "o").disk_mb is None
        with pytest.raises(ValidationFailed, match="cannot be enforced on this server"):
            factory.launch_options("s_2", "o", Limits(disk_mb=100))
        return
    assert factory.launch_options("s_1", "o").disk_mb == 64
    assert factory.launch_options("s_2", "o", Limits(disk_mb=100)).disk_mb == 100
    with pytest.raises(ValidationFailed, match="disk_mb 129 exceeds the server maximum 128"):
        factory.launch_options("s_3", "o", Limits(disk_mb=129))


def test_without_a_default_sessions_have_no_quota(tmp_path: Path) -> None:
    settings = settings_for(tmp_path, default_disk_mb=0)
    writer = Writer()
    factory = SessionFactory(
        settings,
        backends.create("local", settings),
        Store(settings.db_path),
        writer,
        Metrics(lambda: {}),
        "test-broker",
    )
    assert factory.launch_options("s_1", "o").disk_mb is None
    writer.close()


def test_an_unmounted_image_still_gives_its_files_back(tmp_path: Path) -> None:
    """After a host restart the image is no longer mounted: releasing it keeps its files."""
    require_quotas()  # skipped without loop mounts; failed in CI
    session_dir = tmp_path / "sessions" / "s_c"
    workspace = session_dir / "workspace"
    quota.attach(session_dir, workspace, 8)
    (workspace / "kept.txt").write_text("kept")
    subprocess.run(["umount", str(workspace)], check=True)
    assert not (workspace / "kept.txt").exists()
    quota.detach(session_dir, workspace, copy=copy_tree_safely)
    assert (workspace / "kept.txt").read_text() == "kept"
    assert not quota.is_mounted(workspace) and not quota.image_path(session_dir).exists()


def test_a_quota_moves_with_one_system_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-pool claim hands its slot's mounted quota to the session: the mount and its
    files move, the image follows, and no tool is started for it (``mount --move`` was
    most of a claim's time)."""
    require_quotas()  # skipped without loop mounts; failed in CI
    slot, session = tmp_path / "slot", tmp_path / "session"
    quota.attach(slot, slot / "ws", 8)
    (slot / "ws" / "kept.txt").write_text("moved")
    session.mkdir()

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "run", no_process)
    quota.move(slot, slot / "ws", session, session / "workspace")
    monkeypatch.undo()
    try:
        assert quota.is_mounted(session / "workspace") and not quota.is_mounted(slot / "ws")
        assert (session / "workspace" / "kept.txt").read_text() == "moved"
        assert quota.image_path(session).exists() and not quota.image_path(slot).exists()
        # What cannot move fails with the quota's error, not a crash: nothing is mounted there.
        with pytest.raises(KernelStartFailed, match="could not move"):
            quota.move(slot, slot / "ws", tmp_path / "other", tmp_path / "other" / "ws")
    finally:
        quota.detach(session, session / "workspace")
    assert not quota.is_mounted(session / "workspace")
