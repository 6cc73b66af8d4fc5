"""The settings model as the command line and the environment meet it.

Every field of :class:`~interpreter.settings.Settings` becomes a flag of ``interp serve``
(its help is the field's description), the environment's ``INTERP_*`` variables are
checked against the fields so that a misspelt one is reported instead of silently
ignored, and a bad value becomes one line naming the variable or flag and what it
accepts, not a validation traceback.
"""

from __future__ import annotations

import argparse
import difflib
import os
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from interpreter.settings import API_KEY_ENV, DEFAULT_ABOVE_MAX, ENV_PREFIX, Settings

#: ``INTERP_*`` variables read by other parts than the broker's settings.
OTHER_VARIABLES: dict[str, str] = {
    "INTERP_URL": "the service URL for the SDK, the CLI and `interp mcp`",
    "INTERP_MAX_RETRIES": "how often the SDK retries a failed request",
    "INTERP_MCP_TOKENS": "the bearer tokens `interp mcp --http` accepts",
    "INTERP_VENV": "the virtualenv scripts/serve and scripts/test use",
    "INTERP_CACHE_DIR": "the kernel image build cache",
    "INTERP_BASE_IMAGE": "the kernel image's base",
    "INTERP_BASE_PULL_TIMEOUT_S": "how long the image build tries to pull its base",
    "INTERP_DEBIAN_MIRROR": "the Debian mirror of the offline image build",
    "INTERP_REQUIRE_DOCKER": "the test suite: fail instead of skipping Docker tests",
    "INTERP_FUZZ_EXAMPLES": "the test suite: examples per API fuzzing case",
    "INTERP_LOAD_SESSIONS": "the load suite: sessions streaming and plotting (scripts/soak)",
    "INTERP_LOAD_ROUNDS": "the load suite: cells per session",
    "INTERP_LOAD_BACKEND": "the load suite: local or docker",
    "INTERP_LOAD_CHURN": "the load suite: sessions created and deleted meanwhile",
    "INTERP_LOAD_REPEAT": "the load suite: passes over the same broker",
}
#: Settings whose values never appear in a message.
SECRET_FIELDS = frozenset({"api_keys", "metrics_key", "operator_keys"})
#: Names that changed, with what to use instead.
RENAMED: dict[str, str] = {"INTERP_API_KEYS": API_KEY_ENV}


class SettingsError(Exception):
    """A setting that cannot be used; the message is one line for the terminal."""


def env_name(field: str) -> str:
    """The environment variable of a settings field."""
    info = Settings.model_fields[field]
    alias = info.validation_alias
    if alias is not None and hasattr(alias, "choices"):
        return str(alias.choices[0])
    return f"{ENV_PREFIX}{field.upper()}"


def flag_name(field: str) -> str:
    """The ``interp serve`` flag of a settings field."""
    singular = {"api_keys": "--api-key", "operator_keys": "--operator-key"}
    return singular.get(field) or "--" + field.replace("_", "-")


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``INTERP_*`` variable that nothing reads (misspelt, most likely);
    renamed ones are :func:`load`'s errors."""
    known = {env_name(name) for name in Settings.model_fields} | set(OTHER_VARIABLES)
    warnings = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name in known or name in RENAMED:
            continue
        if name.startswith("INTERP_TEST_"):  # the test suite's own
            continue
        # Compared without the common prefix, which would make every name look close.
        stems = {k.removeprefix(ENV_PREFIX): k for k in known}
        close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), sorted(stems), n=1)
        hint = f"did you mean {stems[close[0]]}?" if close else "no setting has this name"
        warnings.append(f"{name} is not a setting and is ignored: {hint}")
    return warnings


def load(overrides: Mapping[str, Any] | None = None) -> Settings:
    """Settings from the environment and ``overrides``; raises :class:`SettingsError`.

    A renamed variable that would change who may connect (``INTERP_API_KEYS``) is an
    error rather than a warning: ignoring it would start a service without the keys its
    operator meant to require.
    """
    for old, new in RENAMED.items():
        if old in os.environ:
            raise SettingsError(f"{old} was renamed: set {new} instead, and unset {old}.")
    given = dict(overrides or {})
    # A blank variable is as good as unset, but a blank key given as a flag was meant to
    # be a key (the list flags' blanks are the settings model's to refuse).
    if isinstance(given.get("metrics_key"), str) and not given["metrics_key"].strip():
        raise SettingsError(
            f"{flag_name('metrics_key')} is empty: give a key of at least 8 characters, "
            "or leave the flag out."
        )
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, set(given))) from None


#: Fields by their variable where it is an alias (errors name the alias).
_by_variable = {env_name(name): name for name in Settings.model_fields}


def _source(field: str, from_flags: set[str]) -> str:
    return flag_name(field) if field in from_flags else env_name(field)


#: What a default above its maximum would mean, where it is not that requests that leave
#: the value out are refused.
WHY_WITHIN = {
    "max_output_bytes": "a result cannot show inline more text than the broker keeps",
    "max_notebook_body_bytes": "one notebook body must fit in what the broker holds of "
    "such bodies at once, and in one key's share of it",
    "max_large_bodies_bytes_per_key": "a key's share cannot be more than the whole",
    "max_concurrent_uploads_per_key": "a key's share cannot be more than the whole",
    "max_connections_per_key": "a key's share cannot be more than the whole",
}


def _describe(exc: ValidationError, from_flags: set[str]) -> str:
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == DEFAULT_ABOVE_MAX:
            ctx = error.get("ctx", {})
            default, most = ctx["default"], ctx["most"]
            low, high = _source(default, from_flags), _source(most, from_flags)
            if not ctx["most_given"]:
                high = f"{flag_name(most)} (or {env_name(most)})"
                above = f"the default {high}={ctx['high']!r}"
            else:
                above = f"{high}={ctx['high']!r}"
            consequence = WHY_WITHIN.get(
                default, "every request that leaves it out would be refused"
            )
            lines.append(
                f"{low}={ctx['low']!r} is above {above}: {consequence}. "
                f"Lower {low} or raise {high}."
            )
            continue
        field = _by_variable.get(field, field)
        if field not in Settings.model_fields:
            lines.append(f"{field or 'settings'}: {error['msg']}")
            continue
        source = flag_name(field) if field in from_flags else env_name(field)
        value = "<hidden>" if field in SECRET_FIELDS else error.get("input")
        description = Settings.model_fields[field].description or ""
        lines.append(
            f"{source}={value!r} is not accepted: {error['msg']} ({accepts(field)}; "
            f"{description.rstrip('.')})."
        )
    return " ".join(lines)


def _base(annotation: Any) -> tuple[Any, bool]:
    """The type of a setting without ``None``, and whether it may be unset."""
    args = typing.get_args(annotation)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def accepts(field: str) -> str:
    """What values a settings field takes, in words."""
    info = Settings.model_fields[field]
    annotation, optional = _base(info.annotation)
    if typing.get_origin(annotation) is typing.Literal:
        text = "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    elif typing.get_origin(annotation) is list:
        text = "a comma-separated list"
    else:
        kind = {int: "an integer", float: "a number", bool: "true or false", str: "text"}
        text = kind.get(annotation, "a path" if "Path" in str(annotation) else "a value")
    bounds = [
        f"{symbol} {getattr(m, attr)}"
        for m in info.metadata
        for attr, symbol in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
        if getattr(m, attr, None) is not None
    ]
    text += " " + " and ".join(bounds) if bounds else ""
    return text + (", or unset for none" if optional else "")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per settings field, with the field's description, default and variable."""
    for name, info in Settings.model_fields.items():
        parser.add_argument(
            flag_name(name),
            dest=name,
            default=argparse.SUPPRESS,
            help=_help(name, info),
            **_flag(info),
        )


def _flag(info: FieldInfo) -> dict[str, Any]:
    annotation, _ = _base(info.annotation)
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if typing.get_origin(annotation) is list:
        return {"action": "append", "metavar": "KEY"}
    if typing.get_origin(annotation) is typing.Literal:
        return {"choices": list(typing.get_args(annotation))}
    if annotation in (int, float):
        return {"metavar": "N"}
    return {"metavar": "PATH" if "Path" in str(annotation) else "TEXT"}


def _help(name: str, info: FieldInfo) -> str:
    default = "none" if info.is_required() else _shown(info)
    extra = ""
    if typing.get_origin(info.annotation) is list:
        extra = " Repeatable; the variable takes a comma-separated list."
    text = (
        f"{(info.description or '').rstrip('.')}.{extra} Default: {default}; env {env_name(name)}."
    )
    return text.replace("%", "%%")


def _shown(info: FieldInfo) -> str:
    if info.default_factory is not None:
        return "none"
    value = info.get_default()
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (absent flags leave the environment's or defaults)."""
    given = vars(args)
    return {name: given[name] for name in Settings.model_fields if name in given}
