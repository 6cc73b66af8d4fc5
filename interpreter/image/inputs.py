"""What the kernel image is made of: names and constants, where its inputs are, their
hash (which tells whether an image is current) and the pinned packages."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
from collections.abc import Callable, Mapping
from pathlib import Path

Progress = Callable[[str], None]

DEFAULT_IMAGE = "interp-kernel:latest"
#: The base used where a registry can be reached (also the Dockerfile's default).
DEFAULT_BASE_IMAGE = "python:3.11-slim"
#: The base made with debootstrap when ``DEFAULT_BASE_IMAGE`` cannot be had.
FALLBACK_BASE_IMAGE = "interp-base:bookworm"
#: Fixed, non-root identity of the kernel process inside the image (H-14).
KERNEL_UID = 10001
KERNEL_GID = 10001
#: Where the image records exactly what is installed.
VERSIONS_FILE = "/etc/interp/versions.json"

PYTHON_VERSION = "3.11"
DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv")
#: glibc minor version of the older base (bookworm: 2.36); wheels may need at most this.
GLIBC_MINOR = 36

LABEL_INPUTS_HASH = "org.interp.inputs-hash"
LABEL_PACKAGES = "org.interp.packages"
LABEL_BASE_IMAGE = "org.interp.base-image"
LABEL_BASE_RECIPE = "org.interp.base-recipe"

ENV_CACHE_DIR = "INTERP_CACHE_DIR"
ENV_BASE_IMAGE = "INTERP_BASE_IMAGE"
ENV_DEBIAN_MIRROR = "INTERP_DEBIAN_MIRROR"
ENV_PULL_TIMEOUT = "INTERP_BASE_PULL_TIMEOUT_S"

BUILD_COMMAND = "interp images build"

# Bump when the way inputs turn into an image changes without any input file changing.
_RECIPE_VERSION = "1"


class ImageBuildError(RuntimeError):
    """The kernel image (or its base, or its wheelhouse) could not be built."""


# --------------------------------------------------------------------------------------------
# Where things are


def repo_root() -> Path:
    """The source checkout this package was imported from (may lack ``images/``)."""
    return Path(__file__).resolve().parents[2]


def image_source_dir(root: Path | None = None) -> Path:
    """``images/python`` of the checkout: the Dockerfile and its companions."""
    return (root or repo_root()) / "images" / "python"


def kernel_package_dir(root: Path | None = None) -> Path:
    """``kernels/interpreter_kernel`` of the checkout, copied into the image."""
    return (root or repo_root()) / "kernels" / "interpreter_kernel"


def has_build_inputs(root: Path | None = None) -> bool:
    """Whether ``root`` (default: this checkout) holds what a build needs."""
    source = image_source_dir(root)
    return (source / "Dockerfile").is_file() and (source / "requirements.txt").is_file()


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Cache root for the wheelhouse, the base rootfs and build contexts.

    ``$INTERP_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/interp``, else ``~/.cache/interp``.
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_CACHE_DIR):
        return Path(env[ENV_CACHE_DIR]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "interp"
    return Path.home() / ".cache" / "interp"


# --------------------------------------------------------------------------------------------
# Inputs and pins


def build_input_files(root: Path | None = None) -> list[tuple[str, Path]]:
    """Every file whose content decides the image, as (name relative to root, path), sorted."""
    root = root or repo_root()
    source = image_source_dir(root)
    files = [p for p in sorted(source.iterdir()) if p.is_file() and _is_input(p)]
    package = kernel_package_dir(root)
    if package.is_dir():
        files += [p for p in sorted(package.rglob("*")) if p.is_file() and _is_input(p)]
    return [(p.relative_to(root).as_posix(), p) for p in files]


def _is_input(path: Path) -> bool:
    # Bytecode and editor/OS droppings are not inputs; hashing them would make the hash
    # depend on who last imported the package.
    return (
        "__pycache__" not in path.parts
        and path.suffix not in {".pyc", ".pyo"}
        and not path.name.startswith(".")
        and not path.name.endswith("~")
    )


def inputs_hash(root: Path | None = None, *, machine: str | None = None) -> str:
    """SHA-256 over the build inputs and the recipe; the ``org.interp.inputs-hash`` label.

    The base image actually used is deliberately not part of it: which base a machine can get
    is a property of the machine, and this hash must be computable without a registry.
    """
    digest = hashlib.sha256()
    recipe = {
        "recipe": _RECIPE_VERSION,
        "python": PYTHON_VERSION,
        "uid": KERNEL_UID,
        "gid": KERNEL_GID,
        "platform": wheel_platform(machine),
    }
    digest.update(json.dumps(recipe, sort_keys=True).encode())
    for name, path in build_input_files(root):
        data = path.read_bytes()
        digest.update(b"\0file\0" + name.encode() + b"\0" + str(len(data)).encode() + b"\0")
        digest.update(data)
    return digest.hexdigest()


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!_-]+)$")


def normalize_name(name: str) -> str:
    """PEP 503 normalized distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(requirements: Path) -> dict[str, str]:
    """Parse a requirements file that may only hold exact pins (``name==version``).

    Raises:
        ValueError: a line is not an exact pin, or a name is pinned twice.
    """
    pins: dict[str, str] = {}
    for number, raw in enumerate(requirements.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.match(line)
        if match is None:
            raise ValueError(f"{requirements.name}:{number}: not an exact pin: {raw.strip()!r}")
        name = normalize_name(match.group(1))
        if name in pins:
            raise ValueError(f"{requirements.name}:{number}: {name} is pinned twice")
        pins[name] = match.group(2)
    return pins


def wheel_platform(machine: str | None = None) -> str:
    """The newest manylinux platform tag the image accepts, e.g. ``manylinux_2_36_x86_64``."""
    arch = (machine or platform.machine()).lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    if arch not in {"x86_64", "aarch64"}:
        raise ImageBuildError(f"no kernel image recipe for machine type {arch!r}")
    return f"manylinux_2_{GLIBC_MINOR}_{arch}"


def wheel_platforms(machine: str | None = None) -> list[str]:
    """Every platform tag a wheel may carry to run on the image's glibc, newest first.

    ``pip download --platform`` matches tags literally (it does not widen
    ``manylinux_2_36`` to older glibc versions), so all of them are listed, and the legacy
    aliases too.
    """
    newest = wheel_platform(machine)
    arch = newest.split("_", 3)[3]
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(GLIBC_MINOR, 16, -1)]
    tags.append(f"manylinux2014_{arch}")
    if arch == "x86_64":
        tags += [f"manylinux_2_{minor}_{arch}" for minor in range(16, 4, -1)]
        tags += [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    return tags
