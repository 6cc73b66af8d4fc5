"""Settings as the command line and the environment meet them: generated flags, unknown
variables, one-line errors, ``-v`` anywhere, a description for every subcommand."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from interpreter import cli
from interpreter.cli_settings import (
    SettingsError,
    accepts,
    env_name,
    flag_name,
    flag_overrides,
    load,
    unknown_variables,
)
from interpreter.client._config import API_KEY_ENV as CLIENT_KEY_ENV
from interpreter.settings import API_KEY_ENV, Settings
from tests.conftest import REPO


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every (nested) subcommand by its full name."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{parser.prog.removeprefix('interp').strip()} {name}".strip()
                found[full] = sub
                found.update(_subparsers(sub))
    return found


def _serve_parser() -> argparse.ArgumentParser:
    return _subparsers(cli.build_parser())["serve"]


def test_every_setting_is_a_serve_flag_with_its_description() -> None:
    actions = {a.dest: a for a in _serve_parser()._actions}
    for name, info in Settings.model_fields.items():
        action = actions[name]
        assert flag_name(name) in action.option_strings
        assert info.description and info.description.rstrip(".") in (action.help or "")
        assert env_name(name) in (action.help or "")


def test_flags_become_settings_and_absent_flags_do_not(tmp_path: Path) -> None:
    parser = cli.build_parser()
    flags = ["--port", "0", "--api-key", "a", "--api-key", "b", "--data-dir", str(tmp_path)]
    flags += ["--no-keep-containers-on-shutdown", "--default-cpus", "0.5"]
    args = parser.parse_args(["serve", *flags])
    overrides = flag_overrides(args)
    assert set(overrides) == {
        "port",
        "api_keys",
        "data_dir",
        "keep_containers_on_shutdown",
        "default_cpus",
    }
    settings = load(overrides)
    assert settings.port == 0 and settings.api_keys == ["a", "b"]
    assert settings.keep_containers_on_shutdown is False and settings.default_cpus == 0.5
    assert settings.data_dir == tmp_path


def test_one_name_for_the_api_key() -> None:
    assert API_KEY_ENV == CLIENT_KEY_ENV == env_name("api_keys") == "INTERP_API_KEY"


def test_unknown_variables_are_reported_with_a_suggestion() -> None:
    environ = {
        "INTERP_QUEU_SIZE": "3",
        "INTERP_PORT": "1",
        "INTERP_URL": "http://x",
        "INTERP_API_KEY": "k",
        "INTERP_TEST_ANYTHING": "1",
        "HOME": "/",
        "INTERP_COLOUR_SCHEME": "1",
    }
    assert unknown_variables(environ) == [
        "INTERP_COLOUR_SCHEME is not a setting and is ignored: no setting has this name",
        "INTERP_QUEU_SIZE is not a setting and is ignored: did you mean INTERP_QUEUE_SIZE?",
    ]


def test_bad_values_are_one_line_naming_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERP_PORT", "eighty")
    with pytest.raises(SettingsError) as env_error:
        load()
    text = str(env_error.value)
    assert "\n" not in text and text.startswith("INTERP_PORT='eighty' is not accepted")
    assert "an integer >= 0 and <= 65535" in text
    monkeypatch.delenv("INTERP_PORT")
    with pytest.raises(SettingsError, match=r"^--backend='podman' .*one of 'local', 'docker'"):
        load({"backend": "podman"})
    assert accepts("max_cpus") == "a number >= 0.05"
    assert accepts("docker_runtime") == "text, or unset for none"
    assert accepts("e2b_port") == "an integer >= 0 and <= 65535, or unset for none"


def test_a_cgroup_parent_is_a_cgroup_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERP_DOCKER_CGROUP_PARENT", "interp/kernels")
    assert load().docker_cgroup_parent == "interp/kernels"
    monkeypatch.setenv("INTERP_DOCKER_CGROUP_PARENT", " ")
    assert load().docker_cgroup_parent is None
    for bad in ("../escape", "a//b", "a b", "/"):
        monkeypatch.setenv("INTERP_DOCKER_CGROUP_PARENT", bad)
        with pytest.raises(SettingsError, match=r"INTERP_DOCKER_CGROUP_PARENT=.*cgroup path"):
            load()


def test_the_old_key_variable_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ignoring it would start the service without the keys its operator meant to require.
    monkeypatch.setenv("INTERP_API_KEYS", "secret")
    with pytest.raises(SettingsError, match="INTERP_API_KEYS was renamed: set INTERP_API_KEY"):
        load()


def test_verbose_before_or_after_the_subcommand() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["-v", "sessions"]).verbose is True
    assert parser.parse_args(["sessions", "-v"]).verbose is True
    assert parser.parse_args(["images", "build", "-v"]).verbose is True
    assert getattr(parser.parse_args(["sessions"]), "verbose", False) is False


def test_url_and_key_before_the_subcommand_go_to_the_client_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = cli.parse_args(["--url", "http://h:1", "--api-key", "k", "notebook", "s1"])
    assert (args.url, args.api_key, args.session) == ("http://h:1", "k", "s1")
    assert not hasattr(args, "root_url")
    # The command's own flag wins.
    assert cli.parse_args(["--url", "http://a:1", "sessions", "--url", "http://b:2"]).url == (
        "http://b:2"
    )
    assert cli.parse_args(["--url", "http://a:1", "approvals"]).url == "http://a:1"
    for argv, flag in (
        (["--api-key", "k", "serve"], "--api-key"),
        (["--url", "u", "openapi"], "--url"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli.parse_args(argv)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert f"{flag} before the command is for the client commands" in err, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # argparse said "the following arguments are required: COMMAND" for this one.
        (["--bogus"], "interp: error: unrecognized arguments: --bogus"),
        # and "interp: error: ..." under the top-level usage for these.
        (["serve", "--bogus"], "interp serve: error: unrecognized arguments: --bogus"),
        (["audit", "verify", "-x"], "interp audit verify: error: unrecognized arguments: -x"),
        ([], "interp: error: the following arguments are required: COMMAND"),
        (["-q"], "interp: error: the following arguments are required: COMMAND"),
    ],
)
def test_an_unknown_option_is_named_by_the_command_it_was_given_to(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == said, err
    usage = said.split(":")[0].removeprefix("interp").strip()
    assert err.startswith(f"usage: interp {usage}".rstrip() + " "), err


def test_every_subcommand_has_a_description() -> None:
    subs = _subparsers(cli.build_parser())
    assert {"serve", "run", "mcp", "replay", "images", "images build"} <= set(subs)
    for name, sub in subs.items():
        assert sub.description, f"`interp {name} --help` has no description"


def test_serve_reports_a_bad_value_in_one_line_and_exits_2() -> None:
    env = {"PATH": "/usr/bin:/bin", "INTERP_MAX_SESSIONS": "lots", "INTERP_POOLSIZE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "interpreter", "serve"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == [
        "interp: warning: INTERP_POOLSIZE is not a setting and is ignored: "
        "did you mean INTERP_POOL_SIZE?",
        "interp: error: INTERP_MAX_SESSIONS='lots' is not accepted: Input should be a valid "
        "integer, unable to parse string as an integer (an integer >= 1; Live sessions "
        "across all keys).",
    ]


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_with_json_logs_the_lines_that_stop_serve_are_json(how: str) -> None:
    """``--log-format json`` left the warnings and the error that stop the service as
    plain text, the lines a log shipper most needs."""
    import json

    env = {"PATH": "/usr/bin:/bin", "INTERP_MAX_SESSIONS": "lots", "INTERP_POOLSIZE": "1"}
    argv = [sys.executable, "-m", "interpreter", "serve"]
    if how == "flag":
        argv += ["--log-format", "json"]
    else:
        env["INTERP_LOG_FORMAT"] = "json"
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert out.returncode == 2
    records = [json.loads(line) for line in out.stderr.strip().splitlines()]
    assert [(r["level"], r["event"]) for r in records] == [
        ("warning", "startup_warning"),
        ("error", "startup_error"),
    ]
    assert "did you mean INTERP_POOL_SIZE?" in records[0]["message"]
    assert records[1]["message"].startswith("INTERP_MAX_SESSIONS='lots' is not accepted")


def test_a_secret_is_never_repeated_in_an_error() -> None:
    with pytest.raises(SettingsError) as error:
        load({"api_keys": ["sk-first", 4815162342]})
    assert "4815162342" not in str(error.value) and "sk-first" not in str(error.value)
    assert str(error.value).startswith("--api-key='<hidden>' is not accepted")


@pytest.mark.parametrize(
    ("default", "most", "low", "high"),
    [
        ("default_timeout_s", "max_timeout_s", 100, 2),
        ("default_memory_mb", "max_memory_mb", 8000, 100),
        ("default_cpus", "max_cpus", 4, 0.5),
        ("default_pids", "max_pids", 500, 100),
        ("default_disk_mb", "max_disk_mb", 2048, 512),
    ],
)
def test_a_default_above_its_maximum_is_refused_in_one_line(
    default: str, most: str, low: float, high: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It used to start: every execute without timeout_s was then refused (422), and a
    # memory default over the maximum crashed the start with a traceback.
    with pytest.raises(SettingsError) as given:
        load({default: low, most: high})
    text = str(given.value)
    assert "\n" not in text and text.startswith(f"{flag_name(default)}=")
    assert f"is above {flag_name(most)}=" in text
    monkeypatch.setenv(env_name(default), str(low))
    monkeypatch.setenv(env_name(most), str(high))
    with pytest.raises(SettingsError, match=rf"^{env_name(default)}=.* is above {env_name(most)}="):
        load()


def test_a_default_above_the_default_maximum_names_both() -> None:
    with pytest.raises(SettingsError) as given:
        load({"default_memory_mb": 8000})
    assert str(given.value) == (
        "--default-memory-mb=8000 is above the default --max-memory-mb (or "
        "INTERP_MAX_MEMORY_MB)=4096: every request that leaves it out would be refused. "
        "Lower --default-memory-mb or raise --max-memory-mb (or INTERP_MAX_MEMORY_MB)."
    )


def test_settings_that_contradict_each_other_are_refused_in_one_line() -> None:
    """A result's inline text above what the broker keeps was accepted (a 3 MB print came
    back whole past --max-output-hard-bytes 1 MB); two surfaces given one port failed at
    bind time, blaming another program for the flags' clash."""
    with pytest.raises(SettingsError) as given:
        load({"max_output_bytes": 5_000_000, "max_output_hard_bytes": 1_000_000})
    assert "a result cannot show inline more text than the broker keeps" in str(given.value)
    assert load({"max_output_hard_bytes": 50_000}).max_output_bytes == 50_000  # follows
    for clash in ({"port": 18400, "e2b_port": 18400}, {"e2b_port": 9, "e2b_envd_port": 9}):
        with pytest.raises(SettingsError) as given:
            load(clash)
        assert "each surface needs its own port" in str(given.value)
    assert load({"port": 0, "e2b_port": 0, "e2b_envd_port": 0}).e2b_port == 0


def test_a_default_left_unset_follows_a_lower_maximum() -> None:
    settings = load({"max_timeout_s": 60, "max_memory_mb": 512, "max_cpus": 0.5})
    assert settings.default_timeout_s == 60 and settings.default_memory_mb == 512
    assert settings.default_cpus == 0.5 and settings.default_pids == 256
    assert load({"max_disk_mb": 100}).default_disk_mb == 100
    assert load({"default_disk_mb": 0, "max_disk_mb": 100}).default_disk_mb == 0


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "Infinity"])
def test_numbers_must_be_finite(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # An infinite default timeout started, then every execute without timeout_s got
    # "timeout_s inf exceeds the server maximum", and /v1/info showed null.
    with pytest.raises(SettingsError, match=r"^--default-timeout-s=.* finite number"):
        load({"default_timeout_s": value})
    monkeypatch.setenv("INTERP_IDLE_TIMEOUT_S", value)
    with pytest.raises(SettingsError, match=r"^INTERP_IDLE_TIMEOUT_S=.* finite number"):
        load()


@pytest.mark.parametrize(
    ("overrides", "variables", "named"),
    [
        ({"api_keys": [""]}, {}, "--api-key"),
        ({"api_keys": ["sk-good", "  "]}, {}, "--api-key"),
        ({"operator_keys": [""]}, {}, "--operator-key"),
        ({}, {"INTERP_API_KEY": ","}, "INTERP_API_KEY"),
        ({}, {"INTERP_OPERATOR_KEY": " , "}, "INTERP_OPERATOR_KEY"),
        ({"metrics_key": ""}, {}, "--metrics-key"),
    ],
)
def test_an_empty_key_is_refused(
    overrides: dict[str, object],
    variables: dict[str, str],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `--api-key ""` started a service that answered every request 401, even on 0.0.0.0.
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as refused:
        load(overrides)
    text = str(refused.value)
    assert text.startswith(named) and "empty" in text and "\n" not in text
    assert "sk-" not in text and "op-key" not in text


def test_a_blank_key_variable_is_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERP_API_KEY", " ")
    monkeypatch.setenv("INTERP_OPERATOR_KEY", "")
    monkeypatch.setenv("INTERP_METRICS_KEY", "")
    settings = load()
    assert settings.api_keys == [] and settings.operator_keys == []
    assert settings.metrics_key is None
    monkeypatch.setenv("INTERP_API_KEY", " sk-a , sk-b ,,")  # stray commas are dropped
    assert load().api_keys == ["sk-a", "sk-b"]
