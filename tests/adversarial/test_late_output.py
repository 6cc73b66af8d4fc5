"""Output of a cell that already ended: a background thread printing, a later cell updating
an earlier display, a kernel forging output for an old cell.

Each message of it changes a finished cell. Writing the cell down per message (its
notebook cell, its record, a link of the audit chain) let one session's flood cost
thousands of links and slow every other session; the changes are now written at most once
an interval per cell, and once more after the last, within the cell's output limits. The
tests count audit links, never clocks; the guard checks the canary of another key.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from interpreter.audit_verify import verify
from tests.adversarial.conftest import Attack, Broker

pytestmark = pytest.mark.parametrize("adv", ["local"], indirect=True)

#: Far fewer links than messages: one per interval of the flood, plus the final ones.
MAX_LINKS = 40


def links(broker: Broker, sid: str) -> int:
    db = sqlite3.connect(f"{(broker.data_dir / 'state.db').as_uri()}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT count(*) FROM audit_links WHERE session_id = ?", (sid,))
        count: int = row.fetchone()[0]
        return count
    finally:
        db.close()


def wait_for_file(attack: Attack, sid: str, name: str) -> None:
    deadline = time.monotonic() + 120
    while attack.api.get(f"/v1/sessions/{sid}/files/{name}").status_code != 200:
        assert time.monotonic() < deadline, f"{name} was never written"
        time.sleep(0.2)


def cell_text(attack: Attack, sid: str, execution_id: str) -> str:
    nb = attack.api.get(f"/v1/sessions/{sid}/notebook").json()
    (cell,) = [
        c
        for c in nb["cells"]
        if c["metadata"].get("interp", {}).get("execution_id") == execution_id
    ]
    return "".join(
        o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
        for o in cell["outputs"]
    )


def settled(attack: Attack, sid: str, execution_id: str, want: str) -> dict[str, Any]:
    """The execution once its late output (ending with ``want``) is written down."""
    deadline = time.monotonic() + 120
    while True:
        ex = attack.api.get(f"/v1/sessions/{sid}/executions/{execution_id}").json()
        if want in ex["stdout"] + ex["stderr"] and want in cell_text(attack, sid, execution_id):
            return ex
        assert time.monotonic() < deadline, f"{want!r} was never recorded"
        time.sleep(0.2)


def assert_verifies(attack: Attack, broker: Broker, sid: str) -> None:
    """Deleted first: its notebook file is then written (it lags the record while it runs)."""
    assert attack.api.delete(f"/v1/sessions/{sid}").status_code == 204
    report = verify(broker.data_dir, sid).to_dict()
    (session,) = report["sessions"]
    assert session["problems"] == [], session["problems"]


def test_a_late_output_flood_is_written_once_an_interval_and_capped_with_one_notice(
    adv: Broker, attack: Attack
) -> None:
    sid = attack.session()
    code = (
        "import threading\n"
        "def later():\n"
        "    for i in range(3000):\n"
        "        print('late', i, flush=True)\n"
        "    for i in range(50):\n"  # 5 MB: past the in-memory limit of 4 MB
        "        print('x' * 100_000, flush=True)\n"
        "    print('last words', flush=True)\n"
        "    open('went', 'w').close()\n"
        "threading.Thread(target=later).start()\n"
    )
    first = attack.run(sid, code)
    assert first["status"] == "ok"
    wait_for_file(attack, sid, "went")
    # Kernel messages are in order: once this cell is done, the late text was routed.
    assert attack.run(sid, "print('after')")["stdout"] == "after\n"
    ex = settled(attack, sid, first["id"], "was dropped]")
    assert ex["stdout"].startswith("late 0\nlate 1\n")  # the middle is cut, and said
    assert ex["truncated"] is True
    assert ex["stderr"].count("printed after the cell ended") == 1
    assert "last words" not in ex["stdout"]  # past the limit: dropped, and said
    assert cell_text(attack, sid, first["id"]).count("printed after the cell ended") == 1
    count = links(adv, sid)
    assert count <= MAX_LINKS, f"{count} audit links for two cells"
    assert_verifies(attack, adv, sid)


def test_updates_of_an_earlier_display_are_written_once_an_interval(
    adv: Broker, attack: Attack
) -> None:
    sid = attack.session()
    shown = attack.run(
        sid,
        "from IPython.display import display\n"
        "h = display({'text/plain': 'start'}, raw=True, display_id=True)",
    )
    updating = attack.run(
        sid, "for i in range(5000): h.update({'text/plain': 'v%d' % i}, raw=True)"
    )
    assert updating["status"] == "ok"
    deadline = time.monotonic() + 120
    while True:
        ex = attack.api.get(f"/v1/sessions/{sid}/executions/{shown['id']}").json()
        nb = attack.api.get(f"/v1/sessions/{sid}/notebook").json()
        plain = [
            o["data"]["text/plain"]
            for c in nb["cells"]
            if c["metadata"].get("interp", {}).get("execution_id") == shown["id"]
            for o in c["outputs"]
        ]
        if ex["outputs"][0]["data"]["text/plain"] == "v4999" and plain == ["v4999"]:
            break
        assert time.monotonic() < deadline, "the last update was never recorded"
        time.sleep(0.2)
    count = links(adv, sid)
    assert count <= MAX_LINKS, f"{count} audit links for two cells"
    assert_verifies(attack, adv, sid)


def test_output_forged_for_an_old_cell_does_not_starve_the_next_cell(
    adv: Broker, attack: Attack
) -> None:
    sid = attack.session()
    first = attack.run(sid, "print('first cell')")
    code = (
        "import threading\n"
        "k = get_ipython().kernel\n"
        f"parent = {{'msg_id': {first['id']!r}, 'msg_type': 'execute_request',\n"
        "          'session': k.session.session, 'username': 'u',\n"
        "          'date': '2020-01-01T00:00:00Z', 'version': '5.3'}\n"
        "def flood():\n"
        "    for i in range(20000):\n"
        "        k.session.send(k.iopub_socket, 'stream',\n"
        "                       {'name': 'stdout', 'text': 'INJECTED\\n'}, parent=parent)\n"
        "    open('went', 'w').close()\n"
        "threading.Thread(target=flood).start()\n"
    )
    assert attack.run(sid, code)["status"] == "ok"
    # Right behind the flood: this cell's own output and idle queue behind it.
    after = attack.run(sid, "print('after')")
    assert after["status"] == "ok" and after["stdout"] == "after\n", after
    wait_for_file(attack, sid, "went")
    assert attack.run(sid, "print('again')")["stdout"] == "again\n"
    ex = settled(attack, sid, first["id"], "INJECTED")
    assert ex["stdout"].startswith("first cell\nINJECTED\n")
    count = links(adv, sid)
    assert count <= MAX_LINKS, f"{count} audit links for four cells"
    assert_verifies(attack, adv, sid)
