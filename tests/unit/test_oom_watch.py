"""The kernel's watch for processes killed for memory (interpreter_kernel.oom_watch): which
cell is told, how often, and the cgroup files it reads. The Docker end to end is
tests/adversarial/test_kernel_abuse.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from interpreter_kernel import oom_watch
from interpreter_kernel.oom_watch import OomWatch, notice, read_kills, read_limit_mb


class Count:
    def __init__(self, value: int | None) -> None:
        self.value = value

    def __call__(self) -> int | None:
        return self.value


def watch(count: Count) -> tuple[OomWatch, io.StringIO]:
    err = io.StringIO()
    return OomWatch(read=count, limit_mb=256, stderr=lambda: err), err


def test_only_kills_during_a_cell_are_said_and_the_second_briefly() -> None:
    count = Count(3)
    w, err = watch(count)
    count.value = 4  # between cells: no cell's
    w.begin()
    assert w.check() == 0 and err.getvalue() == ""
    count.value = 6
    assert w.check() == 2
    count.value = 7
    w.end()
    assert err.getvalue().splitlines() == [
        notice(2, 256).rstrip(),
        "[interp] 1 more process of this session killed for memory.",
    ]
    w.begin()  # the next cell is told in full again
    count.value = 8
    w.end()
    assert err.getvalue().splitlines()[-1] == notice(1, 256).rstrip()


def test_no_count_says_nothing() -> None:
    count = Count(None)
    w, err = watch(count)
    w.begin()
    count.value = 5  # appears mid-cell: a baseline, not five kills
    w.end()
    count.value = 6
    w.begin()
    w.end()
    assert err.getvalue() == ""


def test_the_notice_names_the_limit_and_what_to_do() -> None:
    assert notice(1, 256) == (
        "[interp] A process of this session was killed for memory: it went over the "
        "session's limit (256 MB). The kernel and its variables are intact. Code that waits "
        "on that process (a multiprocessing pool, say) may wait until the cell's timeout: "
        "interrupt it, then use less memory per process or fewer processes.\n"
    )
    assert notice(2, None).startswith(
        "[interp] 2 processes of this session were killed for memory: they went over the "
        "session's limit. "
    )


def test_cgroup_files_of_both_versions_are_read(tmp_path: Path) -> None:
    v2 = tmp_path / "memory.events"
    v2.write_text("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n")
    v1 = tmp_path / "memory.oom_control"
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 5\n")
    missing = str(tmp_path / "none")
    assert read_kills((missing, str(v2))) == 2
    assert read_kills((missing, str(v1))) == 5
    assert read_kills((missing,)) is None
    limit = tmp_path / "limit"
    for raw, expected in [("268435456\n", 256), ("max\n", None), ("9223372036854771712", None)]:
        limit.write_text(raw)
        assert read_limit_mb((missing, str(limit))) == expected


def test_it_is_installed_only_where_the_backend_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    class Shell:
        class events:
            registered: list[str] = []

            @classmethod
            def register(cls, name: str, _: object) -> None:
                cls.registered.append(name)

    monkeypatch.setattr(oom_watch, "_installed", None)
    monkeypatch.delenv("INTERP_OOM_WATCH", raising=False)
    assert oom_watch.install(Shell()) is None  # the local backend: the host's cgroup
    assert Shell.events.registered == []
