"""Files a kernel names outside NFKC form (NFD accents as macOS zips have them, ligatures,
fullwidth letters): the path a listing shows reads, downloads and deletes that file, never
the one its NFKC form names; uploads of new names are still NFKC-normalised."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
from e2b_code_interpreter import Sandbox

from tests.conftest import KEY, Server, own_server, run

pytestmark = pytest.mark.timeout(300)

LIG = "\ufb01le.txt"  # the ligature fi: NFKC 'file.txt'
PLAIN = "file.txt"
NFD = "cafe\u0301.csv"  # e + combining acute
NFC = "caf\u00e9.csv"
FULL = "\uff21.txt"  # fullwidth A: NFKC 'A.txt'


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    with own_server("interp-name-forms-", e2b_port=0) as server:
        yield server


@pytest.fixture
def session(srv: Server) -> Iterator[tuple[httpx.Client, str]]:
    with srv.client() as api:
        resp = api.post("/v1/sessions", json={})
        assert resp.status_code == 201, resp.text
        sid = resp.json()["id"]
        yield api, sid
        api.delete(f"/v1/sessions/{sid}")


def url(sid: str, path: str) -> str:
    return f"/v1/sessions/{sid}/files/{quote(path, safe='/')}"


def make(api: httpx.Client, sid: str, files: dict[str, str]) -> None:
    """Have the kernel write each file (its name as given, directories made)."""
    out = run(
        api,
        sid,
        "import os\n"
        f"for name, text in {files!r}.items():\n"
        "    os.makedirs(os.path.dirname(name) or '.', exist_ok=True)\n"
        "    open(name, 'w').write(text)\n"
        "print('made')",
    )
    assert out["stdout"] == "made\n", out


def kernel_files(api: httpx.Client, sid: str) -> dict[str, str]:
    """Every file under the workspace as the kernel sees it: path -> text."""
    out = run(
        api,
        sid,
        "import os, json\n"
        "print(json.dumps({os.path.relpath(os.path.join(d, f)): open(os.path.join(d, f)).read()"
        " for d, _, fs in os.walk('.') for f in fs}))",
    )
    found: dict[str, str] = json.loads(out["stdout"])
    return found


def listed_files(api: httpx.Client, sid: str, path: str = "") -> list[str]:
    """Every file path the listing shows, walking directories by their listed paths."""
    resp = api.get(f"/v1/sessions/{sid}/files", params={"path": path})
    assert resp.status_code == 200, resp.text
    found: list[str] = []
    for entry in resp.json()["entries"]:
        if entry["type"] == "directory":
            found += listed_files(api, sid, entry["path"])
        else:
            found.append(entry["path"])
    return found


def test_ligature_and_plain_names_are_two_files(session: tuple[httpx.Client, str]) -> None:
    api, sid = session
    make(api, sid, {LIG: "ligature file", PLAIN: "plain file"})
    assert sorted(listed_files(api, sid)) == sorted([LIG, PLAIN])
    for name, text in ((LIG, "ligature file"), (PLAIN, "plain file")):
        got = api.get(url(sid, name))
        assert got.status_code == 200 and got.text == text, (name, got.text)
        head = api.head(url(sid, name))
        assert head.status_code == 200
        assert head.headers["Content-Length"] == str(len(text)), name
        part = api.get(url(sid, name), headers={"Range": "bytes=0-3"})
        assert part.status_code == 206 and part.text == text[:4], (name, part.text)
    assert api.delete(url(sid, LIG)).status_code == 204
    assert kernel_files(api, sid) == {PLAIN: "plain file"}
    # And the other way round: deleting the plain name leaves the ligature.
    make(api, sid, {LIG: "ligature file"})
    assert api.delete(url(sid, PLAIN)).status_code == 204
    assert kernel_files(api, sid) == {LIG: "ligature file"}


def test_nfd_name_downloads_and_deletes(session: tuple[httpx.Client, str]) -> None:
    api, sid = session
    make(api, sid, {NFD: "decomposed"})
    assert listed_files(api, sid) == [NFD]
    got = api.get(url(sid, NFD))
    assert got.status_code == 200 and got.text == "decomposed", got.text
    assert api.head(url(sid, NFD)).headers["Content-Length"] == str(len("decomposed"))
    # Beside an NFC twin, each name reaches its own file.
    make(api, sid, {NFC: "composed"})
    assert api.get(url(sid, NFD)).text == "decomposed"
    assert api.get(url(sid, NFC)).text == "composed"
    assert api.delete(url(sid, NFD)).status_code == 204
    assert kernel_files(api, sid) == {NFC: "composed"}


def test_fullwidth_name_downloads_and_deletes(session: tuple[httpx.Client, str]) -> None:
    api, sid = session
    make(api, sid, {FULL: "fullwidth", "A.txt": "ascii"})
    assert sorted(listed_files(api, sid)) == sorted([FULL, "A.txt"])
    assert api.get(url(sid, FULL)).text == "fullwidth"
    assert api.get(url(sid, "A.txt")).text == "ascii"
    assert api.delete(url(sid, FULL)).status_code == 204
    assert kernel_files(api, sid) == {"A.txt": "ascii"}


def test_every_listed_path_round_trips(session: tuple[httpx.Client, str]) -> None:
    api, sid = session
    files = {
        LIG: "1",
        PLAIN: "2",
        NFD: "3",
        FULL: "4",
        f"cafe\u0301/{LIG}": "5",
        f"cafe\u0301/{PLAIN}": "6",
        f"caf\u00e9/{LIG}": "7",
        f"\uff44ir/\uff21/{NFD}": "8",
    }
    make(api, sid, files)
    listed = listed_files(api, sid)
    assert sorted(listed) == sorted(files)
    for path in listed:
        got = api.get(url(sid, path))
        assert got.status_code == 200 and got.text == files[path], (path, got.text)
    for path in listed:
        assert api.delete(url(sid, path)).status_code == 204, path
        del files[path]
        assert kernel_files(api, sid) == files, path


def test_uploads_are_normalised_unless_they_name_an_entry_exactly(
    session: tuple[httpx.Client, str],
) -> None:
    api, sid = session
    # A decomposed name that does not exist is stored, listed and answered in NFKC form,
    # and reached again by either spelling.
    put = api.put(f"/v1/sessions/{sid}/files/cafe%CC%81.txt", content=b"uploaded")
    assert put.status_code == 201 and put.json()["path"] == "caf\u00e9.txt", put.text
    assert kernel_files(api, sid) == {"caf\u00e9.txt": "uploaded"}
    assert api.get(url(sid, "cafe\u0301.txt")).text == "uploaded"
    put = api.put(url(sid, "\ufb01x.txt"), content=b"new")
    assert put.status_code == 201 and put.json()["path"] == "fix.txt", put.text
    # An upload to a name the kernel made replaces that file, not its NFKC twin.
    make(api, sid, {LIG: "ligature file", PLAIN: "plain file"})
    put = api.put(url(sid, LIG), content=b"replaced")
    assert put.status_code == 201 and put.json()["path"] == LIG, put.text
    seen = kernel_files(api, sid)
    assert seen[LIG] == "replaced" and seen[PLAIN] == "plain file"
    listing = {e["path"] for e in api.get(f"/v1/sessions/{sid}/files").json()["entries"]}
    assert put.json()["path"] in listing


def test_e2b_files_reach_the_listed_name(srv: Server) -> None:
    e2b_url = srv.thread.e2b_urls[0]
    sbx = Sandbox.create(api_key=KEY, api_url=e2b_url, sandbox_url=e2b_url)
    try:
        code = f"open({LIG!r}, 'w').write('ligature file')\nopen({PLAIN!r}, 'w').write('plain')"
        assert sbx.run_code(code).error is None
        assert sbx.run_code(f"open({NFD!r}, 'w').write('decomposed')").error is None
        names = sorted(e.name for e in sbx.files.list("/home/user"))
        assert names == sorted([LIG, PLAIN, NFD])
        assert sbx.files.read(f"/home/user/{LIG}") == "ligature file"
        assert sbx.files.read(NFD) == "decomposed"
        envd = httpx.Client(
            base_url=e2b_url, headers={"X-API-Key": KEY, "E2b-Sandbox-Id": sbx.sandbox_id}
        )
        with envd:
            got = envd.get("/files", params={"path": f"/home/user/{LIG}"})
            assert got.status_code == 200 and got.text == "ligature file"
        sbx.files.remove(f"/home/user/{LIG}")
        left = sbx.run_code("import os\nsorted(os.listdir('.'))").text
        assert left == repr(sorted([PLAIN, NFD]))
        assert sbx.files.read(PLAIN) == "plain"
    finally:
        sbx.kill()
