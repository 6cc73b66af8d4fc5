"""Subprocesses of a build, with their output passed on line by line."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Iterator

from interpreter.image.inputs import ImageBuildError, Progress

# --------------------------------------------------------------------------------------------
# Subprocesses


def run_logged(
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
