"""interp: a stateful code interpreter for AI agents."""

from interpreter._version import __version__

__all__ = ["__version__"]
