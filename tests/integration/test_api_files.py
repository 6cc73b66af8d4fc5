"""Workspace files through the API (docs/security.md H-50, H-51)."""

from __future__ import annotations

import gzip
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import Server, run

GZIP = {"Content-Encoding": "gzip"}


def test_upload_list_download_delete(api: httpx.Client, new_session: Callable[..., str]) -> None:
    sid = new_session()
    body = b"city,n\na,1\nb,2\n"
    up = api.put(f"/v1/sessions/{sid}/files/data/sales.csv", content=body)
    assert up.status_code == 201, up.text
    assert up.json()["size"] == len(body)
    # The kernel sees it in its working directory.
    result = run(api, sid, "import pandas as pd\nint(pd.read_csv('data/sales.csv')['n'].sum())")
    assert result["outputs"][0]["data"]["text/plain"] == "3"
    listing = api.get(f"/v1/sessions/{sid}/files").json()
    assert [(e["name"], e["type"]) for e in listing["entries"]] == [("data", "directory")]
    inner = api.get(f"/v1/sessions/{sid}/files", params={"path": "data"}).json()
    assert [(e["path"], e["size"]) for e in inner["entries"]] == [("data/sales.csv", len(body))]
    down = api.get(f"/v1/sessions/{sid}/files/data/sales.csv")
    assert down.status_code == 200 and down.content == body
    # Files the kernel writes can be downloaded.
    run(api, sid, "open('out.txt', 'w').write('from kernel')")
    assert api.get(f"/v1/sessions/{sid}/files/out.txt").content == b"from kernel"
    assert api.delete(f"/v1/sessions/{sid}/files/data/sales.csv").status_code == 204
    assert api.get(f"/v1/sessions/{sid}/files/data/sales.csv").status_code == 404


@pytest.mark.parametrize(
    "path",
    # Percent-encoded, since HTTP clients remove literal dot segments before sending.
    [
        "%2E%2E/secret",
        "a/%2E%2E/%2E%2E/b",
        "%2Fetc%2Fpasswd",
        "a%00b",
        "%EF%BC%8E%EF%BC%8E/x",
        "a%5C..%5Cb",
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "nul", "fullwidth-dots", "backslash"],
)
def test_paths_escaping_the_workspace_are_refused(
    api: httpx.Client, shared_session: str, path: str
) -> None:
    for method in ("GET", "PUT", "DELETE"):
        resp = api.request(method, f"/v1/sessions/{shared_session}/files/{path}", content=b"x")
        assert resp.status_code == 400, (method, path, resp.status_code)
        assert resp.json()["error"]["type"] == "path_not_allowed"
        assert "error" in resp.json()


def test_symlinks_out_of_the_workspace_are_not_followed(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    run(api, sid, "import os\nos.symlink('/etc', 'etc_link')\nos.symlink('/etc/hostname', 'host')")
    for path in ("host", "etc_link/hostname"):
        resp = api.get(f"/v1/sessions/{sid}/files/{path}")
        assert resp.status_code == 400, (path, resp.text)
        assert "symbolic link" in resp.json()["error"]["message"]
    # Writing through a link must not touch its target either.
    assert api.put(f"/v1/sessions/{sid}/files/etc_link/x", content=b"x").status_code == 400
    # Replacing the link itself is fine and leaves the target alone.
    assert api.put(f"/v1/sessions/{sid}/files/host", content=b"mine").status_code == 201
    assert api.get(f"/v1/sessions/{sid}/files/host").content == b"mine"
    listing = api.get(f"/v1/sessions/{sid}/files").json()
    kinds = {e["name"]: e["type"] for e in listing["entries"]}
    assert kinds == {"etc_link": "other", "host": "file"}


def test_upload_size_limit(api: httpx.Client, shared_session: str) -> None:
    resp = api.put(f"/v1/sessions/{shared_session}/files/big.bin", content=b"0" * (2 << 20))
    assert resp.status_code == 413
    assert resp.json()["error"]["type"] == "payload_too_large"
    assert api.get(f"/v1/sessions/{shared_session}/files/big.bin").status_code == 404


def test_gzip_uploads_are_stored_decompressed_and_bounded(
    api: httpx.Client, shared_session: str
) -> None:
    files = f"/v1/sessions/{shared_session}/files"
    text = b"n\n" + b"42\n" * 100_000
    up = api.put(f"{files}/packed.csv", content=gzip.compress(text), headers=GZIP)
    assert up.status_code == 201, up.text
    assert up.json()["size"] == len(text)
    assert api.get(f"{files}/packed.csv").content == text
    # The limit (1 MiB here) applies to what the gzip expands to.
    bomb = gzip.compress(b"\0" * (32 << 20))
    resp = api.put(f"{files}/bomb.bin", content=bomb, headers=GZIP)
    assert resp.status_code == 413 and resp.json()["error"]["type"] == "payload_too_large"
    resp = api.put(f"{files}/cut.bin", content=gzip.compress(text)[:-30], headers=GZIP)
    assert resp.status_code == 400 and "truncated" in resp.json()["error"]["message"]
    resp = api.put(f"{files}/br.bin", content=b"x", headers={"Content-Encoding": "br"})
    assert resp.status_code == 415 and resp.json()["error"]["type"] == "unsupported_encoding"
    for name in ("bomb.bin", "cut.bin", "br.bin"):
        assert api.get(f"{files}/{name}").status_code == 404
    assert api.delete(f"{files}/packed.csv").status_code == 204


def test_a_multipart_put_is_refused_not_stored_as_its_envelope(
    api: httpx.Client, shared_session: str
) -> None:
    # Before, the form's boundaries and headers became the file: pandas then failed on it.
    resp = api.put(
        f"/v1/sessions/{shared_session}/files/form.csv",
        files={"file": ("form.csv", b"a,b\n1,2\n", "text/csv")},
    )
    assert resp.status_code == 415, resp.text
    assert "sent as they are" in resp.json()["error"]["message"]
    names = [e["name"] for e in api.get(f"/v1/sessions/{shared_session}/files").json()["entries"]]
    assert "form.csv" not in names
    raw = api.put(f"/v1/sessions/{shared_session}/files/form.csv", content=b"a,b\n1,2\n")
    assert raw.status_code == 201, raw.text


def test_curl_d_is_refused_and_curl_t_stores_the_file_as_it_is(
    server: Server, shared_session: str, tmp_path: Path
) -> None:
    """``curl -d @sales.csv`` (what a curl user tries first) takes the file's line breaks
    out and sends a form type: it was stored with 201, a CSV became one line, and pandas
    read 0 rows (found by an outside agent tester). Real curl, as a user runs it."""
    csv = tmp_path / "sales.csv"
    csv.write_bytes(b"city,sales\nOslo,3\nLima,5\n")
    url = f"{server.url}/v1/sessions/{shared_session}/files/sales.csv"
    auth = ["-H", f"Authorization: Bearer {server.api_key}"]
    form = subprocess.run(
        ["curl", "-s", "-XPUT", "-d", f"@{csv}", *auth, "-w", "\n%{http_code}", url],
        capture_output=True,
        text=True,
        check=True,
    )
    body, status = form.stdout.rsplit("\n", 1)
    assert status == "415", form.stdout
    assert "curl -T FILE URL" in json.loads(body)["error"]["message"]
    put = subprocess.run(
        ["curl", "-s", "-T", str(csv), *auth, "-w", "\n%{http_code}", url],
        capture_output=True,
        text=True,
        check=True,
    )
    assert put.stdout.rsplit("\n", 1)[1] == "201", put.stdout
    with server.client() as api:
        stored = api.get(f"/v1/sessions/{shared_session}/files/sales.csv").content
    assert stored == csv.read_bytes()


def test_a_directory_is_listed_in_pages(api: httpx.Client, new_session: Callable[..., str]) -> None:
    """``?limit=`` pages through a large directory in the order of the whole listing
    (directories first, each kind by name); each page's ``next`` is the next ``?after=``,
    and a place whose entry was removed meanwhile still works."""
    sid = new_session()
    made = run(
        api,
        sid,
        "import os\nfor i in range(25):\n    open(f'f{i:02}.txt', 'w').close()\n"
        "for d in ('b', 'a'):\n    os.mkdir(d)",
    )
    assert made["status"] == "ok", made
    url = f"/v1/sessions/{sid}/files"
    whole = api.get(url).json()
    assert whole["next"] is None
    names = [e["name"] for e in whole["entries"]]
    assert names == ["a", "b", *[f"f{i:02}.txt" for i in range(25)]]
    paged: list[str] = []
    pages = []
    after = None
    while True:
        page = api.get(url, params={"limit": 10, **({"after": after} if after else {})}).json()
        paged += [e["name"] for e in page["entries"]]
        pages.append(page["next"])
        if page["next"] is None:
            break
        after = page["next"]
        if after == "f/f07.txt":
            # The entry a place names may be gone by the time the next page is asked.
            assert api.delete(f"{url}/f07.txt").status_code == 204
    assert pages == ["f/f07.txt", "f/f17.txt", None]
    assert paged == names  # f07.txt was listed before it was removed
    assert api.get(url, params={"limit": 2}).json()["next"] == "d/b"
    assert [e["name"] for e in api.get(url, params={"after": "d/b"}).json()["entries"]][:1] == [
        "f00.txt"
    ]
    for bad, says in [
        ({"limit": "0"}, "limit must be a whole number from 1 to 10000"),
        ({"limit": "many"}, "limit must be a whole number from 1 to 10000"),
        ({"after": "f07.txt"}, "give the 'next' of the previous page"),
        ({"after": "x/f07.txt"}, "give the 'next' of the previous page"),
    ]:
        resp = api.get(url, params=bad)
        assert resp.status_code in (400, 422), resp.text
        assert says in resp.json()["error"]["message"], resp.text
