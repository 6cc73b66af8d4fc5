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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.utils

from interpreter.errors import BackendUnavailable
from interpreter.mime import strip_ansi

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
_BASE_RECIPE_VERSION = "1"
_DEFAULT_PULL_TIMEOUT_S = 30.0
_DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
# Directories of the debootstrap root that data work never reads; copyright files stay.
_ROOTFS_TRIM = ("usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt/archives")


class ImageBuildError(RuntimeError):
    """The kernel image (or its base, or its wheelhouse) could not be built."""


# --------------------------------------------------------------------------------------------
# Where things are


def repo_root() -> Path:
    """The source checkout this package was imported from (may lack ``images/``)."""
    return Path(__file__).resolve().parent.parent


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


# Classic-builder bookkeeping lines that say nothing about the build itself.
_BUILD_NOISE = ("Removing intermediate container", "---> Running in")
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


# --------------------------------------------------------------------------------------------
# Build


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
    # The previous build is now untagged; drop it unless a container still uses it.
    with contextlib.suppress(docker.errors.DockerException):
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


# --------------------------------------------------------------------------------------------
# Wheelhouse


def ensure_wheelhouse(
    requirements: Path, *, progress: Progress = print, machine: str | None = None
) -> Path:
    """Download every pinned wheel for the image's Python and platform; cached per pin set.

    Returns:
        The directory holding exactly one wheel per pin.
    """
    plat = wheel_platform(machine)
    pins = read_pins(requirements)
    key = hashlib.sha256(
        json.dumps(
            {"pins": pins, "platform": plat, "python": PYTHON_VERSION}, sort_keys=True
        ).encode()
    ).hexdigest()[:16]
    root = cache_dir() / "wheelhouse"
    target = root / f"cp{PYTHON_VERSION.replace('.', '')}-{plat}-{key}"
    if (target / ".complete").is_file():
        progress(f"wheelhouse cached: {target}")
        return target
    root.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    # A partial directory from an interrupted run is reused: pip skips files it already has.
    partial.mkdir(exist_ok=True)
    abi = f"cp{PYTHON_VERSION.replace('.', '')}"
    command = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:",
        *(arg for tag in wheel_platforms(machine) for arg in ("--platform", tag)),
        "--python-version", PYTHON_VERSION,
        "--implementation", "cp", "--abi", abi,
        "--disable-pip-version-check", "--progress-bar", "off",
        "--dest", str(partial), "-r", str(requirements),
    ]  # fmt: skip
    progress(f"downloading {len(pins)} wheels for CPython {PYTHON_VERSION} on {plat}")
    _run(command, progress=progress, what="pip download")
    found = {_wheel_name(w.name) for w in partial.glob("*.whl")}
    missing = sorted(set(pins) - found)
    if missing:
        raise ImageBuildError(f"pip download left out wheels for: {', '.join(missing)}")
    (partial / ".complete").write_text(json.dumps(pins, sort_keys=True) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    for old in root.iterdir():
        # Older pin sets are dead weight once a newer one is complete.
        if old != target and old.is_dir() and not old.name.endswith(".partial"):
            shutil.rmtree(old, ignore_errors=True)
    return target


def _wheel_name(filename: str) -> str:
    return normalize_name(filename.split("-", 1)[0])


# --------------------------------------------------------------------------------------------
# Base image


def choose_base_image(client: Any, *, progress: Progress = print) -> str:
    """The base to build FROM: an override, ``python:3.11-slim``, or the debootstrap base.

    ``$INTERP_BASE_IMAGE`` forces a base (it must be present or pullable). Otherwise the
    default base is used if present or pullable within ``$INTERP_BASE_PULL_TIMEOUT_S``
    (30 s); failing that, the Debian base is made locally.
    """
    override = os.environ.get(ENV_BASE_IMAGE)
    if override:
        if not _have_or_pull(client, override, progress, _pull_timeout()):
            raise ImageBuildError(f"base image {override!r} ({ENV_BASE_IMAGE}) not available")
        return override
    if _have_or_pull(client, DEFAULT_BASE_IMAGE, progress, _pull_timeout()):
        return DEFAULT_BASE_IMAGE
    progress(f"{DEFAULT_BASE_IMAGE} cannot be pulled; using a Debian {DEBIAN_SUITE} base")
    return ensure_debian_base(client, progress=progress)


def _pull_timeout() -> float:
    raw = os.environ.get(ENV_PULL_TIMEOUT)
    try:
        return float(raw) if raw else _DEFAULT_PULL_TIMEOUT_S
    except ValueError:
        raise ImageBuildError(f"{ENV_PULL_TIMEOUT} is not a number: {raw!r}") from None


def _have_or_pull(client: Any, image: str, progress: Progress, timeout: float) -> bool:
    try:
        client.api.inspect_image(image)
        progress(f"base {image} present")
        return True
    except docker.errors.ImageNotFound:
        pass
    progress(f"pulling {image} (giving up after {timeout:.0f}s without progress)")
    repository, tag = docker.utils.parse_repository_tag(image)
    # A client of its own, for the short timeout: a registry that does not answer must not
    # hold the build for the engine client's ten minutes.
    puller = docker.from_env(timeout=timeout).api
    try:
        last = ""
        for event in puller.pull(repository, tag=tag or "latest", stream=True, decode=True):
            if "error" in event:
                progress(f"pull failed: {event['error']}")
                return False
            status = event.get("status", "")
            # Per-layer byte counters would flood the log; report state changes only.
            if status and status not in {"Downloading", "Extracting", last}:
                progress(f"  {status} {event.get('id', '')}".rstrip())
            last = status
    except Exception as exc:
        # Whatever went wrong (DNS, TLS, timeout, auth), it means: no usable registry.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        progress(f"pull failed: {first}")
        return False
    finally:
        puller.close()
    try:
        client.api.inspect_image(image)
    except docker.errors.ImageNotFound:
        return False
    return True


def base_recipe_hash() -> str:
    """Hash of how the Debian base is made; its image carries it as a label."""
    recipe = {
        "recipe": _BASE_RECIPE_VERSION,
        "suite": DEBIAN_SUITE,
        "variant": "minbase",
        "packages": sorted(DEBIAN_PACKAGES),
        "trim": sorted(_ROOTFS_TRIM),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def ensure_debian_base(
    client: Any, *, progress: Progress = print, image: str = FALLBACK_BASE_IMAGE
) -> str:
    """Make (or reuse) the debootstrap base image and return its reference.

    The root filesystem tarball is cached, so after the first run this is an import at most.

    Raises:
        ImageBuildError: not root, no debootstrap to be had, no mirror, or debootstrap failed.
    """
    recipe = base_recipe_hash()
    try:
        labels = (client.api.inspect_image(image).get("Config") or {}).get("Labels") or {}
        if labels.get(LABEL_BASE_RECIPE) == recipe:
            progress(f"base {image} present")
            return image
    except docker.errors.ImageNotFound:
        pass
    tarball = cache_dir() / "base" / f"{DEBIAN_SUITE}-{recipe[:16]}.tar"
    if tarball.is_file():
        progress(f"root filesystem cached: {tarball}")
    else:
        _make_rootfs_tarball(tarball, progress)
    progress(f"importing {tarball.name} as {image}")
    repository, _, tag = image.rpartition(":")
    changes = [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        f"LABEL {LABEL_BASE_RECIPE}={recipe}",
        'CMD ["/bin/bash"]',
    ]
    # A plain file object is sent with a Content-Length; the SDK's chunked mode
    # (stream_src=True) is rejected by the engine with "invalid byte in chunk length".
    with tarball.open("rb") as stream:
        client.api.import_image(src=stream, repository=repository, tag=tag, changes=changes)
    return image


def _make_rootfs_tarball(tarball: Path, progress: Progress) -> None:
    if os.geteuid() != 0:
        raise ImageBuildError(
            f"making the Debian base needs root (debootstrap). Run `{BUILD_COMMAND}` as root "
            f"once, or set {ENV_BASE_IMAGE} to a present CPython {PYTHON_VERSION} Debian image"
        )
    debootstrap = _ensure_debootstrap(progress)
    source = debian_mirror(DEBIAN_SUITE)
    work = tarball.parent
    work.mkdir(parents=True, exist_ok=True)
    debs = cache_dir() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rootfs-", dir=work) as tmp:
        rootfs = Path(tmp) / "rootfs"
        command = [
            debootstrap,
            "--variant=minbase",
            f"--include={','.join(DEBIAN_PACKAGES)}",
            f"--cache-dir={debs}",
        ]
        if source.keyring is not None:
            command.append(f"--keyring={source.keyring}")
        command += [DEBIAN_SUITE, str(rootfs), source.uri]
        progress(f"debootstrap {DEBIAN_SUITE} from {source.uri} (about a minute)")
        _run(command, progress=progress, what="debootstrap", quiet_prefixes=("I: ",))
        for relative in _ROOTFS_TRIM:
            target = rootfs / relative
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
        for lists in (rootfs / "var/lib/apt/lists").glob("*"):
            if lists.is_file():
                lists.unlink()
        partial = tarball.with_suffix(".tar.partial")
        progress(f"packing {tarball}")
        _run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), "."],
            progress=progress,
            what="tar",
        )
        partial.rename(tarball)


def _ensure_debootstrap(progress: Progress) -> str:
    found = shutil.which("debootstrap")
    if found:
        return found
    if shutil.which("apt-get") is None:
        raise ImageBuildError("debootstrap is missing and there is no apt-get to install it")
    progress("installing debootstrap from the Debian archive")
    install = ["apt-get", "install", "-y", "--no-install-recommends", "debootstrap"]
    try:
        _run(install, progress=progress, what="apt-get install")
    except ImageBuildError:
        # Fresh machines often have empty package lists; refresh once and retry.
        _run(["apt-get", "update"], progress=progress, what="apt-get update")
        _run(install, progress=progress, what="apt-get install")
    found = shutil.which("debootstrap")
    if not found:
        raise ImageBuildError("debootstrap still not on PATH after installing it")
    return found


# --------------------------------------------------------------------------------------------
# Debian mirror from the apt configuration


@dataclass(frozen=True)
class AptSource:
    """One ``deb`` source of the apt configuration."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...] = ()
    keyring: Path | None = None


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Parse a ``*.sources`` file (deb822 format); disabled and ``deb-src`` stanzas are skipped."""
    sources: list[AptSource] = []
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key: str | None = None
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0] in " \t" and key is not None:
                fields[key] += "\n" + line.strip()  # continuation line
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").strip().lower() in {"no", "false", "0"}:
            continue
        signed_by = fields.get("signed-by", "").strip()
        keyring = Path(signed_by) if signed_by.startswith("/") and "\n" not in signed_by else None
        for uri in fields.get("uris", "").split():
            sources.append(
                AptSource(
                    uri=uri,
                    suites=tuple(fields.get("suites", "").split()),
                    components=tuple(fields.get("components", "").split()),
                    keyring=keyring,
                )
            )
    return sources


def parse_sources_list(text: str) -> list[AptSource]:
    """Parse one-line-style ``sources.list`` text; only ``deb`` lines count."""
    sources: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb ") and not line.startswith("deb\t"):
            continue
        rest = line[3:].strip()
        options: dict[str, str] = {}
        if rest.startswith("["):
            inside, _, rest = rest[1:].partition("]")
            for option in inside.split():
                name, _, value = option.partition("=")
                options[name] = value
        words = rest.split()
        if len(words) < 2:
            continue
        signed_by = options.get("signed-by", "")
        sources.append(
            AptSource(
                uri=words[0],
                suites=(words[1],),
                components=tuple(words[2:]),
                keyring=Path(signed_by) if signed_by.startswith("/") else None,
            )
        )
    return sources


def apt_sources(apt_dir: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every ``deb`` source configured under ``apt_dir``, deb822 files first."""
    found: list[AptSource] = []
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        found += parse_deb822_sources(_read(path))
    for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]:
        found += parse_sources_list(_read(path))
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def debian_mirror(
    suite: str = DEBIAN_SUITE,
    *,
    apt_dir: Path = Path("/etc/apt"),
    environ: Mapping[str, str] | None = None,
) -> AptSource:
    """The Debian archive to debootstrap ``suite`` from.

    ``$INTERP_DEBIAN_MIRROR`` wins; otherwise the first apt source of this machine that
    serves ``suite`` itself (not ``-security`` or ``-updates``).

    Raises:
        ImageBuildError: nothing configured serves ``suite``.
    """
    env = os.environ if environ is None else environ
    default_keyring = _DEBIAN_KEYRING if _DEBIAN_KEYRING.is_file() else None
    if env.get(ENV_DEBIAN_MIRROR):
        return AptSource(uri=env[ENV_DEBIAN_MIRROR], suites=(suite,), keyring=default_keyring)
    for source in apt_sources(apt_dir):
        if suite in source.suites and source.uri.startswith(("http://", "https://", "file:")):
            keyring = source.keyring if source.keyring and source.keyring.is_file() else None
            return AptSource(
                uri=source.uri,
                suites=source.suites,
                components=source.components,
                keyring=keyring or default_keyring,
            )
    raise ImageBuildError(
        f"no apt source for Debian {suite} under {apt_dir}; set {ENV_DEBIAN_MIRROR} to a "
        f"Debian archive URL"
    )


# --------------------------------------------------------------------------------------------
# Subprocesses


def _run(
    command: list[str],
    *,
    progress: Progress,
    what: str,
    quiet_prefixes: Iterable[str] = (),
) -> None:
    """Run ``command``, passing its output lines to ``progress``; raise if it fails.

    Lines starting with one of ``quiet_prefixes`` are counted instead of shown, except the
    last few, which are shown if the command fails.
    """
    quiet = tuple(quiet_prefixes)
    tail: list[str] = []
    hidden = 0
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in _lines(proc.stdout):
            tail = [*tail[-19:], line]
            if quiet and line.startswith(quiet):
                hidden += 1
                if hidden % 50 == 0:
                    progress(f"  ... {what}: {line}")
                continue
            progress(f"  {line}")
        code = proc.wait()
    if code != 0:
        shown = "\n".join(tail)
        raise ImageBuildError(f"{what} failed with exit code {code}:\n{shown}")


def _lines(stream: Iterable[str]) -> Iterator[str]:
    for line in stream:
        stripped = line.rstrip()
        if stripped:
            yield stripped
