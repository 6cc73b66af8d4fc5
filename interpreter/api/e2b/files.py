"""envd's file routes, on the session's workspace: ``GET``/``POST /files`` and ``/health``.

E2B paths are absolute in the sandbox (``/home/user/data.csv``) or relative to the user's
home. Here the home is the session's workspace, the kernel's working directory: both forms
map into it, and any other absolute path is refused (400), as ``/v1`` refuses paths that
leave the workspace. Uploads are ``application/octet-stream`` (one file, ``?path=``) or
``multipart/form-data`` (each part's file name is its path, or ``?path=`` for one file).
"""

from __future__ import annotations

import asyncio
import json
import posixpath

from tornado.httputil import HTTPFile, parse_body_arguments

from interpreter.api.e2b.base import SANDBOX_HEADER, E2BHandler
from interpreter.api.e2b.sandboxes import DEBUG_SANDBOX_ID
from interpreter.errors import BadRequest, InterpreterError, PathNotAllowed

HOME = "/home/user"


def workspace_path(path: str) -> str:
    """The workspace-relative path of an E2B path (400 outside the home directory)."""
    if not path or "\x00" in path:
        raise BadRequest("path must be a non-empty file path without NUL bytes.")
    if path.startswith("~/"):
        path = path[2:]
    if path.startswith("/"):
        normal = posixpath.normpath(path)
        if normal != HOME and not normal.startswith(HOME + "/"):
            raise PathNotAllowed(
                f"Path {path[:200]!r} is outside {HOME}: only the sandbox's home (the "
                "session's workspace) is reachable."
            )
        path = normal[len(HOME) :].lstrip("/")
    if not path:
        raise BadRequest(f"path names the home directory {HOME}, not a file.")
    return path


class FilesHandler(E2BHandler):
    body_limit_attr = "max_upload_bytes"

    async def get(self) -> None:
        sandbox = await self.sandbox()
        path = workspace_path(self.get_query_argument("path", ""))
        workspace = await self.broker.workspace(self.owner, sandbox.id)
        fh, size = await asyncio.to_thread(workspace.open_read, path)
        await self.send_file(fh, size)

    async def post(self) -> None:
        sandbox = await self.sandbox()
        query_path = self.get_query_argument("path", None)
        uploads = self._uploads(query_path)
        workspace = await self.broker.workspace(self.owner, sandbox.id)
        written = []
        for e2b_path, data in uploads:
            relative = workspace_path(e2b_path)
            await asyncio.to_thread(workspace.write, relative, [data])
            written.append(
                {"name": posixpath.basename(relative), "type": "file", "path": f"{HOME}/{relative}"}
            )
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(written))

    def _uploads(self, query_path: str | None) -> list[tuple[str, bytes]]:
        body = self.raw_body()
        content_type = self.request.headers.get("Content-Type", "")
        if content_type.startswith("multipart/form-data"):
            arguments: dict[str, list[bytes]] = {}
            files: dict[str, list[HTTPFile]] = {}
            parse_body_arguments(content_type, body, arguments, files, self.request.headers)
            parts = [part for group in files.values() for part in group]
            if not parts:
                raise BadRequest("The multipart body holds no file part.")
            if len(parts) == 1 and query_path:
                return [(query_path, parts[0].body)]
            return [(part.filename or "", part.body) for part in parts]
        if query_path is None:
            raise BadRequest("An octet-stream upload needs ?path=.")
        return [(query_path, body)]


class HealthHandler(E2BHandler):
    """envd's liveness: 204 while the sandbox runs, 502 once it was killed (as E2B)."""

    def check_auth(self) -> None:
        sandbox_id = self.request.headers.get(SANDBOX_HEADER)
        if sandbox_id and sandbox_id != DEBUG_SANDBOX_ID:
            super().check_auth()

    async def get(self) -> None:
        sandbox_id = self.request.headers.get(SANDBOX_HEADER)
        if sandbox_id and sandbox_id != DEBUG_SANDBOX_ID:
            try:
                sandbox = self.sandboxes.get(self.owner, sandbox_id, killed=True)
            except InterpreterError:
                sandbox = None
            if sandbox is None or not self.sandboxes.running(sandbox):
                self.set_status(502)
                self.finish(json.dumps({"code": 502, "message": "The sandbox is not running."}))
                return
        self.set_status(204)
        self.finish()
