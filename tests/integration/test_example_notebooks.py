"""Every example notebook in notebooks/ runs cell by cell through the service."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import nbformat
import pytest

from tests.conftest import REPO, run

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_there_is_an_example_notebook() -> None:
    assert NOTEBOOKS, "notebooks/ must hold at least one example"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_example_runs_through_the_service(
    api: httpx.Client, new_session: Callable[..., str], path: Path
) -> None:
    source = nbformat.read(path, as_version=4)
    cells = [c for c in source.cells if c.cell_type == "code"]
    sid = new_session()
    images = charts = frames = 0
    for cell in cells:
        result = run(api, sid, cell.source, timeout_s=120)
        assert result["status"] == "ok", (cell.source[:80], result["error"])
        for out in result["outputs"]:
            images += sum(a["mime"] == "image/png" for a in out["artifacts"])
            charts += "application/vnd.chart+json" in out["data"]
            frames += "application/vnd.dataframe+json" in out["data"]
    assert images >= 2 and charts >= 2 and frames >= 1
    recorded = nbformat.reads(api.get(f"/v1/sessions/{sid}/notebook").text, as_version=4)
    nbformat.validate(recorded)
    assert [c.source for c in recorded.cells] == [c.source for c in cells]
    # The CSV the notebook made is in the session's workspace.
    names = [e["name"] for e in api.get(f"/v1/sessions/{sid}/files").json()["entries"]]
    assert any(name.endswith(".csv") for name in names)
