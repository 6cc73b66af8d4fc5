"""``setup(shell)``: the display behaviour every interpreter kernel gets.

Nothing here imports pandas or matplotlib: their settings are applied when (and if) the
user's code imports them.
"""

from __future__ import annotations

import logging
import os
import sys
from types import ModuleType
from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from .chart_marks import install_matplotlib, install_seaborn
from .formatters import register_formatters
from .imports import when_imported
from .inline_kept import keep_inline_switch, keep_inline_use
from .interrupts import InterruptWaker, interrupt_before_code, interrupt_shell_commands
from .mpl_compat import install_axes, install_pyplot
from .oom_watch import install as watch_oom_kills
from .output_history import forget_outputs
from .packages import install_package_magics
from .plotly_figure import configure_plotly
from .shell_stdin import no_terminal_input
from .widgets import FinalWidgetState

log = logging.getLogger(__name__)

#: The matplotlib backend that turns figures into display_data messages.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"

#: Resolution of inline figures: a default-sized figure becomes a 640x480 PNG.
FIGURE_DPI = 100

#: How the inline backend renders and cleans up figures.
INLINE_BACKEND_SETTINGS: dict[str, Any] = {
    "figure_formats": {"png"},
    "print_figure_kwargs": {"bbox_inches": "tight"},
    # Each cell's figures are closed once displayed, so pyplot's registry (and memory)
    # does not grow over a long session.
    "close_figures": True,
    "rc": {"figure.dpi": FIGURE_DPI},
}

#: pandas display options: enough to see the shape of the data, short enough for a model.
PANDAS_OPTIONS: dict[str, Any] = {
    "display.max_rows": 30,
    "display.min_rows": 10,
    "display.max_columns": 20,
    "display.max_colwidth": 80,
    # One line per row: wrapped column blocks are hard to read back as a table.
    "display.expand_frame_repr": False,
}


def setup(shell: InteractiveShell) -> None:
    """Configure an IPython shell for the interpreter.

    Tracebacks lose their ANSI colours, DataFrames/Series and matplotlib Figures gain the
    structured MIME types of :mod:`interpreter_kernel.mime`, the inline matplotlib backend
    renders PNGs at :data:`FIGURE_DPI` and closes figures after each cell, and pandas gets
    :data:`PANDAS_OPTIONS` once it is imported, where pip is missing ``%pip`` and
    ``!pip`` say that nothing can be installed, and IPython's history keeps no copy of the
    cells' outputs. Safe to call more than once.

    Called from the kernel launcher once the shell exists, before any user code runs.

    Args:
        shell: the kernel's shell (``get_ipython()``).
    """
    shell.colors = "nocolor"
    if shell.display_formatter is not None:
        register_formatters(shell.display_formatter)
    configure_matplotlib(shell)
    when_imported("pandas", configure_pandas)
    # Box plots, violins and seaborn heatmaps are recorded as they are drawn (chart_marks).
    when_imported("matplotlib.axes", install_matplotlib)
    # boxplot(labels=...) as matplotlib before 3.11 took it (mpl_compat).
    when_imported("matplotlib.axes", install_axes)
    when_imported("matplotlib.pyplot", install_pyplot)
    # matplotlib.use("Agg") keeps the inline backend: figures still come back (inline_kept).
    when_imported("matplotlib", keep_inline_use)
    when_imported("matplotlib.pyplot", keep_inline_switch)
    # PIL's Image.show() displays in the cell, never in a viewer of the host (local backend).
    when_imported("PIL.ImageShow", show_pil_images_inline)
    when_imported("seaborn", install_seaborn)
    when_imported("plotly.io", configure_plotly)
    FinalWidgetState.install(shell)
    # !cmd reads end-of-file, not a terminal nobody types into (shell_stdin); first, so
    # that the wrappers below see the command as written.
    no_terminal_input(shell)
    # No pip in the image: %pip and !pip say that nothing can be installed (packages).
    install_package_magics(shell)
    # An interrupt in IPython's callbacks before a cell's code ends the cell (interrupts),
    # and so does one while a shell command runs.
    interrupt_before_code(shell)
    waker = getattr(getattr(shell, "kernel", None), "_waker", None)
    if isinstance(waker, InterruptWaker):
        interrupt_shell_commands(shell, lambda: waker.sigints)
    # IPython's history keeps no copy of each cell's output (output_history).
    forget_outputs(shell)
    # A process of the session killed for memory is said at once (oom_watch; Docker).
    watch_oom_kills(shell)


def show_pil_images_inline(image_show: ModuleType) -> None:
    """Put PIL's IPython viewer first: ``Image.show()`` becomes an output of the cell.

    PIL tries its viewers in order, and a desktop's ``xdg-open`` (or ``display``) comes
    before IPython's: on the local backend ``show()`` opened a viewer on the service's
    machine, and the cell had no image (in a container no such viewer exists).
    """
    viewer = getattr(image_show, "IPythonViewer", None)
    register = getattr(image_show, "register", None)
    if viewer is not None and register is not None:
        register(viewer, order=-1)


def configure_matplotlib(shell: InteractiveShell) -> None:
    """Select the inline backend and set how it renders figures.

    The broker already sets ``MPLBACKEND``; this covers a kernel started any other way.
    An explicit choice in the environment is kept.

    Args:
        shell: the shell whose inline backend is configured.
    """
    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    config_module = sys.modules.get("matplotlib_inline.config")
    backend_class = getattr(config_module, "InlineBackend", None)
    if backend_class is not None and backend_class.initialized():
        # Already active (matplotlib imported before setup): change the live object.
        backend = backend_class.instance()
        for name, value in INLINE_BACKEND_SETTINGS.items():
            setattr(backend, name, value)
        return
    # The backend reads its configuration from the shell when pyplot first loads it.
    section = shell.config.InlineBackend
    for name, value in INLINE_BACKEND_SETTINGS.items():
        section[name] = value


def configure_pandas(pandas: ModuleType) -> None:
    """Apply :data:`PANDAS_OPTIONS`; options this pandas version lacks are skipped.

    Args:
        pandas: the imported ``pandas`` module.
    """
    for key, value in PANDAS_OPTIONS.items():
        try:
            pandas.set_option(key, value)
        except (KeyError, ValueError):
            log.debug("pandas has no option %s", key, exc_info=True)
