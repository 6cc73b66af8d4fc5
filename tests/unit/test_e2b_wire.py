"""The E2B surface's wire details that need no server: what of a cut stream is still owed
to the client, reason phrases, and Connect's end of stream."""

from __future__ import annotations

import json
import struct

from interpreter.api.e2b.base import REASON_CHARS, reason_phrase
from interpreter.api.e2b.connect_rpc import end_stream, streaming_codec
from interpreter.api.e2b.results import unstreamed
from interpreter.execution import cut_around, cut_middle

URL = "/v1/sessions/s/artifacts/a"


def test_a_spilled_streams_tail_is_owed_after_a_mark_counting_what_never_streamed() -> None:
    # 1000 characters streamed live, 9000 more went to disk; the record keeps 50 + 50.
    head, tail = "h" * 1000, "t" * 40 + "END\n"
    final = cut_around(head, "x" * 5000 + tail, 10_000, 100, URL)
    kept_tail = ("x" * 5000 + tail)[-50:]
    assert unstreamed(final, streamed=1000) == (
        f"\n[... 8950 characters omitted; full text in the artifact {URL}]\n{kept_tail}"
    )


def test_nothing_is_owed_for_a_cut_of_text_that_all_streamed() -> None:
    text = "a" * 500 + "z" * 500
    assert unstreamed(cut_middle(text, 100, URL), streamed=1000) == ""
    assert unstreamed("short and whole\n", streamed=16) == ""


def test_only_the_unseen_end_of_the_tail_is_owed_when_most_of_it_streamed() -> None:
    # 990 of 1000 characters streamed: the last 10 of the record's tail are owed, no mark.
    final = cut_around("h" * 990, "0123456789" * 5, 1000, 100, URL)
    assert unstreamed(final, streamed=990) == "0123456789"


def test_reason_phrases_are_one_line_of_safe_ascii() -> None:
    assert reason_phrase("Language 'js' is not supported.") == "Language 'js' is not supported."
    assert reason_phrase("a\nb\tc  d") == "a b c d"
    assert reason_phrase("caf\u00e9 <script>") == "caf? ?script?"
    assert len(reason_phrase("x" * 1000)) == REASON_CHARS
    assert reason_phrase("") == "Error"


def test_a_streaming_call_ends_with_connects_end_of_stream_envelope() -> None:
    assert streaming_codec("application/connect+json; charset=utf-8") == "json"
    assert streaming_codec("application/connect+proto") == "proto"
    assert streaming_codec("application/json") is None
    frame = end_stream("unimplemented", "process.Process/Start is not supported")
    flags, size = struct.unpack(">BI", frame[:5])
    assert flags == 0b10 and size == len(frame) - 5
    assert json.loads(frame[5:]) == {
        "error": {"code": "unimplemented", "message": "process.Process/Start is not supported"}
    }
