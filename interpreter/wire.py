"""Reading kernel messages off the wire: every check of jupyter_client, less parsing.

jupyter_client's ``Session.deserialize`` turns each date of a message's header and parent
header into a ``datetime`` (a dateutil parse per date, two per message) and hands every
message to the protocol adapter, which changes nothing for a protocol 5 kernel. Together
they took 8-10 % of the event loop's CPU in profiles of busy sessions (issue 10). The broker
only ever keeps a few header dates, as ISO 8601 text (an execution's timing), and parses
just those (:func:`interpreter.execution.header_date`).

:class:`BrokerSession` checks a message exactly as strictly (docs/security.md H-34): at least
five frames, a signature present, not seen before (replay protection through the session's
digest history) and equal, in constant time, to the HMAC of the four signed frames. It then
leaves dates as the text the kernel sent and adapts only messages of an older protocol.
"""

from __future__ import annotations

import hmac
import pprint
from datetime import UTC, datetime
from typing import Any

from jupyter_client.adapter import adapt
from jupyter_client.session import Session

#: Frames of a message after its routing identities: signature, header, parent header,
#: metadata, content (binary buffers may follow).
MESSAGE_FRAMES = 5


def now_iso() -> str:
    """The current UTC time as jupyter_client writes message dates (``...Z``)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def is_protocol_5(header: dict[str, Any]) -> bool:
    """Whether ``header`` says the message follows protocol 5.x (no adaptation needed)."""
    version = header.get("version")
    return isinstance(version, str) and version.partition(".")[0] == "5"


class BrokerSession(Session):
    """A jupyter_client ``Session`` whose :meth:`deserialize` keeps dates as text."""

    def deserialize(
        self,
        msg_list: list[bytes] | list[Any],
        content: bool = True,
        copy: bool = True,
    ) -> dict[str, Any]:
        """The message dict of ``msg_list`` (``[signature, header, parent_header, metadata,
        content, *buffers]``), as jupyter_client's ``deserialize`` returns it, except that
        dates stay strings and a protocol 5 message is not adapted.

        ``content=False`` leaves the content packed and does not record the signature (a
        peek). ``copy=False`` means the frames are ``zmq.Frame`` objects.

        Raises:
            TypeError: fewer than five frames.
            ValueError: the signature is missing, already seen, or wrong; or a part is not
                valid for the unpacker.
        """
        if len(msg_list) < MESSAGE_FRAMES:
            raise TypeError(
                f"malformed message: {len(msg_list)} frames, at least {MESSAGE_FRAMES} needed"
            )
        frames: list[Any] = msg_list[:MESSAGE_FRAMES]
        head: list[bytes] = frames if copy else [bytes(frame.bytes) for frame in frames]
        signature, signed = head[0], head[1:]
        if self.auth is not None:
            self._verify(signature, signed, record=content)
        header = self.unpack(signed[0])
        message: dict[str, Any] = {
            "header": header,
            "msg_id": header["msg_id"],
            "msg_type": header["msg_type"],
            "parent_header": self.unpack(signed[1]),
            "metadata": self.unpack(signed[2]),
            "content": self.unpack(signed[3]) if content else signed[3],
            "buffers": _buffers(msg_list[MESSAGE_FRAMES:]),
        }
        # Signed is not well formed: code in the kernel holds the key (docs/security.md
        # H-34), and every reader of a message takes these parts for objects.
        for part in ("parent_header", "metadata", "content")[: 3 if content else 2]:
            if not isinstance(message[part], dict):
                raise TypeError(f"malformed message: its {part} is not an object")
        if self.debug:
            pprint.pprint(message)
        if not is_protocol_5(header):
            adapted: dict[str, Any] = adapt(message)
            return adapted
        if "date" not in header:
            header["date"] = now_iso()  # what the adapter would add (as text)
        return message

    def _verify(self, signature: bytes, signed: list[bytes], *, record: bool) -> None:
        """Refuse an unsigned, replayed or forged message; remember a good signature.

        A signature is recorded only once it is known good: forged ones cannot fill the
        history (which is culled at random when full) and push real ones out of it.
        """
        if not signature:
            raise ValueError("Unsigned Message")
        if signature in self.digest_history:
            raise ValueError(f"Duplicate Signature: {signature!r}")
        if not hmac.compare_digest(signature, self.sign(signed)):
            raise ValueError(f"Invalid Signature: {signature!r}")
        if record:
            self._add_digest(signature)


def _buffers(frames: list[Any]) -> list[memoryview]:
    """The binary buffers of a message, as memoryviews."""
    views = [memoryview(frame) for frame in frames]
    if views and views[0].shape is None:
        # An old pyzmq Frame's view has no shape (pyzmq #646): copy its bytes instead.
        views = [memoryview(bytes(frame.bytes)) for frame in frames]
    return views
