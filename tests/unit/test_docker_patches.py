"""The engine's parts against the fixes of published container escapes (H-02)."""

from __future__ import annotations

import pytest

from interpreter.backends.docker.patches import outdated, version_of


def _engine(runc: str, containerd: str = "1.6.20", kernel: str = "6.1.0-18-amd64") -> dict:
    parts = [{"Name": "runc", "Version": runc}, {"Name": "containerd", "Version": containerd}]
    return {"Components": [{"Name": "Engine", "Version": "20.10.24"}, *parts],
            "KernelVersion": kernel}  # fmt: skip


def test_versions_read_their_leading_numbers() -> None:
    assert version_of("1.1.5+ds1") == (1, 1, 5)
    assert version_of("v1.4.3") == (1, 4, 3)
    assert version_of("unknown") is None


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        (_engine("1.1.5+ds1"), ["runc 1.1.5+ds1 is older than 1.1.12, which fixes CVE-2024-21626"]),
        (_engine("1.1.12"), []),
        (_engine("1.2.8", containerd="1.4.2"), ["containerd 1.4.2 is older than 1.4.3"]),
        (_engine("1.2.8", kernel="5.10.90"), ["the host kernel 5.10.90 may lack"]),
        (_engine("1.2.8", kernel="5.10.102"), []),
        (_engine("1.2.8", kernel="5.4.0"), []),  # before Dirty Pipe
        (_engine("1.2.8", kernel="5.13.0"), ["the host kernel 5.13.0 may lack"]),
        ({}, []),
    ],
)
def test_outdated_parts_are_named(engine: dict, said: list[str]) -> None:
    found = outdated(engine)
    assert len(found) == len(said), found
    for line, start in zip(found, said, strict=True):
        assert line.startswith(start), line
