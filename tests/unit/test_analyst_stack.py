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


def test_run_code_says_how_the_model_lists_packages_and_no_list_that_is_not_there() -> None:
    """The description, written for the model, sent it to /v1/info (an HTTP route it has
    no tool for) and said the packages were "listed below" when nothing was (found by an
    outside agent tester). ``%pip list`` in run_code lists them, as the kernel's own
    refusal of ``%pip install`` says."""
    from interpreter.mcp_server import mcp_tools
    from interpreter.mcp_sessions import stateless_tools

    descriptions = []
    for packages in (None, {"pandas": "2.3.3"}):
        for fmt in ("openai", "openai-responses", "anthropic"):
            [tool] = tool_definitions(fmt, ["run_code"], packages=packages)
            descriptions.append(tool.get("function", tool)["description"])
    for facts in (None, ServiceFacts(), ServiceFacts(backend="local", packages={"numpy": "2"})):
        for specs in (TOOLS, stateless_tools()):
            [run_code] = [t for t in mcp_tools(facts, specs=specs) if t.name == "run_code"]
            descriptions.append(run_code.description or "")
    for text in descriptions:
        assert "/v1/" not in text and "listed below" not in text, text
        assert "run %pip list" in text
        assert not text.endswith("\n")
    # A list is named only where one follows: the kernel's packages when they are known.
    assert "Packages:" not in descriptions[0]
    assert descriptions[3].endswith("\n\nPackages: pandas 2.3.3.")
