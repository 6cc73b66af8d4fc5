"""What a model reads of an execution, as an outside reviewer of agent transcripts found it
wanting: counts of what was cut, one image once, images a model API takes, a budget for
the outputs of one result, terminal codes, repeated frames, and which cell lost state."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from PIL import Image

from interpreter.client.render import clip, image_forms, render_execution
from interpreter.execution import cut_middle
from interpreter.models import ArtifactRef, ErrorInfo, Execution, Output
from interpreter.tools import images
from interpreter.tools.structured import NOT_SHOWN, execution_data

SID = "s_model"


def ref(mime: str, name: str, size: int = 100) -> ArtifactRef:
    aid = (name * 64)[:64]
    return ArtifactRef(id=aid, mime=mime, size=size, url=f"/v1/sessions/{SID}/artifacts/{aid}")


def execution(**fields: Any) -> Execution:
    return Execution(id="e_1", session_id=SID, status=fields.pop("status", "ok"), **fields)


def text_of(ex: Execution, limit: int = 20_000) -> str:
    return "\n\n".join(render_execution(ex, limit=limit))


# ---------------------------------------------------------------- what was cut


def test_a_text_the_service_cut_counts_both_cuts_and_names_the_artifact() -> None:
    # 165,000 characters, kept to 100,000 by the service, then to 20,000 for the model:
    # the model's mark said 80,173 omitted, and dropped the service's mark with its URL.
    whole = "".join(f"line {i:05d}\n" for i in range(15_000))
    url = f"/v1/sessions/{SID}/artifacts/{'a' * 64}"
    shown = clip(cut_middle(whole, 100_000, url), 20_000)
    [mark] = re.findall(
        r"\[\.\.\. (\d+) characters omitted; full text in the artifact (\S+)", shown
    )
    omitted = len(whole) - (len(shown) - len(mark[0]) - 100)
    assert abs(int(mark[0]) - (len(whole) - 20_000)) < 10 and mark[1] == url, omitted
    assert shown.count("[...") == 1


@pytest.mark.parametrize("width", [7, 10, 13, 61])
def test_cuts_keep_whole_lines_on_both_sides_of_the_note(width: int) -> None:
    # The service's cut and the model's both fell within a line: "line 1443\nlin" then
    # the note, then "3\nline 99394" (found by an outside tester over MCP).
    whole = "".join(f"{i:0{width - 1}d}\n" for i in range(60_000 // width))
    url = f"/v1/sessions/{SID}/artifacts/{'a' * 64}"
    service = cut_middle(whole, 20_000, url)
    for shown in (service, clip(whole, 5_000), clip(service, 5_000)):
        head, note, tail = re.split(r"\n(\[\.\.\. \d+ characters omitted[^\]]*\])\n", shown)
        assert whole.startswith(head) and whole.endswith(tail), note
        assert head.endswith("\n") or whole[len(head)] == "\n", head[-20:]
        assert tail.startswith("\n") or whole[-len(tail) - 1] == "\n", tail[:20]
        counted = int(re.findall(r"\d+", note)[0])
        assert counted == len(whole) - len(head) - len(tail), note


def test_a_cut_that_kept_everything_elsewhere_says_how_to_see_more() -> None:
    ex = execution(stdout="".join(f"row {i:05d}\n" for i in range(3000)))
    text = text_of(ex)
    assert "characters omitted; print a part of it" in text


def test_the_note_says_which_artifact_holds_which_stream() -> None:
    out, err = ref("text/plain", "a", 138_890), ref("text/plain", "b", 138_890)
    ex = execution(
        stdout=cut_middle("o" * 138_890, 100, out.url),
        stderr=cut_middle("e" * 138_890, 100, err.url),
        truncated=True,
        artifacts=[out, err],
    )
    text = text_of(ex)
    assert f"stdout: {out.url} (138,890 bytes); stderr: {err.url} (138,890 bytes)" in text


def test_a_traceback_the_service_cut_is_not_called_cut_output() -> None:
    frames = [f"frame {i}" for i in range(250)] + ["[... 105 more traceback lines omitted]"]
    ex = execution(
        status="error",
        truncated=True,
        error=ErrorInfo(ename="RecursionError", evalue="too deep", traceback=frames),
    )
    text = text_of(ex)
    assert "output was cut" not in text and "105 more traceback lines" in text


# ---------------------------------------------------------------- state


@pytest.mark.parametrize(
    ("status", "reason", "warned"),
    [
        ("timeout", "timeout", True),
        ("kernel_died", "oom_killed", True),
        ("ok", "exit", True),
        ("ok", None, False),  # the first code on the kernel that replaced a lost one
        ("error", None, False),
    ],
)
def test_only_the_code_whose_end_lost_the_state_is_told_to_run_the_setup_again(
    status: str, reason: str | None, warned: bool
) -> None:
    text = text_of(execution(status=status, reason=reason, state_lost=True))
    assert ("Re-run the setup code" in text) is warned
    assert ("this code ran in a fresh kernel" in text) is not warned


# ---------------------------------------------------------------- terminal codes, frames


def test_terminal_codes_and_controls_are_gone_from_every_part() -> None:
    junk = (
        "\x1b[31mred\x1b[0m \x1b]8;;https://x.example\x07link\x1b]8;;\x07 \x1b]0;title\x07bell\x07"
    )
    ex = execution(
        status="error",
        stdout=junk + " nul\x00 bidi\u202e",
        error=ErrorInfo(ename="RuntimeError", evalue=junk, traceback=[junk]),
    )
    text = text_of(ex)
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202a-\u202e]", text), repr(text)
    assert "error: RuntimeError: red link bell" in text
    assert "8;;" not in text and "title" not in text
    data = execution_data(ex)
    assert "\x1b" not in data["error"]["evalue"] and "\x1b" not in data["stdout"]


def test_a_recursion_gives_its_repeated_frame_once_with_a_count() -> None:
    frames = ["Cell In[1], line 2\n----> 2 f()", *["Cell In[1], line 1, in f\n----> f()"] * 261]
    ex = execution(
        status="error", error=ErrorInfo(ename="RecursionError", evalue="deep", traceback=frames)
    )
    text = text_of(ex)
    assert text.count("in f\n") == 1 and "the frame above repeats 260 more times" in text


def test_an_error_of_a_cell_that_went_on_says_so() -> None:
    ex = execution(
        stdout="step 2\n",
        outputs=[Output(type="display_data", data={"text/plain": "'later'"})],
        error=ErrorInfo(ename="RuntimeError", evalue="repr broke", traceback=[]),
    )
    assert "error (the code went on and ended ok): RuntimeError" in text_of(ex)


# ---------------------------------------------------------------- the outputs' budget


def test_many_large_outputs_share_one_budget_and_the_rest_is_counted() -> None:
    # 20 displays of 30,000 characters: 400,966 characters of model text, and as many
    # again in the structured content.
    outputs = [
        Output(type="display_data", data={"text/plain": f"{n}:" + "x" * 30_000}) for n in range(20)
    ]
    ex = execution(outputs=outputs)
    text = text_of(ex)
    assert len(text) < 2 * 20_000 + 1_000
    assert "[... 19 more outputs (" in text and "not shown" in text
    data = execution_data(ex)
    texts = [o["text"] for o in data["outputs"]]
    assert texts[0].startswith("0:") and texts[1:] == [NOT_SHOWN] * 19
    assert sum(map(len, texts)) < 2 * 20_000 + 19 * len(NOT_SHOWN)


def test_the_first_output_is_shown_whatever_was_printed() -> None:
    ex = execution(
        stdout="p" * 50_000,
        stderr="q" * 50_000,
        outputs=[Output(type="execute_result", data={"text/plain": "the answer"})],
    )
    text = text_of(ex)
    assert "result:\nthe answer" in text and "not shown" not in text


# ---------------------------------------------------------------- images


def test_one_picture_is_one_image_in_one_type_and_named_once() -> None:
    png, jpeg = ref("image/png", "p", 7_664), ref("image/jpeg", "j", 8_229)
    svg = ref("image/svg+xml", "s", 114)
    ex = execution(
        outputs=[
            Output(type="execute_result", data={"text/plain": "<Figure>"}, artifacts=[png]),
            Output(type="display_data", data={"text/plain": "<Figure>"}, artifacts=[png]),
            Output(type="display_data", data={"text/plain": "<PIL>"}, artifacts=[png, jpeg]),
            Output(type="display_data", data={}, artifacts=[svg]),
        ]
    )
    assert [[r.mime for r in forms] for forms in image_forms(ex)] == [["image/png"]]
    text = text_of(ex)
    assert text.count("[image 1: image/png, 7,664 bytes]") == 1
    assert text.count("[image 1 again: the same image as shown above") == 2
    assert "the same picture also as image/jpeg, 8,229 bytes" in text
    assert f"not attached: {svg.url} (read_artifact gives its SVG text)" in text
    assert "<Figure>" not in text  # a bare repr says nothing next to its image


def _image(fmt: str, size: tuple[int, int], **save: Any) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(out, fmt, **save)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_an_image_is_read_from_its_own_bytes(fmt: str) -> None:
    fine = images.check(_image(fmt, (640, 480)))
    assert (fine.mime, fine.width, fine.height, fine.problem) == (
        f"image/{fmt.lower()}",
        640,
        480,
        None,
    )
    wide = images.check(_image(fmt, (9_000, 20)))
    assert wide.problem is not None and "9000x20 pixels" in wide.problem


def test_what_a_model_api_would_refuse_is_named_with_why() -> None:
    assert images.check(b"not an image").problem is not None
    assert "cannot be read" in str(images.check(b"\x89PNG\r\n\x1a\n" + b"\0" * 8).problem)
    assert images.too_large(3 << 20) is None  # 4 MiB of base64
    assert "more than a model API takes" in str(images.too_large(4 << 20))
    progressive = images.check(_image("JPEG", (30, 40), progressive=True))
    assert (progressive.width, progressive.height) == (30, 40)


def test_a_one_row_frame_is_one_row() -> None:
    from interpreter.client.render import dataframe_summary

    one = {"kind": "dataframe", "shape": [1, 1], "columns": [{"name": "a", "dtype": "int64"}]}
    assert dataframe_summary(one).startswith("DataFrame: 1 row x 1 column\n")
    assert dataframe_summary({"kind": "series", "shape": [1]}).startswith("Series: 1 row")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_an_image_cut_short_is_not_attached(fmt: str) -> None:
    # Its header is whole (the type and the size read well); the picture does not decode.
    data = _image(fmt, (300, 200))
    cut = images.check(data[: len(data) * 2 // 3])
    assert cut.problem is not None and "cannot be read" in cut.problem


def test_an_output_whose_value_was_dropped_says_so() -> None:
    # A result over 16 Mi characters is dropped whole: the model read "result: [output of
    # type nothing]".
    ex = execution(
        stderr="[output dropped: its text/plain value of 17000000 characters is larger ...]\n",
        outputs=[Output(type="execute_result", data={})],
    )
    text = text_of(ex)
    assert "a value too large to keep is dropped, and stderr says so" in text
    assert "type nothing" not in text


def test_an_error_ipython_also_printed_is_said_once() -> None:
    # `%pip install x` in a kernel without pip: IPython prints the UsageError on stderr and
    # sends it as the error, so the model read the sentence twice (found by an outside
    # tester over MCP). A traceback-less error printed last on stderr is said once.
    said = "packages cannot be installed in this session: the kernel has no pip."
    ex = execution(
        status="error",
        stderr=f"a warning first\nUsageError: {said}\n",
        error=ErrorInfo(ename="UsageError", evalue=said, traceback=[]),
    )
    text = text_of(ex)
    assert text.count(said) == 1 and "error: UsageError: " + said in text
    assert "stderr:\na warning first" in text
    # An error with its own traceback, or text that only looks alike, is left as it is.
    other = execution(
        status="error",
        stderr=f"UsageError: {said}\n",
        error=ErrorInfo(ename="ValueError", evalue=said, traceback=[]),
    )
    assert text_of(other).count(said) == 2
