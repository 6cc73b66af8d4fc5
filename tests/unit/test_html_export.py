"""``interp html``: the export of a session shows its tables and plots, and runs none of
the agent's scripts when a reviewer opens it."""

from __future__ import annotations

import re

import nbformat
import pytest

from interpreter.cli_client import EXPORT_CSP, notebook_to_html

pytest.importorskip("nbconvert")

HOSTILE = (
    "<table class='dataframe'><thead><tr><th>a</th></tr></thead>"
    "<tbody><tr><td>1</td></tr></tbody></table>"
    "<script>alert(1)</script><img src=x onerror=alert(2)>"
    "<meta http-equiv='refresh' content='0;url=https://evil.example/'>"
)


def test_the_html_export_forbids_scripts_and_keeps_tables_and_images() -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("display(HTML(...))")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": HOSTILE, "text/plain": "x"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert(3)"}),
        nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo="}),
    ]
    nb.cells.append(cell)
    page = notebook_to_html(nb)
    head = page[: page.index("</head>")]
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)"', head)
    assert policy is not None and policy.group(1) == EXPORT_CSP
    # The policy comes before any script, and allows none: default-src 'none' with no
    # script-src, so inline scripts, handlers and the template's CDN scripts are blocked.
    assert policy.start() < head.find("<script")
    assert "default-src 'none'" in EXPORT_CSP and "script-src" not in EXPORT_CSP
    assert "http-equiv='refresh'" not in page and "evil.example" not in page
    # What a reviewer reads still renders.
    assert "<th>a</th>" in page and "<tbody><tr><td>1</td></tr></tbody>" in page
    assert 'src="data:image/png;base64,iVBORw0KGgo="' in page
