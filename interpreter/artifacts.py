"""Content-addressed artifact storage for one session (images, big outputs, full texts).

Artifacts are named by the SHA-256 of their bytes, so the same plot stored twice is one file
and a URL never changes meaning. Names come from the server, never from the kernel (H-53).
All file I/O here is synchronous; the session calls it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from pathlib import Path

from interpreter.errors import ArtifactNotFound
from interpreter.mime import is_binary
from interpreter.models import ArtifactRef

_ID_RE = re.compile(r"^[0-9a-f]{64}$")
_MIME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$")


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


class ArtifactStore:
    """Artifacts of one session under ``root`` (``<session-dir>/artifacts``)."""

    def __init__(self, root: Path, session_id: str) -> None:
        self.root = root
        self.session_id = session_id

    def put(self, data: bytes, mime: str) -> ArtifactRef:
        """Store ``data`` (idempotent) and return its reference."""
        mime = mime.lower() if _MIME_RE.match(mime.lower()) else "application/octet-stream"
        digest = hashlib.sha256(data).hexdigest()
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / digest
        if not path.exists():
            tmp = self.root / f".{digest}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            meta = self.root / f"{digest}.json"
            meta.write_text(json.dumps({"mime": mime, "size": len(data)}))
        return ArtifactRef(
            id=digest, mime=mime, size=len(data), url=artifact_url(self.session_id, digest)
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
