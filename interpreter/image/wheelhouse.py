"""The wheelhouse: every pinned package downloaded on the host, because pip inside the
build has no network; cached per requirements file."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from interpreter.image.inputs import (
    PYTHON_VERSION,
    ImageBuildError,
    Progress,
    cache_dir,
    normalize_name,
    read_pins,
    wheel_platform,
    wheel_platforms,
)
from interpreter.image.shell import run_logged

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
    run_logged(command, progress=progress, what="pip download")
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
