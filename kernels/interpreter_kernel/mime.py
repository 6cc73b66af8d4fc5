"""The two structured MIME types the kernel adds to rich outputs, and their schemas.

Both are plain JSON objects (no NaN or Infinity anywhere: missing or non-finite numbers are
``null``), placed in the same ``execute_result`` / ``display_data`` bundle as the
representations IPython already produces. They exist so that a language model that cannot
see HTML tables or images still knows what a value or a plot holds. The broker keeps them
inline in an Execution and the notebook stores them like any other MIME type.

``application/vnd.dataframe+json`` (:data:`DATAFRAME_MIME`), for a pandas DataFrame or
Series::

    {
      "version": 1,
      "kind": "dataframe" | "series",
      "shape": [n_rows, n_columns]        # a Series: [n_rows]
      "columns": [                        # at most max_columns entries (default 30)
        {"name": <label>, "dtype": "int64", "nulls": 3}   # nulls is null when not counted
      ],                                  # a Series: one entry, named after the Series
      "index": {
        "type": "RangeIndex",             # the pandas index class name
        "dtype": "int64",
        "names": [<label> | null, ...],   # one per index level
        "values": [<label>, ...]          # the labels of the rows shown
      },
      "rows": [[<value>, ...], ...],      # the first max_rows rows (default 20), one value
                                          # per entry of "columns"
      "truncated": false                  # true when rows or columns were left out
    }

A ``<label>`` is a JSON scalar, or a list of scalars for a MultiIndex tuple. A ``<value>`` is
a JSON scalar: numbers stay numbers (numpy scalars become Python ones), NaN, NaT, None,
pandas.NA and infinities become ``null``, timestamps and dates become ISO 8601 strings,
timedeltas become pandas-style strings such as ``"1 days 02:00:00"``, anything else its
``str()``. Strings longer than 100 characters are cut and end with ``"…"``. ``nulls`` is
only counted when the frame has at most 10 million cells.

``application/vnd.chart+json`` (:data:`CHART_MIME`), for a matplotlib Figure (sent in the same
``display_data`` message as its ``image/png``), and for a plotly figure redrawn offline (then
with ``"source": "plotly"`` and, when some trace types could not be drawn, ``"not_drawn"``)::

    {
      "version": 1,
      "suptitle": "..." | null,
      "axes": [                           # one per Axes of the figure, colorbars left out
        {
          "kind": "line" | "bar" | "barh" | "scatter" | "hist" | "pie" | "image"
                  | "box" | "violin" | "heatmap" | "mixed" | "unknown" | "empty" | "3d",
          "title": "..." | null,
          "xlabel": "..." | null,
          "ylabel": "..." | null,
          "series": [<series>, ...],
          "bar_layout": "stacked" | "grouped" | "overlaid",   # only with 2+ bar series
          "grid": [row, column, rows, columns],  # only in a figure of several subplots
          "twin_of": 0,                      # only for twinx/twiny: the Axes it overlays
          "legend_title": "...",             # only when the legend has a title
          "zlabel": "..." | null,            # only for "3d"
          "other_artists": n                 # only for "3d": surfaces etc., not described
        }
      ],
      "truncated": false                  # true when any series below was cut
    }

``kind`` is the type shared by every series of the Axes; ``mixed`` when they differ,
``unknown`` when the Axes draws only things not described here (filled areas, step
histograms, ...), ``empty`` when it draws nothing, ``3d`` for a 3-D Axes (its line and
scatter series carry ``z`` too, and their stats are of ``z``). Each ``<series>`` is one of::

    {"type": "line", "label": str | null, "x": [...], "y": [...],
     "points": n, "truncated": bool}
    {"type": "scatter", "label": str | null, "x": [...], "y": [...],
     "points": n, "truncated": bool}
    {"type": "bar" | "barh", "label": str | null, "categories": [...], "values": [...],
     "points": n, "truncated": bool}  # values: bar heights (bar) or widths (barh)
    {"type": "errorbars", "label": null, "x": [...], "low": [...], "high": [...],
     "points": n, "truncated": bool}   # seaborn's error bars of the bars (not a kind)
    {"type": "hist", "label": str | null, "orientation": "vertical" | "horizontal",
     "bin_edges": [...], "counts": [...], "points": n, "truncated": bool}
    {"type": "pie", "labels": [...], "sizes": [...], "points": n, "truncated": bool}
                                      # sizes: each wedge's fraction of the whole (sum 1)
    {"type": "image", "shape": [rows, columns], "values": [[...], ...] | null,
     "stats": <stats> | null, "heatmap": bool}
                                      # values only for a 2-D image of at most 400 cells;
                                      # heatmap: a 2-D array drawn through a colour map
    {"type": "heatmap", "shape": [rows, columns], "values": [[...], ...] | null,
     "stats": <stats> | null, "rows": [...] | null, "columns": [...] | null}
                                      # pcolormesh grids (seaborn's heatmap), tick names
    {"type": "box" | "violin", "label": str | null, "orientation": "vertical" | "horizontal",
     "groups": [{"label", "median", "q1", "q3", "whisker_low", "whisker_high", "mean",
                 "outliers", "outlier_values"} | {"label", "median", "mean", "min", "max"}
                | {"label"}],
     "points": n_groups, "truncated": false}
                                      # outliers: how many; outlier_values: the first 100

Lines, scatters and bars also carry ``"stats": {"count", "min", "max", "mean"}`` of all
their values (not only the points kept), or ``null`` without finite values. Box plots are
recorded as they are drawn (``Axes.bxp``, used by ``boxplot`` and seaborn's ``boxplot``),
violins likewise (``Axes.violin``; seaborn's ``violinplot`` gives group names only), so their
lines and patches are not read as separate series. A series without a label of its own is
named after the legend entry drawn in its colour (seaborn's ``hue`` levels).

``points`` is the number of data points the series really has. Lines and scatters longer
than ``max_points`` (default 1000) are sampled evenly (first and last point kept); bars,
bins and wedges past ``max_points`` are cut; either way ``truncated`` is true. Floats are
rounded to 6 significant digits. Dates on a date axis become ISO 8601 strings, points on a
categorical axis and bars under labelled ticks get their category names. Labels that
matplotlib generates (``_child0``, ``_nolegend_``) become ``null``.
"""

from __future__ import annotations

#: MIME type of the structured summary of a pandas DataFrame or Series.
DATAFRAME_MIME = "application/vnd.dataframe+json"

#: MIME type of the structured description of a matplotlib Figure.
CHART_MIME = "application/vnd.chart+json"

#: Version of both schemas; bumped on an incompatible change.
SCHEMA_VERSION = 1
