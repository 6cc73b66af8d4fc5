"""Building the kernel image: stage the context and run ``docker build`` offline."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.utils

from interpreter.image.debian import choose_base_image
from interpreter.image.inputs import (
    DEFAULT_IMAGE,
    LABEL_BASE_IMAGE,
    LABEL_INPUTS_HASH,
    LABEL_PACKAGES,
    ImageBuildError,
    Progress,
    build_input_files,
    cache_dir,
    has_build_inputs,
    image_source_dir,
    inputs_hash,
    kernel_package_dir,
    read_pins,
)
from interpreter.image.status import image_status
from interpreter.image.wheelhouse import ensure_wheelhouse
from interpreter.mime import strip_ansi

# --------------------------------------------------------------------------------------------
# Build


# Classic-builder bookkeeping lines that say nothing about the build itself.
_BUILD_NOISE = ("Removing intermediate container", "---> Running in")


def build_image(
    image: str = DEFAULT_IMAGE,
    *,
    force: bool = False,
    progress: Progress = print,
) -> str:
    """Build the kernel image unless one with the same inputs hash exists; return its id.

    Args:
        image: reference to tag the result with.
        force: rebuild even when the image is current (and without the layer cache).
        progress: receives one human-readable line per step and per line of build output.

    Raises:
        ImageBuildError: no source checkout, no engine, or any step failed.
    """
    if not has_build_inputs():
        raise ImageBuildError(
            f"building the kernel image needs a source checkout of interp "
            f"(looked for {image_source_dir()}/Dockerfile)"
        )
    started = time.monotonic()
    client = _engine()
    try:
        expected = inputs_hash()
        status = image_status(image, client=client)
        if status.exists and status.up_to_date and not force:
            progress(f"{image} is up to date (inputs {expected[:12]}); nothing to build")
            assert status.image_id is not None
            return status.image_id
        requirements = image_source_dir() / "requirements.txt"
        pins = read_pins(requirements)

        progress("==> [1/4] wheelhouse")
        wheels = ensure_wheelhouse(requirements, progress=progress)
        progress("==> [2/4] base image")
        base = choose_base_image(client, progress=progress)
        progress("==> [3/4] build context")
        cache_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="context-", dir=cache_dir()) as tmp:
            context = Path(tmp)
            stage_context(context, wheels)
            if inputs_hash() != expected or read_pins(requirements) != pins:
                # Someone edited the kernel package (or a pin) while this build ran: the
                # labels would describe other files than the ones staged.
                raise ImageBuildError("build inputs changed during the build; run it again")
            progress(f"==> [4/4] docker build {image} FROM {base}")
            labels = {
                LABEL_INPUTS_HASH: expected,
                LABEL_PACKAGES: json.dumps(pins, sort_keys=True, separators=(",", ":")),
                LABEL_BASE_IMAGE: base,
            }
            image_id = _docker_build(client, context, image, base, labels, force, progress)
        if status.image_id and status.image_id != image_id:
            _remove_quietly(client, status.image_id)
        progress(f"built {image} ({image_id[:19]}) in {time.monotonic() - started:.0f}s")
        return image_id
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"Docker engine error while building {image}: {exc}") from exc
    finally:
        client.close()


def _engine() -> Any:
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        raise ImageBuildError(
            f"Docker engine not reachable ({exc}); start it (e.g. .ci/docker-engine.sh) and retry"
        ) from exc
    return client


def _docker_build(
    client: Any,
    context: Path,
    image: str,
    base: str,
    labels: dict[str, str],
    force: bool,
    progress: Progress,
) -> str:
    # The build runs with networking off: if pip ever tried to reach an index, the build
    # fails here instead of silently depending on the network.
    stream = client.api.build(
        path=str(context),
        tag=image,
        buildargs={"BASE_IMAGE": base},
        labels=labels,
        rm=True,
        forcerm=True,
        pull=False,
        nocache=force,
        network_mode="none",
        decode=True,
        use_config_proxy=False,
    )
    image_id: str | None = None
    for chunk in stream:
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
            raise ImageBuildError(f"docker build failed: {str(detail).strip()}")
        text = chunk.get("stream")
        if isinstance(text, str):
            # The classic builder colours a step's stderr with ANSI codes; logs want text.
            for line in strip_ansi(text).splitlines():
                if line.strip() and not line.lstrip().startswith(_BUILD_NOISE):
                    progress(line.rstrip())
        aux = chunk.get("aux")
        if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
            image_id = aux["ID"]
    attrs = client.api.inspect_image(image)
    if image_id is not None and attrs["Id"] != image_id:
        raise ImageBuildError(f"{image} is {attrs['Id']}, not the image just built ({image_id})")
    built: str = attrs["Id"]
    return built


def _remove_quietly(client: Any, image_id: str) -> None:
    """Drop the previous build, which the new one untagged, unless a container still uses
    it or another tag still names it. The engine removes an image by id together with all
    its tags in one repository, so a tag of the user's own (``interp-kernel:v1``, kept to
    go back to) went with it."""
    with contextlib.suppress(docker.errors.DockerException):
        if client.api.inspect_image(image_id).get("RepoTags"):
            return
        client.api.remove_image(image_id, force=False, noprune=False)


def stage_context(context: Path, wheelhouse: Path, root: Path | None = None) -> None:
    """Fill ``context`` with what the Dockerfile copies. Only build inputs and wheels go in."""
    source = image_source_dir(root)
    for _, path in build_input_files(root):
        if path.parent == source:
            shutil.copy2(path, context / path.name)
    wheels = context / "wheelhouse"
    wheels.mkdir()
    for wheel in sorted(wheelhouse.glob("*.whl")):
        try:
            os.link(wheel, wheels / wheel.name)
        except OSError:
            shutil.copy2(wheel, wheels / wheel.name)
    package = context / "interpreter_kernel"
    package.mkdir()
    origin = kernel_package_dir(root)
    for _, path in build_input_files(root):
        if path.is_relative_to(origin):
            target = package / path.relative_to(origin)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
