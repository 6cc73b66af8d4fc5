"""The kernel's message packing and binary stdout never fail on text user code writes."""

from __future__ import annotations

import io
import json

from interpreter_kernel.textsafe import BinaryBridge, fix_surrogates, pack


def test_pack_replaces_lone_surrogates_and_keeps_everything_else() -> None:
    content = {"name": "stdout", "text": "a\ud800b \udcff c\ud83d\ude00 é"}
    packed = pack(content)
    assert json.loads(packed.decode("utf-8")) == {
        "name": "stdout",
        "text": "a\ufffdb \ufffd c\U0001f600 é",
    }


def test_pack_of_clean_text_is_plain_utf8_json() -> None:
    assert pack({"text": "é", "n": 1}) == '{"text": "é", "n": 1}'.encode()


def test_pack_cleans_what_json_cannot_carry() -> None:
    assert json.loads(pack({"x": float("nan")})) == {"x": "nan"}  # as jupyter_client does


def test_fix_surrogates_joins_pairs_and_replaces_lone_ones() -> None:
    assert fix_surrogates("\ud83d\ude00\ud800x\ude00") == "\U0001f600\ufffdx\ufffd"


def test_binary_bridge_decodes_utf8_across_writes_and_replaces_bad_bytes() -> None:
    text = io.StringIO()
    bridge = BinaryBridge(text)
    euro = "€".encode()
    assert bridge.write(euro[:1]) == 1
    assert bridge.write(euro[1:] + b"\xff!") == 4
    bridge.flush()
    assert text.getvalue() == "€\ufffd!"
