"""The broker's session reads real signed messages as jupyter_client's does, minus the dates.

Messages are made and signed by a stock jupyter_client ``Session`` with the broker's key and
read both by a stock ``Session`` and by :class:`BrokerSession`: the results are equal once
the stock session's dates are written back as text, and every forged, unsigned, replayed or
truncated message is refused as the stock session refuses it.
"""

from __future__ import annotations

import json
import re
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import zmq
import zmq.asyncio
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.session import Session

from interpreter.execution import ExecutionRecorder, header_date
from interpreter.kernel import stop_channels
from interpreter.wire import BrokerSession

KEY = b"a-test-key-of-the-broker"
MESSAGES = Path(__file__).parent.parent / "messages"
CANONICAL = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")


def kernel() -> Session:
    """The kernel's side: signs what it sends with the shared key."""
    return Session(key=KEY, session="kernel-session", username="kernel")


def stock() -> Session:
    return Session(key=KEY)


def broker() -> BrokerSession:
    return BrokerSession(key=KEY)


def wire(session: Session, msg: dict[str, Any], buffers: list[bytes] | None = None) -> list[bytes]:
    """``msg`` as the frames the broker reads after the routing identities (binary buffers
    follow the signed frames unsigned, as ``Session.send`` appends them)."""
    frames = session.serialize(msg, ident=[b"kernel"])
    _, rest = session.feed_identities(frames)
    return [*rest, *(buffers or [])]


def as_text(obj: Any) -> Any:
    """``obj`` with every ``datetime`` written as jupyter_client writes it on the wire."""
    if isinstance(obj, dict):
        return {k: as_text(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [as_text(v) for v in obj]
    if isinstance(obj, datetime):
        return obj.isoformat().replace("+00:00", "Z")
    return obj


def realistic() -> list[dict[str, Any]]:
    """status, execute_input, execute_result (with a buffer-less bundle), execute_reply,
    and a comm message with binary buffers, each the child of one execute_request."""
    k = kernel()
    request = Session(key=KEY).msg("execute_request", {"code": "40 + 2"})
    parent = request["header"]
    return [
        k.msg("status", {"execution_state": "busy"}, parent=parent),
        k.msg("execute_input", {"code": "40 + 2", "execution_count": 1}, parent=parent),
        k.msg(
            "execute_result",
            {"data": {"text/plain": "42"}, "metadata": {}, "execution_count": 1},
            parent=parent,
            metadata={"note": "2024-01-01T00:00:00Z is only text here"},
        ),
        k.msg(
            "execute_reply",
            {"status": "ok", "execution_count": 1, "user_expressions": {}, "payload": []},
            parent=parent,
            metadata={"started": "2024-05-06T07:08:09.123456Z", "status": "ok"},
        ),
        k.msg("comm_msg", {"comm_id": "c", "data": {}}, parent=parent),
    ]


def test_every_realistic_message_reads_as_the_stock_session_reads_it_with_text_dates() -> None:
    k = kernel()
    mine, theirs = broker(), stock()
    for msg in realistic():
        buffers = [b"\x00\x01binary", b"more"] if msg["msg_type"] == "comm_msg" else []
        frames = wire(k, msg, buffers)
        got = mine.deserialize(list(frames))
        expected = theirs.deserialize(list(frames))
        assert isinstance(expected["header"]["date"], datetime)
        assert isinstance(got["header"]["date"], str)
        assert isinstance(got["parent_header"]["date"], str)
        assert CANONICAL.fullmatch(got["header"]["date"])
        assert got == as_text(expected)
        assert list(got) == list(expected)  # the same keys, in the same order
        assert [bytes(b) for b in got["buffers"]] == buffers


def test_frames_not_copied_read_alike() -> None:
    """``copy=False``: the frames are ``zmq.Frame`` objects, buffers included."""
    k = kernel()
    msg = k.msg("display_data", {"data": {"text/plain": "x"}, "metadata": {}})
    rest = wire(k, msg, [b"raw-bytes"])
    zmq_frames = [zmq.Frame(part) for part in rest]
    got = broker().deserialize(zmq_frames, copy=False)
    expected = stock().deserialize([zmq.Frame(part) for part in rest], copy=False)
    assert got == as_text(expected)
    assert bytes(got["buffers"][0]) == b"raw-bytes"


def test_a_forged_signature_is_refused() -> None:
    frames = wire(kernel(), realistic()[0])
    forged = [b"0" * len(frames[0]), *frames[1:]]
    with pytest.raises(ValueError, match="Invalid Signature"):
        broker().deserialize(forged)
    # Signed with another key: refused too.
    other = Session(key=b"not-the-key")
    with pytest.raises(ValueError, match="Invalid Signature"):
        broker().deserialize(wire(other, realistic()[0]))
    # A signed frame changed after signing.
    tampered = [*frames[:4], json.dumps({"execution_state": "idle"}).encode()]
    with pytest.raises(ValueError, match="Invalid Signature"):
        broker().deserialize(tampered)


def test_an_unsigned_message_is_refused() -> None:
    unsigned = wire(Session(key=b""), realistic()[0])
    assert unsigned[0] == b""
    with pytest.raises(ValueError, match="Unsigned"):
        broker().deserialize(unsigned)


def test_a_replayed_message_is_refused() -> None:
    session = broker()
    frames = wire(kernel(), realistic()[1])
    session.deserialize(frames)
    assert frames[0] in session.digest_history
    with pytest.raises(ValueError, match="Duplicate Signature"):
        session.deserialize(list(frames))


def test_a_forged_signature_is_not_remembered() -> None:
    session = broker()
    frames = wire(kernel(), realistic()[0])
    with pytest.raises(ValueError):
        session.deserialize([b"f" * 64, *frames[1:]])
    assert not session.digest_history


def test_a_peek_neither_unpacks_the_content_nor_records_the_signature() -> None:
    session = broker()
    frames = wire(kernel(), realistic()[0])
    peeked = session.deserialize(frames, content=False)
    assert peeked["content"] == frames[4]
    assert not session.digest_history
    assert session.deserialize(frames)["content"] == {"execution_state": "busy"}


@pytest.mark.parametrize("count", [0, 1, 4])
def test_fewer_than_five_frames_are_refused(count: int) -> None:
    frames = wire(kernel(), realistic()[0])[:count]
    with pytest.raises(TypeError, match="at least 5"):
        broker().deserialize(frames)


def test_a_protocol_4_message_is_still_adapted() -> None:
    """A kernel of protocol 4 (no ``version`` in its header) sends ``pyout``: it arrives
    as protocol 5's ``execute_result``, as with the stock session."""
    k = kernel()
    msg = k.msg("pyout", {"data": {"text/plain": "42"}, "metadata": {}, "execution_count": 1})
    del msg["header"]["version"]
    frames = wire(k, msg)
    got = broker().deserialize(frames)
    assert got["msg_type"] == got["header"]["msg_type"] == "execute_result"
    assert got["header"]["version"] == "5.0"
    assert got == as_text(stock().deserialize(list(frames)))


def test_a_protocol_5_header_without_a_date_gets_the_time_of_reading() -> None:
    k = kernel()
    msg = k.msg("status", {"execution_state": "idle"})
    del msg["header"]["date"]
    before = datetime.now(UTC)
    got = broker().deserialize(wire(k, msg))
    assert CANONICAL.fullmatch(got["header"]["date"])
    read = datetime.fromisoformat(got["header"]["date"].replace("Z", "+00:00"))
    assert before <= read <= datetime.now(UTC)


def test_a_hostile_header_is_refused() -> None:
    k = kernel()
    for header in ([], "text", {"msg_type": "status"}):
        parts = [k.pack(header), k.pack({}), k.pack({}), k.pack({})]
        with pytest.raises((TypeError, KeyError)):
            broker().deserialize([k.sign(parts), *parts])


def test_a_signed_message_whose_parts_are_not_objects_is_refused() -> None:
    """Code in the kernel holds the key: a signed parent header, metadata or content that is
    no JSON object is refused here, before any reader takes it for one."""
    k = kernel()
    header = {"msg_id": "m", "msg_type": "status", "version": "5.3"}
    for position in (1, 2, 3):
        for value in ([1], "text", 7, None):
            objects: list[Any] = [header, {}, {}, {"execution_state": "idle"}]
            objects[position] = value
            parts = [k.pack(o) for o in objects]
            with pytest.raises(TypeError, match="is not an object"):
                broker().deserialize([k.sign(parts), *parts])
    # A peek leaves the content packed, unchecked.
    parts = [k.pack(o) for o in (header, {}, {}, [1])]
    assert broker().deserialize([k.sign(parts), *parts], content=False)["content"] == parts[3]


def timing(session: Session, messages: list[dict[str, Any]], reply: dict[str, Any]) -> Any:
    """The timing an execution records from ``messages`` read by ``session``."""
    k = kernel()
    rec = ExecutionRecorder("e")
    for msg in messages:
        rec.feed_iopub(session.deserialize(wire(k, msg)))
    rec.feed_reply(session.deserialize(wire(k, reply)))
    return rec.timing


@pytest.mark.parametrize(
    "date",
    [
        "2024-05-06T07:08:09.123456Z",  # what ipykernel sends
        "2024-05-06T07:08:09Z",  # ... on a whole second
        "2024-05-06T07:08:09.123456+00:00",
        "2024-05-06T07:08:09.120+02:00",  # other precision, other zone
        "2024-05-06T07:08:09.000000Z",
        "2024-05-06T07:08:09",  # no zone: local time
        "yesterday",  # not a date at all
    ],
)
def test_the_recorded_timing_text_is_what_the_stock_session_gave(date: str) -> None:
    """Every key of an execution's timing, from the recorded messages of a real kernel
    (tests/messages) with their dates replaced by ``date``, is the same text whichever
    session read them."""
    data = json.loads((MESSAGES / "execute_result.json").read_text())
    for msg in [*data["iopub"], data["reply"]]:
        msg["header"]["date"] = date
    theirs = timing(stock(), data["iopub"], data["reply"])
    mine = timing(broker(), data["iopub"], data["reply"])
    assert mine == theirs
    assert len(mine) == 5


def test_recorded_messages_keep_their_timing() -> None:
    data = json.loads((MESSAGES / "execute_result.json").read_text())
    theirs = timing(stock(), data["iopub"], data["reply"])
    mine = timing(broker(), data["iopub"], data["reply"])
    assert mine == theirs
    assert all(CANONICAL.fullmatch(text) for text in mine.values())


def test_a_date_the_stock_session_refuses_is_not_kept() -> None:
    """``2024-02-30``: the stock session refuses the whole message; the broker's keeps
    the message and leaves that time out."""
    k = kernel()
    msg = k.msg("status", {"execution_state": "busy"})
    msg["header"]["date"] = "2024-02-30T00:00:00Z"
    with pytest.raises(ValueError):
        stock().deserialize(wire(k, msg))
    rec = ExecutionRecorder("e")
    rec.feed_iopub(broker().deserialize(wire(k, msg)))
    assert rec.busy_seen and rec.timing == {}
    assert header_date("2024-02-30T00:00:00Z") is None
    assert header_date(None) is None and header_date(5) == 5


@pytest.mark.parametrize(
    "date",
    [
        "2026-11-25T20:15:16.988123Z",
        "2026-11-25T20:15:16.988Z",
        "2026-11-25T20:15:16Z",
        "2026-11-25T20:15Z",
        "2026-11-25T20:15:16.988123+00:00",
        "2026-11-25T20:15:16.988123+05:30",
        "2026-11-25T20:15:16.988123",
        "2026-02-30T00:00:00.000000Z",
        "2026-11-25 20:15:16Z",
        "not a dateZ",
        "2026-W47-3T10:00:00Z",  # a week date: fromisoformat reads it, jupyter_client not
        "",
    ],
)
def test_header_dates_read_as_jupyter_client_reads_them(date: str) -> None:
    """The kernel's own form is parsed without jupyter_client's parser, to the same value;
    every other text goes through that parser."""
    from jupyter_client.jsonutil import parse_date

    try:
        theirs: object = parse_date(date)
    except ValueError:
        theirs = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a date without a zone: taken as local, warned
        assert header_date(date) == theirs


async def test_the_broker_client_runs_no_heartbeat_or_stdin_channel() -> None:
    """Started as the broker starts it and stopped as it stops it, a client never creates
    a heartbeat thread or a stdin socket. No kernel is needed: ZMQ connects lazily."""
    ctx = zmq.asyncio.Context()
    try:
        kc = AsyncKernelClient(context=ctx, session=broker())
        kc.load_connection_info(
            {
                "ip": "127.0.0.1",
                "transport": "tcp",
                "key": KEY.decode(),
                "shell_port": 1,
                "iopub_port": 2,
                "stdin_port": 3,
                "hb_port": 4,
                "control_port": 5,
            }
        )
        kc.start_channels(hb=False, stdin=False)
        assert kc.shell_channel.is_alive() and kc.control_channel.is_alive()
        stop_channels(kc)
        assert kc._hb_channel is None and kc._stdin_channel is None
        assert not kc.shell_channel.is_alive() and not kc.iopub_channel.is_alive()
        assert not kc.control_channel.is_alive()
        assert kc.allow_stdin is False
    finally:
        ctx.destroy(linger=0)
