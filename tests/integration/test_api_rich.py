"""Rich capture, artifacts and the live notebook through the API."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import nbformat

from tests.conftest import run

PLOT = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 2, 3], [2, 4, 8], label="growth")
ax.set_title("Growth")
ax.set_xlabel("day")
ax.set_ylabel("value")
plt.show()
"""


def test_plot_is_png_artifact_and_chart_json(api: httpx.Client, shared_session: str) -> None:
    result = run(api, shared_session, PLOT)
    assert result["status"] == "ok", result
    [out] = result["outputs"]
    assert out["type"] == "display_data"
    assert "image/png" not in out["data"], "binary data must not be inline"
    [ref] = [a for a in out["artifacts"] if a["mime"] == "image/png"]
    chart = out["data"]["application/vnd.chart+json"]
    flat = str(chart)
    assert "Growth" in flat and "day" in flat and "value" in flat and "line" in flat
    png = api.get(ref["url"])
    assert png.status_code == 200
    assert png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png.content) == ref["size"]
    assert png.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in png.headers["content-security-policy"]
    assert png.headers["content-disposition"].startswith("attachment")
    # Content-addressed: the same figure again gives the same artifact id.
    again = run(api, shared_session, PLOT)
    assert again["outputs"][0]["artifacts"][0]["id"] == ref["id"]


def test_dataframe_summary_inline(api: httpx.Client, shared_session: str) -> None:
    code = (
        "import pandas as pd, numpy as np\n"
        "df = pd.DataFrame({'city': ['a', 'b', None] * 20, 'n': np.arange(60.0)})\n"
        "df.loc[3, 'n'] = np.nan\n"
        "df"
    )
    result = run(api, shared_session, code)
    [out] = result["outputs"]
    summary = out["data"]["application/vnd.dataframe+json"]
    assert summary["shape"] == [60, 2]
    cols = {c["name"]: c for c in summary["columns"]}
    assert cols["n"]["dtype"] == "float64" and cols["n"]["nulls"] == 1
    assert cols["city"]["nulls"] == 20
    assert summary["truncated"] is True
    assert 0 < len(summary["rows"]) < 60
    assert "text/plain" in out["data"]
    series = run(api, shared_session, "df['n']")["outputs"][0]["data"]
    assert "application/vnd.dataframe+json" in series


def test_mime_types_pass_through(api: httpx.Client, shared_session: str) -> None:
    code = (
        "from IPython.display import HTML, Markdown, JSON, SVG, display\n"
        "display(HTML('<b>bold</b>'))\n"
        "display(Markdown('# Title'))\n"
        "display(JSON({'a': 1}))\n"
        'display(SVG(\'<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>\'))\n'
    )
    result = run(api, shared_session, code)
    outs = result["outputs"]
    assert outs[0]["data"]["text/html"] == "<b>bold</b>"
    assert outs[1]["data"]["text/markdown"] == "# Title"
    assert outs[2]["data"]["application/json"] == {"a": 1}
    [svg] = outs[3]["artifacts"]
    assert svg["mime"] == "image/svg+xml"
    body = api.get(svg["url"])
    assert body.headers["content-type"] == "image/svg+xml" and b"<svg" in body.content


def test_notebook_is_valid_and_records_everything(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "a = 1\nprint('hi')")
    run(api, sid, PLOT)
    run(api, sid, "1/0")
    resp = api.get(f"/v1/sessions/{sid}/notebook")
    assert resp.status_code == 200
    nb = nbformat.reads(resp.text, as_version=4)
    nbformat.validate(nb)
    meta = nb.metadata["interp"]
    assert meta["session_id"] == sid and meta["kernel_name"] and meta["kernel_version"]
    assert [c.metadata["interp"]["status"] for c in nb.cells] == ["ok", "ok", "error"]
    assert [c.execution_count for c in nb.cells] == [1, 2, 3]
    for cell in nb.cells:
        m = cell.metadata["interp"]
        assert m["started_at"] and m["duration_ms"] is not None and m["state_lost"] is False
    # Images are embedded so the notebook renders on its own in JupyterLab.
    assert nb.cells[1].outputs[0]["data"]["image/png"]
    assert nb.cells[2].outputs[-1]["output_type"] == "error"


def test_deleted_session_keeps_notebook_and_artifacts(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    url = run(api, sid, PLOT)["outputs"][0]["artifacts"][0]["url"]
    assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    assert api.get(f"/v1/sessions/{sid}").json()["status"] == "closed"
    assert api.get(url).status_code == 200
    nb = nbformat.reads(api.get(f"/v1/sessions/{sid}/notebook").text, as_version=4)
    assert len(nb.cells) == 1
    resp = api.post(f"/v1/sessions/{sid}/execute", json={"code": "1"})
    assert resp.status_code == 409
    assert resp.json()["error"]["type"] == "session_closed"


def test_executions_are_retrievable(api: httpx.Client, shared_session: str) -> None:
    result = run(api, shared_session, "print('kept')")
    again = api.get(f"/v1/sessions/{shared_session}/executions/{result['id']}").json()
    assert again == result
    missing = api.get(f"/v1/sessions/{shared_session}/executions/ex_nope")
    assert missing.status_code == 404
