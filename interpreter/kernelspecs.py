"""Where the kernelspecs of ``kernels/`` are, in a source checkout or an installed wheel."""

from __future__ import annotations

from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager

KERNEL_NAMES = {"local": "python3", "docker": "python3-docker"}


def kernels_dir() -> Path:
    """The directory holding ``python3/`` and ``python3-docker/`` kernelspecs."""
    source = Path(__file__).resolve().parent.parent / "kernels"
    if (source / "python3" / "kernel.json").is_file():
        return source
    import importlib.util

    spec = importlib.util.find_spec("interpreter_kernel")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The kernel-side package interpreter_kernel is not installed.")
    return Path(next(iter(spec.submodule_search_locations))) / "_kernelspecs"


def repo_root() -> Path | None:
    """The source checkout this package runs from, if any."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() else None


def kernel_spec_manager() -> KernelSpecManager:
    """A spec manager that sees only our kernelspecs (never the user's installed ones)."""
    return KernelSpecManager(kernel_dirs=[str(kernels_dir())], ensure_native_kernel=False)
