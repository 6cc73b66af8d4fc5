"""The compact JSON summary of a pandas DataFrame or Series (``application/vnd.dataframe+json``).

The schema is documented in :mod:`interpreter_kernel.mime`. pandas is never imported here:
an object can only be a DataFrame if the user's code already imported pandas.
"""

from __future__ import annotations

import sys
from typing import Any

from .jsonsafe import JSONScalar, json_label, json_scalar
from .mime import SCHEMA_VERSION

#: Rows included by default.
DEFAULT_MAX_ROWS = 20
#: Columns included by default.
DEFAULT_MAX_COLUMNS = 30
#: Longest string value or label included.
MAX_STRING_CHARS = 100
#: Null counts are skipped above this many cells: counting scans the whole frame.
MAX_NULL_COUNT_CELLS = 10_000_000


def dataframe_json(
    obj: Any,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_columns: int = DEFAULT_MAX_COLUMNS,
) -> dict[str, Any] | None:
    """Summarise a pandas DataFrame or Series for a language model.

    Args:
        obj: any object; only pandas DataFrames and Series (and subclasses) are summarised.
        max_rows: how many leading rows to include.
        max_columns: how many leading columns to include.

    Returns:
        The JSON-safe summary, or ``None`` when ``obj`` is not a DataFrame or Series.
    """
    pd = sys.modules.get("pandas")
    if pd is None:
        return None
    styler = styler_class()
    if styler is not None and isinstance(obj, styler):
        # A Styler shows its frame: the same summary as the frame itself.
        obj = obj.data
    if isinstance(obj, pd.DataFrame):
        return _summarise(obj, "dataframe", max_rows, max_columns)
    if isinstance(obj, pd.Series):
        summary = _summarise(obj.to_frame(), "series", max_rows, max_columns)
        # to_frame() names an unnamed Series' column 0; the summary keeps the real name.
        summary["columns"][0]["name"] = json_label(obj.name, max_chars=MAX_STRING_CHARS)
        return summary
    return None


def _summarise(frame: Any, kind: str, max_rows: int, max_columns: int) -> dict[str, Any]:
    n_rows, n_columns = frame.shape
    shown = frame.iloc[:max_rows, :max_columns]
    nulls = _null_counts(frame.iloc[:, :max_columns], n_rows)
    columns = [
        {
            "name": json_label(name, max_chars=MAX_STRING_CHARS),
            "dtype": str(dtype),
            "nulls": None if nulls is None else nulls[position],
        }
        for position, (name, dtype) in enumerate(zip(shown.columns, shown.dtypes, strict=True))
    ]
    rows: list[list[JSONScalar]] = [
        [json_scalar(value, max_chars=MAX_STRING_CHARS) for value in row]
        for row in shown.itertuples(index=False, name=None)
    ]
    index = frame.index
    return {
        "version": SCHEMA_VERSION,
        "kind": kind,
        "shape": [n_rows] if kind == "series" else [n_rows, n_columns],
        "columns": columns,
        "index": {
            "type": type(index).__name__,
            "dtype": str(index.dtype),
            "names": [json_label(name, max_chars=MAX_STRING_CHARS) for name in index.names],
            "values": [json_label(label, max_chars=MAX_STRING_CHARS) for label in shown.index],
        },
        "rows": rows,
        "truncated": n_rows > len(rows) or n_columns > len(columns),
    }


def _null_counts(frame: Any, n_rows: int) -> list[int] | None:
    """Missing values per column, by position, or ``None`` when the frame is too big to scan."""
    if n_rows * frame.shape[1] > MAX_NULL_COUNT_CELLS:
        return None
    return [int(count) for count in frame.isna().sum().to_numpy()]


def styler_class() -> Any:
    """pandas' ``Styler`` class, if pandas' styling module is loaded (never imported here)."""
    module = sys.modules.get("pandas.io.formats.style")
    return getattr(module, "Styler", None)
