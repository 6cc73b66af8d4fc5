"""Replay's pure parts: normalisation, comparisons, outputs from cells and executions."""

from __future__ import annotations

import base64
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from PIL import Image, ImageDraw

from interpreter.cells import recorded_status
from interpreter.models import ArtifactRef, Execution, Output
from interpreter.replay import (
    CellOutputs,
    compare_images,
    compare_json,
    compare_outputs,
    compare_text,
    compare_value,
    image_size,
    normalize_svg,
    normalize_text,
    outputs_from_cell,
    outputs_from_execution,
)


def png(
    width: int = 64, height: int = 48, *, line: bool = True, shift: int = 0, fmt: str = "PNG"
) -> bytes:
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    if line:
        draw.line([(0 + shift, height - 1), (width - 1, 0)], fill="blue", width=3)
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


# ---------------------------------------------------------------------- normalisation

# When the recording and the replay ran: readings of the clock within them are masked.
RECORDED_AT = datetime(2026, 11, 23, 15, 20, 3, tzinfo=UTC)
REPLAYED_AT = datetime(2026, 11, 24, 9, 1, 58, tzinfo=UTC)
RAN = {
    "recorded_ran": (RECORDED_AT, RECORDED_AT + timedelta(seconds=2)),
    "replayed_ran": (REPLAYED_AT, REPLAYED_AT + timedelta(seconds=2)),
}


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("<__main__.A object at 0x7fa9401f3cd0>", "<__main__.A object at 0x7f00deadbeef>"),
        ("hex(id(x)) 0x7fa9401f3cd0", "hex(id(x)) 0x55d0c0ffee00"),
        ("now: 2026-11-23 15:20:03.123456", "now: 2026-11-24T09:01:58.058967+00:00"),
        ("at 15:20:04.250", "at 09:01:59.5"),
        ("local 2026-11-23 16:20:04.1", "local 2026-11-24 04:31:59.9"),  # UTC+1, UTC-4:30
        ("id 93991165833440", "id 140234567890128"),
        (
            "2.37 μs ± 339 ns per loop (mean ± std. dev. of 7 runs, 100,000 loops each)",
            "1.9 µs ± 12.5 ns per loop (mean ± std. dev. of 7 runs, 1,000,000 loops each)",
        ),
        ("Wall time: 15 ms", "Wall time: 2.1 s"),
        (
            "/tmp/ipykernel_31658/2176412354.py:2: UserWarning: careful",
            "/tmp/ipykernel_4242/99.py:2: UserWarning: careful",
        ),
        ("artifact b410578edfe607ed0be917f093d0506d", "artifact 0123456789abcdef0123456789abcdef"),
        ("\x1b[31mred\x1b[0m text   \r\n", "red text"),
        ("file /tmp/tmpab12cd_x/data.csv", "file /tmp/tmpzz99yy77/data.csv"),
        # pandas' Styler: random CSS ids.
        (
            '<style>#T_3e14a_row1_col0 {color: red}</style><table id="T_3e14a">',
            '<style>#T_36cfa_row1_col0 {color: red}</style><table id="T_36cfa">',
        ),
    ],
)
def test_masked_differences_match(a: str, b: str) -> None:
    assert normalize_text(a, ran=RAN["recorded_ran"]) == normalize_text(b, ran=RAN["replayed_ran"])
    assert compare_text("stdout", a, b, **RAN) is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("total: 405", "total: 406"),
        ("north    405\nsouth    285", "north    405\nsouth    284"),
        ("ok", "ok\nextra line"),
        ("shape (10, 3)", "shape (10, 4)"),
        ("x = 1.5", "x = 1.25"),
    ],
)
def test_real_differences_are_reported(a: str, b: str) -> None:
    found = compare_text("stdout", a, b)
    assert found is not None and found.startswith("stdout differs:")


# A tampered value must never pass as a match: every row is a recorded text and the same
# text with one value changed the way a wrong replay would change it.
TAMPERED = [
    ("0.9999999999999999", "0.3333333333333333"),
    ("mean 3.14159265", "mean 3.14159365"),
    ("r2 = 0.8731", "r2 = 0.8732"),
    ("1.5e-07", "1.6e-07"),
    ("1e+300", "2e+300"),
    ("12345678901234567890", "12345678901234567891"),
    ("count 1000000000000", "count 1000000000001"),
    ("n 140061543826512", "n 140061543826513"),  # not aligned: not an address
    ("id 42", "id 43"),  # a short value after "id" is data, not an object id
    ("sha256 " + "ab" * 32, "sha256 " + "ab" * 31 + "ac"),
    ("md5 d41d8cd98f00b204e9800998ecf8427e", "md5 d41d8cd98f00b204e9800998ecf8427f"),
    ("hash 1234567890123456", "hash 1234567890123457"),
    ("deadbeefcafebabe0123", "deadbeefcafebabe0124"),
    ("2024-01-01", "2024-01-02"),
    ("Timestamp('2024-01-01 10:00:00')", "Timestamp('2024-01-01 10:00:01')"),
    ("2024-03-05T10:00:00+00:00", "2024-03-05T11:00:00+00:00"),
    ("1", "1.0"),
    ("-3", "3"),
    ("[1.5 2.5]", "[1.5 2.6]"),
    # Hex literals are values; only addresses in reprs are masked.
    ("0xff", "0xfe"),
    ("mask 0x0000ffff", "mask 0x0000fffe"),
    ("crc 0xdeadbeefcafe", "crc 0xdeadbeefcaff"),
    # A number after "id" is a value; only an id() can be masked.
    ("order id 1234567", "order id 7654321"),
    ("ID: 100200", "ID: 999999"),
    ("user_id=140234567890128", "user_id=140234567890129"),
    # Durations the cell printed are values; only timing reports are masked.
    ("mean duration 42.5 s", "mean duration 97.0 s"),
    ("5 minutes", "50 minutes"),
    ("took 0.050s", "took 1.3 s"),
    ("timeout 30 ms", "timeout 300 ms"),
    # Timestamps in the data, with or without fractional seconds.
    ("Timestamp('2024-01-01 10:00:00.5')", "Timestamp('2024-01-01 10:00:00.7')"),
    ("Timestamp('2024-01-01 10:00:00.500000')", "Timestamp('2024-01-01 10:00:00.700000')"),
    ("event 2026-11-20 15:20:04.123456", "event 2026-11-20 15:20:04.123457"),
    ("at 10:00:03.250", "at 10:00:03.251"),
    # UUIDs from data (and random ones: a uuid4 cannot be told apart from data).
    ("id 7d39d79a-bf10-4598-946e-022360c15097", "id 7d39d79a-bf10-4598-946e-022360c15098"),
    ("run 7d39d79a-bf10-4598-946e-022360c15097", "run 0b4f3c1e-9a55-4f5e-8d39-3e2b1c0a9f88"),
    ("uuid1 78f3d000-2c7d-11ea-8000-0242ac110002", "uuid1 798c6680-2c7d-11ea-8000-0242ac110002"),
    # No absolute tolerance: small values are values.
    ("p = 3e-13", "p = 9e-13"),
    ("eps 1e-20", "eps 2e-20"),
    ("residual 1.1102230246251565e-16", "residual 0.0"),
    ("noise 5.551115123125783e-17", "noise -2.7755575615628914e-17"),
    # A tempfile-like word that is data.
    ("column tmp_total", "column tmp_count"),
]

# Reprs that legitimately differ between two runs of the same code.
VARYING = [
    ("<Foo object at 0x7f3a2c1b9d90>", "<Foo object at 0x55d0c0ffee00>"),
    ("<memory at 0x7f3a2c1b9d90>", "<memory at 0x7f3a2c1b9e00>"),
    ("datetime.now(): 2026-11-23 15:20:04.123456", "datetime.now(): 2026-11-24 09:01:59.000001"),
    ("logged 2026-11-23 15:20:04,123 INFO", "logged 2026-11-24 09:01:59,999 INFO"),
    ("Timestamp('2026-11-23 15:20:03.5')", "Timestamp('2026-11-24 09:01:58.7')"),
    ("utc 2026-11-23T15:20:04Z", "utc 2026-11-24T09:01:59Z"),
    ("id(x) = id 140234567890128", "id(x) = id 93991165833440"),
    ("<class 'Thing'> 140061543826512", "<class 'Thing'> 94512938215424"),
    ("0.1 + 0.2 = 0.30000000000000004", "0.1 + 0.2 = 0.30000000000000004"),
    ("sum 10.000000000000002", "sum 10.0"),
    ("x = 0.30000000000000004", "x = 0.3"),
    ("zero 0.0", "zero -0.0"),
    ("uuid1 5b942a00-e751-11f1-8000-0242ac110002", "uuid1 b4ad9d80-e7e5-11f1-8000-0242ac110002"),
    (
        "CPU times: user 12 ms, sys: 0 ns, total: 12 ms",
        "CPU times: user 1.3 s, sys: 4 ms, total: 1.31 s",
    ),
    ("Wall time: 15 ms", "Wall time: 2.1 s"),
    (
        "2.37 μs ± 339 ns per loop (mean ± std. dev. of 7 runs, 100,000 loops each)",
        "1.9 µs ± 12.5 ns per loop (mean ± std. dev. of 7 runs, 1,000,000 loops each)",
    ),
    (
        "<TimeitResult : 5.1 ms +- 1 ms per loop (mean +- std. dev. of 1 run, 1 loop each)>",
        "<TimeitResult : 3 s +- 0 ns per loop (mean +- std. dev. of 1 run, 1 loop each)>",
    ),
    (
        "The slowest run took 5.12 times longer than the fastest.",
        "The slowest run took 11.50 times longer than the fastest.",
    ),
    (
        "100%|██████████| 10/10 [00:00<00:00, 9652.78it/s]",
        "100%|██████████| 10/10 [00:01<00:00,  8.12it/s]",
    ),
    ("rows: 10it [00:00, 123.4rows/s, loss=0.5]", "rows: 10it [01:02, 1.23s/it, loss=0.5]"),
]


@pytest.mark.parametrize(("recorded", "replayed"), TAMPERED)
def test_every_tampered_value_is_a_mismatch(recorded: str, replayed: str) -> None:
    for ran in ({}, RAN):
        assert compare_text("stdout", recorded, replayed, **ran) is not None
        assert compare_text("stdout", replayed, recorded, **ran) is not None
        assert compare_value("text/plain", recorded, replayed, **ran) is not None


@pytest.mark.parametrize(("recorded", "replayed"), VARYING)
def test_every_legitimately_varying_repr_matches(recorded: str, replayed: str) -> None:
    assert compare_text("stdout", recorded, replayed, **RAN) is None
    assert compare_value("text/plain", recorded, replayed, **RAN) is None


def test_clock_readings_are_masked_only_within_the_run() -> None:
    now = "now 2026-11-23 15:20:04.123456"
    later = "now 2026-11-24 09:01:59.000001"
    assert compare_text("stdout", now, later) is not None  # when the runs are unknown
    assert compare_text("stdout", now, later, recorded_ran=RAN["recorded_ran"]) is not None
    assert compare_text("stdout", now, later, **RAN) is None
    # A timestamp ten seconds after the recorded run is not a reading of its clock.
    assert compare_text("stdout", "now 2026-11-23 15:20:15.0", later, **RAN) is not None


def test_difference_message_points_at_the_line() -> None:
    found = compare_text("text/plain", "a\nb\nc", "a\nB\nc")
    assert found == "text/plain differs: line 2: recorded 'b', replayed 'B'"
    assert compare_text("x", "a", "a\nb") == "x differs: recorded 1 lines, replayed 2"


def test_known_session_ids_are_masked() -> None:
    a = "/data/sessions/s_recordedAAAA/workspace"
    b = "/data/sessions/s_replayedBBBB/workspace"
    assert compare_text("cwd", a, b) is not None
    assert compare_text("cwd", a, b, ("s_recordedAAAA", "s_replayedBBBB")) is None


def test_svg_ignores_generated_ids_and_metadata() -> None:
    a = (
        '<svg><metadata><dc:date>2024-01-01</dc:date></metadata><defs><clipPath id="p1a2b3">'
        '</clipPath></defs><path clip-path="url(#p1a2b3)" d="M 0 0 L 1 1"/></svg>'
    )
    b = (
        '<svg><metadata><dc:date>2025-02-02</dc:date></metadata><defs><clipPath id="p9z8y7">'
        '</clipPath></defs><path clip-path="url(#p9z8y7)" d="M 0 0 L 1 1"/></svg>'
    )
    assert normalize_svg(a) == normalize_svg(b)
    assert compare_value("image/svg+xml", a, b.replace("L 1 1", "L 2 2")) is not None


# ------------------------------------------------------------------------------- json


def test_json_compares_structure_with_rounded_floats() -> None:
    a = {"shape": [3, 2], "rows": [[1, 0.1 + 0.2]], "when": "2026-11-23T15:20:04.123456"}
    b = {"shape": [3, 2], "rows": [[1, 0.3]], "when": "2026-11-24T09:01:59.654321"}
    assert compare_json("application/json", a, b, **RAN) is None
    assert compare_json("application/json", a, b) is not None
    assert compare_json("x", {"p": 3e-13}, {"p": 9e-13}) is not None
    assert compare_json("x", {"v": 0.9999999999999999}, {"v": 0.3333333333333333}) == (
        "x differs at $.v: recorded 0.9999999999999999, replayed 0.3333333333333333"
    )
    assert compare_json("x", {"n": 2**70}, {"n": 2**70 + 1}) is not None
    assert compare_json("x", {"d": "2024-01-01"}, {"d": "2024-01-02"}) is not None
    assert compare_json("x", a, {**b, "shape": [3, 3]}) == (
        "x differs at $.shape[1]: recorded 2, replayed 3"
    )
    assert compare_json("x", {"a": 1}, {}) == "x differs at $.a missing in replay"
    assert compare_json("x", [1, 2], [1]) == "x differs at $: 2 items recorded, 1 replayed"
    assert compare_json("x", {"n": float("nan")}, {"n": float("nan")}) is None


# ----------------------------------------------------------------------------- images


def test_identical_and_re_encoded_images_match() -> None:
    a = png()
    assert compare_images("image/png", a, a) is None
    # Same pixels, different bytes (a different encoder setting).
    img = Image.open(io.BytesIO(a))
    buf = io.BytesIO()
    img.save(buf, format="PNG", compress_level=0)
    assert buf.getvalue() != a
    assert compare_images("image/png", a, buf.getvalue()) is None


def test_slightly_shifted_image_is_within_tolerance() -> None:
    assert compare_images("image/png", png(320, 240), png(320, 240, shift=1)) is None


def test_different_size_or_content_does_not_match() -> None:
    assert "size differs: recorded (64, 48), replayed (64, 50)" in (
        compare_images("image/png", png(), png(64, 50)) or ""
    )
    found = compare_images("image/png", png(line=True), png(line=False))
    assert found is not None and "pixels differ" in found
    assert "cannot decode" in (compare_images("image/png", png(), b"not an image") or "")


def test_image_values_are_compared_from_base64() -> None:
    a, b = base64.b64encode(png()).decode(), base64.b64encode(png(64, 50)).decode()
    assert compare_value("image/png", a, a) is None
    assert compare_value("image/png", a, b) is not None
    split = [a[:20] + "\n", a[20:]]  # nbformat may store base64 as a list of lines
    assert compare_value("image/png", split, a) is None


def test_image_size_without_pillow() -> None:
    assert image_size(png(33, 21)) == (33, 21)
    assert image_size(png(7, 5, fmt="GIF")) == (7, 5)
    assert image_size(png(40, 30, fmt="JPEG")) == (40, 30)
    assert image_size(b"nope") is None


def test_without_pillow_sizes_still_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pil(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pil)
    assert compare_images("image/png", png(), png(line=False)) is None  # pixels unknown
    assert compare_images("image/png", png(), png(64, 50)) is not None


# ---------------------------------------------------------------------------- outputs


CELL: dict[str, Any] = {
    "cell_type": "code",
    "execution_count": 3,
    "source": "...",
    "metadata": {"interp": {"status": "ok", "duration_ms": 12.5}},
    "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["a\n", "b\n"]},
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {"image/png": base64.b64encode(png()).decode(), "text/plain": "<Figure>"},
        },
        {"output_type": "stream", "name": "stdout", "text": "c\n"},
        {"output_type": "stream", "name": "stderr", "text": "warn\n"},
        {
            "output_type": "execute_result",
            "execution_count": 3,
            "metadata": {},
            "data": {"text/plain": "42"},
        },
    ],
}


def test_outputs_from_cell_join_streams() -> None:
    out = outputs_from_cell(CELL)
    assert out.stdout == "a\nb\nc\n" and out.stderr == "warn\n"
    assert [sorted(d) for d in out.rich] == [["image/png", "text/plain"], ["text/plain"]]
    assert out.error is None
    errored = outputs_from_cell(
        {
            "outputs": [
                {"output_type": "error", "ename": "KeyError", "evalue": "'x'", "traceback": []}
            ]
        }
    )
    assert errored.error == ("KeyError", "'x'")


def test_outputs_from_execution_fetch_artifacts() -> None:
    ref = ArtifactRef(id="a" * 64, mime="image/png", size=10, url="/x")
    big = ArtifactRef(id="b" * 64, mime="text/html", size=10, url="/y")
    chart = ArtifactRef(id="c" * 64, mime="application/vnd.chart+json", size=2, url="/z")
    execution = Execution(
        id="e",
        session_id="s",
        status="ok",
        stdout="a\nb\nc\n",
        stderr="warn\n",
        outputs=[
            Output(
                type="display_data", data={"text/plain": "<Figure>"}, artifacts=[ref, big, chart]
            ),
            Output(type="execute_result", data={"text/plain": "42"}),
        ],
    )
    blobs = {"/x": png(), "/y": b"<b>big</b>", "/z": b'{"k": 1}'}
    out = outputs_from_execution(execution, lambda r: blobs[r.url])
    assert base64.b64decode(out.rich[0]["image/png"]) == png()
    assert out.rich[0]["text/html"] == "<b>big</b>"
    assert out.rich[0]["application/vnd.chart+json"] == {"k": 1}
    assert compare_outputs(outputs_from_cell(CELL), out) == []


def test_compare_outputs_reports_each_kind_of_difference() -> None:
    recorded = CellOutputs("x\n", "", [{"text/plain": "1", "image/png": "AAAA"}], None)
    assert compare_outputs(recorded, CellOutputs("x\n", "", [{"text/plain": "1"}], None)) == [
        "output 1: image/png missing in replay"
    ]
    extra = CellOutputs(
        "x\n",
        "",
        [{"text/plain": "1", "image/png": "AAAA", "application/vnd.chart+json": {}}],
        None,
    )
    assert compare_outputs(recorded, extra) == []  # a replay may add representations
    assert compare_outputs(recorded, CellOutputs("x\n", "", [], None)) == [
        "1 rich outputs recorded, 0 replayed"
    ]
    raised = CellOutputs("x\n", "", recorded.rich, ("NameError", "name 'y' is not defined"))
    assert compare_outputs(recorded, raised) == ["replay raised NameError: name 'y' is not defined"]
    assert compare_outputs(raised, recorded) == [
        "recorded error NameError: name 'y' is not defined, replay raised nothing"
    ]
    other = CellOutputs("x\n", "", recorded.rich, ("KeyError", "'z'"))
    assert compare_outputs(raised, other)[0].startswith("error differs")
    assert compare_outputs(recorded, CellOutputs("y\n", "", recorded.rich, None)) == [
        "stdout differs: line 1: recorded 'x', replayed 'y'"
    ]


def test_recorded_status() -> None:
    assert recorded_status(CELL) == "ok"
    assert recorded_status({"metadata": {"interp": {"status": "timeout"}}}) == "timeout"
    assert recorded_status({"outputs": [{"output_type": "error"}]}) == "error"
    assert recorded_status({"outputs": []}) == "ok"


@pytest.mark.parametrize("nb", [[1, 2], {"cells": "x"}, {"not": "a notebook"}])
def test_replay_notebook_refuses_what_is_not_a_v4_notebook(nb: Any) -> None:
    """Before any session is created: the client's address is never reached."""
    from interpreter.client import Client
    from interpreter.replay import replay_notebook

    with (
        Client("http://127.0.0.1:9", api_key="k") as client,
        pytest.raises(ValueError, match=r"^x\.ipynb is not a valid nbformat v4 notebook: "),
    ):
        replay_notebook(client, nb, name="x.ipynb")


def test_a_widgets_random_model_id_is_not_a_difference() -> None:
    view = "application/vnd.jupyter.widget-view+json"
    recorded = {"model_id": "a" * 32, "version_major": 2, "version_minor": 0}
    assert compare_value(view, recorded, {**recorded, "model_id": "b" * 32}) is None
    assert compare_value(view, recorded, {**recorded, "version_major": 3}) is not None
