"""``interp run`` prints each display as its readable text, as the model reads it."""

from __future__ import annotations

from typing import Any
from unittest.mock import MagicMock

import pytest

from interpreter.cli_client import _print_output
from interpreter.client import OutputEvent
from interpreter.models import Output


@pytest.mark.parametrize(
    ("data", "printed"),
    [
        ({"text/plain": "<IPython.core.display.Markdown object>", "text/markdown": "# T"}, "# T"),
        ({"text/plain": "<IPython.core.display.HTML object>", "text/html": "<b>hi</b>"}, "hi"),
        (
            {"text/plain": "<IPython.core.display.JSON object>", "application/json": {"c": "ü"}},
            '{\n "c": "ü"\n}',
        ),
        ({"text/plain": "\x1b[31m42\x1b[0m"}, "42"),
    ],
)
def test_interp_run_prints_the_readable_text_of_a_display(
    data: dict[str, Any], printed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _print_output(OutputEvent(Output(type="display_data", data=data)), None, MagicMock())
    assert capsys.readouterr().out == printed + "\n"
