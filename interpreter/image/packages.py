"""The Python packages a kernel can import, for the API, notebooks and tool descriptions.

A docker kernel's list is read from its image itself: a short container of the image (no
network, read-only, the kernel's user) lists the distributions its ``python`` can import,
once per image id. The ``org.interp.packages`` label is not used for this, because an image
built ``FROM`` ours inherits the label and would report the base's list; the label stays
what the build installed, and is the fallback when the image cannot be run. A local kernel
is a subprocess on the broker's own interpreter, so its packages are this environment's
distributions. Both lookups block (a container run of about 0.4 s, a scan of
site-packages): call them off the event loop. Each list is read once per process (per
image id for images).
"""

from __future__ import annotations

import functools
import json
import threading
from importlib import metadata
from typing import Any

import docker
import docker.errors

from interpreter.image.inputs import KERNEL_UID, normalize_name
from interpreter.image.status import image_status

#: Run in the image: its distributions as JSON, the way :func:`environment_packages` reads them.
_LIST_DISTRIBUTIONS = (
    "import json\nfrom importlib import metadata\nfound = {}\n"
    "for dist in metadata.distributions():\n"
    "    name = dist.metadata['Name']\n"
    "    if name:\n        found.setdefault(name, dist.version)\n"
    "print(json.dumps(found))"
)
_by_image_id: dict[str, dict[str, str]] = {}
_lock = threading.Lock()


@functools.cache
def environment_packages() -> dict[str, str]:
    """Distributions of this Python environment: what a local kernel can import."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(name, dist.version)
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def _sorted(packages: dict[str, str]) -> dict[str, str]:
    return dict(sorted(packages.items(), key=lambda item: item[0].lower()))


def scan_image(image: str, *, client: Any = None) -> dict[str, str]:
    """The distributions ``image``'s ``python`` can import, read by running it (PEP 503
    names, as the label has them). Raises ``docker.errors.DockerException`` or
    ``ValueError`` when the image cannot be run or answers something else."""
    engine = client or docker.from_env(timeout=60)
    out = engine.containers.run(
        image,
        ["python", "-c", _LIST_DISTRIBUTIONS],
        entrypoint=[],
        user=f"{KERNEL_UID}:{KERNEL_UID}",
        network_disabled=True,
        read_only=True,
        remove=True,
        stdout=True,
        stderr=False,
    )
    found = json.loads(out)
    if not isinstance(found, dict):
        raise ValueError(f"{image}: the package scan printed {type(found).__name__}")
    return _sorted({normalize_name(str(k)): str(v) for k, v in found.items()})


def image_packages(image: str) -> dict[str, str]:
    """What a kernel of ``image`` can import, read from the image (see the module
    docstring), cached by image id; the image's ``org.interp.packages`` label when it
    cannot be run, and empty when the image is missing."""
    status = image_status(image)
    if not status.exists or status.image_id is None:
        return {}
    with _lock:
        cached = _by_image_id.get(status.image_id)
        if cached is not None:
            return dict(cached)
        try:
            found = scan_image(status.image_id)
        except (docker.errors.DockerException, ValueError):
            return _sorted(status.packages)
        _by_image_id[status.image_id] = found
        return dict(found)
