"""A budget that every API key draws on, with a share for each (upload slots, bytes of
large request bodies).

A budget capped only in all lets one key take the whole of it: sixteen uploads trickled
at a byte a second hold every upload slot for the body timeout, and every other tenant is
refused meanwhile. Each key may hold at most its share; the budget stays capped in all.
Which cap refused says who has to wait: everyone, because the service is full (the API
answers 503), or the key over its share (429).
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

#: Why more does not fit: the key's share, or the whole budget.
Refusal = Literal["key", "service"]


class SharedBudget:
    """Units of one resource held now, in all and by each key (its owner id)."""

    def __init__(self) -> None:
        #: Held now by all keys together.
        self.held = 0
        self._by_key: Counter[str] = Counter()

    def of(self, key: str) -> int:
        """What ``key`` holds now."""
        return self._by_key[key]

    def refusal(self, key: str, more: int, *, most: int, share: int) -> Refusal | None:
        """Why ``key`` may not take ``more``: past ``most`` in all (checked first: with
        both, and where a key's share is the whole, the service is full for everyone),
        or past the key's ``share``; None when it fits."""
        if self.held + more > most:
            return "service"
        if self._by_key[key] + more > share:
            return "key"
        return None

    def take(self, key: str, more: int) -> None:
        self.held += more
        self._by_key[key] += more

    def give_back(self, key: str, less: int) -> None:
        self.held -= less
        left = self._by_key[key] - less
        if left > 0:
            self._by_key[key] = left
        else:
            del self._by_key[key]
