"""A service without API keys refuses what web pages send it; programs are served as before.

Found by an outside security tester: a page of any site could send the keyless service
(what ``./scripts/serve`` starts) a cross-site "simple" POST, which needs no preflight,
and its code ran, on the local backend as the developer's own user; on the E2B surface
not even a session id was needed. Through DNS rebinding a page could also read every
keyless session's notebook. Each test sends what a browser sends, and checks that the
code did not run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from interpreter.api.browser_guard import is_loopback_host, refusal
from tests.conftest import KEY, Server, own_server

#: What a page's ``fetch(url, {method: "POST", mode: "no-cors", body})`` sends.
FROM_A_PAGE = {
    "Origin": "https://evil.example",
    "Content-Type": "text/plain;charset=UTF-8",
    "Sec-Fetch-Site": "cross-site",
}


@pytest.fixture(scope="module")
def keyless() -> Iterator[Server]:
    with own_server("interp-browser-", api_keys=[], e2b_port=0, pool_size=0) as srv:
        yield srv


def _proof(tmp_path: Path) -> tuple[str, Path]:
    proof = tmp_path / "ran"
    return json.dumps({"code": f"open({str(proof)!r}, 'w').write('x')"}), proof


def test_a_cross_site_post_is_refused_and_runs_nothing(keyless: Server, tmp_path: Path) -> None:
    body, proof = _proof(tmp_path)
    with httpx.Client(base_url=keyless.url, timeout=60) as api:
        before = api.get("/v1/sessions").json()
        refused = api.post("/v1/sessions", content="{}", headers=FROM_A_PAGE)
        assert refused.status_code == 403, refused.text
        message = refused.json()["error"]["message"]
        assert "comes from a web page (https://evil.example)" in message
        assert "start it with an API key (INTERP_API_KEY)" in message
        assert api.get("/v1/sessions").json() == before  # no session was made
        sid = api.post("/v1/sessions").json()["id"]
        for headers in (
            FROM_A_PAGE,
            {"Origin": "http://localhost:3000"},  # another local page
            {"Origin": "null"},  # a sandboxed frame, a file:// page
            {"Sec-Fetch-Site": "same-site"},
        ):
            resp = api.post(f"/v1/sessions/{sid}/execute", content=body, headers=headers)
            assert resp.status_code == 403, (headers, resp.text)
        # A program (no Origin) and a page the service served itself (its own origin).
        own = "http://" + urlsplit(keyless.url).netloc
        assert (
            api.post(
                f"/v1/sessions/{sid}/execute", json={"code": "1"}, headers={"Origin": own}
            ).json()["status"]
            == "ok"
        )
        assert not proof.exists()
        assert api.post(f"/v1/sessions/{sid}/execute", content=body).json()["status"] == "ok"
        assert proof.exists()
        api.delete(f"/v1/sessions/{sid}")


def test_a_rebound_host_name_is_refused(keyless: Server) -> None:
    """DNS rebinding: the page's own name resolves to 127.0.0.1, so the browser finds it
    same-origin and sends its own name as ``Host``."""
    port = urlsplit(keyless.url).port
    rebound = f"rebind.evil.example:{port}"
    with httpx.Client(base_url=keyless.url, timeout=60) as api:
        for path in ("/v1/sessions", "/healthz"):
            resp = api.get(path, headers={"Host": rebound, "Origin": f"http://{rebound}"})
            assert resp.status_code == 403, resp.text
            assert "not a loopback name" in resp.json()["error"]["message"]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
            assert api.get("/v1/sessions", headers={"Host": host}).status_code == 200


def test_the_e2b_surface_refuses_a_page_too(keyless: Server, tmp_path: Path) -> None:
    body, proof = _proof(tmp_path)
    with httpx.Client(base_url=keyless.thread.e2b_urls[0], timeout=60) as e2b:
        resp = e2b.post("/execute", content=body, headers=FROM_A_PAGE)
        assert resp.status_code == 403, resp.text
        assert not proof.exists()


def test_with_keys_a_keyed_request_is_served_whatever_its_origin(tmp_path: Path) -> None:
    """A page cannot send a key (a custom header needs a preflight, which gets no CORS
    grant), so with keys the headers of a browser change nothing."""
    with own_server("interp-browser-keyed-", pool_size=0) as srv, srv.client() as api:
        resp = api.post("/v1/sessions", headers={**FROM_A_PAGE, "Authorization": f"Bearer {KEY}"})
        assert resp.status_code == 201, resp.text
        api.delete(f"/v1/sessions/{resp.json()['id']}")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST:8700", True),
        ("app.localhost:8700", True),
        ("127.0.0.1:8700", True),
        ("127.1.2.3", True),
        ("[::1]:8700", True),
        ("localhost.:8700", True),
        ("0.0.0.0:8700", False),
        ("10.0.0.2:8700", False),
        ("evil.example:8700", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.nip.io:8700", False),
        ("localhost:http", False),
        ("", False),
    ],
)
def test_loopback_names(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
    assert (refusal({"Host": host}) is None) is loopback
