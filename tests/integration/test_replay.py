"""Replay against a real broker: recorded sessions and the example notebooks in notebooks/."""

from __future__ import annotations

import base64
import copy
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from PIL import Image

from interpreter.client import Client
from interpreter.replay import CellReport, replay_notebook
from tests.conftest import REPO, Server

EXAMPLES = sorted((REPO / "notebooks").glob("*.ipynb"))

CELLS = [
    "import datetime, os, time, uuid\nclass Thing: pass\n"
    "print(Thing(), datetime.datetime.now(), uuid.uuid1(), id(Thing))\nprint(os.getcwd())",
    "%time time.sleep(0.01)",
    "import numpy as np, pandas as pd\nrng = np.random.default_rng(7)\n"
    "df = pd.DataFrame({'g': list('abab'), 'v': rng.normal(size=4)})\ndf",
    "undefined_variable",
    "import warnings\nwarnings.warn('heads up')",
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
    "ax.bar(df.g, df.v)\nax.set_title('by group')\nplt.show()",
    "print(df.groupby('g').v.sum().round(6).to_dict())",
]


@pytest.fixture(scope="module")
def client(local_server: Server) -> Iterator[Client]:
    with Client(local_server.url, api_key=local_server.api_key) as c:
        yield c


@pytest.fixture(scope="module")
def recorded(client: Client) -> dict[str, Any]:
    """The notebook of a session that ran CELLS (one of them fails)."""
    with client.create_session() as session:
        for code in CELLS:
            session.run(code)
        nb = session.notebook()
    nbformat.validate(nbformat.from_dict(nb))
    return nb


def test_recorded_session_replays_with_all_cells_matching(
    client: Client, recorded: dict[str, Any]
) -> None:
    seen: list[CellReport] = []
    report = replay_notebook(client, recorded, on_cell=seen.append, name="recorded")
    assert [c.status for c in report.cells] == ["match"] * 7
    assert seen == report.cells
    # A cell that raised ran too: it is re-run, and raising the same error is a match.
    failed = report.cells[3]
    assert failed.recorded_status == "error" and failed.replay_status == "error"
    assert failed.note == "raised its recorded error again"
    assert report.ok and report.matched == 7 and report.recorded_failures == 0
    assert report.recorded_cells_s is not None and report.replay_s > 0
    # The replay ran in its own session, which is gone afterwards.
    assert client.get_session(report.session_id or "").info.status == "closed"


def _different_png(value: str) -> str:
    with Image.open(io.BytesIO(base64.b64decode(value))) as img:
        flipped = img.transpose(Image.Transpose.FLIP_TOP_BOTTOM)
        buf = io.BytesIO()
        flipped.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def test_changed_outputs_are_mismatches(client: Client, recorded: dict[str, Any]) -> None:
    nb = copy.deepcopy(recorded)
    plot_cell = nb["cells"][5]
    for output in plot_cell["outputs"]:
        if "image/png" in output.get("data", {}):
            output["data"]["image/png"] = _different_png(output["data"]["image/png"])
    sums_cell = nb["cells"][6]
    sums_cell["outputs"][0]["text"] = "{'a': 0.0, 'b': 0.0}\n"
    report = replay_notebook(client, nb)
    statuses = [c.status for c in report.cells]
    assert statuses[5:] == ["mismatch", "mismatch"]
    assert any("image/png pixels differ" in d for d in report.cells[5].differences)
    assert report.cells[6].differences[0].startswith("stdout differs: line 1")
    assert not report.ok and report.mismatched == 2


def test_stop_on_mismatch_leaves_the_rest_unrun(client: Client, recorded: dict[str, Any]) -> None:
    nb = copy.deepcopy(recorded)
    nb["cells"][1]["outputs"] = []  # the timing cell now "printed nothing"
    report = replay_notebook(client, nb, stop_on_mismatch=True)
    assert [c.status for c in report.cells][:2] == ["match", "mismatch"]
    assert all(c.status == "skipped" and "not reached" in c.note for c in report.cells[2:])
    assert report.stopped_early and not report.ok


def test_example_notebooks_exist() -> None:
    assert EXAMPLES, "notebooks/ should hold at least one example notebook"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_notebook_replays_with_all_cells_matching(client: Client, path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    report = replay_notebook(client, dict(nb), name=path.name)
    problems = [f"cell {c.index}: {c.differences}" for c in report.cells if c.status == "mismatch"]
    assert not problems, "\n".join(problems)
    assert report.ok and report.matched > 0
    assert report.recorded_failures == 0, "example notebooks should have no failed cells"
    recorded = f"{report.recorded_cells_s:.1f}s" if report.recorded_cells_s else "unknown"
    print(
        f"{path.name}: replayed {report.matched} cells in {report.replay_s:.1f}s "
        f"(cells {report.replay_cells_s:.1f}s); recorded run: {recorded}"
    )


def test_fork_and_recovered_notebooks_replay(client: Client) -> None:
    with client.create_session() as source:
        source.run("base = 20", raise_on_error=True)
        with source.fork() as fork:
            fork.run("print(base + 1)", raise_on_error=True)
            fork_nb = fork.notebook()
        source.restart(recover=True)  # re-runs `base = 20` into the same notebook
        source.run("print(base * 2)", raise_on_error=True)
        recovered_nb = source.notebook()
    # A fork's notebook starts with the inherited cells: they are run, so later cells work.
    fork_report = replay_notebook(client, fork_nb)
    assert [c.status for c in fork_report.cells] == ["match", "match"]
    # A recovery's re-runs duplicate cells already in the notebook: they are skipped.
    report = replay_notebook(client, recovered_nb)
    assert [c.status for c in report.cells] == ["match", "skipped", "match"]
    assert "recovery" in report.cells[1].note


def test_state_from_a_failed_cell_and_displays_updated_later_replay_as_recorded(
    client: Client,
) -> None:
    # A cell defines a function and fails on a test call of it; the next cell uses it.
    # A display is updated by a later cell: the notebook records its last value.
    with client.create_session() as session:
        session.run("def double(x):\n    return 2 * x\ndouble()")
        session.run("print(double(21))")
        session.run(
            "from IPython.display import display, Markdown\n"
            "h = display(Markdown('v1'), display_id=True)"
        )
        session.run("h.update(Markdown('v2'))")
        nb = session.notebook()
    assert nb["cells"][2]["outputs"][0]["data"]["text/markdown"] == "v2"
    seen: list[CellReport] = []
    report = replay_notebook(client, nb, on_cell=seen.append)
    problems = [(c.index, c.status, c.differences) for c in report.cells if c.status != "match"]
    assert not problems and report.ok
    assert report.cells[0].note == "raised its recorded error again"
    assert sorted(c.index for c in seen) == [0, 1, 2, 3]
