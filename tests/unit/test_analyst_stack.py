"""The analyst's stack (issue 13 item 1): pinned in the image and the local extra at the same
versions, named to models in the run_code and MCP descriptions, and images allowlisted."""

from __future__ import annotations

import tomllib

from interpreter.image.inputs import normalize_name, read_pins
from interpreter.mcp_service import ServiceFacts
from interpreter.settings import Settings
from interpreter.tools.specs import TOOLS, tool_definitions
from tests.conftest import ANALYST, REPO


def kernel_extra() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in project["optional-dependencies"]["kernel"]:
        name, _, version = requirement.partition("==")
        assert version, f"the kernel extra pins exactly: {requirement}"
        pins[normalize_name(name)] = version
    return pins


def test_the_image_and_the_kernel_extra_pin_the_same_analyst_stack() -> None:
    image = read_pins(REPO / "images" / "python" / "requirements.txt")
    extra = kernel_extra()
    for name in [*ANALYST, "nbformat", "jinja2"]:
        assert name in image, f"{name} is not in the image"
        assert extra.get(name) == image[name], f"{name}: extra {extra.get(name)} != {image[name]}"


def test_the_run_code_description_names_the_main_packages_of_the_kernel() -> None:
    packages = {"pandas": "2.3.3", "seaborn": "0.13.2", "polars": "1.9.0", "zzz": "1"}
    for fmt in ("openai", "anthropic"):
        tools = tool_definitions(fmt, packages=packages)
        [run_code] = [
            t.get("function", t) for t in tools if t.get("function", t)["name"] == "run_code"
        ]
        text = run_code["description"]
        assert "Packages: pandas 2.3.3, seaborn 0.13.2, polars 1.9.0, and 1 more." in text
    # The kernel's list, not a fixed one: a package it lacks is not named.
    [plain] = [t for t in TOOLS if t.name == "run_code"]
    [named] = tool_definitions("anthropic", ["run_code"], packages={"numpy": "2.0.0"})
    assert named["description"] == plain.description + "\n\nPackages: numpy 2.0.0."
    assert tool_definitions("anthropic", ["run_code"])[0]["description"] == plain.description


def test_the_mcp_description_names_the_packages_the_kernel_has() -> None:
    facts = ServiceFacts(
        backend="docker", packages={"plotly": "7.1.0", "seaborn": "0.13.2", "zzz": "1"}
    )
    text = facts.describe()
    assert "Packages: seaborn 0.13.2, plotly 7.1.0, and 1 more." in text


def test_allowed_images_come_comma_separated() -> None:
    settings = Settings(docker_images="a:1, b:2")  # type: ignore[arg-type]
    assert settings.docker_images == ["a:1", "b:2"]
    assert Settings().docker_images == []
