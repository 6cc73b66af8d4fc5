"""What a closed session leaves behind: nothing but its files.

Its runtime directory (connection file, ipc sockets) is removed, and its workspace quota
(:mod:`interpreter.quota`) is unmounted with its image deleted, the files copied out so
that they stay readable. Called when a session closes and when startup recovery closes a
session whose kernel is gone.
"""

from __future__ import annotations

import logging
import shutil

from interpreter import quota
from interpreter.backends.base import LaunchOptions
from interpreter.workspace import copy_tree_safely

log = logging.getLogger(__name__)


def release_disk(options: LaunchOptions) -> None:
    """What a closed session no longer needs: its runtime directory, and its workspace
    quota unmounted with the image removed (the workspace's files are kept)."""
    shutil.rmtree(options.runtime_dir, ignore_errors=True)
    try:
        quota.detach(options.session_dir, options.workspace, copy=copy_tree_safely)
    except Exception:
        log.exception("session %s: workspace quota not released", options.session_id)
