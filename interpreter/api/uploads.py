"""Receiving an upload: streamed to a temporary file in the workspace as it arrives.

The body never sits in memory: each piece tornado reads is written (off the loop) before
the next is read, so a slow disk slows the client instead of growing the broker. The
number of uploads received at once is capped per broker (503 with Retry-After past it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from interpreter.api.base import BaseHandler
from interpreter.broker import SessionBroker
from interpreter.errors import InterpreterError, TooManyUploads
from interpreter.upload import Upload

#: Clean-ups of abandoned uploads still running (referenced so they finish).
_cleanups: set[asyncio.Future[None]] = set()


def active_uploads(broker: SessionBroker) -> int:
    """Uploads the broker is receiving now (also the ``interp_uploads_receiving`` gauge)."""
    return broker.metrics.uploads_receiving


class UploadReceiver(BaseHandler):
    """A handler whose PUT body is a file for the workspace, streamed to disk."""

    body_limit_attr = "max_upload_bytes"
    _upload: Upload | None = None
    _counted = False
    _writing: asyncio.Future[None] | None = None

    async def prepare(self) -> None:  # type: ignore[override]  # tornado awaits either
        super().prepare()
        if self.request.method != "PUT" or self._rejected is not None or self._finished:
            return
        try:
            if active_uploads(self.broker) >= self.conf.max_concurrent_uploads:
                raise TooManyUploads(
                    f"The service already receives {self.conf.max_concurrent_uploads} uploads "
                    "at once; retry shortly.",
                    retry_after=2,
                )
            self.broker.metrics.uploads_receiving += 1
            self._counted = True
            workspace = await self.broker.workspace(self.owner, self.path_kwargs["session_id"])
            self._upload = await asyncio.to_thread(
                Upload, workspace, self.path_kwargs["path"], self.body_limit
            )
        except InterpreterError as exc:
            self._release()
            self._reject_after_body(exc)

    def data_received(self, chunk: bytes) -> Any:
        upload = self._upload
        if upload is None:
            return super().data_received(chunk)
        self._writing = asyncio.ensure_future(self._write(upload, chunk))
        return self._writing

    async def _write(self, upload: Upload, chunk: bytes) -> None:
        try:
            await asyncio.to_thread(upload.write, chunk)
        except InterpreterError as exc:
            self._upload = None
            await asyncio.to_thread(upload.abort)
            self._release()
            self.refuse_oversized_body(exc)

    def take_upload(self) -> Upload:
        """The received upload, for the PUT method to commit (once)."""
        upload = self._upload
        assert upload is not None
        self._upload = None
        return upload

    def _release(self) -> None:
        if self._counted:
            self._counted = False
            self.broker.metrics.uploads_receiving -= 1

    def _drop_upload(self) -> None:
        """Give up an upload that will not be committed (after any write in progress)."""
        upload, self._upload = self._upload, None
        self._release()
        if upload is None:
            return
        pending = self._writing

        async def drop() -> None:
            if pending is not None:
                await asyncio.gather(pending, return_exceptions=True)
            await asyncio.to_thread(upload.abort)

        task = asyncio.ensure_future(drop())
        _cleanups.add(task)
        task.add_done_callback(_cleanups.discard)

    def on_finish(self) -> None:
        self._drop_upload()

    def on_connection_close(self) -> None:
        self._drop_upload()
        super().on_connection_close()
