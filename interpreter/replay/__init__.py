"""Replay a notebook in a fresh session and check, cell by cell, that its outputs match.

:mod:`~interpreter.replay.compare` holds the comparison (pure: normal forms of text, JSON,
SVG and images); :mod:`~interpreter.replay.runner` drives a session through the public SDK
and reports. ``interp replay`` is built on :func:`replay_notebook`.
"""

from __future__ import annotations

from interpreter.replay.compare import (
    CellOutputs,
    compare_images,
    compare_json,
    compare_outputs,
    compare_text,
    compare_value,
    image_size,
    normalize_json,
    normalize_svg,
    normalize_text,
    outputs_from_cell,
    outputs_from_execution,
)
from interpreter.replay.runner import (
    CellReport,
    CellStatus,
    ReplayReport,
    print_cell,
    print_summary,
    replay_notebook,
)

__all__ = [
    "CellOutputs",
    "CellReport",
    "CellStatus",
    "ReplayReport",
    "compare_images",
    "compare_json",
    "compare_outputs",
    "compare_text",
    "compare_value",
    "image_size",
    "normalize_json",
    "normalize_svg",
    "normalize_text",
    "outputs_from_cell",
    "outputs_from_execution",
    "print_cell",
    "print_summary",
    "replay_notebook",
]
