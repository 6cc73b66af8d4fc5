"""Every message the kernel sends is valid UTF-8, whatever text the user's code wrote.

Python strings may hold lone surrogates (``"a\\ud800b"``, or bytes decoded with
``surrogateescape``). jupyter_client's packer cannot encode them: the send fails and the
rest of the cell's output is lost without a word. :func:`pack` replaces each lone surrogate
with U+FFFD (a valid pair written as two code points becomes its character) and sends the
rest unchanged. :class:`BinaryBridge` gives ``sys.stdout.buffer``/``sys.stderr.buffer``:
bytes written there are decoded as UTF-8, invalid sequences becoming U+FFFD.
"""

from __future__ import annotations

import codecs
import json
from typing import Any, TextIO

from jupyter_client.jsonutil import json_clean, json_default

REPLACEMENT = "\ufffd"


def fix_surrogates(text: str) -> str:
    """``text`` with valid surrogate pairs joined and lone surrogates as U+FFFD."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _dumps(obj: Any) -> str:
    try:
        return json.dumps(obj, default=json_default, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        # What jupyter_client does as well: clean (NaN, odd types), then try again.
        return json.dumps(json_clean(obj), default=json_default, ensure_ascii=False)


def pack(obj: Any) -> bytes:
    """Serialise one message part as UTF-8 JSON; never fails on lone surrogates."""
    text = _dumps(obj)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return fix_surrogates(text).encode("utf-8")


class BinaryBridge:
    """A binary ``buffer`` for a text stream that has none (ipykernel's ``OutStream``)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data: bytes | bytearray | memoryview) -> int:
        raw = bytes(data)
        text = self._decoder.decode(raw)
        if text:
            self._stream.write(text)
        return len(raw)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._stream.flush()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def isatty(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False


def install(session: Any, streams: list[Any]) -> None:
    """Use :func:`pack` for ``session`` and give each of ``streams`` a binary ``buffer``."""
    session.pack = pack
    for stream in streams:
        if stream is not None and not hasattr(stream, "buffer"):
            stream.buffer = BinaryBridge(stream)
