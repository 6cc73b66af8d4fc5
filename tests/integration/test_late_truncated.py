"""Through a real broker (local backend): a cell's final state, whatever came before or
after it.

* Late output of a cut cell: a cell prints 320 KB (cut to head and tail, with a full-text
  artifact), then a background thread prints one more line after the cell ended. The
  execution read back kept half the budget, a notice counting a fifth of what was cut
  and a literal ``...`` for the artifact URL, and the notebook another form.
* A redraw loop past the cell's rich budget (``clear_output(wait=True)`` then
  ``display``, or ``handle.update``) lost its final frame: the budget counted every frame
  drawn. The budget is lowered here (``max_rich_output_bytes``) so that a few
  megabytes of frames go past it.

No clock is asserted on: the late line is waited for, with a deadline.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server, run, start_server

NOTICE = re.compile(r"\[\.\.\. (\d+) characters omitted; ([^\]]*)\]")
#: The cell's rich budget in these tests, and its frames: 40 of 600,000 characters.
RICH_BUDGET = 4 << 20
FRAMES = 40
FRAME_CHARS = 600_000


@pytest.fixture
def srv(tmp_path: Path) -> Iterator[Server]:
    server = start_server("local", tmp_path / "data", max_rich_output_bytes=RICH_BUDGET)
    yield server
    server.thread.stop()


def session(client: httpx.Client) -> str:
    resp = client.post("/v1/sessions", json={})
    assert resp.status_code in (200, 201), resp.text
    sid: str = resp.json()["id"]
    return sid


def cell_outputs(client: httpx.Client, sid: str, execution_id: str) -> list[dict[str, Any]]:
    nb = client.get(f"/v1/sessions/{sid}/notebook").json()
    (cell,) = [
        c
        for c in nb["cells"]
        if c["metadata"].get("interp", {}).get("execution_id") == execution_id
    ]
    outputs: list[dict[str, Any]] = cell["outputs"]
    return outputs


def text_of(output: dict[str, Any]) -> str:
    text = output.get("text", "")
    return text if isinstance(text, str) else "".join(text)


def test_late_output_of_a_cut_cell_keeps_its_cut_form(srv: Server) -> None:
    client = srv.client()
    sid = session(client)
    # The thread prints once a file appears in the workspace, uploaded after the cell
    # has finished (no other cell runs meanwhile: its output would go to that one).
    code = (
        "import os, threading, time\n"
        "def late():\n"
        "    while not os.path.exists('go'): time.sleep(0.05)\n"
        "    print('late line')\n"
        "threading.Thread(target=late, daemon=True).start()\n"
        "print(''.join(f'{i:07d}\\n' for i in range(40000)))\n"
    )
    first = run(client, sid, code)
    printed = 40000 * 8 + 1
    assert first["truncated"] and len(first["artifacts"]) == 1
    url = first["artifacts"][0]["url"]
    assert first["artifacts"][0]["size"] == printed
    ((_, where),) = NOTICE.findall(first["stdout"])
    assert url in where
    assert client.put(f"/v1/sessions/{sid}/files/go", content=b"").status_code in (200, 201)
    deadline = time.monotonic() + 60
    while True:
        got = client.get(f"/v1/sessions/{sid}/executions/{first['id']}").json()
        if got["stdout"].endswith("late line\n"):
            break
        assert time.monotonic() < deadline, got["stdout"][-200:]
        time.sleep(0.1)
    ((late_omitted, late_where),) = NOTICE.findall(got["stdout"])
    # Cut as a finished cell's is: the same budget, every character cut counted, the
    # artifact still named, and said to hold only what came before the cell finished.
    mark = NOTICE.search(got["stdout"])
    assert mark is not None
    kept = len(got["stdout"]) - len(mark.group(0)) - 2  # the line breaks around the notice
    assert kept + int(late_omitted) == printed + len("late line\n")
    assert url in late_where and "after the cell finished" in late_where
    assert "the artifact ...]" not in got["stdout"]
    assert abs(len(got["stdout"]) - len(first["stdout"])) < 200
    assert got["stdout"].startswith(first["stdout"][:40_000])
    assert got["truncated"] and got["artifacts"] == first["artifacts"]
    # Artifacts are content-addressed, never rewritten: it holds what came before.
    body = client.get(url).content
    assert len(body) == printed and body.endswith(b"0039999\n\n") and b"late" not in body
    # The notebook cell says the same.
    deadline = time.monotonic() + 60
    while True:
        outputs = cell_outputs(client, sid, first["id"])
        stdout = "".join(text_of(o) for o in outputs if o.get("name") == "stdout")
        if stdout.endswith("late line\n"):
            break
        assert time.monotonic() < deadline, stdout[-200:]
        time.sleep(0.1)
    assert stdout == got["stdout"]


REDRAW = {
    "clear": "clear_output(wait=True); display(HTML(frame))",
    "update": "h.update(HTML(frame)) if step else None\n"
    "    h = h if step else display(HTML(frame), display_id=True)",
}


@pytest.mark.parametrize("mode", sorted(REDRAW))
def test_a_redraw_loop_past_the_rich_budget_keeps_its_last_frame(srv: Server, mode: str) -> None:
    client = srv.client()
    sid = session(client)
    code = (
        "from IPython.display import HTML, display, clear_output\n"
        f"for step in range({FRAMES}):\n"
        f"    frame = f'<p>frame {{step:04d}}</p>'.ljust({FRAME_CHARS}, 'x')\n"
        f"    {REDRAW[mode]}\n"
    )
    assert FRAMES * FRAME_CHARS > RICH_BUDGET
    ex = run(client, sid, code, timeout_s=300)
    assert ex["status"] == "ok", ex
    assert "[output dropped" not in ex["stderr"] and not ex["truncated"]
    (out,) = ex["outputs"]
    (html,) = [a for a in out["artifacts"] if a["mime"] == "text/html"]
    assert client.get(html["url"]).text.startswith(f"<p>frame {FRAMES - 1:04d}</p>")
    outputs = cell_outputs(client, sid, ex["id"])
    (shown,) = [o for o in outputs if o["output_type"] == "display_data"]
    assert text_of({"text": shown["data"]["text/html"]}).startswith(
        f"<p>frame {FRAMES - 1:04d}</p>"
    )


def test_outputs_past_the_rich_budget_are_dropped_with_one_notice(srv: Server) -> None:
    client = srv.client()
    sid = session(client)
    code = (
        "from IPython.display import HTML, display\n"
        f"for step in range({FRAMES}):\n"
        f"    display(HTML(f'<p>frame {{step:04d}}</p>'.ljust({FRAME_CHARS}, 'x')))\n"
    )
    ex = run(client, sid, code, timeout_s=300)
    kept = len(ex["outputs"])
    assert 0 < kept < FRAMES and kept * FRAME_CHARS <= RICH_BUDGET
    assert ex["truncated"] and ex["stderr"].count("[output dropped") == 1
    assert f"{FRAMES - kept} rich outputs" in ex["stderr"]
    outputs = cell_outputs(client, sid, ex["id"])
    said = "".join(text_of(o) for o in outputs if o.get("name") == "stderr")
    assert said.count("[output dropped") == 1 and f"{FRAMES - kept} rich outputs" in said


def test_a_timed_out_cells_thread_prints_into_that_cell(srv: Server) -> None:
    """After a timeout the broker asks the kernel whether it is still there (a
    ``kernel_info_request``), and ipykernel made that probe the parent of all output
    that followed: a line the timed-out cell's thread printed afterwards carried the
    probe's id and was in no execution and no notebook cell (found by a helper writing
    the notebook-endings tests). A probe runs no code: output stays with the cell."""
    client = srv.client()
    sid = session(client)
    code = (
        "import os, threading, time\n"
        "def late():\n"
        "    while not os.path.exists('go'): time.sleep(0.05)\n"
        "    print('late line', flush=True)\n"
        "threading.Thread(target=late, daemon=True).start()\n"
        "print('before', flush=True)\n"
        "time.sleep(60)\n"
    )
    first = run(client, sid, code, timeout_s=2)
    assert first["status"] == "timeout" and first["state_lost"] is False, first
    assert first["stdout"] == "before\n"
    assert client.put(f"/v1/sessions/{sid}/files/go", content=b"").status_code in (200, 201)
    deadline = time.monotonic() + 30
    while True:
        got = client.get(f"/v1/sessions/{sid}/executions/{first['id']}").json()
        if "late line" in got["stdout"]:
            break
        assert time.monotonic() < deadline, got["stdout"]
        time.sleep(0.1)
    assert got["stdout"] == "before\nlate line\n"
    deadline = time.monotonic() + 30
    while "late line" not in "".join(text_of(o) for o in cell_outputs(client, sid, first["id"])):
        assert time.monotonic() < deadline, "the late line is not in the notebook cell"
        time.sleep(0.1)
    # The next cell is the kernel's as before.
    assert run(client, sid, "1 + 1")["outputs"][0]["data"]["text/plain"] == "2"
