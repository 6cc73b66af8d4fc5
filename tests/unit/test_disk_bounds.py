"""The free-space floor, the choice of a session's disk quota, releasing a quota (no kernel)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from interpreter import backends, quota, storage_floor
from interpreter.errors import StorageFull, ValidationFailed
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
