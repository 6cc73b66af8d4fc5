"""A fresh broker's first session starts as fast as the next (``SessionFactory.prime``).

A process's first use of nbformat's validator compiles its JSON schema (about 40 ms), and
its first read of the environment's distributions took 100-300 ms; a fresh broker did both
inside its first create, the compile on the event loop, so the first local session took
about 190 ms longer than the second. The broker now does both when it opens, off the loop.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import nbformat.validator
import pytest

from interpreter import launch
from interpreter.server import ServerThread
from tests.conftest import KEY
from tests.conftest import test_settings as settings_for


def test_the_first_session_finds_its_notebook_validator_and_packages_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nbformat.validator, "validators", {})  # as in a fresh process
    compiled_in: list[str] = []
    packages_read_in: list[str] = []
    real_get_validator = nbformat.validator.get_validator
    real_packages = launch.environment_packages

    def get_validator(*args: Any, **kwargs: Any) -> Any:
        before = len(nbformat.validator.validators)
        validator = real_get_validator(*args, **kwargs)
        if len(nbformat.validator.validators) > before:
            compiled_in.append(threading.current_thread().name)
        return validator

    def environment_packages() -> dict[str, str]:
        packages_read_in.append(threading.current_thread().name)
        return real_packages()

    monkeypatch.setattr(nbformat.validator, "get_validator", get_validator)
    monkeypatch.setattr(launch, "environment_packages", environment_packages)
    settings = settings_for(tmp_path / "data", backend="local")
    with ServerThread(settings, backend="local") as server:
        headers = {"Authorization": f"Bearer {KEY}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=120) as api:
            created = api.post("/v1/sessions", json={})
            assert created.status_code == 201, created.text
            sid = created.json()["id"]
            ran = api.post(f"/v1/sessions/{sid}/execute", json={"code": "1+1"}).json()
            assert ran["status"] == "ok", ran
            nb = api.get(f"/v1/sessions/{sid}/notebook").json()
            assert nb["metadata"]["interp"]["packages"], "the packages were recorded"
    # The schema was compiled once, by a worker thread (asyncio's to_thread), never by
    # the server's event loop; the environment was read first in a worker too (the
    # create's own read then finds importlib's cache).
    assert len(compiled_in) == 1 and compiled_in[0].startswith("asyncio_"), compiled_in
    assert packages_read_in and packages_read_in[0].startswith("asyncio_"), packages_read_in
    assert "interp-server" not in compiled_in + packages_read_in
