"""Content-addressed artifact storage for one session (images, big outputs, full texts).

Artifacts are named by the SHA-256 of their bytes, so the same plot stored twice is one file
and a URL never changes meaning. Names come from the server, never from the kernel (H-53).
All file I/O here is synchronous; the session calls it through ``asyncio.to_thread``.

Files being written have names that start with a dot and end in ``.tmp`` (an artifact's own
temporary, or a stream's spill file: :mod:`interpreter.spill`); they are never served, and
:func:`remove_temporaries` removes what a broker that stopped mid-write left behind.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from interpreter.errors import ArtifactNotFound
from interpreter.mime import is_binary
from interpreter.models import ArtifactRef

_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_MIME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$")
#: Bytes read at a time when a file is stored (:meth:`ArtifactStore.put_file`).
CHUNK_BYTES = 1 << 20
#: Names of files still being written in an artifact directory.
TEMP_GLOB = ".*.tmp"


def artifact_url(session_id: str, artifact_id: str) -> str:
    return f"/v1/sessions/{session_id}/artifacts/{artifact_id}"


def decode_value(mime: str, value: object) -> bytes:
    """Bytes of a MIME-bundle value: base64 for binary types, UTF-8 text or JSON otherwise."""
    if isinstance(value, str):
        if is_binary(mime):
            try:
                return base64.b64decode(value, validate=False)
            except (binascii.Error, ValueError):
                return value.encode("utf-8")
        return value.encode("utf-8")
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


class ArtifactBudgetSpent(Exception):
    """A new artifact would take its store past its budget (``budget_bytes``)."""


class ArtifactStore:
    """Artifacts of one session under ``root`` (``<session-dir>/artifacts``).

    ``budget_bytes`` (0: none) bounds what :meth:`put` with ``budgeted`` adds: the bytes of
    the artifacts this object added, whatever their kind, counted from its creation (an
    artifact already there costs nothing).
    """

    def __init__(self, root: Path, session_id: str, budget_bytes: int = 0) -> None:
        self.root = root
        self.session_id = session_id
        self.budget_bytes = budget_bytes
        #: Bytes of the artifacts this object added (not those found on disk).
        self.added_bytes = 0

    def put(self, data: bytes, mime: str, *, budgeted: bool = False) -> ArtifactRef:
        """Store ``data`` (idempotent) and return its reference. With ``budgeted``, a new
        artifact past the budget raises :class:`ArtifactBudgetSpent` instead."""
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / digest
        if not path.exists():
            if budgeted and self.budget_bytes and self.added_bytes + len(data) > self.budget_bytes:
                raise ArtifactBudgetSpent(
                    f"{self.added_bytes} bytes of artifacts, budget {self.budget_bytes}"
                )
            tmp = self._temporary()
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            self._commit(tmp, digest, mime, len(data))
        return self._ref(digest, mime, len(data))

    def put_file(self, source: Path, mime: str, *, head: bytes = b"") -> ArtifactRef:
        """Store ``head`` followed by the bytes of the file ``source``, and consume the file.

        The file is read in chunks of :data:`CHUNK_BYTES` while it is hashed, never whole:
        without a ``head``, a file in this store's directory is hashed and then moved into
        place; otherwise ``head`` and the file are copied to a new file, and ``source`` is
        removed. Either way ``source`` is gone afterwards (also when the artifact existed).
        """
        digest = hashlib.sha256(head)
        size = len(head)
        if not head and source.parent.resolve() == self.root.resolve():
            with open(source, "rb") as src:
                while chunk := src.read(CHUNK_BYTES):
                    digest.update(chunk)
                    size += len(chunk)
                os.fsync(src.fileno())
            self._commit(source, digest.hexdigest(), mime, size)
        else:
            tmp = self._temporary()
            try:
                with open(tmp, "wb") as out, open(source, "rb") as src:
                    out.write(head)
                    while chunk := src.read(CHUNK_BYTES):
                        digest.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                    out.flush()
                    os.fsync(out.fileno())
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            self._commit(tmp, digest.hexdigest(), mime, size)
            source.unlink(missing_ok=True)
        return self._ref(digest.hexdigest(), mime, size)

    def _temporary(self) -> Path:
        """A new empty file in the store's directory, named as a temporary."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=".put-", suffix=".tmp", dir=self.root)
        os.close(fd)
        return Path(name)

    def _commit(self, tmp: Path, digest: str, mime: str, size: int) -> None:
        """Give the complete file ``tmp`` its name (or drop it: the artifact exists)."""
        path = self.root / digest
        if path.exists():
            tmp.unlink(missing_ok=True)
            return
        os.replace(tmp, path)
        self.added_bytes += size
        meta = self.root / f"{digest}.json"
        meta.write_text(json.dumps({"mime": _clean_mime(mime), "size": size}))

    def _ref(self, digest: str, mime: str, size: int) -> ArtifactRef:
        return ArtifactRef(
            id=digest, mime=_clean_mime(mime), size=size, url=artifact_url(self.session_id, digest)
        )

    def open(self, artifact_id: str) -> tuple[Path, str, int]:
        """Path, MIME type and size of an artifact; ArtifactNotFound if there is none."""
        if not _ID_RE.match(artifact_id):
            raise ArtifactNotFound(f"No artifact {artifact_id!r} in this session.")
        path = self.root / artifact_id
        try:
            meta = json.loads((self.root / f"{artifact_id}.json").read_text())
            size = path.stat().st_size
        except (OSError, ValueError) as exc:
            raise ArtifactNotFound(f"No artifact {artifact_id!r} in this session.") from exc
        mime = str(meta.get("mime", "application/octet-stream"))
        return path, mime, size


def _clean_mime(mime: str) -> str:
    lowered = mime.lower()
    return lowered if _MIME_RE.match(lowered) else "application/octet-stream"


def remove_temporaries(root: Path) -> int:
    """Remove the files a stopped broker left half-written in the artifact directory
    ``root`` (no broker may be writing there); returns how many."""
    removed = 0
    try:
        paths = list(root.glob(TEMP_GLOB))
    except OSError:
        return 0
    for path in paths:
        try:
            path.unlink()
            removed += 1
        except OSError:
            continue
    return removed
