"""Whether the kernel image is present and current, and what to say when it is not."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
import docker.utils

from interpreter.errors import BackendUnavailable
from interpreter.image.inputs import (
    BUILD_COMMAND,
    DEFAULT_IMAGE,
    LABEL_BASE_IMAGE,
    LABEL_INPUTS_HASH,
    LABEL_PACKAGES,
    has_build_inputs,
    inputs_hash,
)

# --------------------------------------------------------------------------------------------
# Status


@dataclass(frozen=True)
class ImageStatus:
    """What is known about a kernel image on the local engine.

    Attributes:
        image: the reference asked about, e.g. ``interp-kernel:latest``.
        exists: the engine has it.
        up_to_date: it carries the inputs hash of this checkout. Where no source checkout is
            available there is nothing to compare, and an existing image counts as current.
        image_id: the engine's id (``sha256:...``) when it exists.
        inputs_hash: the hash label on the image, if any.
        expected_hash: the hash of this checkout's inputs; None without a checkout.
        base_image: the base it was built from (label).
        packages: exact Python package versions in the image (label), name -> version.
    """

    image: str
    exists: bool
    up_to_date: bool
    image_id: str | None = None
    inputs_hash: str | None = None
    expected_hash: str | None = None
    base_image: str | None = None
    packages: dict[str, str] = field(default_factory=dict)

    def problem(self) -> str | None:
        """A one-paragraph explanation of what is wrong, or None when the image is fine."""
        if not self.exists:
            return missing_image_message(self.image)
        if not self.up_to_date:
            return (
                f"Kernel image {self.image!r} was built from other inputs than this checkout "
                f"(kernel package, Dockerfile or pins changed). Rebuild it with: "
                f"{_build_command(self.image)}"
            )
        return None


def image_status(image: str = DEFAULT_IMAGE, *, client: Any = None) -> ImageStatus:
    """Inspect ``image`` on the local Docker engine.

    Called by the docker backend when it starts, off the event loop.

    Args:
        image: image reference.
        client: a ``docker.DockerClient`` to reuse; one is made from the environment if None.

    Raises:
        BackendUnavailable: the Docker engine does not answer.
    """
    expected = inputs_hash() if has_build_inputs() else None
    try:
        api = (client or docker.from_env(timeout=30)).api
        attrs = api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return ImageStatus(image=image, exists=False, up_to_date=False, expected_hash=expected)
    except docker.errors.DockerException as exc:
        raise BackendUnavailable(f"Docker engine not reachable: {exc}") from exc
    labels: dict[str, str] = (attrs.get("Config") or {}).get("Labels") or {}
    actual = labels.get(LABEL_INPUTS_HASH)
    try:
        packages = json.loads(labels.get(LABEL_PACKAGES, "{}"))
    except ValueError:
        packages = {}
    return ImageStatus(
        image=image,
        exists=True,
        up_to_date=expected is None or actual == expected,
        image_id=attrs.get("Id"),
        inputs_hash=actual,
        expected_hash=expected,
        base_image=labels.get(LABEL_BASE_IMAGE),
        packages=packages if isinstance(packages, dict) else {},
    )


def missing_image_message(image: str = DEFAULT_IMAGE) -> str:
    """What to tell a user whose engine lacks the kernel image: the exact command to build it."""
    return (
        f"Kernel image {image!r} not found on the Docker engine. Build it from a source "
        f"checkout of interp with: {_build_command(image)} "
        f"(a few minutes the first time; works offline given Debian packages and PyPI)."
    )


def _build_command(image: str) -> str:
    return BUILD_COMMAND if image == DEFAULT_IMAGE else f"{BUILD_COMMAND} --image {image}"
