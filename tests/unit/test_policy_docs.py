"""The README's example policy loads, and its table of evasions matches the tested one."""

from __future__ import annotations

import re

import pytest

from interpreter.policy.facts import analyse
from interpreter.policy.loader import parse
from interpreter.policy.rules import Policy, Request, evaluate
from tests.conftest import REPO
from tests.unit.test_policy_facts import DATA_ANALYSIS, EVASIONS

README = (REPO / "README.md").read_text(encoding="utf-8")


def _section() -> str:
    start = README.index("## Policies and approvals")
    return README[start : README.index("\n## ", start + 5)]


def test_the_readme_policy_example_loads() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", _section(), flags=re.DOTALL)
    assert len(blocks) == 1
    policy = parse(blocks[0], "README.md")
    assert policy.policies["default"].rules[0].message.startswith("subprocess is not allowed")
    assert policy.policies["tight"].limits.max_executions_per_minute == 30


def test_the_readme_says_a_policy_is_not_a_sandbox() -> None:
    assert "**A policy is not a sandbox.**" in _section()
    assert "test_known_evasions_are_not_caught" in _section()


def _evasion_table() -> dict[str, str]:
    """The README's table of evasions: first cell -> second cell."""
    section = _section()
    table = section[section.index("### What a policy does not catch") :]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    cells = [[c.strip() for c in row.strip("|").split(" | ")] for row in rows]
    return {c[0]: c[1] for c in cells}


def test_the_readme_evasion_table_is_the_tested_one_row_by_row() -> None:
    table = _evasion_table()
    assert set(table) == {row for row, *_ in EVASIONS}
    for row, _code, _wanted, unknown in EVASIONS:
        reported = table[row]
        if unknown:
            assert all(f"unknown: {kind}" in reported for kind in unknown), row
        else:
            assert reported.startswith("nothing"), row


def _tight() -> Policy:
    blocks = re.findall(r"```toml\n(.*?)```", _section(), flags=re.DOTALL)
    return parse(blocks[0], "README.md").policies["tight"]


#: Ways a cell starts a process that an outside tester ran past the README's tight policy
#: (its imports rule denies os and subprocess), with the rule that now denies each.
STARTS_A_PROCESS = [
    ("import sys\nprint(sys.modules['os'].popen('id').read())", "no-processes-or-network"),
    ("import sys\nsys.modules.get('subprocess').run(['id'])", "no-processes-or-network"),
    ("import pathlib\nprint(pathlib.os.popen('id').read())", "no-processes-or-network"),
    ("pathlib.os.popen('id')", "no-processes-or-network"),
    ("import pandas\nprint(pandas.io.common.os.popen('id').read())", "no-processes-or-network"),
    ("import tempfile\ntempfile._os.system('id')", "no-processes-or-network"),
    ("from pathlib import os\nos.popen('id')", "no-processes-or-network"),
    ("Path.__init__.__globals__['os'].popen('id')", "no-processes-or-network"),
    ("pathlib.__builtins__['__import__']('os').popen('id')", "no-processes-or-network"),
    ("import asyncio\nasyncio.subprocess.create_subprocess_exec('id')", "no-processes-or-network"),
    (
        "import asyncio\nasync def f():\n    p = await asyncio.create_subprocess_exec('id')\n"
        "await f()",
        "no-async-processes",
    ),
    ("import asyncio\nawait asyncio.create_subprocess_shell('id')", "no-async-processes"),
    ("await a.create_subprocess_exec('id')", "no-async-processes"),  # import asyncio as a
    ("await create_subprocess_shell('id')", "no-async-processes"),  # imported by a cell before
    (
        "from asyncio import get_running_loop\nloop = get_running_loop()\n"
        "await loop.subprocess_shell(P, 'id')",
        "no-async-processes",
    ),
    (
        "import timeit\ntimeit.timeit(\"import os; os.popen('id')\", number=1)",
        "no-processes-or-network",
    ),
    ("import pydoc\npydoc.pipepager('', 'id')", "no-command-runners"),
    ("from imaplib import IMAP4_stream\nIMAP4_stream('id')", "no-command-runners"),
    ("import uuid\nuuid._get_command_stdout('id')", "no-command-runners"),
    ("import webbrowser\nwebbrowser.get('id %s').open('x')", "no-command-runners"),
    # Packages of the kernel image that run a command (an outside security tester's).
    ("import pexpect\nprint(pexpect.run('id'))", "no-command-packages"),
    ("import ptyprocess\nptyprocess.PtyProcess.spawn(['id']).read()", "no-command-packages"),
    (
        "import tornado.process\ntornado.process.Subprocess(['id']).proc.wait()",
        "no-command-packages",
    ),
    (
        "from matplotlib.testing import subprocess_run_for_testing as r\nr(['id'])",
        "no-command-packages",
    ),
    (
        "from jupyter_client.launcher import launch_kernel\nlaunch_kernel(['id']).wait()",
        "no-command-packages",
    ),
    ("import psutil\npsutil.Popen(['id'])", "no-command-packages"),
    ("import ipykernel.kernelbase as k\nk.psutil.Popen(['id'])", "no-command-packages"),
    ("get_ipython().system('id')", "no-shell"),
    ("print(get_ipython().getoutput('id'))", "no-shell"),
    ("get_ipython().run_cell('!id')", "no-shell"),
    ("from IPython.utils.process import getoutput\nprint(getoutput('id'))", "no-shell"),
    ("x = !!id", "no-shell"),
    ("x = %sx id", "no-shell"),
    ("%system id", "no-shell"),
    ("!id", "no-shell"),
    # An outside security tester's: the subclass walk, __import__ passed to map, and exec,
    # eval or __import__ kept under another name for a later cell to call.
    (
        "w = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close']"
        "[0]\nw.__init__.__globals__['system']('id')",
        "nothing-unread",
    ),
    ("m = list(map(__import__, ['os']))[0]\nm.system('id')", "nothing-unread"),
    ("r = exec", "nothing-unread"),
    ("ev = eval", "nothing-unread"),
    ("imp = __import__", "nothing-unread"),
    ("__builtins__.exec('import o' + 's')", "nothing-unread"),
]


@pytest.mark.parametrize(("code", "rule"), STARTS_A_PROCESS)
def test_the_readme_tight_policy_denies_each_way_to_start_a_process(code: str, rule: str) -> None:
    verdict = evaluate(_tight(), "tight", analyse(code), Request(key="agent"))
    assert (verdict.decision, verdict.rule) == ("deny", rule), code
    assert verdict.message and "rule" not in verdict.message  # its own words, not a stock one


@pytest.mark.parametrize("code", DATA_ANALYSIS)
def test_the_readme_tight_policy_allows_ordinary_data_analysis(code: str) -> None:
    verdict = evaluate(_tight(), "tight", analyse(code), Request(key="agent"))
    assert (verdict.decision, verdict.rule) == ("allow", None), code
