"""The parts of operations that need no server: log formatting, request ids, buckets,
settings errors."""

from __future__ import annotations

import json
import logging
import sys
from typing import Literal

import pytest

from interpreter import logs
from interpreter.api.access import method_label, request_id
from interpreter.api.handlers import ROUTES
from interpreter.cli_settings import SettingsError, load
from interpreter.metrics import duration_buckets
from interpreter.openapi import openapi_document
from interpreter.settings import Settings


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    logger = logging.getLogger("test.ops")
    return logger.makeRecord(
        logger.name, logging.WARNING, __file__, 1, msg, args, None, extra=extra
    )


def test_json_lines_carry_the_fields_and_keep_their_own_keys() -> None:
    record = _record("hello %s", "there", request_id="r1", status=200, level="spoofed")
    data = json.loads(logs.JsonFormatter().format(record))
    assert data["message"] == "hello there"
    assert data["level"] == "warning"  # a field cannot replace the line's own keys
    assert data["logger"] == "test.ops"
    assert (data["request_id"], data["status"]) == ("r1", 200)
    assert data["ts"].endswith("+00:00")


def test_a_traceback_stays_inside_its_one_json_line() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = _record("failed")
        record.exc_info = sys.exc_info()
    record.msg = "failed \r\x1b[31m"
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert "ValueError: bad" in json.loads(line)["exc_info"]


def test_emit_names_the_event_and_leaves_out_missing_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test.ops.emit")
    with caplog.at_level(logging.INFO, logger=logger.name):
        logs.emit(logger, "thing", {"a": 1, "b": None, "c": "x"})
    (record,) = caplog.records
    assert record.getMessage() == "thing a=1 c=x"
    assert not hasattr(record, "b")
    assert json.loads(logs.JsonFormatter().format(record))["event"] == "thing"


@pytest.mark.parametrize(
    "given", ["abc", "0f8fad5b-d9cb-469f-a165-70867728950e", "Root=1-5e1b:a/b+c@d_e.f", "x" * 128]
)
def test_reasonable_request_ids_are_kept(given: str) -> None:
    assert request_id(given) == given


@pytest.mark.parametrize("given", [None, "", "x" * 129, "a b", "a\tb", "<script>", "ü", "a;b"])
def test_other_request_ids_are_replaced_by_fresh_ones(given: str | None) -> None:
    first, second = request_id(given), request_id(given)
    assert first != second
    assert len(first) == 32 and int(first, 16) >= 0


def test_methods_outside_http_become_other() -> None:
    assert method_label("GET") == "GET"
    assert method_label("BREW") == "other"
    assert method_label(None) == "other"


@pytest.mark.parametrize("max_timeout", [1.5, 300.0, 3600.0, 10_000.0])
def test_duration_buckets_reach_the_maximum_timeout(max_timeout: float) -> None:
    buckets = duration_buckets(max_timeout)
    assert buckets[-1] == max_timeout
    assert list(buckets) == sorted(set(buckets))


def test_settings_errors_name_the_variable_but_never_a_secret_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("INTERP_METRICS_KEY", "secret7")
    with pytest.raises(SettingsError) as caught:
        load({"log_format": "xml"})
    problem = str(caught.value)
    assert "INTERP_METRICS_KEY='<hidden>'" in problem and "--log-format='xml'" in problem
    assert "secret7" not in problem
    assert Settings(metrics_key="  ").metrics_key is None


def test_route_templates_are_the_paths_of_the_openapi_document() -> None:
    templates = {template.removesuffix("/?") for template, _ in ROUTES}
    assert templates - {"/v1/openapi.json"} == set(openapi_document()["paths"])


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_lines_are_written_by_their_own_thread_and_all_of_them_before_exit(
    fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    logs.configure("json" if fmt == "json" else "text")
    try:
        # The loop's thread only queues records: no handler of its own writes.
        assert [type(h).__name__ for h in root.handlers] == ["_HandOff"]
        try:
            raise ZeroDivisionError("nope")
        except ZeroDivisionError:
            logging.getLogger("test.ops").exception("failed %s", "here")
        for n in range(200):
            logs.emit(logs.EXECUTIONS, "execution", {"n": n, "status": "ok"})
    finally:
        logs._stop_writer()  # as at exit: every queued line is written first
        root.handlers[:], _ = saved[0], root.setLevel(saved[1])
    err = capsys.readouterr().err
    if fmt == "json":
        lines = [json.loads(line) for line in err.splitlines()]
        assert lines[0]["message"] == "failed here"
        assert "ZeroDivisionError: nope" in lines[0]["exc_info"]
        assert [line["n"] for line in lines[1:]] == list(range(200))
    else:
        assert "ERROR test.ops: failed here\nTraceback" in err
        assert "ZeroDivisionError: nope" in err
        assert err.count("INFO interpreter.executions: execution n=") == 200


def test_the_lines_of_serve_itself_are_json_records_in_the_json_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # With --log-format json, "listening on", "Shutting down" and "Stopped." were plain
    # text on stdout; the text format keeps them as they were (README and tests read them).
    logs.announce("text", "interp (local backend) listening on http://h:1", "listening", url="u")
    assert capsys.readouterr().out == "interp (local backend) listening on http://h:1\n"
    logs.announce("json", "Stopped.", "stopped", url=None, backend="local")
    record = json.loads(capsys.readouterr().out)
    assert {"ts", "level", "logger", "message", "event"} <= set(record)
    assert (record["logger"], record["event"], record["message"]) == (
        "interpreter.server",
        "stopped",
        "Stopped.",
    )
    assert record["backend"] == "local" and "url" not in record


class _Writes:
    """A stdout that keeps each write apart."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_line_of_serve_itself_is_one_write(
    fmt: Literal["text", "json"], monkeypatch: pytest.MonkeyPatch
) -> None:
    # With stdout unbuffered (PYTHONUNBUFFERED) and stderr on the same pipe, a line
    # written in two writes (print: the text, then its newline) took a log line between
    # them: a supervisor read "listening on http://127.0.0.1:454972026-11-27".
    out = _Writes()
    monkeypatch.setattr(sys, "stdout", out)
    logs.announce(fmt, "interp (local backend) listening on http://h:1", "listening", url="u")
    assert len(out.writes) == 1 and out.writes[0].endswith("}\n" if fmt == "json" else "h:1\n")


def test_every_json_execution_line_has_the_same_keys(caplog: pytest.LogCaptureFixture) -> None:
    # An ``ok`` cell has no reason: its JSON line left the key out, so a shipper's schema
    # saw ``reason`` on some lines only. The text line still skips what is None.
    from interpreter.models import Execution

    ok = Execution(id="e_1", session_id="s_1", status="ok", duration_ms=3.0)
    cut = Execution(id="e_2", session_id="s_1", status="timeout", reason="timeout")
    with caplog.at_level(logging.INFO, logger="interpreter.executions"):
        logs.execution_finished(ok, key_id="k", request_id=None)
        logs.execution_finished(cut, key_id="k", request_id="r")
    lines = [json.loads(logs.JsonFormatter().format(r)) for r in caplog.records]
    shared = {"session_id", "execution_id", "key_id", "status", "reason", "duration_ms"}
    assert all(shared <= set(line) for line in lines)
    assert (lines[0]["reason"], lines[1]["duration_ms"]) == (None, None)
    assert "reason=" not in caplog.records[0].getMessage()
