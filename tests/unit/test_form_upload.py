"""Multipart bodies streamed to a workspace part by part, and gzip bodies undone in pieces."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from interpreter.body_encoding import OUT_CHUNK, decoder_for
from interpreter.errors import BadRequest, PayloadTooLarge, UnsupportedEncoding
from interpreter.form_upload import FormUpload
from interpreter.upload import TEMP_PREFIX
from interpreter.workspace import Workspace

BOUNDARY = "b0undary-x"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def part(name: str, data: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"'
    if filename is not None:
        disposition += f'; filename="{filename}"'
    head = f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n"
    head += "Content-Type: application/octet-stream\r\n\r\n"
    return head.encode() + data + b"\r\n"


def body(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    root.mkdir()
    return Workspace(root)


def leftovers(root: Path) -> list[str]:
    return [p.name for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


def feed(upload: FormUpload, raw: bytes, piece: int = 7) -> None:
    for start in range(0, len(raw), piece):
        upload.write(raw[start : start + piece])


def test_parts_land_under_their_file_names_only_once_the_body_is_complete(
    ws: Workspace,
) -> None:
    raw = body(
        part("file", b"a,b\n1,2\n", "data/in.csv"),
        part("note", b"a form field, not a file"),
        part("file", bytes(range(256)) * 3, "bin/x.bin"),
    )
    upload = FormUpload(ws, CONTENT_TYPE, 1 << 20, lambda p: p)
    feed(upload, raw[:-10])
    # Written to temporaries, not yet visible under their names.
    assert not (ws.root / "data" / "in.csv").exists()
    feed(upload, raw[-10:])
    entries = upload.commit()
    assert [e.path for e in entries] == ["data/in.csv", "bin/x.bin"]
    assert (ws.root / "data" / "in.csv").read_bytes() == b"a,b\n1,2\n"
    assert (ws.root / "bin" / "x.bin").read_bytes() == bytes(range(256)) * 3
    assert not (ws.root / "note").exists()
    assert leftovers(ws.root) == []


def test_a_fixed_path_takes_one_file_and_refuses_a_second(ws: Workspace) -> None:
    upload = FormUpload(ws, CONTENT_TYPE, 1 << 20, lambda p: p, fixed_path="one.txt")
    feed(upload, body(part("file", b"hello", "ignored-name")))
    assert [e.path for e in upload.commit()] == ["one.txt"]
    assert (ws.root / "one.txt").read_bytes() == b"hello"
    two = FormUpload(ws, CONTENT_TYPE, 1 << 20, lambda p: p, fixed_path="two.txt")
    with pytest.raises(BadRequest, match=r"Several file parts go to 'two\.txt'"):
        feed(two, body(part("file", b"1", "a"), part("file", b"2", "b")))
    two.abort()
    assert not (ws.root / "two.txt").exists()
    assert leftovers(ws.root) == []


def test_a_body_cut_short_writes_nothing(ws: Workspace) -> None:
    raw = body(part("file", b"x" * 5000, "cut.bin"))
    upload = FormUpload(ws, CONTENT_TYPE, 1 << 20, lambda p: p)
    feed(upload, raw[: len(raw) // 2], piece=100)
    with pytest.raises(BadRequest, match="ended before its closing boundary"):
        upload.commit()
    assert not (ws.root / "cut.bin").exists()
    assert leftovers(ws.root) == []


def test_the_limit_counts_every_part_and_stops_the_body_as_it_arrives(ws: Workspace) -> None:
    raw = body(part("field", b"y" * 3000), part("file", b"x" * 3000, "big.bin"))
    upload = FormUpload(ws, CONTENT_TYPE, 4000, lambda p: p)
    with pytest.raises(PayloadTooLarge, match="4000 bytes"):
        feed(upload, raw, piece=500)
    upload.abort()
    assert leftovers(ws.root) == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (body(part("field", b"only a field")), "no file part"),
        (body(part("file", b"x", "")), "has no file name"),
        (b"--other\r\n\r\nx\r\n--other--\r\n", "malformed"),
    ],
)
def test_bodies_without_a_usable_file_part_get_a_400(
    ws: Workspace, raw: bytes, message: str
) -> None:
    upload = FormUpload(ws, CONTENT_TYPE, 1 << 20, lambda p: p)
    with pytest.raises(BadRequest, match=message):
        feed(upload, raw)
        upload.commit()
    upload.abort()
    assert leftovers(ws.root) == []


def test_a_content_type_without_a_boundary_is_a_400(ws: Workspace) -> None:
    with pytest.raises(BadRequest, match="boundary"):
        FormUpload(ws, "multipart/form-data", 1 << 20, lambda p: p)


def test_the_target_mapping_refuses_paths_before_anything_is_written(ws: Workspace) -> None:
    def only_home(path: str) -> str:
        if not path.startswith("/home/user/"):
            raise BadRequest(f"{path} is outside /home/user")
        return path.removeprefix("/home/user/")

    upload = FormUpload(ws, CONTENT_TYPE, 1 << 20, only_home)
    raw = body(part("file", b"ok", "/home/user/a.txt"), part("file", b"no", "/etc/passwd"))
    with pytest.raises(BadRequest, match="outside"):
        feed(upload, raw)
    upload.abort()
    assert os.listdir(ws.root) == []


def test_gzip_is_undone_in_bounded_pieces_and_a_bomb_stops_at_the_limit() -> None:
    data = os.urandom(1000) * 3000  # 3 MB, compresses well
    packed = gzip.compress(data)
    decoder = decoder_for("gzip")
    assert decoder is not None
    out = []
    for start in range(0, len(packed), 4096):
        for piece in decoder.feed(packed[start : start + 4096]):
            assert len(piece) <= OUT_CHUNK
            out.append(piece)
    decoder.close()
    assert b"".join(out) == data
    # 1 GiB of zeros is ~1 MB of gzip: the caller's limit stops it after a few pieces.
    bomb = gzip.compress(b"\0" * (64 << 20))
    decoder = decoder_for("GZIP")
    assert decoder is not None
    total = 0
    with pytest.raises(PayloadTooLarge):
        for piece in decoder.feed(bomb):
            total += len(piece)
            if total > 2 * OUT_CHUNK:
                raise PayloadTooLarge("limit")
    assert total <= 3 * OUT_CHUNK


def test_encodings_named_and_broken_gzip_get_clear_errors() -> None:
    assert decoder_for(None) is None
    assert decoder_for("identity") is None
    with pytest.raises(UnsupportedEncoding, match="'br' is not supported"):
        decoder_for("br")
    decoder = decoder_for("gzip")
    assert decoder is not None
    with pytest.raises(BadRequest, match="not valid gzip"):
        list(decoder.feed(b"not gzip at all"))
    decoder = decoder_for("gzip")
    assert decoder is not None
    list(decoder.feed(gzip.compress(b"x" * 10000)[:-20]))
    with pytest.raises(BadRequest, match="truncated"):
        decoder.close()
