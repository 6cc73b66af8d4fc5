"""The analyst's kernel on real kernels of both backends (issue 13 items 1-3): the package
list, readable text for common outputs, and progress bars in their final state in the
result, the SSE stream's final event, the notebook and the HTML export.

The docker backend runs ``INTERP_DOCKER_IMAGE`` (default ``interp-kernel:latest``); an
image built before the analyst's stack was added lacks seaborn and plotly, and the tests
that need them say so.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from interpreter.cli_client import notebook_to_html
from interpreter.client.render import render_execution
from interpreter.image import image_status
from interpreter.models import Execution
from interpreter.settings import Settings
from tests.conftest import ANALYST, Server, require_docker, run, start_server


def model_text(result: dict[str, Any]) -> str:
    return "\n\n".join(render_execution(Execution.model_validate(result)))


def notebook(api: httpx.Client, sid: str) -> dict[str, Any]:
    resp = api.get(f"/v1/sessions/{sid}/notebook")
    assert resp.status_code == 200
    data: dict[str, Any] = resp.json()
    return data


def last_cell_outputs(api: httpx.Client, sid: str) -> list[dict[str, Any]]:
    outputs: list[dict[str, Any]] = notebook(api, sid)["cells"][-1]["outputs"]
    return outputs


@pytest.fixture(scope="module")
def analyst(server: Server, shared_session: str) -> str:
    """The shared session, once its kernel is known to have the analyst's stack."""
    with server.client() as api:
        resp = api.get(f"/v1/sessions/{shared_session}/packages")
    assert resp.status_code == 200, resp.text
    names = {name.lower() for name in resp.json()["packages"]}
    missing = [name for name in ANALYST if name not in names]
    if missing:
        why = f"this kernel lacks {missing}: rebuild the image (interp images build)"
        if os.environ.get("INTERP_REQUIRE_DOCKER") == "1":
            pytest.fail(f"the analyst tests must run here but cannot: {why}")
        pytest.skip(why)
    return shared_session


def test_a_closed_sessions_package_list_is_still_served(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    # Before, it was empty once the session closed, though its notebook kept it.
    sid = new_session()
    live = api.get(f"/v1/sessions/{sid}/packages").json()["packages"]
    assert "ipykernel" in {n.lower() for n in live}
    assert api.delete(f"/v1/sessions/{sid}").status_code == 204
    assert api.get(f"/v1/sessions/{sid}/packages").json()["packages"] == live


def test_the_package_list_is_served_and_recorded(
    api: httpx.Client, server: Server, shared_session: str
) -> None:
    resp = api.get(f"/v1/sessions/{shared_session}/packages")
    assert resp.status_code == 200
    body = resp.json()
    assert body["session_id"] == shared_session
    assert {"pandas", "numpy", "ipykernel"} <= {n.lower() for n in body["packages"]}
    session = api.get(f"/v1/sessions/{shared_session}").json()
    assert session["packages"] == body["packages"]
    meta = notebook(api, shared_session)["metadata"]["interp"]
    assert meta["packages"] == body["packages"]
    if server.backend == "docker":
        assert body["image"] == session["image"] == meta["image"]
        info = api.get("/v1/info").json()
        assert info["images"][0] == body["image"]
    else:
        assert body["image"] is None and "image" not in meta
    # What the list says is importable, is.
    code = "import importlib.metadata as m\nprint(m.version('pandas'))"
    assert run(api, shared_session, code)["stdout"].strip() == body["packages"]["pandas"]


def test_an_image_off_the_allowlist_is_refused(api: httpx.Client, server: Server) -> None:
    resp = api.post("/v1/sessions", json={"image": "evil/kernel:1"})
    assert resp.status_code == 422, resp.text
    message = resp.json()["error"]["message"]
    if server.backend == "docker":
        assert "'evil/kernel:1' is not allowed" in message and "interp-kernel" in message
    else:
        assert "runs no images" in message


def test_a_seaborn_boxplot(api: httpx.Client, analyst: str) -> None:
    code = (
        "import seaborn as sns, pandas as pd, matplotlib.pyplot as plt\n"
        "df = pd.DataFrame({'g': ['a'] * 5 + ['b'] * 5, 'v': [1, 2, 3, 4, 10, 2, 3, 4, 5, 6]})\n"
        "sns.boxplot(data=df, x='g', y='v')\nplt.title('Spread')\nplt.show()"
    )
    result = run(api, analyst, code)
    text = model_text(result)
    assert result["status"] == "ok", text
    assert "plot 1: box plot titled 'Spread' (x='g', y='v')" in text
    assert "a: median 3, quartiles 2 to 4, whiskers 1 to 4, 1 outlier" in text


def test_a_plotly_bar_is_a_png_a_chart_and_in_the_html_export(
    api: httpx.Client, analyst: str
) -> None:
    code = (
        "import plotly.express as px\n"
        "px.bar(x=['north', 'south', 'east', 'west'], y=[120, 95, 143, 80], title='Revenue',"
        " labels={'x': 'region', 'y': 'revenue'})"
    )
    result = run(api, analyst, code)
    text = model_text(result)
    assert result["status"] == "ok", text
    assert "north=120, south=95, east=143, west=80" in text
    [out] = result["outputs"]
    assert "application/vnd.plotly.v1+json" in out["data"]
    [png] = [a for a in out["artifacts"] if a["mime"] == "image/png"]
    assert api.get(png["url"]).content.startswith(b"\x89PNG")
    [cell_output] = last_cell_outputs(api, analyst)
    assert cell_output["data"]["image/png"]
    html = notebook_to_html(notebook(api, analyst))
    assert "data:image/png;base64," in html


def test_markdown_html_and_latex_displays_read_as_text(api: httpx.Client, analyst: str) -> None:
    code = (
        "from IPython.display import display, Markdown, HTML, Latex\n"
        "display(Markdown('**x**'))\n"
        "display(HTML('<ul><li>alpha &amp; beta</li></ul>'))\n"
        "display(Latex('$x^2$'))"
    )
    text = model_text(run(api, analyst, code))
    assert "display:\n**x**" in text
    assert "display:\n- alpha & beta" in text
    assert "display:\n$x^2$" in text
    assert "object>" not in text


def test_a_styler_reads_as_its_frame(api: httpx.Client, analyst: str) -> None:
    code = "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [0.5, 1.5]}).style.highlight_max()"
    text = model_text(run(api, analyst, code))
    assert "DataFrame: 2 rows x 2 columns" in text and "columns: a (int64), b (float64)" in text
    assert "Styler" not in text


def test_a_tqdm_loop_ends_as_its_final_bar(api: httpx.Client, server: Server, analyst: str) -> None:
    code = (
        "from tqdm.auto import tqdm\nfor _ in tqdm(range(40), mininterval=0, desc='work'):\n"
        "    pass"
    )
    result = run(api, analyst, code)
    text = model_text(result)
    assert result["stderr"] == "", "tqdm.auto must not warn"
    [out] = result["outputs"]
    assert out["data"]["text/plain"].startswith("work: 100%") and "40/40" in text
    [cell_output] = last_cell_outputs(api, analyst)
    assert cell_output["data"]["text/plain"] == out["data"]["text/plain"]
    # The plain tqdm bar (stderr, \r frames) keeps only its last frame too.
    plain = run(api, analyst, code.replace("tqdm.auto", "tqdm"))
    assert plain["stderr"].count("\r") == 0 and plain["stderr"].startswith("work: 100%")
    assert plain["stderr"].count("work:") == 1


def test_a_carriage_return_loop_keeps_its_last_frame_everywhere(
    api: httpx.Client, shared_session: str
) -> None:
    code = (
        "import time\nfor i in range(1, 51):\n"
        "    print(f'\\rstep {i}/50', end='', flush=True)\n    time.sleep(0.002)\nprint(' done')"
    )
    with api.stream(
        "POST",
        f"/v1/sessions/{shared_session}/execute",
        json={"code": code},
        headers={"Accept": "text/event-stream"},
    ) as resp:
        assert resp.status_code == 200
        done = None
        for line in resp.iter_lines():
            if line.startswith("data: "):
                done = json.loads(line[6:])
    assert done is not None and done["status"] == "ok"
    assert done["stdout"] == "step 50/50 done\n"
    [cell_output] = last_cell_outputs(api, shared_session)
    assert cell_output["text"] == "step 50/50 done\n"
    html = notebook_to_html(notebook(api, shared_session))
    assert "step 50/50 done" in html and "step 49/50" not in html


def test_the_analysts_libraries_work_offline(api: httpx.Client, analyst: str) -> None:
    code = """
import numpy as np, pandas as pd, scipy.stats, sympy, tabulate
import statsmodels.api as sm
from sklearn.linear_model import LinearRegression
x = np.arange(20.0)
y = 3 * x + 1
print(round(LinearRegression().fit(x.reshape(-1, 1), y).coef_[0], 6))
print(round(sm.OLS(y, sm.add_constant(x)).fit().params[1], 6))
print(round(scipy.stats.pearsonr(x, y)[0], 6))
df = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})
df.to_parquet('t.parquet'); df.to_excel('t.xlsx', index=False)
print(pd.read_parquet('t.parquet').equals(df), pd.read_excel('t.xlsx').equals(df))
print(sympy.diff(sympy.Symbol('t') ** 3))
print(tabulate.tabulate([[1, 2]], headers=['p', 'q'], tablefmt='github').splitlines()[0])
"""
    result = run(api, analyst, code)
    assert result["status"] == "ok", model_text(result)
    assert result["stdout"].split("\n")[:6] == [
        "3.0",
        "3.0",
        "1.0",
        "True True",
        "3*t**2",
        "|   p |   q |",
    ]


def test_an_ipywidgets_progress_bar_ends_as_its_final_value(
    api: httpx.Client, analyst: str
) -> None:
    code = (
        "import ipywidgets as widgets\nfrom IPython.display import display\n"
        "bar = widgets.IntProgress(max=10, description='load')\ndisplay(bar)\n"
        "for i in range(10):\n    bar.value = i + 1"
    )
    result = run(api, analyst, code)
    [out] = result["outputs"]
    assert "value=10" in out["data"]["text/plain"], out
    [cell_output] = last_cell_outputs(api, analyst)
    assert "value=10" in cell_output["data"]["text/plain"]


def test_a_session_runs_an_allowlisted_image(tmp_path: Path) -> None:
    """A second image (here the default one named by its id, so no extra image is needed)
    is allowed by docker_images, chosen per session, recorded, and runs."""
    require_docker()
    default = Settings().docker_image
    image_id = image_status(default).image_id
    assert image_id is not None
    srv = start_server("docker", tmp_path, pool_size=0, docker_images=[image_id])
    try:
        with srv.client() as api:
            assert api.get("/v1/info").json()["images"] == [default, image_id]
            resp = api.post("/v1/sessions", json={"image": image_id})
            assert resp.status_code == 201, resp.text
            sid = resp.json()["id"]
            assert resp.json()["image"] == image_id
            assert api.get(f"/v1/sessions/{sid}/packages").json()["image"] == image_id
            assert run(api, sid, "print(6 * 7)")["stdout"] == "42\n"
            assert notebook(api, sid)["metadata"]["interp"]["image"] == image_id
            api.delete(f"/v1/sessions/{sid}")
    finally:
        srv.thread.stop()


DERIVED = """\
FROM interp-kernel:latest
USER 0
RUN d=/opt/kernel/lib/python3.11/site-packages \\
 && mkdir $d/interp_probe-1.2.3.dist-info \\
 && printf 'Metadata-Version: 2.1\\nName: interp-probe\\nVersion: 1.2.3\\n' \\
    > $d/interp_probe-1.2.3.dist-info/METADATA \\
 && echo 'VALUE = 42' > $d/interp_probe.py
USER 10001:10001
"""


def test_an_image_built_from_ours_reports_its_own_packages(tmp_path: Path) -> None:
    """A user's image built FROM ours (images/README.md) inherits our package label. Its
    sessions report what it really has: with the label inherited unchanged, and with a
    label of its own that is wrong (the list is read from the image, not the label)."""
    require_docker()
    import uuid

    import docker

    engine = docker.from_env()
    tag = f"interp-test-derived-{uuid.uuid4().hex[:8]}"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(DERIVED)
    (tmp_path / "ctx2").mkdir()
    (tmp_path / "ctx2" / "Dockerfile").write_text(
        f'FROM {tag}:inherited\nLABEL org.interp.packages=\'{{"interp-probe": "9.9.9"}}\'\n'
    )
    images = [f"{tag}:inherited", f"{tag}:labelled"]
    srv = None
    try:

        def unlabelled() -> set[str]:
            """Containers without a broker's label: a build's intermediate ones, never a
            kernel of a broker running alongside (its containers come and go)."""
            return {
                c.id
                for c in engine.containers.list(all=True, sparse=True)
                if "org.interp.broker" not in (c.attrs.get("Labels") or {})
            }

        before = unlabelled()
        engine.images.build(
            path=str(tmp_path / "ctx"), tag=images[0], network_mode="none", rm=True, forcerm=True
        )
        engine.images.build(
            path=str(tmp_path / "ctx2"), tag=images[1], network_mode="none", rm=True, forcerm=True
        )
        # The builds leave no intermediate container behind (each CI run used to leave two).
        assert unlabelled() <= before
        base_label = image_status("interp-kernel:latest").packages
        assert "interp-probe" not in base_label
        assert image_status(images[0]).packages == base_label  # the inherited, stale label
        assert image_status(images[1]).packages == {"interp-probe": "9.9.9"}
        srv = start_server("docker", tmp_path / "data", pool_size=0, docker_images=images)
        with srv.client() as api:
            for image in images:
                resp = api.post("/v1/sessions", json={"image": image})
                assert resp.status_code == 201, resp.text
                sid = resp.json()["id"]
                packages = api.get(f"/v1/sessions/{sid}/packages").json()["packages"]
                assert packages["interp-probe"] == "1.2.3", image
                assert packages["pandas"] == base_label["pandas"]
                assert notebook(api, sid)["metadata"]["interp"]["packages"] == packages
                code = "import interp_probe\nprint(interp_probe.VALUE)"
                assert run(api, sid, code)["stdout"] == "42\n"
                api.delete(f"/v1/sessions/{sid}")
            # The default image's list does not name the derived image's package.
            assert "interp-probe" not in api.get("/v1/info").json()["packages"]
    finally:
        if srv is not None:
            srv.thread.stop()
        for image in reversed(images):
            with contextlib.suppress(docker.errors.ImageNotFound):
                engine.images.remove(image, force=True)


def test_composite_charts_and_a_json_display_read_as_text(api: httpx.Client, analyst: str) -> None:
    """One figure with a violin, a seaborn heatmap, an imshow, stacked and grouped bars, a
    seaborn hue line plot and a twin axis, then a JSON display: each recognised and named."""
    code = """
import seaborn as sns, pandas as pd, numpy as np, matplotlib.pyplot as plt
from IPython.display import display, JSON
df = pd.DataFrame({'g': list('aaabbb'), 'v': [1, 2, 3, 4, 5, 9]})
fig, axes = plt.subplots(2, 3, figsize=(12, 7))
sns.violinplot(data=df, x='g', y='v', ax=axes[0, 0])
grid = pd.DataFrame([[1, 2, 3], [4, 5, 6]], index=['r1', 'r2'], columns=['c1', 'c2', 'c3'])
sns.heatmap(grid, ax=axes[0, 1])
axes[0, 2].imshow(np.arange(12).reshape(3, 4))
bars = pd.DataFrame({'x': [1, 2], 'y': [3, 4]}, index=['p', 'q'])
bars.plot.bar(stacked=True, ax=axes[1, 0])
bars.plot.bar(ax=axes[1, 1])
lines = pd.DataFrame({'t': [0, 1, 0, 1], 'y': [1, 2, 3, 4], 'k': list('uuww')})
sns.lineplot(data=lines, x='t', y='y', hue='k', ax=axes[1, 2])
axes[1, 2].twinx().plot([0, 1], [30, 40], label='temp')
plt.show()
display(JSON({'region': 'north', 'sales': [120, 95], 'ok': True}))
"""
    result = run(api, analyst, code)
    text = model_text(result)
    assert result["status"] == "ok", text
    expected = [
        "plot 1: violin plot (x='g', y='v'), subplot row 1 column 1 of 2x3\n  series: a; b",
        "plot 2: heatmap, subplot row 1 column 2 of 2x3",
        "  series: 2x3 grid, rows r1, r2, columns c1, c2, c3, values 1, 2, 3; 4, 5, 6",
        "plot 3: heatmap (image), subplot row 1 column 3 of 2x3\n"
        "  series: 3x4 grid, values 0, 1, 2, 3; 4, 5, 6, 7; 8, 9, 10, 11",
        "plot 4: stacked bar, subplot row 2 column 1 of 2x3\n"
        "  series 'x': p=1, q=2\n  series 'y': p=3, q=4",
        "plot 5: grouped bar, subplot row 2 column 2 of 2x3\n"
        "  series 'x': p=1, q=2\n  series 'y': p=3, q=4",
        "plot 6: line (x='t', y='y'), subplot row 2 column 3 of 2x3\n"
        "  series 'u': (0, 1), (1, 2)\n  series 'w': (0, 3), (1, 4)\n  (legend: k)",
        "plot 7: line, twin axes over plot 6 (same x, own y axis)\n"
        "  series 'temp': (0, 30), (1, 40)",
    ]
    for part in expected:
        assert part in text, f"{part!r} not in:\n{text}"
    chart, shown = result["outputs"]
    kinds = [ax["kind"] for ax in chart["data"]["application/vnd.chart+json"]["axes"]]
    assert kinds == ["violin", "heatmap", "image", "bar", "bar", "line", "line"], kinds
    # The JSON display reaches the model as the JSON itself, not an object repr.
    assert shown["data"]["application/json"] == {"region": "north", "sales": [120, 95], "ok": True}
    assert '"region": "north"' in text and '"ok": true' in text and "object>" not in text


def test_interleaved_text_keeps_redraws_and_order_and_a_long_error_is_said_cut(
    api: httpx.Client, shared_session: str
) -> None:
    # Redraws on stdout and stderr in turn, then a heading and a display per group.
    code = (
        "import sys, time\nfrom IPython.display import display\nfor i in range(3):\n"
        "    sys.stdout.write(f'\\rA{i}'); sys.stdout.flush()\n"
        "    sys.stderr.write(f'\\rB{i}'); sys.stderr.flush(); time.sleep(0.02)\n"
        "print()\nfor g in 'ab':\n    print(f'== group {g} ==', flush=True)\n"
        "    display(g.upper() * 3)\n"
    )
    result = run(api, shared_session, code)
    assert result["stdout"] == "A2\n== group a ==\n== group b ==\n"
    assert result["stderr"] == "B2"
    text = model_text(result)
    order = [text.index(s) for s in ("== group a ==", "'AAA'", "== group b ==", "'BBB'")]
    assert order == sorted(order), text
    # A message longer than the broker keeps: cut with a notice, and said by `truncated`.
    long = run(api, shared_session, "raise ValueError('y' * 300_000)")
    assert long["status"] == "error" and long["truncated"]
    assert "characters of this error text omitted by the service" in long["error"]["evalue"]
    blocks = render_execution(Execution.model_validate(long), limit=20_000)
    assert sum(len(b) for b in blocks) < 21_000
