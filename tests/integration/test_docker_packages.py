"""Installing packages in the kernel image, which has no pip and no network: ``%pip`` and
``!pip`` are errors that say so, and ``%pip list`` lists what is installed."""

from __future__ import annotations

from tests.integration.docker_lab import Lab, lab, run, short_base

__all__ = ["lab", "short_base"]


async def test_pip_install_in_the_image_is_an_error_that_says_why(lab: Lab) -> None:
    # Exploration B, issue 16: `%pip install x` printed "No module named pip" and "you may
    # need to restart the kernel", and the cell's status was ok.
    kc = await lab.client(await lab.start(lab.options()))
    for cell in ("%pip install polars", "!pip install polars"):
        reply = await run(kc, cell)
        assert (reply["status"], reply.get("ename")) == ("error", "UsageError"), (cell, reply)
        assert "packages cannot be installed in this session" in reply["evalue"]
        assert "No module named pip" not in reply["stdout"]
    listed = await run(kc, "%pip list")
    assert listed["status"] == "ok" and "pandas==" in listed["stdout"]
