"""The notebook's output budget (``max_notebook_bytes``), from recorder to notebook form and
back to what replay compares (A5: a session's big rich outputs grew the broker and the
notebook without bound)."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbformat

from interpreter.artifacts import ArtifactStore
from interpreter.audit import cell_digest
from interpreter.execution import ExecutionRecorder
from interpreter.models import Execution
from interpreter.notebook import NotebookRecorder
from interpreter.notebook_budget import (
    PLAIN_KEPT,
    LeftOut,
    NotebookBudget,
    SetAside,
    note,
    outputs_size,
    recorded_form,
)
from interpreter.outputs import OutputCapture
from interpreter.replay import compare_outputs, outputs_from_cell, outputs_from_execution
from interpreter.restore_cells import restore

INLINE = 1000
BIG = 20_000


def html(seed: int, size: int = BIG) -> str:
    return (f"<p>{seed}</p>" * size)[:size]


def display(data: dict[str, Any], display_id: str | None = None) -> dict[str, Any]:
    content: dict[str, Any] = {"data": data, "metadata": {}}
    if display_id is not None:
        content["transient"] = {"display_id": display_id}
    return {"header": {"msg_type": "display_data"}, "content": content}


def update(data: dict[str, Any], display_id: str) -> dict[str, Any]:
    content = {"data": data, "metadata": {}, "transient": {"display_id": display_id}}
    return {"header": {"msg_type": "update_display_data"}, "content": content}


def cell(cap: OutputCapture, n: int, *messages: dict[str, Any]) -> tuple[Execution, Any, Any]:
    """Run ``messages`` through a recorder and finish it: (execution, recorder, notebook
    outputs)."""
    rec = ExecutionRecorder(f"m{n}")
    for msg in messages:
        rec.feed_iopub(msg)
    rec.feed_reply({"content": {"status": "ok", "execution_count": n}})
    ex = Execution(id=f"ex_{n}", session_id="s_test", status="ok", code=f"cell {n}")
    outputs = asyncio.run(cap.finish(ex, rec, {}))
    return ex, rec, outputs


def capture(tmp_path: Path, notebook_bytes: int, inline: int = INLINE) -> OutputCapture:
    store = ArtifactStore(tmp_path / "artifacts", "s_test")
    return OutputCapture(
        store, inline_bytes=inline, output_bytes=100_000, notebook_bytes=notebook_bytes
    )


def held_by(rec: ExecutionRecorder) -> int:
    """Characters of rich values the recorder still holds."""
    return outputs_size(rec.output(i) for i in rec.rich_indexes())


def artifact_text(cap: OutputCapture, artifact_id: str) -> str:
    path, _, _ = cap.artifacts.open(artifact_id)
    return path.read_text()


def valid(outputs: list[dict[str, Any]]) -> None:
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("x")
    code.outputs = [nbformat.from_dict(o) for o in outputs]
    nb.cells.append(code)
    nbformat.validate(nb)


def test_past_the_budget_large_values_are_only_artifacts_and_the_note_names_them(
    tmp_path: Path,
) -> None:
    cap = capture(tmp_path, notebook_bytes=2 * BIG + 500)
    # Two large values fit; the third and later ones do not.
    _, _, first = cell(cap, 1, display({"text/html": html(1)}), display({"text/html": html(2)}))
    assert [o["data"]["text/html"] for o in first] == [html(1), html(2)]
    ex, rec, later = cell(
        cap,
        2,
        display({"text/html": html(3), "text/plain": "<Report 3>"}),
        display({"text/html": html(4)}),
    )
    valid(later)
    for output, api, seed in zip(later, ex.outputs, (3, 4), strict=True):
        [ref] = api.artifacts
        assert "text/html" not in output["data"]
        plain = output["data"]["text/plain"]
        assert ref.url in plain and ref.id in plain and "max_notebook_bytes" in plain
        assert output["metadata"]["interp"]["set_aside"] == [
            {"mime": "text/html", "size": BIG, "id": ref.id, "url": ref.url}
        ]
        # Nothing is lost: the artifact holds the value whole.
        assert artifact_text(cap, ref.id) == html(seed)
        assert ref.id == hashlib.sha256(html(seed).encode()).hexdigest()
    # A text/plain the output had follows the note; one it lacked is not made up.
    assert later[0]["data"]["text/plain"].endswith("]\n<Report 3>")
    assert later[1]["metadata"]["interp"]["text_plain"] == "added"
    # The API's outputs are as without a budget: the value as an artifact, text inline.
    assert ex.outputs[0].data == {"text/plain": "<Report 3>"}
    assert ex.outputs[1].data == {}
    # The finished recorder (kept for late output) no longer holds the values.
    assert held_by(rec) < 2000
    assert cap.budget.total <= 2 * BIG + 2000


def test_an_output_keeps_all_its_large_values_or_none(tmp_path: Path) -> None:
    cap = capture(tmp_path, notebook_bytes=int(1.5 * BIG))
    plain = "row\n" * (BIG // 4)
    _, _, outputs = cell(cap, 1, display({"text/html": html(1), "text/plain": plain}))
    [output] = outputs
    # Both large values together do not fit: neither is kept (JupyterLab would show the
    # lesser form as if it were whole); the note names both artifacts, text/plain's too.
    assert "text/html" not in output["data"]
    assert [v["mime"] for v in output["metadata"]["interp"]["set_aside"]] == [
        "text/html",
        "text/plain",
    ]
    assert output["metadata"]["interp"]["text_plain"] == "added"
    text = output["data"]["text/plain"]
    assert len(text) < 2 * INLINE and text.endswith("]\n") and "row" not in text
    valid(outputs)


def test_a_display_updated_after_it_was_set_aside_is_decided_again(tmp_path: Path) -> None:
    cap = capture(tmp_path, notebook_bytes=BIG // 2)
    ex, rec, [output] = cell(cap, 1, display({"text/html": html(1)}, "d"))
    assert "text/html" not in output["data"]
    # A later cell updates it (what interpreter/displays.py does) with a small value.
    [event] = rec.feed_iopub(update({"text/html": "<b>done</b>"}, "d"))
    ex.outputs = [asyncio.run(cap.output(rec, event.index))]
    [output] = cap.notebook_form(ex, rec)
    assert output["data"] == {"text/html": "<b>done</b>"} and output["metadata"] == {}


def test_no_budget_keeps_every_value(tmp_path: Path) -> None:
    cap = capture(tmp_path, notebook_bytes=0)
    for n in range(1, 4):
        _, _, outputs = cell(cap, n, display({"text/html": html(n)}))
        assert outputs[0]["data"]["text/html"] == html(n)


def _saved(tmp_path: Path, code: str, outputs: list[Any], execution_id: str) -> NotebookRecorder:
    """A notebook file holding one finished cell."""
    nb = NotebookRecorder.create(
        tmp_path / "nb.ipynb", session_id="s_test", kernel_name="python3", backend="local"
    )
    nb.add_cell(
        code,
        outputs,
        execution_id=execution_id,
        execution_count=1,
        status="ok",
        started_at=None,
        duration_ms=1.0,
        state_lost=False,
        reason=None,
    )
    nb.save()
    return nb


def test_a_notebook_read_back_counts_against_the_budget(tmp_path: Path) -> None:
    outputs = [{"output_type": "display_data", "data": {"text/html": html(1)}, "metadata": {}}]
    nb = _saved(tmp_path, "x", outputs, "ex_1")
    budget = NotebookBudget(BIG)
    budget.load(NotebookRecorder.load(nb.path).nb.cells)
    assert budget.total == BIG
    assert not budget.fits("ex_2", 1) and budget.fits("ex_1", BIG)


def test_a_set_aside_cell_is_stored_verified_and_replayed_as_a_match(tmp_path: Path) -> None:
    cap = capture(tmp_path, notebook_bytes=1)
    ex, _, outputs = cell(
        cap,
        1,
        {"header": {"msg_type": "stream"}, "content": {"name": "stdout", "text": "hi\n"}},
        display({"text/html": html(1), "text/plain": "<Report>"}),
        display({"text/html": html(2)}),
    )
    # Stored as written: the digest interp audit verify recomputes from the file.
    nb = _saved(tmp_path, ex.code, outputs, ex.id)
    [saved] = NotebookRecorder.load(nb.path).nb.cells
    assert cell_digest(saved.source, saved.outputs) == cell_digest(ex.code, outputs)
    # The kernel's bundle as far as the notebook has it, and what only artifacts hold.
    assert recorded_form(saved.outputs[1]) == ({"text/plain": "<Report>"}, ["text/html"])
    assert recorded_form(saved.outputs[2]) == ({}, ["text/html"])

    def fetch(ref: Any) -> bytes:
        return cap.artifacts.open(ref.id)[0].read_bytes()

    # A faithful replay matches; the note is no difference.
    faithful = outputs_from_execution(ex.model_copy(update={"stdout": "hi\n"}), fetch)
    assert compare_outputs(outputs_from_cell(saved), faithful) == []
    # One that no longer shows the value, or shows another text/plain, does not.
    dropped = ex.model_copy(
        update={
            "stdout": "hi\n",
            "outputs": [ex.outputs[0], ex.outputs[1].model_copy(update={"artifacts": []})],
        }
    )
    assert compare_outputs(outputs_from_cell(saved), outputs_from_execution(dropped, fetch)) == [
        "output 2: text/html missing in replay"
    ]
    other = faithful.rich[0] | {"text/plain": "<Other>"}
    faithful.rich[0] = other
    [diff] = compare_outputs(outputs_from_cell(saved), faithful)
    assert diff.startswith("output 1: text/plain differs")


def test_the_note_names_every_value_on_its_own_line() -> None:
    text = note(
        [SetAside("text/html", 5, "a" * 64, "/u/a"), SetAside("image/png", 7, "b" * 64, "/u/b")]
    )
    assert text.count("\n") == 3
    assert "\n  text/html, 5 bytes: /u/a\n" in text


def test_a_cell_restored_from_the_store_is_set_aside_as_its_broker_wrote_it(
    tmp_path: Path,
) -> None:
    # A broker recorded two cells past the budget, then stopped before its notebook file
    # had them: the next one writes them back from the store, as they were written.
    cap = capture(tmp_path, notebook_bytes=int(1.5 * BIG))
    plain = "row\n" * (BIG // 4)
    written = []
    for n, messages in enumerate(
        [
            [display({"text/html": html(1)})],
            [display({"text/html": html(2), "text/plain": plain}), display({"text/html": "<i/>"})],
        ],
        start=1,
    ):
        ex, _, outputs = cell(cap, n, *messages)
        ex.started_at = datetime(2026, 1, 1, tzinfo=UTC)
        written.append((ex, cell_digest(ex.code, outputs)))
    assert "text/html" not in written[1][0].outputs[0].data
    nb = NotebookRecorder.create(
        tmp_path / "nb.ipynb", session_id="s_test", kernel_name="python3", backend="local"
    )
    executions = [ex for ex, _ in written]
    digests = {ex.id: digest for ex, digest in written}
    restored = restore(
        nb,
        executions,
        cap.artifacts.root,
        digests,
        inline_bytes=INLINE,
        notebook_bytes=int(1.5 * BIG),
    )
    assert restored == 2
    for saved, (_, digest) in zip(nb.nb.cells, written, strict=True):
        assert saved.metadata["interp"]["audit_sha256"] == digest
    [first], [aside, small] = (c.outputs for c in nb.nb.cells)
    assert first["data"]["text/html"] == html(1)
    assert [v["mime"] for v in aside["metadata"]["interp"]["set_aside"]] == [
        "text/html",
        "text/plain",
    ]
    assert small["data"] == {"text/html": "<i/>"}


#: A small value (no artifact) in the tests with an inline limit of 4 * INLINE.
SMALL = 4 * INLINE - 10


def test_past_the_budget_small_values_are_left_out_and_the_note_counts_them(
    tmp_path: Path,
) -> None:
    # F11: small values (no artifacts) were always kept, so each cell added its displays'
    # values to the notebook past the budget (2,000 of 63 KB each: 64 MB per cell).
    cap = capture(tmp_path, notebook_bytes=4 * SMALL + 100, inline=4 * INLINE)
    _, _, first = cell(cap, 1, *(display({"text/html": html(n, SMALL)}) for n in range(3)))
    assert [o["data"]["text/html"] for o in first] == [html(n, SMALL) for n in range(3)]
    flood = [
        display({"text/html": html(n, SMALL), "text/plain": f"<{n}>" + "p" * (n % 2) * PLAIN_KEPT})
        for n in range(50)
    ]
    ex, rec, later = cell(cap, 2, *flood)
    valid(later)
    # The first output fits; the rest are set aside, the budget's total stays within the
    # notes' size beyond the limit, and the recorder holds no value past it.
    assert later[0]["data"]["text/html"] == html(0, SMALL)
    for n, output in enumerate(later[1:], start=1):
        entry = output["metadata"]["interp"]
        assert entry["set_aside"] == []
        plain = output["data"]["text/plain"]
        assert "text/html" not in output["data"]
        assert f"  text/html, {SMALL} characters" in plain and "execution record" in plain
        if n % 2:  # a long text/plain is left out too, a short one follows the note
            assert entry["left_out"] == [
                {"mime": "text/html", "size": SMALL},
                {"mime": "text/plain", "size": len(f"<{n}>") + PLAIN_KEPT},
            ]
            assert entry["text_plain"] == "added" and "ppp" not in plain
        else:
            assert entry["left_out"] == [{"mime": "text/html", "size": SMALL}]
            assert plain.endswith(f"]\n<{n}>") and entry["text_plain"] == "prefixed"
        assert len(plain) < 400
    assert held_by(rec) < SMALL + 50 * 500
    assert cap.budget.total < 4 * SMALL + 50 * 500
    # The API's answer (and so the record) is as without a budget: every value inline.
    assert [o.data["text/html"] for o in ex.outputs] == [html(n, SMALL) for n in range(50)]
    # What replay compares: the bundle as far as the notebook has it, and what it lacks.
    assert recorded_form(later[1]) == ({}, ["text/html", "text/plain"])
    assert recorded_form(later[2]) == ({"text/plain": "<2>"}, ["text/html"])


def test_past_the_budget_a_small_image_is_named_by_its_artifact(tmp_path: Path) -> None:
    cap = capture(tmp_path, notebook_bytes=1)
    png = "iVBORw0KGgo" + "A" * 100
    ex, _, [output] = cell(cap, 1, display({"image/png": png, "text/plain": "<Figure>"}))
    [ref] = ex.outputs[0].artifacts
    assert output["data"]["text/plain"].endswith(f"{ref.url}]\n<Figure>")
    assert output["metadata"]["interp"]["set_aside"][0]["id"] == ref.id
    assert "left_out" not in output["metadata"]["interp"]


def test_a_short_text_plain_alone_is_kept_past_the_budget(tmp_path: Path) -> None:
    cap = capture(tmp_path, notebook_bytes=1)
    _, _, [output] = cell(cap, 1, display({"text/plain": "42"}))
    assert output["data"] == {"text/plain": "42"} and output["metadata"] == {}


def test_the_note_of_values_left_out_names_each_after_the_artifacts() -> None:
    text = note([SetAside("image/png", 7, "b" * 64, "/u/b")], [LeftOut("text/html", 9)])
    assert text.endswith(
        "and kept only in this cell's execution record "
        "(GET /v1/sessions/{id}/executions/{eid}, eid the cell's "
        "execution_id):\n  text/html, 9 characters]\n"
    )
    alone = note([], [LeftOut("application/json", 3)])
    assert alone.startswith(
        "[Not in this notebook, which reached its output budget "
        "(max_notebook_bytes); kept only in this cell's execution record"
    )


def test_small_values_restored_from_the_store_are_left_out_as_written(tmp_path: Path) -> None:
    cap = capture(tmp_path, notebook_bytes=2 * SMALL, inline=4 * INLINE)
    written = []
    for n in (1, 2):
        ex, _, outputs = cell(
            cap,
            n,
            display({"text/html": html(n, SMALL), "text/plain": "x" * (2 * PLAIN_KEPT)}),
            display({"application/json": {"n": n}, "text/plain": str(n)}),
        )
        ex.started_at = datetime(2026, 1, 1, tzinfo=UTC)
        written.append((ex, cell_digest(ex.code, outputs)))
    assert "left_out" in outputs[0]["metadata"]["interp"]
    nb = NotebookRecorder.create(
        tmp_path / "nb.ipynb", session_id="s_test", kernel_name="python3", backend="local"
    )
    executions = [ex for ex, _ in written]
    digests = {ex.id: digest for ex, digest in written}
    restore(
        nb,
        executions,
        cap.artifacts.root,
        digests,
        inline_bytes=4 * INLINE,
        notebook_bytes=2 * SMALL,
    )
    for saved, (_, digest) in zip(nb.nb.cells, written, strict=True):
        assert saved.metadata["interp"]["audit_sha256"] == digest
