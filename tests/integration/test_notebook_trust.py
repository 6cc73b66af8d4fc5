"""A notebook a person can trust (real kernels, both backends): restarts and recoveries
are visible where they happened, JupyterLab's Run All (nbclient here) runs each recovered
cell once, and every cell carries ``metadata.execution`` timing."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from interpreter.kernelspecs import kernel_spec_manager
from interpreter.notes import RERUN_HEADER
from tests.conftest import over_ipc, run

TIMING_KEYS = {
    "iopub.status.busy",
    "iopub.execute_input",
    "shell.execute_reply.started",
    "shell.execute_reply",
    "iopub.status.idle",
}


def notebook(api: httpx.Client, sid: str) -> dict[str, Any]:
    resp = api.get(f"/v1/sessions/{sid}/notebook")
    assert resp.status_code == 200, resp.text
    nb: dict[str, Any] = resp.json()
    nbformat.validate(nbformat.from_dict(nb))
    return nb


def outline(nb: dict[str, Any]) -> list[str]:
    """Each cell as ``code: <first line>`` or ``md: <first words>``."""
    found = []
    for cell in nb["cells"]:
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        kind = "code" if cell["cell_type"] == "code" else "md"
        found.append(f"{kind}: {text.split(chr(10))[0][:40]}")
    return found


def test_restart_and_recovery_are_visible_and_run_all_runs_each_cell_once(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "runs = 0")
    run(api, sid, "runs += 1\nprint('runs', runs)")
    died = run(api, sid, "import os\nos._exit(3)")
    assert died["status"] == "kernel_died"
    resp = api.post(f"/v1/sessions/{sid}/restart", json={"recover": True})
    assert resp.status_code == 200, resp.text
    assert run(api, sid, "print('runs', runs)")["stdout"] == "runs 1\n"
    nb = notebook(api, sid)
    expected = [
        ("code", "runs = 0"),
        ("code", "runs += 1"),
        ("code", "import os"),
        ("md", "**Kernel restarted** after it died (exit:3)"),
        ("md", "**Kernel restarted** on request (generation 3)"),
        ("md", "**Recovery**: 2 cells (In [1], In [2]) of this notebook re-run below"),
        ("code", RERUN_HEADER),
        ("code", RERUN_HEADER),
        ("code", "print('runs', runs)"),
    ]
    assert outline(nb) == [f"{kind}: {text[:40]}" for kind, text in expected]
    # In [3] when the kernel said so before it died, else its index: the count comes with
    # the kernel's execute_input, which it may not have sent first.
    note = "".join(nb["cells"][5]["source"])
    assert re.search(r"not re-run: (In \[3\]|cell #2) `import os` \(kernel_died\)", note), note
    recovered = nb["cells"][7]
    assert recovered["outputs"][0]["text"] == "runs 1\n"  # what the re-run printed
    for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
        timing = cell["metadata"].get("execution", {})
        if cell["metadata"]["interp"]["status"] == "kernel_died":  # it never replied
            assert set(timing) <= {"iopub.status.busy", "iopub.execute_input"}
            continue
        assert set(timing) == TIMING_KEYS, cell["source"]
        start = datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
        assert start <= end

    # Run All, as JupyterLab does it, without the cell that kills the kernel.
    doc = nbformat.from_dict(nb)
    doc.cells = [c for c in doc.cells if "os._exit" not in "".join(c.source)]
    km = over_ipc(
        AsyncKernelManager(kernel_name="python3", kernel_spec_manager=kernel_spec_manager())
    )
    # Given a manager, nbclient leaves its kernel and client running unless told.
    NotebookClient(doc, km=km, timeout=60).execute(cleanup_kc=True)
    final = doc.cells[-1]
    assert final.outputs[0]["text"] == "runs 1\n"  # not 2: the recovered cell ran as nothing
