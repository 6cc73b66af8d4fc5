"""A request body's ``Content-Encoding``, undone piece by piece with bounded output.

E2B's SDK can send an upload gzip-compressed (``Content-Encoding: gzip``). A few kilobytes of
gzip can expand to gigabytes, so the body is never decompressed whole: each piece yields at
most :data:`OUT_CHUNK` bytes at a time, and the caller's size limit (applied to what comes
out) stops a bomb after the limit, not after the expansion.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from interpreter.errors import BadRequest, UnsupportedEncoding

#: Most bytes one decompression step yields.
OUT_CHUNK = 1 << 20
#: Encodings that leave the body as it is.
IDENTITY = frozenset({"", "identity"})


class GzipDecoder:
    """Undo ``Content-Encoding: gzip`` (or ``x-gzip``) as the body arrives."""

    def __init__(self) -> None:
        self._z = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decompressed bytes of ``data``, in pieces of at most :data:`OUT_CHUNK`."""
        pending = data
        while pending:
            try:
                out = self._z.decompress(pending, OUT_CHUNK)
            except zlib.error as exc:
                raise BadRequest(
                    f"The body is not valid gzip ({exc}); send it as it is, or gzip it whole."
                ) from None
            pending = self._z.unconsumed_tail
            if out:
                yield out
            if self._z.eof:
                if pending or self._z.unused_data:
                    raise BadRequest("The gzip body has bytes after its end.")
                return

    def close(self) -> None:
        """Check that the body ended where the gzip stream ends."""
        if not self._z.eof:
            raise BadRequest("The gzip body ended before the gzip stream did (truncated).")


def decoder_for(content_encoding: str | None) -> GzipDecoder | None:
    """The decoder for a ``Content-Encoding`` header (None: the body is as sent); 415 for
    an encoding the service does not undo."""
    value = (content_encoding or "").strip().lower()
    if value in IDENTITY:
        return None
    if value in ("gzip", "x-gzip"):
        return GzipDecoder()
    raise UnsupportedEncoding(
        f"Content-Encoding {value[:50]!r} is not supported for uploads; send the body as it "
        "is or gzip-compressed (Content-Encoding: gzip)."
    )
