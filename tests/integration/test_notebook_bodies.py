"""A notebook sent in a request: larger than other JSON bodies may be, still bounded.

A notebook with a few plots is over a megabyte, the limit of the other JSON bodies
(``max_body_bytes``). Creating a session ``from_notebook`` and rebuilding one take it up
to ``max_notebook_body_bytes``; past that, the 413 names the setting.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from interpreter.client import BadRequestError, Client
from interpreter.errors import PayloadTooLarge
from tests.conftest import Server, own_server, run

#: The other JSON bodies' limit here (the default), and the notebooks'.
BODY_LIMIT = 1 << 20
NOTEBOOK_LIMIT = 3 << 20


def _notebook(printed: int) -> dict[str, Any]:
    """Two code cells, as the service records them: each printed ``printed`` characters."""
    cells = [
        {
            "cell_type": "code",
            "id": f"c{i}",
            "metadata": {},
            "execution_count": i + 1,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "x" * printed}],
            "source": source,
        }
        for i, source in enumerate(["base = 40", "answer = base + 2"])
    ]
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}


@pytest.fixture(scope="module")
def limited() -> Iterator[Server]:
    with own_server(
        "interp-nb-bodies-",
        max_body_bytes=BODY_LIMIT,
        max_notebook_body_bytes=NOTEBOOK_LIMIT,
        pool_size=0,
    ) as srv:
        yield srv


def _answer(api: httpx.Client, sid: str) -> str:
    result = run(api, sid, "answer")
    assert result["status"] == "ok", result
    text: str = result["outputs"][0]["data"]["text/plain"]
    return text


def test_a_notebook_over_the_json_limit_rebuilds_and_creates_a_session(limited: Server) -> None:
    nb = _notebook(700_000)  # about 1.4 MB of JSON: over max_body_bytes
    with Client(limited.url, api_key=limited.api_key) as client, limited.client() as api:
        with client.create_session() as session:
            info = session.rebuild(nb)
            report = info.rebuild
            assert report is not None and report.cells_ran == 2 and not report.failed, report
            assert _answer(api, session.id) == "42"
        created = client.create_session(from_notebook=nb)
        try:
            report = created.info.rebuild
            assert report is not None and report.cells_ran == 2 and not report.failed, report
            assert _answer(api, created.id) == "42"
        finally:
            created.close()


def test_a_body_past_the_limits_is_refused_with_the_setting_and_the_session_goes_on(
    limited: Server,
) -> None:
    with (
        Client(limited.url, api_key=limited.api_key) as client,
        limited.client() as api,
        client.create_session() as session,
    ):
        run(api, session.id, "kept = 'still here'")
        # Past the notebook limit: refused as it arrives, whatever route takes it.
        too_big = _notebook(1_600_000)  # about 3.2 MB
        with pytest.raises(BadRequestError) as refused:
            session.rebuild(too_big)
        assert "INTERP_MAX_NOTEBOOK_BODY_BYTES" in str(refused.value)
        resp = api.post("/v1/sessions", json={"from_notebook": too_big})
        assert resp.status_code == PayloadTooLarge.status, resp.text
        assert "INTERP_MAX_NOTEBOOK_BODY_BYTES" in resp.json()["error"]["message"]
        # The other JSON bodies keep their own limit.
        resp = api.post(f"/v1/sessions/{session.id}/execute", json={"code": "#" * BODY_LIMIT})
        assert resp.status_code == PayloadTooLarge.status, resp.text
        assert "INTERP_MAX_BODY_BYTES" in resp.json()["error"]["message"]
        assert run(api, session.id, "kept")["outputs"][0]["data"]["text/plain"] == ("'still here'")
