"""One session's artifacts are bounded (``max_session_artifact_bytes``): a cell that makes
plot after plot used to store every one, each a new file on the data disk all sessions
share, without end. Past the budget, new large rich values are left out of the API, the
record and the notebook alike, and the cell's stderr says so once; values already stored
cost nothing, and other sessions are not affected."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interpreter.outputs import unstored_notice
from tests.conftest import Server, own_server, run

#: Room for two of the images below (each a PNG of about 100 KB of random pixels).
BUDGET = 250_000
#: Displays PNGs ``n`` of random pixels (each distinct: no two share an artifact).
IMAGES = (
    "import io\nfrom IPython.display import Image, display\n"
    "import matplotlib.pyplot as plt\nimport numpy as np\n"
    "def png(seed):\n"
    "    buf = io.BytesIO()\n"
    "    plt.imsave(buf, np.random.default_rng(seed).random((180, 180, 3)), format='png')\n"
    "    return buf.getvalue()\n"
    "sizes = []\n"
    "for seed in {seeds}:\n"
    "    data = png(seed)\n"
    "    sizes.append(len(data))\n"
    "    display(Image(data=data))\n"
    "print(sizes)"
)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with own_server("interp-artifact-budget-", max_session_artifact_bytes=BUDGET) as srv:
        yield srv


def test_past_its_artifact_budget_a_session_stores_no_new_plot_and_says_so(
    server: Server,
) -> None:
    with server.client() as api:
        sid = api.post("/v1/sessions", json={}).json()["id"]
        first = run(api, sid, IMAGES.format(seeds=[1, 2, 3, 4]))
        assert first["status"] == "ok", first
        sizes = [int(s) for s in first["stdout"].strip("[]\n").split(", ")]
        assert all(80_000 < s < 125_000 for s in sizes), sizes
        stored = [o for o in first["outputs"] if "image/png" in o["data"] or o["artifacts"]]
        assert len(stored) == 2, first["outputs"]
        # The others are there, without the picture the session had no room for.
        assert [sorted(o["data"]) for o in first["outputs"][2:]] == [["text/plain"]] * 2
        assert first["stderr"] == unstored_notice(BUDGET)
        cells = api.get(f"/v1/sessions/{sid}/notebook").json()["cells"]
        shown = [o for o in cells[-1]["outputs"] if "image/png" in o.get("data", {})]
        assert len(shown) == 2
        # An image already stored costs nothing; a new one is refused, told again.
        again = run(api, sid, IMAGES.format(seeds=[1, 5]))
        assert ["image/png" in o["data"] or bool(o["artifacts"]) for o in again["outputs"]] == [
            True,
            False,
        ]
        assert again["stderr"] == unstored_notice(BUDGET)
        assert run(api, sid, "print('text still works')")["stdout"] == "text still works\n"
        # Another session has a budget of its own.
        other = api.post("/v1/sessions", json={}).json()["id"]
        fresh = run(api, other, IMAGES.format(seeds=[7]))
        assert fresh["stderr"] == "" and fresh["outputs"][0]["artifacts"], fresh
