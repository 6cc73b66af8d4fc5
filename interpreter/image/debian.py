"""The base image: ``python:3.11-slim`` when present or pullable, else a Debian root
filesystem made with ``debootstrap`` from this machine's apt mirror."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.utils

from interpreter.image.inputs import (
    BUILD_COMMAND,
    DEBIAN_PACKAGES,
    DEBIAN_SUITE,
    DEFAULT_BASE_IMAGE,
    ENV_BASE_IMAGE,
    ENV_DEBIAN_MIRROR,
    ENV_PULL_TIMEOUT,
    FALLBACK_BASE_IMAGE,
    LABEL_BASE_RECIPE,
    PYTHON_VERSION,
    ImageBuildError,
    Progress,
    cache_dir,
)
from interpreter.image.shell import run_logged

# --------------------------------------------------------------------------------------------
# Base image


_DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


_DEFAULT_PULL_TIMEOUT_S = 30.0


# Directories of the debootstrap root that data work never reads; copyright files stay.
_ROOTFS_TRIM = ("usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt/archives")


_BASE_RECIPE_VERSION = "1"


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
        run_logged(command, progress=progress, what="debootstrap", quiet_prefixes=("I: ",))
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
        run_logged(
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
        run_logged(install, progress=progress, what="apt-get install")
    except ImageBuildError:
        # Fresh machines often have empty package lists; refresh once and retry.
        run_logged(["apt-get", "update"], progress=progress, what="apt-get update")
        run_logged(install, progress=progress, what="apt-get install")
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
