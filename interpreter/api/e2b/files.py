"""envd's file routes, on the session's workspace: ``GET``/``POST /files`` and ``/health``.

E2B paths are absolute in the sandbox (``/home/user/data.csv``), relative to the user's
home, or start with ``~``. Here the home is the session's workspace, the kernel's working
directory: each form maps into it once cleaned as envd cleans it, and a path outside it is
refused (400), as ``/v1`` refuses paths that leave the workspace. Uploads are
``application/octet-stream`` (one file, ``?path=``) or ``multipart/form-data`` (each file
part's file name is its path, or ``?path=`` for one file), optionally gzip-encoded; either
way the body streams to disk as it arrives.
"""

from __future__ import annotations

import asyncio
import json
import posixpath

from interpreter import storage_floor
from interpreter.api.e2b.base import SANDBOX_HEADER, E2BHandler
from interpreter.api.e2b.sandboxes import DEBUG_SANDBOX_ID
from interpreter.api.uploads import Receiving, UploadReceiver
from interpreter.errors import BadRequest, InterpreterError, PathNotAllowed
from interpreter.form_upload import FormUpload
from interpreter.upload import Upload
from interpreter.workspace import file_path

HOME = "/home/user"


def workspace_path(path: str, *, home: bool = False) -> str:
    """The workspace-relative path of an E2B path (400 outside the home directory).
    ``home``: the home directory itself is allowed too (as ``""``).

    As envd does, ``~`` is the home directory, a relative path is taken from it, and the
    path is cleaned (``.``, ``..`` and repeated slashes resolved) before it is checked.
    """
    if not path or "\x00" in path:
        raise BadRequest("path must be a non-empty file path without NUL bytes.")
    given = path
    if path == "~" or path.startswith("~/"):
        path = HOME + path[1:]
    elif not path.startswith("/"):
        path = f"{HOME}/{path}"
    # One leading slash: normpath keeps two, as POSIX lets "//" mean something else.
    normal = posixpath.normpath("/" + path.lstrip("/"))
    if normal != HOME and not normal.startswith(HOME + "/"):
        raise PathNotAllowed(
            f"Path {given[:200]!r} is outside {HOME}: only the sandbox's home (the "
            "session's workspace) is reachable."
        )
    relative = normal[len(HOME) :].lstrip("/")
    if not relative and not home:
        raise BadRequest(f"path names the home directory {HOME}, not a file.")
    return relative


def _file_target(path: str) -> str:
    """The workspace path of an E2B path to write a file to: as :func:`workspace_path`,
    which cleans a trailing '/' away, but refused with one (it names a directory)."""
    return workspace_path(file_path(path))


class FilesHandler(E2BHandler, UploadReceiver[Receiving]):
    """``GET /files`` reads a file; ``POST /files`` writes one or several, streamed to disk
    as the body arrives (an octet-stream body, or each file part of a multipart one) and
    made visible together once the whole body is in."""

    upload_method = "POST"

    async def open_upload(self) -> Receiving:
        sandbox = await self.sandbox()
        query_path = self.get_query_argument("path", None)
        content_type = self.request.headers.get("Content-Type", "")
        workspace = await self.broker.workspace(self.owner, sandbox.id)
        if content_type.lower().startswith("multipart/"):
            return await asyncio.to_thread(
                FormUpload, workspace, content_type, self.body_limit, _file_target, query_path
            )
        if query_path is None:
            raise BadRequest(
                "An application/octet-stream upload needs ?path= (or send multipart/form-data "
                "with the path as each part's file name)."
            )
        return await asyncio.to_thread(Upload, workspace, _file_target(query_path), self.body_limit)

    async def get(self) -> None:
        sandbox = await self.sandbox()
        path = workspace_path(self.get_query_argument("path", ""))
        workspace = await self.broker.workspace(self.owner, sandbox.id)
        fh, size = await asyncio.to_thread(workspace.open_read, path)
        await self.send_file(fh, size)

    async def post(self) -> None:
        storage_floor.check(self.conf.data_dir, self.conf.min_free_mb)
        upload = self.take_upload()
        if isinstance(upload, FormUpload):
            entries = await asyncio.to_thread(upload.commit)
        else:
            assert isinstance(upload, Upload)
            entries = [await asyncio.to_thread(upload.commit)]
        written = [
            {"name": posixpath.basename(e.path), "type": "file", "path": f"{HOME}/{e.path}"}
            for e in entries
        ]
        self.set_header("Content-Type", "application/json; charset=utf-8")
        self.finish(json.dumps(written))


class HealthHandler(E2BHandler):
    """envd's liveness: 204 while the sandbox runs, 502 once it was killed (as E2B)."""

    def check_auth(self) -> None:
        sandbox_id = self.request.headers.get(SANDBOX_HEADER)
        if sandbox_id and sandbox_id != DEBUG_SANDBOX_ID:
            super().check_auth()

    async def get(self) -> None:
        sandbox_id = self.request.headers.get(SANDBOX_HEADER)
        if sandbox_id and sandbox_id != DEBUG_SANDBOX_ID:
            self.sandbox_id()  # an access token asks of its own sandbox only
            try:
                sandbox = self.sandboxes.get(self.owner, sandbox_id, killed=True)
            except InterpreterError:
                sandbox = None
            if sandbox is None or not self.sandboxes.running(sandbox):
                self.designed_error = True  # the SDK's is_running() asks this: no ERROR line
                self.set_status(502)
                self.finish(json.dumps({"code": 502, "message": "The sandbox is not running."}))
                return
        self.set_status(204)
        self.finish()
