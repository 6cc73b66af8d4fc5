"""envd's ``filesystem.Filesystem`` unary calls on the session's workspace.

``Stat`` (the SDK's ``files.exists`` and ``get_info``), ``ListDir`` (``files.list``),
``MakeDir``, ``Move`` (``files.rename``) and ``Remove``. Paths map as for ``/files``:
``/home/user/...`` and relative paths into the workspace, anything else is refused
(``invalid_argument``), and the workspace layer walks them without following symlinks.
Entries carry name, type, path, size and modification time; mode, permissions, owner and
group are not reported, and symlinks and special files have no type (``files.list``
leaves them out). Watching (``WatchDir``, ``CreateWatcher``, ...) is not served.
"""

from __future__ import annotations

import asyncio
import posixpath
from collections.abc import Callable
from typing import Any

from interpreter.api.e2b.connect_rpc import ConnectHandler
from interpreter.api.e2b.files import HOME, workspace_path
from interpreter.errors import BadRequest, Conflict, PayloadTooLarge, ValidationFailed
from interpreter.models import FileEntry
from interpreter.workspace import Workspace

SERVICE = "filesystem.Filesystem"
#: The most entries one ``ListDir`` answers (deep trees: list a subdirectory).
MAX_ENTRIES = 100_000
FILE_TYPES = {"file": "FILE_TYPE_FILE", "directory": "FILE_TYPE_DIRECTORY"}


class AlreadyExists(Conflict):
    """``MakeDir`` of a directory that exists (the SDK's ``make_dir`` returns False)."""

    code = "already_exists"


def entry_json(entry: FileEntry) -> dict[str, Any]:
    """A workspace entry as envd's ``EntryInfo`` (proto JSON: int64 as a string)."""
    item: dict[str, Any] = {
        "name": entry.name or posixpath.basename(HOME),
        "path": f"{HOME}/{entry.path}" if entry.path else HOME,
        "size": str(entry.size),
        "modifiedTime": entry.modified_at.isoformat().replace("+00:00", "Z"),
    }
    if entry.type in FILE_TYPES:
        item["type"] = FILE_TYPES[entry.type]
    return item


def text_field(message: dict[str, Any], name: str) -> str:
    value = message.get(name, "")
    if not isinstance(value, str):
        raise ValidationFailed(f"'{name}' must be a string.")
    return value


def stat(ws: Workspace, message: dict[str, Any]) -> dict[str, Any]:
    path = workspace_path(text_field(message, "path"), home=True)
    return {"entry": entry_json(ws.stat(path))}


def list_dir(ws: Workspace, message: dict[str, Any]) -> dict[str, Any]:
    given = text_field(message, "path")
    path = workspace_path(given, home=True)
    depth = message.get("depth", 0)
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ValidationFailed("'depth' must be a non-negative integer.")
    if ws.stat(path).type != "directory":
        raise BadRequest(f"'{given[:200]}' is not a directory.")
    entries: list[dict[str, Any]] = []
    level = [path]
    for _ in range(max(1, depth)):
        below: list[str] = []
        for directory in level:
            for entry in ws.listing(directory).entries:
                entries.append(entry_json(entry))
                if entry.type == "directory":
                    below.append(entry.path)
            if len(entries) > MAX_ENTRIES:
                raise PayloadTooLarge(
                    f"'{given[:200]}' holds more than {MAX_ENTRIES} entries to depth {depth}; "
                    "list a subdirectory, or with a smaller depth."
                )
        level = below
    return {"entries": entries}


def make_dir(ws: Workspace, message: dict[str, Any]) -> dict[str, Any]:
    given = text_field(message, "path")
    path = workspace_path(given)
    if not ws.make_dir(path):
        raise AlreadyExists(f"Directory '{given[:200]}' already exists.")
    return {"entry": entry_json(ws.stat(path))}


def move(ws: Workspace, message: dict[str, Any]) -> dict[str, Any]:
    source = workspace_path(text_field(message, "source"))
    destination = workspace_path(text_field(message, "destination"))
    ws.rename(source, destination)
    return {"entry": entry_json(ws.stat(destination))}


def remove(ws: Workspace, message: dict[str, Any]) -> dict[str, Any]:
    ws.delete(workspace_path(text_field(message, "path")))
    return {}


#: Method name -> what it does (run off the event loop).
METHODS: dict[str, Callable[[Workspace, dict[str, Any]], dict[str, Any]]] = {
    "Stat": stat,
    "ListDir": list_dir,
    "MakeDir": make_dir,
    "Move": move,
    "Remove": remove,
}


class FilesystemHandler(ConnectHandler):
    async def post(self, method: str) -> None:
        message = self.message()
        sandbox = await self.sandbox()
        workspace = await self.broker.workspace(self.owner, sandbox.id)
        self.answer(await asyncio.to_thread(METHODS[method], workspace, message))
