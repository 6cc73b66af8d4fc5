"""What ``Session.run()`` returns: the execution record plus helpers to reach its artifacts."""

from __future__ import annotations

import mimetypes
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

import anyio

from interpreter.client._errors import ExecutionError
from interpreter.mime import CHART_MIME, DATAFRAME_MIME, is_image
from interpreter.models import (
    ArtifactRef,
    ErrorInfo,
    Execution,
    ExecutionStatus,
    Output,
    PolicyResult,
)

A = TypeVar("A", bound="_ArtifactBase")


def _target_path(dest: str | os.PathLike[str], ref: ArtifactRef) -> Path:
    """``dest`` itself, or a file named after the artifact inside ``dest`` if it is a dir."""
    path = Path(dest)
    if path.is_dir():
        ext = mimetypes.guess_extension(ref.mime.split(";")[0].strip()) or ".bin"
        path = path / f"{ref.id[:16]}{ext}"
    return path


class _ArtifactBase:
    def __init__(self, ref: ArtifactRef) -> None:
        self.ref = ref

    @property
    def id(self) -> str:
        """Content hash that names the artifact."""
        return self.ref.id

    @property
    def mime(self) -> str:
        """MIME type, e.g. ``image/png``."""
        return self.ref.mime

    @property
    def size(self) -> int:
        """Size in bytes."""
        return self.ref.size

    @property
    def url(self) -> str:
        """URL of the bytes, relative to the service's base URL."""
        return self.ref.url

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.mime} {self.size} bytes {self.id[:12]}>"


class Artifact(_ArtifactBase):
    """A stored output (an image, a large table, a full log) of a run.

    Example:
        >>> result = session.run("import matplotlib.pyplot as plt; plt.plot([1, 2]); plt.show()")
        >>> result.images[0].save("plot.png")  # doctest: +SKIP
    """

    def __init__(self, ref: ArtifactRef, load: Callable[[], bytes]) -> None:
        super().__init__(ref)
        self._load = load

    def read(self) -> bytes:
        """Fetch the artifact's bytes from the service."""
        return self._load()

    def save(self, dest: str | os.PathLike[str]) -> Path:
        """Fetch the bytes and write them to ``dest`` (a file, or a directory to put it in).

        Returns:
            The path written.
        """
        path = _target_path(dest, self.ref)
        path.write_bytes(self.read())
        return path


class AsyncArtifact(_ArtifactBase):
    """The async twin of :class:`Artifact`: ``read`` and ``save`` are coroutines."""

    def __init__(self, ref: ArtifactRef, load: Callable[[], Awaitable[bytes]]) -> None:
        super().__init__(ref)
        self._load = load

    async def read(self) -> bytes:
        """Fetch the artifact's bytes from the service."""
        return await self._load()

    async def save(self, dest: str | os.PathLike[str]) -> Path:
        """Fetch the bytes and write them to ``dest`` (a file, or a directory to put it in)."""
        data = await self.read()
        path = _target_path(dest, self.ref)
        await anyio.to_thread.run_sync(path.write_bytes, data)
        return path


class _RunResultBase(Generic[A]):
    def __init__(self, execution: Execution, make_artifact: Callable[[ArtifactRef], A]) -> None:
        self.execution = execution
        self._make_artifact = make_artifact

    # -- the record -----------------------------------------------------------------

    @property
    def id(self) -> str:
        """Execution id; ``Session.execution(id)`` fetches it again."""
        return self.execution.id

    @property
    def status(self) -> ExecutionStatus:
        """``ok``, ``error``, ``timeout``, ``interrupted``, ``kernel_died`` or ``unknown``."""
        return self.execution.status

    @property
    def ok(self) -> bool:
        """True when the code ran to the end without raising."""
        return self.execution.status == "ok"

    @property
    def denied(self) -> bool:
        """True when the service's policy refused the code (it never ran); see ``policy``."""
        return self.execution.status == "denied"

    @property
    def policy(self) -> PolicyResult | None:
        """The policy's decision (rule, message, facts, approval); None without a policy."""
        return self.execution.policy

    @property
    def stdout(self) -> str:
        """Everything written to standard output (head and tail kept if it was huge)."""
        return self.execution.stdout

    @property
    def stderr(self) -> str:
        """Everything written to standard error."""
        return self.execution.stderr

    @property
    def outputs(self) -> list[Output]:
        """Rich outputs in order: displays and the result, each a MIME bundle."""
        return self.execution.outputs

    @property
    def error(self) -> ErrorInfo | None:
        """What the code raised (name, message, traceback), or None."""
        return self.execution.error

    @property
    def execution_count(self) -> int | None:
        """The ``In [n]`` number of this cell in the session's notebook."""
        return self.execution.execution_count

    @property
    def duration_ms(self) -> float | None:
        """Wall-clock run time in milliseconds."""
        return self.execution.duration_ms

    @property
    def state_lost(self) -> bool:
        """True when the kernel had to restart, so earlier variables are gone."""
        return self.execution.state_lost

    @property
    def reason(self) -> str | None:
        """Why the run ended abnormally (``timeout``, ``oom_killed``, ``exit:1``, ...), or None."""
        return self.execution.reason

    @property
    def generation(self) -> int | None:
        """The kernel generation that ran it: 1 for the first kernel, +1 at each restart.

        Pass it as ``generation=`` to ``interrupt`` or ``restart`` to act only on that kernel.
        """
        return self.execution.generation

    @property
    def truncated(self) -> bool:
        """True when stdout/stderr were cut; the full text is an artifact."""
        return self.execution.truncated

    # -- conveniences -------------------------------------------------------------------

    @property
    def result(self) -> Output | None:
        """The ``execute_result`` output (the value of the last expression), if any."""
        for output in self.execution.outputs:
            if output.type == "execute_result":
                return output
        return None

    @property
    def text(self) -> str | None:
        """``text/plain`` of the last expression's value: ``"2"`` for ``1 + 1``."""
        result = self.result
        if result is None:
            return None
        value = result.data.get("text/plain")
        if isinstance(value, list):  # nbformat allows multi-line strings as lists
            return "".join(str(v) for v in value)
        return value if isinstance(value, str) else None

    @property
    def artifacts(self) -> list[A]:
        """Every artifact of the run: images, large outputs, full texts of cut logs."""
        refs = [ref for output in self.execution.outputs for ref in output.artifacts]
        refs.extend(self.execution.artifacts)
        return [self._make_artifact(ref) for ref in refs]

    @property
    def images(self) -> list[A]:
        """Artifacts that are images (PNG, JPEG, SVG, ...), in output order."""
        return [a for a in self.artifacts if is_image(a.mime)]

    @property
    def dataframes(self) -> list[dict[str, Any]]:
        """Summaries of displayed pandas objects: shape, columns and dtypes, first rows."""
        return self._bundles(DATAFRAME_MIME)

    @property
    def charts(self) -> list[dict[str, Any]]:
        """Structured descriptions of drawn figures: kind, title, axes, series."""
        return self._bundles(CHART_MIME)

    def _bundles(self, mime: str) -> list[dict[str, Any]]:
        found = []
        for output in self.execution.outputs:
            value = output.data.get(mime)
            if isinstance(value, dict):
                found.append(value)
        return found

    def raise_for_error(self) -> None:
        """Raise :class:`ExecutionError` unless the status is ``ok``."""
        if not self.ok:
            raise ExecutionError(self.execution)

    def __repr__(self) -> str:
        text = self.text
        shown = f" text={text[:40]!r}" if text is not None else ""
        return f"<{type(self).__name__} {self.status} #{self.execution_count}{shown}>"


class RunResult(_RunResultBase[Artifact]):
    """The outcome of ``Session.run()``: output, errors, status and artifacts.

    Example:
        >>> r = session.run("x = 21\\nprint('hi')\\nx * 2")  # doctest: +SKIP
        >>> r.ok, r.stdout, r.text  # doctest: +SKIP
        (True, 'hi\\n', '42')
    """


class AsyncRunResult(_RunResultBase[AsyncArtifact]):
    """The outcome of ``AsyncSession.run()``; artifact helpers are coroutines."""
