"""MIME types the service treats specially, and terminal codes stripped from text.

A leaf: the broker, the SDK, replay and the tools all decide from these sets, so that "is
this an image", "is this binary" and "what does a model read inline" have one answer.
"""

from __future__ import annotations

import re

#: Structured summary of a pandas DataFrame or Series (kernel side, ``kernels/``).
DATAFRAME_MIME = "application/vnd.dataframe+json"
#: Structured description of a matplotlib figure (kernel side, ``kernels/``).
CHART_MIME = "application/vnd.chart+json"
SVG_MIME = "image/svg+xml"
PDF_MIME = "application/pdf"

#: MIME types whose value in a notebook may be any JSON (nbformat v4's schema); every other
#: type's value is text (a string, or a list of strings to join).
_JSON_MIME = re.compile(r"^application/(.*\+)?json$")

#: Raster images: base64 text in Jupyter messages, decoded bytes in artifacts.
RASTER_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})
#: Values that are binary (base64 text in Jupyter messages).
BINARY_MIMES = RASTER_MIMES | {PDF_MIME}
#: Images a multimodal model accepts as image input.
MODEL_IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
#: Forms that always stay inline in an output, whatever their size (an agent reads them
#: without a second request; ``text/plain`` is cut in the middle when large).
INLINE_MIMES = frozenset({"text/plain", DATAFRAME_MIME})

#: File name extensions of common types, for downloads.
EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    SVG_MIME: ".svg",
    PDF_MIME: ".pdf",
    "text/html": ".html",
    "text/plain": ".txt",
    "application/json": ".json",
}

#: Terminal control sequences: OSC strings (hyperlinks, window titles: up to BEL or
#: ESC \\), CSI (colours, cursor moves) and two-character escapes.
ANSI_RE = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def is_image(mime: str) -> bool:
    """Any image type, SVG included."""
    return mime.startswith("image/")


def is_binary(mime: str) -> bool:
    """Whether values of ``mime`` are base64-encoded bytes (raster images, PDF)."""
    return mime in BINARY_MIMES or (is_image(mime) and mime != SVG_MIME)


def strip_ansi(text: str) -> str:
    """Remove terminal colour and cursor codes."""
    return ANSI_RE.sub("", text)


def is_json(mime: str) -> bool:
    """Whether a value of ``mime`` is JSON data rather than text (in nbformat's terms)."""
    return _JSON_MIME.match(mime) is not None
