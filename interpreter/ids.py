"""Identifiers the service hands out."""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path


def new_id(prefix: str) -> str:
    """A 144-bit random identifier (docs/security.md H-42), e.g. ``s_...`` or ``ex_...``."""
    return f"{prefix}_{secrets.token_urlsafe(18)}"


def broker_id_for(data_dir: Path) -> str:
    """The id of the broker on ``data_dir``: every broker on the same data directory has
    it, so a restarted broker finds the containers its predecessor labelled with it."""
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
