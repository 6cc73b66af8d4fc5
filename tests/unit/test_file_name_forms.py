"""Names that are not in NFKC form (a kernel makes them): a path exactly as listed reaches
that entry, never the one its NFKC form names; a name that does not exist is the NFKC one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from interpreter.errors import FileNotFoundInWorkspace, PathNotAllowed
from interpreter.workspace import Workspace, given_parts

LIG = "\ufb01le.txt"  # the ligature fi: NFKC 'file.txt'
PLAIN = "file.txt"
NFD = "cafe\u0301.csv"  # e + combining acute, as macOS zips have it
NFC = "caf\u00e9.csv"
FULL = "\uff21.txt"  # fullwidth A: NFKC 'A.txt'


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


def read(ws: Workspace, path: str) -> bytes:
    fh, _ = ws.open_read(path)
    with fh:
        return fh.read()


def on_disk(ws: Workspace, sub: str = "") -> list[str]:
    return sorted(os.listdir(ws.root / sub))


def test_given_parts_only_when_not_nfkc_and_checked_as_given() -> None:
    assert given_parts("a/b.txt") is None
    assert given_parts(f"d/{LIG}/") == ["d", LIG]
    assert given_parts("\ufb01/\u202e.txt") is None  # a bidi control, as given: not kept
    assert given_parts("\uff0e\uff0e/x") == ["\uff0e\uff0e", "x"]  # but split_path refuses


def test_ligature_and_plain_are_two_files(ws: Workspace) -> None:
    (ws.root / LIG).write_bytes(b"ligature")
    (ws.root / PLAIN).write_bytes(b"plain")
    listed = [e.path for e in ws.listing().entries]
    assert sorted(listed) == sorted([LIG, PLAIN])
    assert read(ws, LIG) == b"ligature" and read(ws, PLAIN) == b"plain"
    assert ws.stat(LIG).size == len(b"ligature")
    ws.delete(LIG)
    assert on_disk(ws) == [PLAIN]
    assert read(ws, PLAIN) == b"plain"
    # And the other way round.
    (ws.root / LIG).write_bytes(b"ligature")
    ws.delete(PLAIN)
    assert on_disk(ws) == [LIG]


def test_nfd_and_fullwidth_names_are_reached(ws: Workspace) -> None:
    (ws.root / NFD).write_bytes(b"nfd")
    (ws.root / FULL).write_bytes(b"fullwidth")
    for entry in ws.listing().entries:
        assert read(ws, entry.path) == (b"nfd" if entry.path == NFD else b"fullwidth")
    (ws.root / NFC).write_bytes(b"nfc")
    assert read(ws, NFD) == b"nfd" and read(ws, NFC) == b"nfc"
    ws.delete(NFD)
    ws.delete(FULL)
    assert on_disk(ws) == [NFC]


def test_writes_replace_an_exact_name_else_write_the_nfkc_one(ws: Workspace) -> None:
    (ws.root / LIG).write_bytes(b"ligature")
    (ws.root / PLAIN).write_bytes(b"plain")
    ws.write(LIG, [b"new ligature"])
    assert (ws.root / LIG).read_bytes() == b"new ligature"
    assert (ws.root / PLAIN).read_bytes() == b"plain"
    # A name that does not exist is written in NFKC form.
    ws.write("\ufb01x.txt", [b"x"])
    ws.write("cafe\u0301.txt", [b"y"])
    assert "fix.txt" in on_disk(ws) and "caf\u00e9.txt" in on_disk(ws)
    assert "\ufb01x.txt" not in on_disk(ws) and "cafe\u0301.txt" not in on_disk(ws)


def test_components_are_matched_one_by_one(ws: Workspace) -> None:
    (ws.root / "cafe\u0301").mkdir()
    (ws.root / "cafe\u0301" / LIG).write_bytes(b"inner ligature")
    (ws.root / "caf\u00e9").mkdir()
    (ws.root / "caf\u00e9" / PLAIN).write_bytes(b"other dir")
    listed = [e.path for e in ws.listing("cafe\u0301").entries]
    assert listed == [f"cafe\u0301/{LIG}"]
    assert read(ws, listed[0]) == b"inner ligature"
    # The directory exists as given; the new file name in it is the NFKC one.
    assert ws.resolve("cafe\u0301/\ufb01x.txt") == ["cafe\u0301", "fix.txt"]
    ws.write("cafe\u0301/\ufb01x.txt", [b"new"])
    assert on_disk(ws, "cafe\u0301") == sorted([LIG, "fix.txt"])
    assert on_disk(ws, "caf\u00e9") == [PLAIN]
    assert ws.make_dir("cafe\u0301") is False
    ws.rename(f"cafe\u0301/{LIG}", "moved.txt")
    assert read(ws, "moved.txt") == b"inner ligature"
    assert on_disk(ws, "caf\u00e9") == [PLAIN]
    ws.delete("cafe\u0301")
    assert on_disk(ws) == sorted(["caf\u00e9", "moved.txt"])


def test_names_whose_nfkc_form_is_refused_stay_refused(ws: Workspace) -> None:
    (ws.root / "\u2025").mkdir()  # two-dot leader: NFKC '..'
    (ws.root / "\u2025" / "x").write_bytes(b"x")
    (ws.root / "\uff3c").write_bytes(b"x")  # fullwidth backslash: NFKC '\'
    for path in ("\u2025/x", "\uff3c"):
        with pytest.raises(PathNotAllowed):
            ws.open_read(path)
        with pytest.raises(PathNotAllowed):
            ws.delete(path)


def test_a_link_named_exactly_is_still_refused(ws: Workspace, tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / PLAIN).write_bytes(b"host")
    os.symlink(tmp_path / "outside", ws.root / "\ufb01")
    with pytest.raises(PathNotAllowed):
        ws.open_read(f"\ufb01/{PLAIN}")
    with pytest.raises(PathNotAllowed):
        ws.write(f"\ufb01/{PLAIN}", [b"x"])
    assert (tmp_path / "outside" / PLAIN).read_bytes() == b"host"


def test_a_name_missing_in_both_forms_is_404(ws: Workspace) -> None:
    with pytest.raises(FileNotFoundInWorkspace):
        ws.open_read(LIG)


def test_undecodable_names_shown_exactly_win_over_nfkc_twins(ws: Workspace) -> None:
    # Both show with U+FFFD; the NFKC form of the first's shown name is the second's.
    lig = os.fsencode("\ufb01") + b"\xe9"
    plain = b"fi\xe9"
    with open(os.path.join(os.fsencode(ws.root), lig), "wb") as fh:
        fh.write(b"ligature")
    with open(os.path.join(os.fsencode(ws.root), plain), "wb") as fh:
        fh.write(b"plain")
    listed = sorted(e.path for e in ws.listing().entries)
    assert listed == sorted(["fi\ufffd", "\ufb01\ufffd"])
    assert read(ws, "\ufb01\ufffd") == b"ligature"
    assert read(ws, "fi\ufffd") == b"plain"
    ws.delete("\ufb01\ufffd")
    assert os.listdir(os.fsencode(ws.root)) == [plain]


def test_a_retried_deletion_of_a_ligature_name_never_deletes_its_plain_twin(
    ws: Workspace,
) -> None:
    # The first DELETE of 'ﬁle.txt' removes it; a client that retries it (its answer was
    # lost) must get 404, not lose 'file.txt', which its NFKC form names.
    (ws.root / LIG).write_bytes(b"ligature")
    (ws.root / PLAIN).write_bytes(b"plain")
    ws.delete(LIG)
    with pytest.raises(FileNotFoundInWorkspace):
        ws.delete(LIG)
    assert on_disk(ws) == [PLAIN]
    # A canonical difference still reaches the name an upload made.
    (ws.root / NFC).write_bytes(b"composed")
    ws.delete(NFD)
    assert on_disk(ws) == [PLAIN]
