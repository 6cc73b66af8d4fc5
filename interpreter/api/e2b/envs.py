"""Per-run environment variables (``run_code(envs=...)``) as two recorded cells.

E2B sets a run's variables for that run only. Here a cell before it sets them and a cell
after it puts back what was there; both are ordinary executions in the session's queue
(so they run in that order, around the user's code, and replay reproduces them), marked
in the notebook with ``e2b_role: env_vars``.
"""

from __future__ import annotations

from pydantic import ValidationError

from interpreter.api.json_body import describe_validation
from interpreter.errors import ValidationFailed
from interpreter.models import CreateSessionRequest

SAVED = "_e2b_saved_env"


def checked(env: dict[str, str]) -> dict[str, str]:
    """The variables, validated like a session's ``env`` (422 on a bad name or size)."""
    try:
        return CreateSessionRequest(env=env).env
    except ValidationError as exc:
        raise ValidationFailed(describe_validation(exc)) from exc


def setup_code(env: dict[str, str]) -> str:
    names = sorted(env)
    return (
        "import os as _e2b_os\n"
        f"{SAVED} = {{k: _e2b_os.environ.get(k) for k in {names!r}}}\n"
        f"_e2b_os.environ.update({dict(sorted(env.items()))!r})\n"
        "del _e2b_os\n"
    )


def restore_code() -> str:
    return (
        "import os as _e2b_os\n"
        f"for _e2b_k, _e2b_v in {SAVED}.items():\n"
        "    if _e2b_v is None:\n"
        "        _e2b_os.environ.pop(_e2b_k, None)\n"
        "    else:\n"
        "        _e2b_os.environ[_e2b_k] = _e2b_v\n"
        f"del _e2b_os, {SAVED}\n"
        "globals().pop('_e2b_k', None), globals().pop('_e2b_v', None)\n"
    )
