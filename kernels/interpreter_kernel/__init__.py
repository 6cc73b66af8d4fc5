"""Kernel-side code of the interpreter: launcher, display setup and rich-output formatters.

Installed as the top-level package ``interpreter_kernel``, both on the host (local backend)
and in the kernel image, where only ipykernel, pandas, matplotlib and numpy exist. So it
imports nothing from ``interpreter``, and pandas/matplotlib only once user code has.
Importing it has no side effects; :func:`setup` and :func:`interpreter_kernel.app.main` do
the work.
"""

from .chart import chart_json
from .configure import setup
from .dataframe import dataframe_json
from .mime import CHART_MIME, DATAFRAME_MIME, SCHEMA_VERSION

__all__ = [
    "CHART_MIME",
    "DATAFRAME_MIME",
    "SCHEMA_VERSION",
    "chart_json",
    "dataframe_json",
    "setup",
]
