"""The ``env`` a session asks for: names a shell and ``os.environ`` take, never reserved."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from interpreter.models import CreateSessionRequest, reserved_env


@pytest.mark.parametrize("name", ["A\nB", "A B", "A=B", "1A", "", "A-B", "Ä"])
def test_a_name_a_shell_would_not_take_is_refused(name: str) -> None:
    """A newline in a name was accepted (201): it splits ``env`` output and env files."""
    with pytest.raises(ValidationError, match="invalid variable name"):
        CreateSessionRequest.model_validate({"env": {name: "x"}})


def test_ordinary_names_are_taken_and_reserved_ones_refused() -> None:
    taken = CreateSessionRequest.model_validate({"env": {"DB_URL": "x", "_a1": "y"}})
    assert taken.env == {"DB_URL": "x", "_a1": "y"}
    with pytest.raises(ValidationError, match="'PATH' is reserved"):
        CreateSessionRequest.model_validate({"env": {"PATH": "/x"}})


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("PYTHONBREAKPOINT", "breakpoint() calls the function it names"),
        ("BROWSER", "webbrowser"),
        ("LD_AUDIT", "dynamic loader"),
        ("JUPYTER_CONFIG_DIR", "Jupyter set-up"),
        ("JPY_PARENT_PID", "the service sets it"),
    ],
)
def test_a_variable_that_names_code_to_run_is_refused_saying_why(name: str, why: str) -> None:
    """PYTHONBREAKPOINT, BROWSER and the like were taken: later innocent-looking code
    (breakpoint("id"), import antigravity) ran the command they named."""
    assert why in (reserved_env(name) or "")
    with pytest.raises(ValidationError, match=f"'{name}' is reserved: .*{re.escape(why)}"):
        CreateSessionRequest.model_validate({"env": {name: "x"}})
    assert reserved_env("PYTHONBREAKPOINTS") is None and reserved_env("MY_BROWSER") is None
