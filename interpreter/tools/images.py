"""Whether an image can go to a model as it is: its real type, its size and its pixels.

Model APIs refuse an image that is too large, too many pixels a side, or not an image at
all, and the refusal is of the whole request: the conversation that carries the image
fails from then on. So an image is checked before it is attached, from its own bytes
(the type a kernel declared is not trusted), and one that would be refused is named with
the reason and its URL instead.

The bounds are those of the strictest API a tool result goes to (Anthropic's Messages
API: 5 MB of base64 per image, 8000 pixels a side; OpenAI's are wider).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: The largest base64 text of one image (5 MiB), as the API counts it.
MAX_BASE64_BYTES = 5 << 20
#: The most pixels on either side.
MAX_SIDE_PX = 8000

#: Leading bytes of the image formats a model can be shown.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
#: JPEG start-of-frame markers (they carry the size); not DHT, JPG or DAC.
_JPEG_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_mime(data: bytes) -> str | None:
    """The MIME type of an image a model can be shown, by its leading bytes; else None."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def base64_size(n: int) -> int:
    """Characters of the base64 text of ``n`` bytes."""
    return 4 * ((n + 2) // 3)


def too_large(n: int) -> str | None:
    """Why an image of ``n`` bytes cannot be attached, from its size alone; else None."""
    if base64_size(n) > MAX_BASE64_BYTES:
        return f"{n:,} bytes, more than a model API takes ({MAX_BASE64_BYTES >> 20} MB of base64)"
    return None


@dataclass(frozen=True)
class Checked:
    """An image's real type and pixel size, or why it cannot be attached."""

    mime: str | None
    width: int = 0
    height: int = 0
    problem: str | None = None


def check(data: bytes) -> Checked:
    """Read ``data``'s type and size from its own bytes and say whether a model can take it."""
    mime = image_mime(data)
    if mime is None:
        return Checked(None, problem="not a PNG, JPEG, GIF or WebP image (by its bytes)")
    size = too_large(len(data))
    if size is not None:
        return Checked(mime, problem=size)
    pixels = _pixels(mime, data) if _whole(mime, data) else None
    if pixels is None:
        return Checked(mime, problem=f"its {mime} data cannot be read (damaged or cut short)")
    width, height = pixels
    if width <= 0 or height <= 0:
        return Checked(mime, width, height, problem=f"{width}x{height} pixels: empty")
    if max(width, height) > MAX_SIDE_PX:
        return Checked(
            mime,
            width,
            height,
            problem=f"{width}x{height} pixels, more than a model API takes ({MAX_SIDE_PX} a side)",
        )
    return Checked(mime, width, height)


def _whole(mime: str, data: bytes) -> bool:
    """Whether ``data`` runs to its format's end: a PNG's IEND chunk, a JPEG's end-of-image
    marker (trailing bytes allowed), a GIF's trailer, a WebP's RIFF length. A picture cut
    short has a good header and fails to decode, and a model API refuses it."""
    if mime == "image/png":
        return data.endswith(b"IEND\xaeB`\x82")
    if mime == "image/jpeg":
        return b"\xff\xd9" in data[-4096:]
    if mime == "image/gif":
        return data.rstrip(b"\0").endswith(b"\x3b")
    return len(data) >= 12 and int.from_bytes(data[4:8], "little") + 8 <= len(data)


def _pixels(mime: str, data: bytes) -> tuple[int, int] | None:
    try:
        if mime == "image/png":
            if data[12:16] != b"IHDR":
                return None
            width, height = struct.unpack(">II", data[16:24])
            return int(width), int(height)
        if mime == "image/gif":
            width, height = struct.unpack("<HH", data[6:10])
            return int(width), int(height)
        if mime == "image/webp":
            return _webp(data)
        return _jpeg(data)
    except struct.error:
        return None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    if chunk == b"VP8L" and data[20:21] == b"\x2f":
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if marker in _JPEG_FRAMES:
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        if marker == 0xD9 or length < 2:
            return None
        at += 2 + length
    return None
