"""The service's notebook against nbclient's, for the same cells on the same kernel.

Each small notebook (and each example in notebooks/) is executed twice: by nbclient (the
reference Jupyter client, in a kernel of the project's kernelspec) and through the service
(local backend), cell by cell.
Both must record the same outputs in the same order: output types and stream names, then
the values compared by replay's comparator (numbers as numbers, images by pixels).

nbclient records one output per stream message, so a cell that prints, pauses and prints
again has two outputs there; JupyterLab joins consecutive chunks of one stream into one
output, and so does the service. The reference is nbclient's with those chunks joined
(:func:`join_consecutive_streams`; nbclient's own ``coalesce_streams`` also moves a stream
past a display between its chunks, which is not the kernel's order).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from interpreter.cells import source_of
from interpreter.client import Client
from interpreter.kernelspecs import kernel_spec_manager
from interpreter.replay import compare_outputs, outputs_from_cell
from tests.conftest import REPO, Server, over_ipc

NOTEBOOKS = {
    "display_updated_later": [
        "from IPython.display import display\nh = display('Hello', display_id='d1')",
        "h.update('world')",
        "display('again', display_id='d1')",
    ],
    "error_after_figure": [
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1/0",
        "print('after the error')",
    ],
    "unknown_magic": ["%undefined-line-magic", "1 + 1"],
    "streams_displays_result": [
        "import sys, warnings\nprint('out 1')\nprint('err', file=sys.stderr)\n"
        "display({'a': 1}, raw=False)\nprint('out 2')\nwarnings.warn('careful')\n6 * 7",
    ],
    "stream_in_pauses": [
        "import sys, time\nprint('a', flush=True)\ntime.sleep(0.3)\nprint('b', flush=True)\n"
        "time.sleep(0.3)\nprint('e', file=sys.stderr, flush=True)\ntime.sleep(0.3)\nprint('c')",
    ],
    "clear_output": [
        "from IPython.display import clear_output\nfor i in range(3):\n"
        "    clear_output(wait=True)\n    print('step', i)",
    ],
    "dataframe_and_markdown": [
        "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3], 'y': [0.5, 1.5, 2.5]})\ndf",
        "from IPython.display import Markdown\nMarkdown('**bold**')",
        "df.describe()",
    ],
}


def with_nbclient(sources: list[str], cwd: Path) -> list[dict[str, Any]]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in sources]
    km = over_ipc(
        AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_spec_manager())
    )
    client = NotebookClient(
        nb,
        km=km,
        allow_errors=True,
        timeout=120,
        resources={"metadata": {"path": str(cwd)}},
    )
    # Given a manager, nbclient leaves its kernel and client running unless told.
    client.execute(cleanup_kc=True)
    cells: list[dict[str, Any]] = nbformat.from_dict(nb)["cells"]
    return [join_consecutive_streams(dict(c)) for c in cells]


def join_consecutive_streams(cell: dict[str, Any]) -> dict[str, Any]:
    """``cell`` with each run of consecutive outputs of one stream joined into one."""
    joined: list[dict[str, Any]] = []
    for output in cell.get("outputs", []):
        last = joined[-1] if joined else None
        if (
            last is not None
            and output["output_type"] == last["output_type"] == "stream"
            and output["name"] == last["name"]
        ):
            joined[-1] = {**last, "text": last["text"] + output["text"]}
        else:
            joined.append(dict(output))
    return {**cell, "outputs": joined}


@pytest.fixture(scope="module")
def client(local_server: Server) -> Iterator[Client]:
    with Client(local_server.url, api_key=local_server.api_key) as c:
        yield c


def shape(cell: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(o["output_type"], o.get("name")) for o in cell.get("outputs", [])]


for example in sorted((REPO / "notebooks").glob("*.ipynb")):
    NOTEBOOKS[example.stem] = [
        source_of(c) for c in nbformat.read(example, as_version=4).cells if c.cell_type == "code"
    ]


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_same_outputs_in_the_same_order_as_nbclient(
    client: Client, name: str, tmp_path: Path
) -> None:
    sources = NOTEBOOKS[name]
    reference = with_nbclient(sources, tmp_path)
    with client.create_session() as session:
        for source in sources:
            session.run(source)
        ours = [c for c in session.notebook()["cells"] if c["cell_type"] == "code"]
    assert len(ours) == len(reference)
    for n, (a, b) in enumerate(zip(reference, ours, strict=True), start=1):
        assert shape(b) == shape(a), f"cell {n}: {shape(a)} from nbclient, {shape(b)} here"
        found = compare_outputs(outputs_from_cell(a), outputs_from_cell(b))
        assert found == [], f"cell {n}: {found}"
