"""The analyser's facts: what it catches (with obfuscations) and the evasions it does not.

The evasion table is README "Policies" > "What a policy does not catch": each row is
asserted to escape the fact a rule would match (or to show up only as "unknown").
"""

from __future__ import annotations

import pytest

from interpreter.policy.facts import analyse

CAUGHT_CALLS = [
    ("import os\nos.system('ls')", "os.system"),
    ("import os as o\no.system('ls')", "os.system"),
    ("from os import system as s\ns('ls')", "os.system"),
    ("import os\nf = os.system\nf('ls')", "os.system"),
    ("import subprocess\nsubprocess.run(['ls'])", "subprocess.run"),
    ("import subprocess as sp\nsp.check_output('ls')", "subprocess.check_output"),
    ("from subprocess import Popen\nPopen(['ls'])", "subprocess.Popen"),
    ("__import__('subprocess').run(['ls'])", "subprocess.run"),
    ("import importlib\nimportlib.import_module('socket').socket()", "socket.socket"),
    ("import shutil\nshutil.rmtree('data')", "shutil.rmtree"),
    ("import os.path\nos.remove('x')", "os.remove"),
    ("import os\ngetattr(os, 'system')('ls')", "os.system"),
    ("import pathlib\npathlib.Path('x').unlink()", "pathlib.Path.unlink"),
    ("from pathlib import Path\nPath('x').unlink()", "pathlib.Path.unlink"),
]


@pytest.mark.parametrize(("code", "call"), CAUGHT_CALLS)
def test_calls_are_resolved_through_aliases_and_attribute_chains(code: str, call: str) -> None:
    assert call in analyse(code).calls


@pytest.mark.parametrize(
    ("code", "module"),
    [
        ("import subprocess", "subprocess"),
        ("import os.path", "os"),
        ("from socket import socket", "socket"),
        ("__import__('ctypes')", "ctypes"),
        ("import importlib\nimportlib.import_module('http.client')", "http"),
        ("from importlib import import_module as im\nim('socket')", "socket"),
    ],
)
def test_imports_include_dunder_import_and_importlib_with_literal_names(
    code: str, module: str
) -> None:
    assert module in analyse(code).imports


@pytest.mark.parametrize(
    ("code", "magic"),
    [
        ("!ls -l", "!"),
        ("files = !ls", "!"),
        ("%sx ls", "sx"),
        ("%%bash\necho hi", "bash"),
        ("%pip install requests", "pip"),
        ("%system ls", "system"),
        ("x = 1\n%%bash\necho not a cell magic here", None),
    ],
)
def test_shell_escapes_and_magics_are_recognised(code: str, magic: str | None) -> None:
    facts = analyse(code)
    if magic is None:
        # A cell magic must start the cell: IPython runs this as broken Python.
        assert facts.syntax_error
        return
    assert magic in facts.magics
    assert facts.shell


def test_plain_python_has_no_shell_and_no_unknown() -> None:
    facts = analyse("import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf.sum()")
    assert not facts.shell and not facts.unknown and not facts.dynamic_exec
    assert "pandas" in facts.imports and "pandas.DataFrame" in facts.calls


@pytest.mark.parametrize(
    ("code", "outside"),
    [
        ("open('/etc/passwd', 'w')", {"/etc/passwd"}),
        ("open('../x.txt', mode='a')", {"../x.txt"}),
        ("from pathlib import Path\nPath('/tmp/x').write_text('a')", {"/tmp/x"}),
        ("open('~/.bashrc', 'w')", {"~/.bashrc"}),
        ("open('/workspace/out.csv', 'w')", set()),
        ("open('out/data.csv', 'w')", set()),
        ("open('/etc/passwd')", set()),  # reading is not writing
        ("open('/etc/passwd', 'rb')", set()),
    ],
)
def test_writes_outside_the_workspace(code: str, outside: set[str]) -> None:
    assert analyse(code).writes_outside_workspace == outside


def test_the_local_backend_workspace_counts_as_inside() -> None:
    code = "open('/data/sessions/s1/workspace/x', 'w')"
    assert analyse(code, ("/data/sessions/s1/workspace",)).writes_outside_workspace == set()
    assert analyse(code).writes_outside_workspace == {"/data/sessions/s1/workspace/x"}


def test_eval_and_exec_of_non_literals_are_dynamic() -> None:
    assert not analyse("eval('1 + 1')").dynamic_exec
    facts = analyse("src = input()\nexec(src)")
    assert facts.dynamic_exec and "exec_source" in facts.unknown


def test_syntax_errors_are_reported_not_guessed() -> None:
    facts = analyse("def f(:\n    pass")
    assert facts.syntax_error
    assert not facts.calls and not facts.imports


def test_a_broken_cell_still_shows_its_line_magics() -> None:
    facts = analyse("!rm -rf x\ndef f(:")
    assert facts.syntax_error and facts.shell


# The known evasions (README "Policies"): code that does what a rule forbids, but that the
# analyser does not see as that. Each row: code, the fact a rule would want, and what the
# analyser reports instead ("unknown" kinds, or nothing).
EVASIONS = [
    ("import os\ngetattr(os, 'sys' + 'tem')('ls')", "os.system", {"getattr"}),
    ("import base64\nexec(base64.b64decode('b3Muc3lzdGVtKCdscycp'))", "os.system", {"exec_source"}),
    (
        "import importlib\nname = 'subpro' + 'cess'\nimportlib.import_module(name)",
        "subprocess",
        {"import"},
    ),
    ("import os\nvars(os)['system']('ls')", "os.system", set()),
    ("import os\nos.__dict__['system']('ls')", "os.system", set()),
    ("import sys\nsys.modules['os'].system('ls')", "os.system", set()),
    ("import ctypes\nctypes.CDLL(None).system(b'ls')", "os.system", set()),
    ("import pickle\npickle.loads(payload)", "os.system", set()),
    ("import os\nfns = [os.system]\nfns[0]('ls')", "os.system", set()),
    ("def run(f):\n    return f('ls')\nimport os\nrun(os.system)", "os.system", set()),
]


@pytest.mark.parametrize(("code", "wanted", "unknown"), EVASIONS)
def test_known_evasions_are_not_caught(code: str, wanted: str, unknown: set[str]) -> None:
    facts = analyse(code)
    assert wanted not in facts.calls | facts.imports
    assert facts.unknown == unknown
