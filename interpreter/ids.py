"""Identifiers the service hands out."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    """A 144-bit random identifier (docs/security.md H-42), e.g. ``s_...`` or ``ex_...``."""
    return f"{prefix}_{secrets.token_urlsafe(18)}"
