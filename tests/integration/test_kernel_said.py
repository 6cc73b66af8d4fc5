"""The notebook and the API say what the kernel said, in its order (real kernels, both
backends): a display updated from a later cell, an error before a figure, an unknown
magic, output metadata."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tests.conftest import run


def cells(api: httpx.Client, sid: str) -> list[dict[str, Any]]:
    nb = api.get(f"/v1/sessions/{sid}/notebook").json()
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_a_display_updated_from_a_later_cell_changes_the_earlier_one(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    first = run(api, sid, 'h = display("Hello", display_id="d1")')
    assert [o["data"]["text/plain"] for o in first["outputs"]] == ["'Hello'"]
    second = run(api, sid, 'h.update("world")')
    assert second["status"] == "ok" and second["outputs"] == []
    earlier = api.get(f"/v1/sessions/{sid}/executions/{first['id']}").json()
    assert [o["data"]["text/plain"] for o in earlier["outputs"]] == ["'world'"]
    assert earlier["outputs"][0]["display_id"] == "d1"
    recorded = cells(api, sid)
    assert [o["data"]["text/plain"] for o in recorded[0]["outputs"]] == ["'world'"]
    assert recorded[1]["outputs"] == []


def test_error_order_unknown_magic_and_metadata(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    failed = run(api, sid, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1/0")
    assert failed["status"] == "error" and failed["error"]["ename"] == "ZeroDivisionError"
    magic = run(api, sid, "%undefined-line-magic")
    assert magic["status"] == "error" and magic["error"]["ename"] == "UsageError"
    retina = run(
        api,
        sid,
        "%config InlineBackend.figure_formats = ['retina']\nplt.plot([1, 2])\nplt.show()",
    )
    (figure,) = retina["outputs"]
    size = figure["metadata"]["image/png"]
    assert size["width"] > 0 and size["height"] > 0
    recorded = cells(api, sid)
    assert [o["output_type"] for o in recorded[0]["outputs"]] == ["error", "display_data"]
    assert [(o["output_type"], o.get("name")) for o in recorded[1]["outputs"]] == [
        ("stream", "stderr")
    ]
    assert recorded[2]["outputs"][0]["metadata"]["image/png"] == size
