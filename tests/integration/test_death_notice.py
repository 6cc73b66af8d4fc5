"""A kernel death is reported as a death, not as output lost on a dropped link.

When a kernel dies, its end of the iopub link goes away and libzmq keeps retrying it. The
iopub watch took the first retry for a reconnect and told the dying cell "[output link
interrupted: the connection to the kernel dropped and came back ...]" (stderr and the
notebook, with two warnings in the log) at every death, though nothing had come back and
no output was dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.conftest import run

NOTICE = "output link interrupted"


def test_a_kernel_death_says_kernel_died_and_nothing_about_the_output_link(
    api: httpx.Client, new_session: Callable[..., str]
) -> None:
    sid = new_session()
    assert run(api, sid, "print('before')")["stdout"] == "before\n"
    # No output right before the death: a kernel that exits at once may die before its
    # output thread sent what it printed (README, "Kernel death"), so nothing is asserted
    # about last words here; the notice is the subject.
    died = run(api, sid, "import os\nos._exit(3)")
    assert died["status"] == "kernel_died" and died["state_lost"] is True, died
    assert NOTICE not in died["stderr"] + died["stdout"], died
    assert died["truncated"] is False
    after = run(api, sid, "print('after')")
    assert after["stdout"] == "after\n" and NOTICE not in after["stderr"]
    notebook = api.get(f"/v1/sessions/{sid}/notebook")
    assert notebook.status_code == 200 and NOTICE not in notebook.text
