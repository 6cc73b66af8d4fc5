"""Receiving an upload: streamed to a temporary file in the workspace as it arrives.

The body never sits in memory: each piece tornado reads is written (off the loop) before
the next is read, so a slow disk slows the client instead of growing the broker. A
gzip-encoded body (``Content-Encoding: gzip``) is undone piece by piece, its limit applying
to what comes out. The number of uploads received at once is capped per broker (503 with
Retry-After past it) and per API key, a share of that cap (429 with Retry-After past it:
one key's trickling uploads cannot hold every slot). Handlers say what receives the body
(:meth:`UploadReceiver.open_upload`: one file, or a multipart body of several) and commit
it in their method.
"""

from __future__ import annotations

import asyncio
from typing import Any, Generic, Protocol, TypeVar

from interpreter.api.base import BaseHandler
from interpreter.body_encoding import GzipDecoder, decoder_for
from interpreter.broker import SessionBroker
from interpreter.errors import InterpreterError, KeyUploadsFull, TooManyUploads
from interpreter.settings import ENV_PREFIX

#: Clean-ups of abandoned uploads still running (referenced so they finish).
_cleanups: set[asyncio.Future[None]] = set()


def active_uploads(broker: SessionBroker) -> int:
    """Uploads the broker is receiving now (also the ``interp_uploads_receiving`` gauge)."""
    return broker.metrics.uploads.held


class Receiving(Protocol):
    """Where an upload's bytes go as they arrive (synchronous: called in a worker thread)."""

    def write(self, chunk: bytes) -> None: ...

    def abort(self) -> None: ...


R = TypeVar("R", bound=Receiving)


class UploadReceiver(BaseHandler, Generic[R]):
    """A handler whose body (of :attr:`upload_method`) is streamed to disk as it arrives."""

    body_limit_attr = "max_upload_bytes"

    @property
    def holds_body(self) -> bool:  # type: ignore[override]
        """Only an upload streams to disk; another method's body is held like any other."""
        return self.request.method != self.upload_method

    upload_method = "PUT"
    _upload: R | None = None
    _decoder: GzipDecoder | None = None
    #: The key whose upload slot this request holds (None: it holds none).
    _counted: str | None = None
    _writing: asyncio.Future[None] | None = None

    async def open_upload(self) -> R:
        """What receives the body."""
        raise NotImplementedError

    async def prepare(self) -> None:  # type: ignore[override]  # tornado awaits either
        super().prepare()
        if (
            self.request.method != self.upload_method
            or self._rejected is not None
            or self._finished
        ):
            return
        try:
            self._take_slot()
            self._decoder = decoder_for(self.request.headers.get("Content-Encoding"))
            self._upload = await self.open_upload()
        except InterpreterError as exc:
            self._release()
            self._reject_after_body(exc)

    def _take_slot(self) -> None:
        """Count this upload against the broker's cap and its key's share of it."""
        slots, conf = self.broker.metrics.uploads, self.conf
        refusal = slots.refusal(
            self.owner,
            1,
            most=conf.max_concurrent_uploads,
            share=conf.max_concurrent_uploads_per_key,
        )
        if refusal == "key":
            raise KeyUploadsFull(
                f"This API key already sends {slots.of(self.owner)} uploads at once, its "
                f"share of the service's {conf.max_concurrent_uploads} "
                f"({ENV_PREFIX}MAX_CONCURRENT_UPLOADS_PER_KEY); retry once one of them is "
                "done.",
                retry_after=2,
            )
        if refusal == "service":
            raise TooManyUploads(
                f"The service already receives {conf.max_concurrent_uploads} uploads "
                "at once; retry shortly.",
                retry_after=2,
            )
        slots.take(self.owner, 1)
        self._counted = self.owner

    def data_received(self, chunk: bytes) -> Any:
        upload = self._upload
        if upload is None:
            return super().data_received(chunk)
        self._writing = asyncio.ensure_future(self._write(upload, chunk))
        return self._writing

    async def _write(self, upload: R, chunk: bytes) -> None:
        decoder = self._decoder
        try:
            if decoder is None:
                await asyncio.to_thread(upload.write, chunk)
            else:
                await asyncio.to_thread(_write_decoded, decoder, upload, chunk)
        except InterpreterError as exc:
            self._upload = None
            await asyncio.to_thread(upload.abort)
            self._release()
            self.refuse_oversized_body(exc)

    def take_upload(self) -> R:
        """The received upload, for the handler's method to commit (once); 400 when a
        gzip body ended early (the upload is then dropped)."""
        upload = self._upload
        assert upload is not None
        if self._decoder is not None:
            self._decoder.close()
        self._upload = None
        return upload

    def _release(self) -> None:
        if self._counted is not None:
            self.broker.metrics.uploads.give_back(self._counted, 1)
            self._counted = None

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
        super().on_finish()

    def on_connection_close(self) -> None:
        self._drop_upload()
        super().on_connection_close()


def _write_decoded(decoder: GzipDecoder, upload: Receiving, chunk: bytes) -> None:
    for piece in decoder.feed(chunk):
        upload.write(piece)
