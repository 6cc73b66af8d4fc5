"""The one rule for which recorded cells a rebuild or a replay runs again."""

from __future__ import annotations

from typing import Any

import pytest

from interpreter.audit import cell_digest
from interpreter.cells import notebook_problem, plan, recorded_status, source_of

ERROR = {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "x", "traceback": []}
STREAM = {"output_type": "stream", "name": "stdout", "text": "hi\n"}


def code(src: Any = "x = 1", outputs: list[Any] | None = None, **interp: Any) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": "code", "source": src, "outputs": outputs or []}
    cell["metadata"] = {"interp": interp} if interp else {}
    return cell


CASES = [
    # (cell, recorded status, skip reason)
    (code(), "ok", None),
    (code(["a = 1\n", "b = 2"]), "ok", None),
    (code(status="ok"), "ok", None),
    (code(outputs=[STREAM]), "ok", None),
    # JupyterLab cells have no status of ours: an error output means the cell failed.
    # A cell that raised ran, and what it did up to the error is state: it is re-run.
    (code(outputs=[STREAM, ERROR]), "error", None),
    (code(outputs=[ERROR], status="error"), "error", None),
    # Our status wins over the outputs (a timeout's cell ends with our own error output).
    (code(outputs=[ERROR], status="ok"), "ok", None),
    (code(outputs=[ERROR], status="timeout"), "timeout", "recorded_failure"),
    (code(outputs=[ERROR], status="kernel_died"), "kernel_died", "recorded_failure"),
    (code(status="interrupted"), "interrupted", "recorded_failure"),
    (code(status="unknown"), "unknown", "recorded_failure"),
    # Cells that never reached a kernel.
    (code(status="denied"), "denied", "never_ran"),
    (code(status="cancelled"), "cancelled", "never_ran"),
    (code(""), "ok", "empty"),
    (code("  \n\t"), "ok", "empty"),
    (code("", outputs=[ERROR], status="error"), "error", "empty"),
    # Replays: a fork's cells (another source) are its state; a recovery's are not.
    (code(status="ok", replay_of=0, replay_source="session:s_parent"), "ok", None),
    (code(status="ok", replay_of=1, replay_source="session:s_me"), "ok", "own_rerun"),
    (
        code(outputs=[ERROR], status="error", replay_of=1, replay_source="session:s_me"),
        "error",
        "own_rerun",
    ),
    (code(status="ok", replay_of=0, replay_source="notebook"), "ok", None),
]


@pytest.mark.parametrize(("cell", "status", "skip"), CASES)
def test_rule(cell: dict[str, Any], status: str, skip: str | None) -> None:
    nb = {"metadata": {"interp": {"session_id": "s_me"}}, "cells": [cell]}
    (got,) = plan(nb)
    assert (got.status, got.skip, got.rerun) == (status, skip, skip is None)
    assert got.source == source_of(cell) and recorded_status(cell) == status


def _recorded(src: str, outputs: list[Any], status: str) -> dict[str, Any]:
    """A cell as the service records it: status and the digest of source and outputs."""
    return code(src, outputs, status=status, audit_sha256=cell_digest(src, outputs))


RESULT = {"output_type": "execute_result", "data": {"text/plain": "3"}, "metadata": {}}


@pytest.mark.parametrize(
    ("cell", "status"),
    [
        # As recorded: the metadata says how it ended.
        (_recorded("x = f()", [ERROR], "error"), "error"),
        (_recorded("sleep(99)", [ERROR], "timeout"), "timeout"),
        # A reviewer fixed the cell and re-ran it in Jupyter (nbconvert --execute): the
        # outputs changed, the metadata did not. The outputs decide.
        ({**_recorded("x = f()", [ERROR], "error"), "outputs": [RESULT]}, "ok"),
        ({**_recorded("sleep(99)", [ERROR], "timeout"), "outputs": [RESULT]}, "ok"),
        ({**_recorded("x = f()", [ERROR], "error"), "source": "x = g()"}, "error"),
        # A timeout cell edited and re-run to another error: an error, which is re-run.
        (
            {**_recorded("sleep(99)", [ERROR], "timeout"), "outputs": [{**ERROR, "evalue": "y"}]},
            "error",
        ),
        # Without a digest, an "error" with no error output left is not one.
        (code("x = 1", [RESULT], status="error"), "ok"),
    ],
)
def test_a_cell_changed_since_recorded_is_judged_by_its_outputs(
    cell: dict[str, Any], status: str
) -> None:
    assert recorded_status(cell) == status
    (got,) = plan({"cells": [cell]})
    assert got.rerun == (status in ("ok", "error"))


def test_positions_count_every_cell_and_only_code_cells_are_planned() -> None:
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "# title", "metadata": {}},
            code("a = 1"),
            {"cell_type": "raw", "source": "raw", "metadata": {}},
            code("b = 2", status="timeout"),
        ]
    }
    assert [(c.index, c.source, c.rerun) for c in plan(nb)] == [
        (1, "a = 1", True),
        (3, "b = 2", False),
    ]


def test_a_plan_names_the_recorded_execution_and_error() -> None:
    cell = {**code("f()", [ERROR], status="error", execution_id="e_1"), "execution_count": 4}
    (got,) = plan({"cells": [cell]})
    assert (got.execution_id, got.execution_count, got.ename) == ("e_1", 4, "ZeroDivisionError")


def test_without_a_recording_session_no_replay_counts_as_own() -> None:
    nb = {"cells": [code(status="ok", replay_of=0, replay_source="session:s_me")]}
    assert plan(nb)[0].rerun


V4 = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}


@pytest.mark.parametrize(
    ("nb", "problem"),
    [
        (V4, None),
        ({**V4, "cells": [{**code(), "execution_count": None, "id": "a1"}]}, None),
        ([1, 2], "it is a JSON array, not an object"),
        ("x", "it is a JSON string, not an object"),
        ({"not": "a notebook"}, 'it has no "nbformat" version: not a Jupyter notebook'),
        ({"cells": "x"}, 'it has no "nbformat" version: not a Jupyter notebook'),
        # A valid v3 notebook keeps its cells in worksheets: plan() would find none.
        (
            {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": []},
            "it is nbformat version 3; convert it to version 4 first "
            "(jupyter nbconvert --to notebook)",
        ),
        ({**V4, "cells": "x"}, 'its "cells" is not a list'),
        ({**V4, "cells": [1]}, "cell 0 is a JSON number, not an object"),
        (
            {**V4, "cells": [{"cell_type": "code"}]},
            "'metadata' is a required property (at cells/0)",
        ),
        # Without ids (required since 4.5, still accepted by nbformat): valid, no warning.
        ({**V4, "cells": [{**code(), "execution_count": None}]}, None),
        # What the execute route refuses in code (it stalled a rebuild before).
        (
            {**V4, "cells": [{**code("a\x00"), "execution_count": None}]},
            "code cell 0's source contains a NUL character, which code cannot hold",
        ),
        (
            {**V4, "cells": [{**code(["x = '", "\ud800'"]), "execution_count": None}]},
            "code cell 0's source contains a lone surrogate, which code cannot hold",
        ),
        # Another language's notebook: replayed as Python, it raised NameErrors.
        (
            {**V4, "metadata": {"kernelspec": {"name": "ir", "language": "R"}}},
            "it is a notebook of the 'R' language (its metadata says so); this service runs Python",
        ),
        (
            {**V4, "metadata": {"language_info": {"name": "julia"}}},
            (
                "it is a notebook of the 'julia' language (its metadata says so); "
                "this service runs Python"
            ),
        ),
        (
            {
                **V4,
                "metadata": {
                    "kernelspec": {"name": "python3", "display_name": "P", "language": "Python"}
                },
            },
            None,
        ),
    ],
)
def test_notebook_problem_says_in_one_line_what_is_wrong(nb: Any, problem: str | None) -> None:
    assert notebook_problem(nb) == problem


def note(text: str, **interp: Any) -> dict[str, Any]:
    return {
        "cell_type": "markdown",
        "source": text,
        "metadata": {"interp": interp} if interp else {},
    }


RESTART_ON_REQUEST = note("**Kernel restarted** on request", event="restart", reasons=["requested"])
RESTART_AFTER_DEATH = note("**Kernel restarted** after it died", event="restart", reasons=["died"])
RECOVERY = note("**Recovery**: ...", event="recovery")
OWN = "session:s_me"


@pytest.mark.parametrize(
    ("cells", "rerun"),
    [
        # A restart on request clears what came before it...
        ([code("a = 1"), RESTART_ON_REQUEST, code("b = 2")], ["b = 2"]),
        ([code("a = 1"), RESTART_ON_REQUEST], []),
        # ...unless a recovery brought it back (its re-runs repeat the cells above).
        (
            [
                code("a = 1"),
                RESTART_ON_REQUEST,
                RECOVERY,
                code("a = 1", replay_of=0, replay_source=OWN),
                code("b = 2"),
            ],
            ["a = 1", "b = 2"],
        ),
        # A death is not a clearing on purpose: a recovery rebuilds that state.
        (
            [
                code("a = 1"),
                code("boom", status="kernel_died", state_lost=True),
                RESTART_AFTER_DEATH,
            ],
            ["a = 1"],
        ),
        # exit() clears the state: neither it nor what came before is re-run.
        (
            [
                code("a = 1"),
                code("exit()", status="ok", reason="exit", state_lost=True),
                code("b = 2", status="ok", state_lost=True),
            ],
            ["b = 2"],
        ),
        # A session notebook written before notes carried their event: read by the text.
        ([code("a = 1"), note("**Kernel restarted** on request (generation 2)"), code("b")], ["b"]),
    ],
)
def test_a_rebuild_of_the_current_state_starts_after_the_last_clearing(
    cells: list[dict[str, Any]], rerun: list[str]
) -> None:
    nb = {"metadata": {"interp": {"session_id": "s_me"}}, "cells": cells}
    assert [c.source for c in plan(nb, current_state=True) if c.rerun] == rerun
    # A replay (interp replay) runs what the session ran, clearings included.
    assert len([c for c in plan(nb) if c.rerun]) >= len(rerun)


def test_a_notebook_from_elsewhere_has_no_clearing() -> None:
    nb = {"cells": [code("a = 1"), note("**Kernel restarted** on request"), code("b = 2")]}
    assert [c.source for c in plan(nb, current_state=True) if c.rerun] == ["a = 1", "b = 2"]
