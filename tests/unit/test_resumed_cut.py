"""A cell a killed broker left running, whose kept output was already cut: the broker that
attaches it goes on from that cut text, and every later cut counts what the first left out.

The next broker fed the progress record's cut stdout (head, the dead broker's own notice,
tail) back as if the cell had printed it: the final cut counted only the characters it cut
again (139 in the API, 65 in the notebook, of millions printed), and the "full-text"
artifact was the re-fed 100 KB (found by an outside operations tester). Driven by a
recorded real-kernel stream message (``tests/messages``) with its text swapped, as
``test_late_cut.py`` is.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from interpreter.artifacts import ArtifactStore
from interpreter.execution import ExecutionRecorder, cut_middle, lost_cut, split_cut
from interpreter.models import Execution
from interpreter.outputs import OutputCapture
from tests.unit.test_late_cut import lines, nb_valid, recording, stream

BUDGET = 10_000
NOTICE = re.compile(r"\n\[\.\.\. (\d+) characters omitted; ([^\]]*)\]\n")
GAP = "\n[the service restarted here: what the cell printed meanwhile is missing]\n"


def shown(cut: str, whole: str) -> tuple[int, str]:
    """The count and the where of ``cut``'s one notice, checked: its head starts
    ``whole``, its tail ends it, and the count is every character between them."""
    (match,) = NOTICE.finditer(cut)
    head, tail = cut[: match.start()], cut[match.end() :]
    assert whole.startswith(head) and whole.endswith(tail), (head[-40:], tail[:40])
    count = int(match.group(1))
    assert count == len(whole) - len(head) - len(tail)
    return count, match.group(2)


def resumed(tmp_path: Path, saved: str, after: str) -> tuple[OutputCapture, Execution, list]:  # type: ignore[type-arg]
    """The next broker's recorder of the cell: the saved stdout seeded, the gap on
    stderr, then what the cell printed after it attached; finished."""
    data = recording()
    rec = ExecutionRecorder(data["msg_id"])
    cut = split_cut(saved)
    assert cut is not None
    rec.seed_cut("stdout", cut)
    rec.feed_iopub(stream("stderr", GAP))
    if after:
        rec.feed_iopub(stream("stdout", after))
    rec.feed_reply(data["reply"])
    cap = OutputCapture(
        ArtifactStore(tmp_path / "artifacts", "s_test"), inline_bytes=64_000, output_bytes=BUDGET
    )
    ex = Execution(id="ex_1", session_id="s_test", status="unknown", truncated=True)
    nb = asyncio.run(cap.finish(ex, rec, {}))
    return cap, ex, nb


def test_a_resumed_cut_stream_counts_what_the_dead_broker_left_out(tmp_path: Path) -> None:
    printed = lines(40_000)  # 320,000 characters before the kill
    # What the dead broker's last progress write kept (snapshot.output_so_far).
    saved = cut_middle(printed, BUDGET)
    assert "full text in the artifact ...]" in saved
    earlier = len(printed) - len(saved) + len(NOTICE.search(saved)[0])  # type: ignore[index]
    for after in ("", "more 1\nmore 2\n", "tail\n" * 3_000):
        _, ex, nb = resumed(tmp_path, saved, after)
        # The seeded text keeps the earlier head and the earlier tail's end as the cell
        # printed them; the count is of the characters really printed and not shown.
        count, where = shown(ex.stdout, printed + after)
        assert count >= len(printed) - BUDGET, count
        assert "full text is lost" in where and "artifact" not in where, where
        assert ex.truncated
        # No artifact calls the kept text the full text.
        assert not any(ref.mime == "text/plain" and "stdout" in ref.url for ref in ex.artifacts)
        assert all("full text in the artifact" not in o.get("text", "") for o in nb)
        # The notebook's first stdout output is the seeded text, cut as it was.
        first = next(o["text"] for o in nb if o.get("name") == "stdout")
        nb_count, nb_where = shown(first, printed)
        assert nb_where == where and nb_count == earlier
        if not after:
            # Nothing more to cut: the record says what the dead broker said.
            assert count == earlier
        nb_valid(nb)


def test_a_text_cut_twice_keeps_one_count(tmp_path: Path) -> None:
    """Killed again: the record's text has the lost form, which is read back the same."""
    printed = lines(40_000)
    _, first, _ = resumed(tmp_path, cut_middle(printed, BUDGET), "")
    _, again, _ = resumed(tmp_path, first.stdout, "end\n")
    count, where = shown(again.stdout, printed + "end\n")
    assert count >= shown(first.stdout, printed)[0] and "full text is lost" in where


def test_an_artifact_of_an_earlier_shutdown_stays_named(tmp_path: Path) -> None:
    """A broker that shut down and kept its kernel stored the full text so far: the next
    one's notice names that artifact, for the text up to the restart."""
    url = "/v1/sessions/s_test/artifacts/" + "a" * 64
    printed = lines(40_000)
    _, ex, _ = resumed(tmp_path, cut_middle(printed, BUDGET, url), "")
    _, where = shown(ex.stdout, printed)
    assert f"the artifact {url} holds its full text up to the restart" in where


def test_a_progress_notice_of_a_cell_no_broker_ended_says_the_text_is_lost() -> None:
    printed = lines(40_000)
    saved = cut_middle(printed, BUDGET)
    text = lost_cut(saved)
    count, where = shown(text, printed)
    assert "full text is lost" in where and count == shown(saved, printed)[0]
    assert lost_cut("no cut here\n") == "no cut here\n"
    url_cut = cut_middle(printed, BUDGET, "/v1/sessions/s/artifacts/" + "b" * 64)
    assert lost_cut(url_cut) == url_cut
