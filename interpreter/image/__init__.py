"""The kernel image: build it (also offline) and tell whether the one present is current.

The image is described by ``images/python/`` (Dockerfile, pinned requirements) plus the
kernel-side package ``kernels/interpreter_kernel``. Building therefore needs a source
checkout of this project; an installed wheel can inspect images but not build them.

A build has four steps, each skipped when its result is already there:

1. a **wheelhouse**: every pinned package downloaded on the host for CPython 3.11 on
   manylinux, cached per requirements file, because pip inside the build has no network;
2. a **base image**: ``python:3.11-slim`` if present or pullable, otherwise a Debian bookworm
   root filesystem made with ``debootstrap`` from this machine's apt mirror and imported as
   ``interp-base:bookworm`` (the tarball is cached);
3. a **build context** staged in the cache directory;
4. ``docker build`` with networking off, labelled with the inputs hash and the package pins.

Step 4 (and everything before it) is skipped when an image with the same inputs hash
already exists, unless forced. Everything here blocks; callers on an event loop run it in
a thread.

Called by the CLI (``interp images build``) and by the docker backend when it starts
(:func:`image_status`, :func:`missing_image_message`).

Modules: ``inputs`` (names, inputs and their hash, pins), ``status``, ``build``,
``wheelhouse``, ``debian`` (the base image and the apt mirror), ``shell`` (subprocesses).
"""

from __future__ import annotations

from interpreter.image.build import (
    build_image,
    stage_context,
)
from interpreter.image.debian import (
    AptSource,
    apt_sources,
    base_recipe_hash,
    choose_base_image,
    debian_mirror,
    ensure_debian_base,
    parse_deb822_sources,
    parse_sources_list,
)
from interpreter.image.inputs import (
    BUILD_COMMAND,
    DEBIAN_PACKAGES,
    DEBIAN_SUITE,
    DEFAULT_BASE_IMAGE,
    DEFAULT_IMAGE,
    ENV_BASE_IMAGE,
    ENV_CACHE_DIR,
    ENV_DEBIAN_MIRROR,
    ENV_PULL_TIMEOUT,
    FALLBACK_BASE_IMAGE,
    GLIBC_MINOR,
    KERNEL_GID,
    KERNEL_UID,
    LABEL_BASE_IMAGE,
    LABEL_BASE_RECIPE,
    LABEL_INPUTS_HASH,
    LABEL_PACKAGES,
    PYTHON_VERSION,
    VERSIONS_FILE,
    ImageBuildError,
    Progress,
    build_input_files,
    cache_dir,
    has_build_inputs,
    image_source_dir,
    inputs_hash,
    kernel_package_dir,
    normalize_name,
    read_pins,
    repo_root,
    wheel_platform,
    wheel_platforms,
)
from interpreter.image.shell import (
    run_logged,
)
from interpreter.image.status import (
    ImageStatus,
    image_status,
    missing_image_message,
)
from interpreter.image.wheelhouse import (
    ensure_wheelhouse,
)

__all__ = [
    "BUILD_COMMAND",
    "DEBIAN_PACKAGES",
    "DEBIAN_SUITE",
    "DEFAULT_BASE_IMAGE",
    "DEFAULT_IMAGE",
    "ENV_BASE_IMAGE",
    "ENV_CACHE_DIR",
    "ENV_DEBIAN_MIRROR",
    "ENV_PULL_TIMEOUT",
    "FALLBACK_BASE_IMAGE",
    "GLIBC_MINOR",
    "KERNEL_GID",
    "KERNEL_UID",
    "LABEL_BASE_IMAGE",
    "LABEL_BASE_RECIPE",
    "LABEL_INPUTS_HASH",
    "LABEL_PACKAGES",
    "PYTHON_VERSION",
    "VERSIONS_FILE",
    "AptSource",
    "ImageBuildError",
    "ImageStatus",
    "Progress",
    "apt_sources",
    "base_recipe_hash",
    "build_image",
    "build_input_files",
    "cache_dir",
    "choose_base_image",
    "debian_mirror",
    "ensure_debian_base",
    "ensure_wheelhouse",
    "has_build_inputs",
    "image_source_dir",
    "image_status",
    "inputs_hash",
    "kernel_package_dir",
    "missing_image_message",
    "normalize_name",
    "parse_deb822_sources",
    "parse_sources_list",
    "read_pins",
    "repo_root",
    "run_logged",
    "stage_context",
    "wheel_platform",
    "wheel_platforms",
]
