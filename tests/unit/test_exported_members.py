"""The public surface of ``interpreter`` and ``interpreter.client`` is exactly ``__all__``."""

from __future__ import annotations

import types

import pytest

import interpreter
import interpreter.client


@pytest.mark.parametrize("package", [interpreter, interpreter.client], ids=lambda p: p.__name__)
def test_all_is_the_public_surface(package: types.ModuleType) -> None:
    exported = set(package.__all__)
    assert len(exported) == len(package.__all__), "a name is listed twice in __all__"
    assert not [name for name in exported if not hasattr(package, name)]
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - exported == set(), "public but not in __all__"


@pytest.mark.parametrize("package", [interpreter, interpreter.client], ids=lambda p: p.__name__)
def test_exported_classes_and_functions_come_from_the_package(package: types.ModuleType) -> None:
    for name in package.__all__:
        member = getattr(package, name)
        if isinstance(member, type | types.FunctionType):
            assert member.__module__.startswith("interpreter"), (name, member.__module__)


def test_the_sdk_entry_points_are_the_same_objects() -> None:
    assert interpreter.Client is interpreter.client.Client
    assert interpreter.AsyncClient is interpreter.client.AsyncClient
