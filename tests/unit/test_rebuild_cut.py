"""The report a rebuild keeps on record for a broker killed mid-rebuild, and how the next
broker completes it from the final record of the cell sent last (the end-to-end cases are
in tests/faults/test_rebuild_cut_by_broker.py)."""

from __future__ import annotations

from interpreter.cells import CellPlan
from interpreter.models import ErrorInfo, Execution, RebuildReport
from interpreter.rebuild import cut_by_restart, if_killed

CELLS = [
    CellPlan(0, "a = 1", "ok", None, execution_count=1),
    CellPlan(1, "1/0", "error", None, execution_count=2, ename="ZeroDivisionError"),
    CellPlan(2, "b = 2", "ok", None, execution_count=3),
]


def _start() -> RebuildReport:
    return RebuildReport(source="notebook", cells_total=3)


def _ended(status: str, ename: str | None = None) -> Execution:
    error = ErrorInfo(ename=ename, evalue="x", traceback=[]) if ename else None
    return Execution(id="ex_1", session_id="s_1", status=status, code="", error=error)  # type: ignore[arg-type]


def test_the_report_kept_says_the_cell_sent_last_is_unknown_and_the_rest_not_run() -> None:
    cut = if_killed(_start(), CELLS, CELLS, CELLS[1], "ex_1")
    assert (cut.stopped, cut.stopped_at, cut.cells_ran) == ("broker_restarted", 1, 1)
    assert (cut.failed, cut.not_run) == ([1], [2])
    assert "STOPPED while In [2] `1/0` re-ran (its outcome is unknown)" in cut.summary()
    assert cut_by_restart(cut, _ended("unknown")) == cut
    before = if_killed(_start(), CELLS, CELLS, None, None)
    assert (before.stopped_at, before.cells_ran, before.not_run) == (None, 0, [0, 1, 2])
    assert "STOPPED before any cell re-ran" in before.summary()


def test_a_cell_that_ended_before_the_kill_is_reported_as_it_ended() -> None:
    cut = if_killed(_start(), CELLS, CELLS, CELLS[1], "ex_1")
    done = cut_by_restart(cut, _ended("error", "ZeroDivisionError"))
    assert (done.stopped, done.stopped_at, done.not_run) == ("broker_restarted", None, [2])
    assert (done.failed, done.errors_again) == ([], [1])
    assert "STOPPED between two cells" in done.summary()


def test_a_last_cell_that_ended_before_the_kill_leaves_a_rebuild_that_did_not_stop() -> None:
    report = _start()
    report.cells_ran = 2
    done = cut_by_restart(if_killed(report, CELLS, CELLS, CELLS[2], "ex_1"), _ended("ok"))
    assert (done.stopped, done.stopped_at, done.cells_ran, done.failed) == (None, None, 3, [])
    assert done.cells == [] and done.summary() == "3 of 3 cells re-ran; none failed."
