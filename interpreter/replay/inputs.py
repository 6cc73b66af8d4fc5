"""The input files a replayed notebook reads: from a local directory (``--files DIR``) or
from the workspace of a recorded session (``--from-session ID``), put into the replay's
session before its first cell runs (through the SDK only)."""

from __future__ import annotations

from pathlib import Path

from interpreter.client import Client, Session


def upload_directory(session: Session, directory: Path) -> list[str]:
    """Upload every file under ``directory`` to the same relative path in the session's
    workspace; returns the paths written, in order.

    Raises:
        NotADirectoryError: ``directory`` is not a directory.
    """
    if not directory.is_dir():
        raise NotADirectoryError(f"--files {directory}: not a directory")
    written = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = path.relative_to(directory).as_posix()
        with path.open("rb") as fh:
            session.upload(relative, fh)
        written.append(relative)
    return written


def copy_workspace(client: Client, source_id: str, session: Session) -> list[str]:
    """Copy every file of session ``source_id``'s workspace (open or closed: its files
    stay readable) into ``session``'s; returns the paths copied, in order."""
    source = client.get_session(source_id)
    copied = []
    pending = [""]
    while pending:
        listing = source.list_files(pending.pop(0))
        for entry in listing.entries:
            if entry.type == "directory":
                pending.append(entry.path)
            elif entry.type == "file":
                session.upload(entry.path, source.download(entry.path))
                copied.append(entry.path)
    return copied
