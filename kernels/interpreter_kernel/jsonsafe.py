"""Turn single data values into JSON scalars that strict JSON encoders accept."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import sys
from typing import Any

#: A value ``json.dumps(..., allow_nan=False)`` accepts without help.
JSONScalar = None | bool | int | float | str

#: Marks a string that was cut.
ELLIPSIS = "…"


def cut(text: str, max_chars: int) -> str:
    """Shorten ``text`` to at most ``max_chars`` characters, marking the cut with ``…``."""
    if len(text) <= max_chars:
        return text
    return text[: max(max_chars - 1, 0)] + ELLIPSIS


def json_scalar(value: Any, *, max_chars: int = 100) -> JSONScalar:
    """Convert one data value (Python, numpy or pandas) into a JSON scalar.

    Missing values (None, NaN, NaT, ``pandas.NA``) become ``None``; infinities become the
    strings ``"inf"`` and ``"-inf"``, as pandas prints them (as ``None`` they read as
    missing values, hiding a division by zero in the data); numpy scalars become Python
    numbers; dates and timestamps become ISO 8601 strings; timedeltas, periods, intervals
    and any other object become their ``str()``. Strings are cut to ``max_chars``. Never
    raises.

    Args:
        value: the value to convert.
        max_chars: longest string returned.
    """
    try:
        return _convert(value, max_chars)
    except Exception:
        # A user object whose __str__ fails must not break a whole summary.
        return cut(f"<{type(value).__name__}>", max_chars)


def json_label(value: Any, *, max_chars: int = 100) -> JSONScalar | list[JSONScalar]:
    """Convert an index or column label; tuples (MultiIndex levels) become lists."""
    if isinstance(value, tuple):
        return [json_scalar(item, max_chars=max_chars) for item in value]
    return json_scalar(value, max_chars=max_chars)


def _convert(value: Any, max_chars: int) -> JSONScalar:
    # Exact built-in types first: they are by far the most common and need no lookup.
    if value is None or isinstance(value, bool):
        return value
    # int()/float() also turn subclasses (numpy.float64, IntEnum) into the plain type.
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else _not_finite(value)
    if isinstance(value, str):
        return cut(str(value), max_chars)

    if _is_missing(value):
        return None

    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic):
        return _convert_numpy(value, np, max_chars)

    if isinstance(value, dt.timedelta):
        # Checked before datetime: pandas.Timedelta's str() ("1 days 02:00:00") reads better
        # than an ISO 8601 duration.
        return cut(str(value), max_chars)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return cut(value.isoformat(), max_chars)
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else _not_finite(float(value))
    if isinstance(value, bytes):
        return cut(repr(value), max_chars)
    return cut(str(value), max_chars)


def _not_finite(value: float) -> str | None:
    """An infinity as pandas prints it; NaN (a missing value) as None."""
    if math.isnan(value):
        return None
    return "inf" if value > 0 else "-inf"


def _is_missing(value: Any) -> bool:
    """Whether ``value`` is one of pandas' missing-value singletons (NaT, NA)."""
    pd = sys.modules.get("pandas")
    if pd is None:
        return False
    return value is pd.NaT or value is pd.NA


def _convert_numpy(value: Any, np: Any, max_chars: int) -> JSONScalar:
    if isinstance(value, np.datetime64):
        if np.isnat(value):
            return None
        # .item() of a nanosecond datetime64 is a bare int; microseconds give a datetime.
        return _convert(value.astype("datetime64[us]").item(), max_chars)
    if isinstance(value, np.timedelta64):
        if np.isnat(value):
            return None
        return _convert(value.astype("timedelta64[us]").item(), max_chars)
    if isinstance(value, np.complexfloating):
        return cut(str(value), max_chars)
    return _convert(value.item(), max_chars)
