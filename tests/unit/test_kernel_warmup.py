"""The kernel's warm-up (``interpreter_kernel.warmup``): the first cell's one-time work done
at start, where a warm pool's kernel waits for its session, and no trace of it left."""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from interpreter_kernel.warmup import warm_up


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    """A plain IPython shell without a history file, as the kernel's (not set up as the
    kernel's with ``configure.setup``: that would install import hooks and a matplotlib
    backend in this test process)."""
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell(config=config)
    yield shell
    shell.cleanup()
    InteractiveShell.clear_instance()


def python_calls(shell: InteractiveShell, code: str) -> int:
    """The Python function calls ``shell`` makes to run ``code`` as a cell (cProfile's
    count: the same work gives the same number, however busy the machine)."""
    profile = cProfile.Profile()
    with redirect_stdout(io.StringIO()):
        profile.runcall(shell.run_cell, code)
    calls: int = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return calls


def visible_state(shell: InteractiveShell) -> dict[str, Any]:
    ns = shell.user_ns
    return {
        "count": shell.execution_count,
        "inputs": list(ns["In"]),
        "outputs": dict(ns["Out"]),
        "last": (ns["_"], ns["__"], ns["___"]),
        "names": sorted(k for k in ns if not k.startswith("_")),
    }


def test_after_the_warm_up_the_first_cell_costs_what_the_next_ones_do(
    shell: InteractiveShell,
) -> None:
    """Without it a kernel's first ``1+1`` made some 18,000 Python calls against 1,040 for
    each one after (a shell set up as the kernel's, in a process of its own): the display
    formatters, the logger's import and the compile path are built on first use, and a
    claimed warm kernel's first cell paid for them while its agent waited."""
    warm_up(shell)
    first, second, third = (python_calls(shell, "1+1") for _ in range(3))
    assert second == third
    assert first <= 1.1 * second, (first, second)


def test_the_warm_up_leaves_nothing_a_cell_or_its_output_could_see(
    shell: InteractiveShell,
) -> None:
    before = visible_state(shell)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        warm_up(shell)
    assert visible_state(shell) == before
    assert out.getvalue() == err.getvalue() == ""
    # The first cell is still number 1 and the first input.
    with redirect_stdout(io.StringIO()):
        result = shell.run_cell("x = 1\nx + 1", store_history=True)
    assert result.result == 2
    assert result.execution_count == 1
    assert shell.user_ns["In"] == ["", "x = 1\nx + 1"]


def test_a_failing_warm_up_leaves_the_kernel_as_it_was(shell: InteractiveShell) -> None:
    """Whatever breaks in it, the kernel starts (cold) rather than not at all."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken shell")

    shell.run_cell = broken  # type: ignore[method-assign]
    before = visible_state(shell)
    warm_up(shell)
    assert visible_state(shell) == before
