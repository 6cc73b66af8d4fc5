"""Stopping a kernel client's channels without touching those never started.

jupyter_client's ``KernelClient.stop_channels`` reads each channel's property, and reading
one creates the channel: a client started with shell and IOPub alone would connect a
stdin socket (and make a heartbeat channel) only to close them again.
"""

from __future__ import annotations

from typing import Any

CHANNELS = ("shell", "iopub", "stdin", "hb", "control")


def stop_channels(kc: Any) -> None:
    """Stop the channels of ``kc`` that were started, as ``kc.stop_channels()`` does, but
    without first creating the others. A context the client made itself is destroyed as
    jupyter_client does; one it was given stays open for its owner."""
    for name in CHANNELS:
        channel = getattr(kc, f"_{name}_channel", None)
        if channel is not None and channel.is_alive():
            channel.stop()
    if getattr(kc, "_created_context", False) and not kc.context.closed:
        kc.context.destroy(linger=100)
