"""The Python packages a kernel can import, for the API, notebooks and tool descriptions.

A docker kernel runs an image whose build recorded its exact versions (the
``org.interp.packages`` label, read through :func:`interpreter.image.image_status`); a
local kernel is a subprocess on the broker's own interpreter, so its packages are this
environment's distributions. Both lookups block (a Docker call, a scan of site-packages):
call them off the event loop. The environment's list is read once per process.
"""

from __future__ import annotations

import functools
from importlib import metadata

from interpreter.image.status import image_status


@functools.cache
def environment_packages() -> dict[str, str]:
    """Distributions of this Python environment: what a local kernel can import."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(name, dist.version)
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def image_packages(image: str) -> dict[str, str]:
    """The packages recorded in ``image``'s labels (empty when it has none or is missing)."""
    return dict(sorted(image_status(image).packages.items()))
