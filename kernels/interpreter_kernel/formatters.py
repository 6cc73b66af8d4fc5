"""IPython display formatters that add the structured MIME types to rich outputs.

Each formatter owns one printer that decides by itself which objects it describes (with
``isinstance`` against classes taken from ``sys.modules``), so neither pandas nor matplotlib
is imported until the user's own code does. Type registration (``for_type``) is not used:
matplotlib's inline backend removes every formatter's Figure printer when it activates
(``IPython.core.pylabtools.select_figure_formats``), which would silently drop the chart.

A formatter never raises: a failure is logged and the bundle simply lacks that one
representation, while ``text/plain``, ``text/html`` and ``image/png`` still display.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from IPython.core.formatters import BaseFormatter, DisplayFormatter
from traitlets import ObjectName, Unicode

from .chart import chart_json
from .dataframe import dataframe_json
from .mime import CHART_MIME, DATAFRAME_MIME

log = logging.getLogger(__name__)

Printer = Callable[[Any], "dict[str, Any] | None"]


class StructuredJSONFormatter(BaseFormatter):
    """An IPython formatter for one JSON MIME type, computed by a single printer.

    The printer receives every object IPython displays and returns ``None`` for those it
    does not describe.

    Args:
        printer: computes the JSON object; exceptions are swallowed (see :func:`safe`).
        **kwargs: traits of ``BaseFormatter``, usually ``parent`` and ``format_type``.
    """

    format_type = Unicode("application/json")
    # No object opts in through a method of its own.
    print_method = ObjectName("_repr_interp_structured_json_")
    _return_type = (dict,)

    def __init__(self, printer: Printer, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._printer = safe(printer)

    def __call__(self, obj: Any) -> dict[str, Any] | None:
        """Compute the representation of ``obj``, or ``None``."""
        if not self.enabled:
            return None
        return self._printer(obj)


def safe(printer: Printer) -> Printer:
    """Wrap ``printer`` so that any exception becomes ``None`` (and a debug log line)."""

    def call(obj: Any) -> dict[str, Any] | None:
        try:
            return printer(obj)
        except Exception:
            # IPython would print the traceback into the user's cell; a missing extra
            # representation is better than noise in their output.
            log.debug("%s failed on %s", printer.__name__, type(obj).__name__, exc_info=True)
            return None

    call.__name__ = f"safe_{printer.__name__}"
    return call


def register_formatters(display_formatter: DisplayFormatter) -> None:
    """Add the dataframe and chart formatters to an IPython ``DisplayFormatter``.

    Calling it again replaces the earlier registration.

    Args:
        display_formatter: usually ``shell.display_formatter``.
    """
    printers: dict[str, Printer] = {
        DATAFRAME_MIME: dataframe_json,
        CHART_MIME: chart_json,
    }
    for mime, printer in printers.items():
        formatter = StructuredJSONFormatter(printer, parent=display_formatter, format_type=mime)
        display_formatter.formatters[mime] = formatter
    plain = display_formatter.formatters.get("text/plain")
    if plain is not None:
        # A Styler's repr is "<pandas.io.formats.style.Styler at 0x...>"; its text is its frame.
        plain.for_type_by_name("pandas.io.formats.style", "Styler", _styler_text)


def _styler_text(obj: Any, printer: Any, cycle: bool) -> None:
    printer.text(repr(obj.data))
