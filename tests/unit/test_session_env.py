"""The ``env`` a session asks for: names a shell and ``os.environ`` take, never reserved."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from interpreter.models import CreateSessionRequest


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
