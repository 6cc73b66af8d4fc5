"""``interp replay --files DIR`` and ``--from-session ID`` supply the input files a
notebook reads (real processes, a real broker, local backend)."""

from __future__ import annotations

import json
from pathlib import Path

from interpreter.client import Client
from tests.conftest import Server
from tests.integration.test_cli import interp

CELLS = [
    "import pandas as pd\nsales = pd.read_csv('data/sales.csv')\nsales.total.sum()",
    "print(open('data/deep/notes.txt').read())",
]
FILES = {"data/sales.csv": "region,total\nnorth,405\nsouth,285\n", "data/deep/notes.txt": "q3\n"}


def test_replay_supplies_input_files(local_server: Server, tmp_path: Path) -> None:
    with (
        Client(local_server.url, api_key=local_server.api_key) as client,
        client.create_session() as session,
    ):
        for path, text in FILES.items():
            session.upload(path, text)
        for code in CELLS:
            assert session.run(code).ok
        nb = session.notebook()
        recorded_id = session.id
    # The recording session is closed now; its files stay readable.
    path = tmp_path / "reads_files.ipynb"
    path.write_text(json.dumps(nb))

    without = interp(local_server, "replay", str(path), "--json")
    assert without.returncode == 1
    cells = json.loads(without.stdout)["cells"]
    assert [c["status"] for c in cells] == ["mismatch", "mismatch"]
    assert "FileNotFoundError" in cells[0]["differences"][0]

    copied = interp(local_server, "replay", str(path), "--from-session", recorded_id)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert f"copied 2 files from session {recorded_id}" in copied.stderr
    assert "2 match, 0 mismatch" in copied.stdout

    local = tmp_path / "inputs"
    for name, text in FILES.items():
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        (local / name).write_text(text)
    uploaded = interp(local_server, "replay", str(path), "--files", str(local))
    assert uploaded.returncode == 0, uploaded.stdout + uploaded.stderr
    assert f"uploaded 2 files from {local}" in uploaded.stderr

    (local / "data" / "sales.csv").write_text("region,total\nnorth,1\n")
    changed = interp(local_server, "replay", str(path), "--files", str(local), "--json")
    assert changed.returncode == 1
    assert (
        "recorded 'np.int64(690)', replayed 'np.int64(1)'"
        in json.loads(changed.stdout)["cells"][0]["differences"][0]
    )

    missing = interp(local_server, "replay", str(path), "--files", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert f"--files {tmp_path / 'nope'}: not a directory" in missing.stderr
    assert "Traceback" not in missing.stderr
