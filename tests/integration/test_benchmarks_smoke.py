"""The round-trip benchmark's Jupyter Kernel Gateway reference, with a tiny ``n``.

The gateway is the optional extra ``bench`` (not in ``dev``): with it installed, a real
gateway process runs a real kernel; without it, the benchmark must say so and go on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import gateway, roundtrip


def test_gateway_round_trips_or_says_it_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    measured = gateway.measure(3, flood=False)
    if not gateway.installed():
        assert measured is None
        assert gateway.NOT_INSTALLED in capsys.readouterr().out
        return
    assert measured is not None
    samples, flood = measured
    assert len(samples) == 3
    assert all(ms > 0 for ms in samples)
    assert flood is None


def test_missing_gateway_is_reported_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The other variants are stood in for: only the benchmark's handling is under test.
    async def raw(n: int) -> tuple[list[float], float]:
        return [1.0] * n, 2.0

    monkeypatch.setattr(gateway, "installed", lambda: False)
    monkeypatch.setattr(roundtrip, "raw_jupyter_client", raw)
    monkeypatch.setattr(roundtrip, "through_api", lambda backend, n: ([3.0] * n, 4.0))
    monkeypatch.setattr(sys, "argv", ["roundtrip", "--n", "3", "--backends", "local"])
    roundtrip.main()
    out = capsys.readouterr().out
    assert "not installed" in out
    assert "pip install -e '.[bench]'" in out
    assert "raw jupyter_client" in out
    assert "local backend" in out
    assert "Kernel Gateway (" not in out


def test_harness_prints_each_figure_with_its_ratio_to_the_floor(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import run

    argv = ["run", "--quick", "--backends", "local", "--only", "cold", "--no-gateway"]
    monkeypatch.setattr(sys, "argv", argv)
    run.main()
    out = capsys.readouterr().out
    assert "FAILED" not in out
    assert "| cold create to 1st result | floor local |" in out
    row = next(
        line
        for line in out.splitlines()
        if line.startswith("| cold create to 1st result | API local |")
    )
    assert row.split("|")[4].strip().endswith("x"), row


@pytest.mark.docker
def test_the_refill_scenario_times_the_running_session_in_both_kinds_of_block() -> None:
    from benchmarks import refill
    from tests.integration.docker_lab import require_docker

    require_docker()
    seen = refill.running_session(pool=1, pairs=1)
    # The running session's round trips in each kind of block, every one a real answer.
    assert seen["refill"] and seen["quiet"]
    assert all(ms > 0 for ms in seen["refill"] + seen["quiet"])
    # One refill, timed from the claim until the pool was full again (bounded).
    assert len(seen["refilled"]) == 1
    assert 0 < seen["refilled"][0] < refill.MAX_BLOCK_S


def test_side_by_side_drives_this_build_and_a_revision_from_its_own_checkout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import subprocess

    from benchmarks import service, sidebyside

    served_from: list[Path | None] = []
    serve = service.serve

    def recording(backend: str, cwd: Path | None = None) -> Any:
        served_from.append(cwd)
        if cwd is not None:  # the revision's checkout, and the package imported from it
            probe = [sys.executable, "-c", "import interpreter; print(interpreter.__file__)"]
            where = subprocess.run(probe, cwd=cwd, capture_output=True, text=True, check=True)
            assert Path(where.stdout.strip()) == cwd / "interpreter" / "__init__.py"
        return serve(backend, cwd=cwd)

    monkeypatch.setattr(service, "serve", recording)
    argv = ["sidebyside", "--against", "HEAD", "--turns", "3", "--rounds", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    sidebyside.main()
    out = capsys.readouterr().out
    assert "| floor | 1 |" in out
    assert "| this build | 1 |" in out
    assert "| HEAD | 1 |" in out
    this, checkout = served_from
    assert this is None and checkout is not None
    # The checkout is gone afterwards, from the disk and from git's list.
    assert not checkout.exists()
    listed = subprocess.run(
        ["git", "-C", str(sidebyside.REPO), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert str(checkout) not in listed


def test_side_by_side_says_which_revision_it_cannot_check_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from benchmarks import sidebyside

    monkeypatch.setattr(sys, "argv", ["sidebyside", "--against", "no-such-revision-xyz"])
    with pytest.raises(SystemExit, match="cannot check out 'no-such-revision-xyz'"):
        sidebyside.main()
