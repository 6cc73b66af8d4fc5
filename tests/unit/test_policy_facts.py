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
    # The literal source of exec/eval/compile is code too, in the cell's namespace.
    ("exec(\"import os; os.system('ls')\")", "os.system"),
    ("eval(\"__import__('os').system('ls')\")", "os.system"),
    ("import os\nexec('exec(\"os.system(1)\")')", "os.system"),
    ("compile('import subprocess; subprocess.run(1)', 'f', 'exec')", "subprocess.run"),
    # A module reached through another module's attribute is that module.
    ("import os.path\nos.path.os.system('ls')", "os.system"),
    ("import shutil\nshutil.os.system('ls')", "os.system"),
    ("import subprocess as sp\nsp.os.system('ls')", "os.system"),
    ("import logging.handlers\nlogging.handlers.socket.socket()", "socket.socket"),
    ("__import__('os').path.os.system('ls')", "os.system"),
    # ... also from a name of an earlier cell (``import pathlib`` ran before), or a module
    # imported under another name (``tempfile._os``), or through its globals.
    ("pathlib.os.popen('id')", "os.popen"),
    ("pandas.io.common.os.popen('id')", "os.popen"),
    ("import pandas\npandas.io.common.os.popen('id')", "os.popen"),
    ("x.subprocess.run(['id'])", "subprocess.run"),
    ("import tempfile\ntempfile._os.system('id')", "os.system"),
    ("import pathlib\nm = pathlib.os\nm.popen('id')", "os.popen"),
    ("from pathlib import os as o\no.popen('id')", "os.popen"),
    ("import pathlib\ngetattr(pathlib, 'os').popen('id')", "os.popen"),
    ("import pathlib\nvars(pathlib)['os'].popen('id')", "os.popen"),
    ("pathlib.Path.__init__.__globals__['os'].popen('id')", "os.popen"),
    ("asyncio.subprocess.create_subprocess_exec('id')", "subprocess.create_subprocess_exec"),
    # An event loop's methods that start a process, on whatever object.
    (
        "import asyncio\nloop = asyncio.get_running_loop()\nloop.subprocess_exec(P, 'id')",
        "asyncio.AbstractEventLoop.subprocess_exec",
    ),
    (
        "asyncio.get_event_loop().subprocess_shell(P, 'id')",
        "asyncio.AbstractEventLoop.subprocess_shell",
    ),
    # Star imports of the modules rules commonly name bind what those modules export.
    ("from os import *\nsystem('ls')", "os.system"),
    ("from subprocess import *\nrun(['ls'])", "subprocess.run"),
    ("from shutil import *\nrmtree('x')", "shutil.rmtree"),
    ("from socket import *\ncreate_connection(('h', 1))", "socket.create_connection"),
    # Every way a name is bound: walrus, tuples, annotations, chained assignment.
    ("import os\n(f := os.system)('ls')", "os.system"),
    ("import os\nif (f := os.system):\n    f('ls')", "os.system"),
    ("import os\na, b = os.system, 1\na('ls')", "os.system"),
    ("import os\n[a, (b, c)] = 1, (2, os.system)\nc('ls')", "os.system"),
    ("import os\nfrom typing import Any\nf: Any = os.system\nf('ls')", "os.system"),
    ("import os\nf = g = os.system\ng('ls')", "os.system"),
]


def test_a_rebound_name_forgets_its_alias() -> None:
    calls = analyse("import os\nf = os.system\nf, g = print, 1\nf('x')").calls
    assert "os.system" not in calls and "print" in calls
    calls = analyse("import os\nf = os.system\nf, *g = range(3)\nf('x')").calls
    assert "os.system" not in calls


def test_only_known_modules_count_as_re_exports() -> None:
    # numpy.random is not the random module, pandas.io not io: no rewriting of those.
    calls = analyse(
        "import numpy as np\nnp.random.rand(3)\nimport pandas as pd\npd.io.json.x()"
    ).calls
    assert calls == {"numpy.random.rand", "pandas.io.json.x"}
    # An object's attribute is not a module: a chain rooted at a name the cell binds
    # (a parameter, a call's result) is not rewritten, nor is a numpy array's ``.ctypes``.
    method = "class T:\n    def f(self):\n        self.os.system('ls')"
    assert analyse(method).calls == {"self.os.system"}
    facts = analyse("import numpy as np\narr = np.zeros(3)\narr.ctypes.data_as(p)")
    assert "ctypes" not in facts.imports and "ctypes.data_as" not in facts.calls
    facts = analyse("arr.ctypes.data_as(p)\narr.ctypes.data")
    assert facts.imports == set() and facts.calls == {"arr.ctypes.data_as"}
    # The chain as written stays a fact too (a rule may name it).
    assert "os.path.os.system" in analyse("import os\nos.path.os.system('ls')").calls


def test_literal_exec_sources_are_analysed_to_a_bounded_depth() -> None:
    inner = "import os; os.system('ls')"
    for _ in range(3):
        inner = f"exec({inner!r})"
    facts = analyse(inner)
    assert "os.system" in facts.calls and not facts.unknown
    facts = analyse(f"exec({inner!r})")
    assert "os.system" not in facts.calls and facts.unknown == {"exec_source"}
    big = "x = 1\n" * 20_000
    facts = analyse(f"exec({big!r})\nexec('import os; os.system(1)')")
    assert facts.unknown == {"exec_source"} and "os.system" not in facts.calls
    # A literal that does not parse raises SyntaxError when run: nothing of it runs.
    assert analyse("exec('def f(:')").unknown == set()
    assert not analyse("eval('1 + 1')").dynamic_exec


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
        ("x = !!id", "!"),
        ("x = %sx id", "sx"),
        # The calls those become, made by hand, are the shell too.
        ("get_ipython().getoutput('id')", "!"),
        ("get_ipython().system_piped('id')", "!"),
        ("ip = get_ipython()\nip.system_raw('id')", "!"),
        ("import IPython\nIPython.get_ipython().system('id')", "!"),
        ("get_ipython().run_cell('!!id')", "!"),
        ("from IPython.utils.process import getoutput\ngetoutput('id')", "!"),
        ("import IPython.utils.process as p\np.system('id')", "!"),
        ("from IPython.utils._process_posix import system\nsystem('id')", "!"),
        ("get_ipython().find_line_magic('sx')('id')", "sx"),
        ("get_ipython().find_cell_magic('bash')('', 'id')", "bash"),
        ("get_ipython().kernel.shell.getoutput('id')", "!"),
        (
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "InteractiveShell.instance().system('id')",
            "!",
        ),
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
    ("code", "module"),
    [
        ("import sys\nsys.modules['os'].popen('id')", "os"),
        ("sys.modules.get('subprocess').run(['id'])", "subprocess"),
        ("import sys\nm = sys.modules['_posixsubprocess']", "_posixsubprocess"),
        ("import pathlib\npathlib.os.popen('id')", "os"),
        ("pathlib.os.popen('id')", "os"),  # pathlib imported by an earlier cell
        ("import pandas\npandas.io.common.os.popen('id')", "os"),
        ("pandas.io.common.os.popen('id')", "os"),
        ("import random\nf(random._os)", "os"),  # handed on, never called here
        ("from pathlib import os", "os"),
        ("from tempfile import _os as o", "os"),
        ("import pathlib\ng = getattr(pathlib, 'os')", "os"),
        ("import pathlib\ng = vars(pathlib)['os']", "os"),
        ("g = Path.__init__.__globals__['os']", "os"),
        ("__builtins__.__import__('subprocess')", "subprocess"),
        ("pathlib.__builtins__['__import__']('os')", "os"),
        ("import asyncio\nasyncio.subprocess.PIPE", "subprocess"),
        # Read off a value the analyser cannot name, or through other ways to read a key
        # or an attribute, or found by name without an import statement.
        ("import pathlib\n[m for m in [pathlib]][0].os.system('id')", "os"),
        ("f().subprocess.run(['id'])", "subprocess"),
        ("import sys\nsys.modules.__getitem__('os').system('id')", "os"),
        ("import sys\nsys.modules.setdefault('pty').spawn('id')", "pty"),
        ("globals()['__builtins__'].__import__('os')", "os"),
        ("import operator\noperator.attrgetter('os.system')(pathlib)('id')", "os"),
        ("__loader__.load_module('os').system('id')", "os"),
        ("import importlib.util as u\nu.find_spec('subprocess')", "subprocess"),
    ],
)
def test_a_module_reached_without_its_own_import_counts_as_imported(code: str, module: str) -> None:
    """A rule on ``imports`` (the README's tight policy) was passed by reaching the module
    another way: ``sys.modules["os"].popen``, ``pathlib.os.popen``,
    ``pandas.io.common.os.popen`` started a process under a policy denying ``os``."""
    facts = analyse(code)
    assert module in facts.imports, facts
    # A function's globals or a module's builtins read as an attribute are introspection.
    introspects = any(n in code for n in (".__globals__", ".__builtins__", "'__builtins__'"))
    assert facts.unknown == ({"introspection"} if introspects else set()), facts


# Ordinary data analysis: none of it reaches a module a rule would deny, runs a shell or is
# unknown. Names like df, arr, plt are those of earlier cells.
DATA_ANALYSIS = [
    "import pandas as pd\nimport numpy as np\ndf = pd.read_csv('data.csv')\n"
    "df.groupby('a').agg({'b': 'mean'}).reset_index()",
    "import numpy as np\narr = np.random.default_rng(0).normal(size=100)\narr.ctypes.data",
    "arr.ctypes.data_as(p)\narr.ctypes.shape",
    "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\n"
    "fig.savefig('out.png')",
    "from pathlib import Path\np = Path('data') / 'x.csv'\np.exists()\np.read_text()",
    "import pathlib\npathlib.Path('out').mkdir(exist_ok=True)",
    "import pandas as pd\npd.io.json.json_normalize([{'a': 1}])\npd.api.types.is_numeric_dtype",
    "df.plot.scatter(x='a', y='b')\nplt.show()\nsns.histplot(df['a'])",
    "import json, csv, math, statistics\njson.loads('{}')\nmath.sqrt(2)",
    "import asyncio\nawait asyncio.sleep(0)\nasyncio.gather(f(), g())",
    "import timeit\ntimeit.timeit(f, number=3)\n"
    "timeit.timeit('sorted(xs)', setup='xs = [3, 1, 2]', number=10)",
]


@pytest.mark.parametrize("code", DATA_ANALYSIS)
def test_ordinary_data_analysis_reaches_no_module_and_no_shell(code: str) -> None:
    facts = analyse(code)
    assert not facts.shell and not facts.unknown and not facts.dynamic_exec, facts
    imported = {"pandas", "numpy", "matplotlib", "matplotlib.pyplot", "pathlib",
                "pathlib.Path", "json", "csv", "math", "statistics", "asyncio",
                "timeit"}  # fmt: skip
    assert facts.imports <= imported, facts
    assert not any(c.startswith(("os.", "subprocess.", "ctypes.")) for c in facts.calls)


def test_os_path_join_is_os_and_nothing_more() -> None:
    facts = analyse("import os\nos.path.join('a', 'b')\nos.path.exists('a')")
    assert facts.imports == {"os"} and facts.calls == {"os.path.join", "os.path.exists"}
    assert not facts.shell and not facts.unknown


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
        ("%%writefile /etc/x.txt\nhello", {"/etc/x.txt"}),
        ("%%writefile -a '/tmp/y z'\nhello", {"/tmp/y z"}),
        ("%%writefile out.txt\nhello", set()),
        ("df.to_csv('/etc/x.csv')", {"/etc/x.csv"}),
        ("df.to_parquet(path='/etc/x.pq')", {"/etc/x.pq"}),
        ("df.to_excel('/etc/x.xlsx', index=False)", {"/etc/x.xlsx"}),
        ("import pandas as pd\npd.DataFrame().to_json('/tmp/x.json')", {"/tmp/x.json"}),
        ("df.to_csv('out.csv')\ndf.to_json()", set()),  # inside; to_json() returns text
        ("import numpy as np\nnp.save('/etc/a.npy', a)", {"/etc/a.npy"}),
        ("import numpy as np\nnp.savetxt(fname='/etc/a.txt', X=a)", {"/etc/a.txt"}),
        ("arr.tofile('/etc/a.bin')", {"/etc/a.bin"}),
        ("import os\nos.rename('a.txt', '/etc/a.txt')", {"/etc/a.txt"}),
        ("import os\nos.replace('/etc/passwd', 'p')", {"/etc/passwd"}),
        ("import shutil\nshutil.copyfile('a', dst='/etc/b')", {"/etc/b"}),
        ("import shutil\nshutil.os.rename('a', '/etc/c')", {"/etc/c"}),
        ("from pathlib import Path\nPath('a').rename('/etc/d')", {"/etc/d"}),
    ],
)
def test_writes_outside_the_workspace(code: str, outside: set[str]) -> None:
    assert analyse(code).writes_outside_workspace == outside


def test_the_local_backend_workspace_counts_as_inside() -> None:
    code = "open('/data/sessions/s1/workspace/x', 'w')"
    assert analyse(code, ("/data/sessions/s1/workspace",)).writes_outside_workspace == set()
    assert analyse(code).writes_outside_workspace == {"/data/sessions/s1/workspace/x"}


def test_writes_with_computed_paths_are_unknown() -> None:
    assert analyse("df.to_csv(target)").unknown == {"write_path"}
    assert analyse("import os\nos.rename('a', target)").unknown == {"write_path"}


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


# The known evasions (README "Policies" > "What a policy does not catch"): code that does
# what a rule forbids, but that the analyser does not see as that. Each row: the README
# row it belongs to (the text of its first cell), the code, the fact a rule would want, and
# what the analyser reports instead ("unknown" kinds, or nothing);
# tests/unit/test_policy_docs.py checks the README's table against these rows.
#: A row of the README's table: names kept by one cell, used by a later one.
CROSS_CELL = (
    "a module, function or object kept under a name by an earlier cell and used through "
    'it in a later one: `import pydoc as p`, then `p.pipepager("", "ls")`; '
    '`c = asyncio.create_subprocess_exec`, then `await c("ls")`; `import builtins as b`, '
    'then `b.exec(text)`; `ip = get_ipython()`, then `ip.system("ls")`'
)
EVASIONS = [
    (
        '`getattr(os, "sys" + "tem")("ls")`',
        "import os\ngetattr(os, 'sys' + 'tem')('ls')",
        "os.system",
        {"getattr"},
    ),
    (
        '`exec(base64.b64decode("..."))`',
        "import base64\nexec(base64.b64decode('b3Muc3lzdGVtKCdscycp'))",
        "os.system",
        {"exec_source"},
    ),
    (
        "`exec` of a literal nested more than 3 deep, or literal sources over 100,000 characters",
        "exec('exec(\"exec(\\'exec(\\\\\"import os; os.system(1)\\\\\")\\')\")')",
        "os.system",
        {"exec_source"},
    ),
    (
        "`importlib.import_module(name)` with a computed `name`",
        "import importlib\nname = 'subpro' + 'cess'\nimportlib.import_module(name)",
        "subprocess",
        {"import"},
    ),
    (
        "`from pty import *` (any module but os, posix, subprocess, shutil, socket), "
        "then `spawn(...)`",
        "from pty import *\nspawn(['ls'])",
        "pty.spawn",
        {"star_import"},
    ),
    (
        '`ctypes.CDLL(None).system(b"ls")`',
        "import ctypes\nctypes.CDLL(None).system(b'ls')",
        "os.system",
        set(),
    ),
    (
        "`pickle.loads(payload)` (a crafted pickle runs any call)",
        "import pickle\npickle.loads(payload)",
        "os.system",
        set(),
    ),
    (
        '`fns = [os.system]; fns[0]("ls")`, passing `os.system` to a function, a class attribute',
        "import os\nfns = [os.system]\nfns[0]('ls')",
        "os.system",
        set(),
    ),
    (
        '`fns = [os.system]; fns[0]("ls")`, passing `os.system` to a function, a class attribute',
        "def run(f):\n    return f('ls')\nimport os\nrun(os.system)",
        "os.system",
        set(),
    ),
    (
        '`fns = [os.system]; fns[0]("ls")`, passing `os.system` to a function, a class attribute',
        "import os\nclass T:\n    run = os.system\nT.run('ls')",
        "os.system",
        set(),
    ),
    (
        "`for m in [pathlib]: m.os.system(...)`: a module held by a name the cell binds (a "
        "loop variable, a parameter), or `x.ctypes` when the cell does not import `x`",
        "import pathlib\nfor m in [pathlib]:\n    m.os.system('ls')",
        "os",
        set(),
    ),
    (
        "`for m in [pathlib]: m.os.system(...)`: a module held by a name the cell binds (a "
        "loop variable, a parameter), or `x.ctypes` when the cell does not import `x`",
        "def f(m):\n    return m.os.system('ls')\nimport pathlib\nf(pathlib)",
        "os",
        set(),
    ),
    (
        "`for m in [pathlib]: m.os.system(...)`: a module held by a name the cell binds (a "
        "loop variable, a parameter), or `x.ctypes` when the cell does not import `x`",
        "x.ctypes.CDLL(None).system(b'ls')",
        "ctypes",
        set(),
    ),
    (
        "`dict(sys.modules)`, `sys.modules.values()`, `gc.get_objects()`: a module found "
        "among many values",
        "import sys\nm = dict(sys.modules)\nm['os'].system('ls')",
        "os",
        set(),
    ),
    (
        "`dict(sys.modules)`, `sys.modules.values()`, `gc.get_objects()`: a module found "
        "among many values",
        "import gc\n[o for o in gc.get_objects() if getattr(o, '__name__', '') == 'posix']",
        "posix",
        set(),
    ),
    (
        '`pydoc.pipepager("", "ls")`, `imaplib.IMAP4_stream("ls")`: standard-library '
        "functions that run a command they are given",
        "import pydoc\npydoc.pipepager('', 'ls')",
        "subprocess",
        set(),
    ),
    (
        '`s = "..."; timeit.timeit(s)` (`timeit` is usually given a callable), '
        '`code.InteractiveInterpreter().runsource("...")`: Python text run by a function '
        "other than `exec`, `timeit`, `cProfile`/`profile`/`pdb` `run`",
        "import timeit\ns = 'import os; os.system(1)'\ntimeit.timeit(s, number=1)",
        "os.system",
        set(),
    ),
    (
        '`s = "..."; timeit.timeit(s)` (`timeit` is usually given a callable), '
        '`code.InteractiveInterpreter().runsource("...")`: Python text run by a function '
        "other than `exec`, `timeit`, `cProfile`/`profile`/`pdb` `run`",
        "import code\ncode.InteractiveInterpreter().runsource('import os; os.system(1)')",
        "os.system",
        set(),
    ),
    (
        '`pexpect.run("ls")`, `ptyprocess.PtyProcess.spawn`, `psutil.Popen`, '
        "`tornado.process.Subprocess`, `jupyter_client.launcher.launch_kernel`, "
        "`matplotlib.testing.subprocess_run_for_testing`: other packages of the kernel image "
        "that run a command they are given",
        "import pexpect\npexpect.run('ls')",
        "subprocess",
        set(),
    ),
    (
        '`pexpect.run("ls")`, `ptyprocess.PtyProcess.spawn`, `psutil.Popen`, '
        "`tornado.process.Subprocess`, `jupyter_client.launcher.launch_kernel`, "
        "`matplotlib.testing.subprocess_run_for_testing`: other packages of the kernel image "
        "that run a command they are given",
        "import matplotlib\nmatplotlib.rcParams['animation.ffmpeg_path'] = 'ls'",
        "subprocess",
        set(),
    ),
    (
        '`Path("~/x").expanduser().write_text(...)`: a path made by a method',
        "from pathlib import Path\nPath('~/x').expanduser().write_text('x')",
        "~/x",
        set(),
    ),
    (
        "a name made a shell alias in an earlier cell (`%alias` itself is the shell)",
        "x",
        "!",
        set(),
    ),
    (
        '`plt.savefig("/etc/x.png")`, `image.save(...)`: writers of other libraries',
        "import matplotlib.pyplot as plt\nplt.savefig('/etc/x.png')",
        "/etc/x.png",
        set(),
    ),
    (
        CROSS_CELL,
        "p.pipepager('', 'ls')",
        "pydoc.pipepager",
        set(),
    ),
    (
        CROSS_CELL,
        "await c('ls')",
        "asyncio.create_subprocess_exec",
        set(),
    ),
    (
        CROSS_CELL,
        "b.exec(text)",
        "exec",
        set(),
    ),
    (
        CROSS_CELL,
        "ip.system('ls')",
        "!",
        set(),
    ),
    (
        '`open("m.py", "w").write(text)`, then `import m` or `runpy.run_path("m.py")`: code '
        "written to a file, then imported or run",
        "open('m.py', 'w').write('import os; os.system(1)')\nimport m",
        "os.system",
        set(),
    ),
]


@pytest.mark.parametrize(
    ("code", "imports", "calls"),
    [
        ("%%time\nimport subprocess\nsubprocess.run(['id'])", {"subprocess"}, {"subprocess.run"}),
        ("%time import os; os.system('id')", {"os"}, {"os.system"}),
        ("%timeit -n1 -r 1 import subprocess", {"subprocess"}, set()),
        ("%%timeit -n 1 import os\nos.system('x')", {"os"}, {"os.system"}),
        ("%%capture out\nimport subprocess", {"subprocess"}, set()),
        ("get_ipython().run_cell('import subprocess')", {"subprocess"}, set()),
        ("import importlib\nimportlib.__import__('subprocess')", {"subprocess"}, set()),
        ("import os\nos.system.__call__('true')", {"os"}, {"os.system"}),
    ],
)
def test_code_a_magic_or_the_shell_runs_is_the_cells_own(
    code: str, imports: set[str], calls: set[str]
) -> None:
    """``%%time``, ``%timeit``, ``%%capture`` ... run the Python given to them: a deny
    rule on an import or a call was passed by putting ``%%time`` above the cell."""
    facts = analyse(code)
    assert imports <= facts.imports and calls <= facts.calls, facts
    assert not facts.unknown


@pytest.mark.parametrize(
    "code",
    ["%alias x id", "ll /etc/passwd", "%ls -la /run", "ls", "pip install x", "cat notes.txt",
     "get_ipython().alias_manager.define_alias('x', 'id')"],
)  # fmt: skip
def test_aliases_and_automagic_are_the_shell(code: str) -> None:
    """``%alias`` makes a shell command a magic, IPython's own aliases (``%ls``, ``ll``)
    run one, and a one-line cell that starts with a magic's name runs as that magic
    (automagic): none was taken for a shell."""
    assert analyse(code).shell


@pytest.mark.parametrize("code", ["ls = 3", "cat(1)", "ls.sort()", "x = 1\nls"])
def test_a_name_used_as_python_is_not_automagic(code: str) -> None:
    assert not analyse(code).shell


@pytest.mark.parametrize(
    ("code", "imports", "calls"),
    [
        ("import timeit\ntimeit.timeit(\"import os; os.popen('id')\", number=1)", {"os"},
         {"os.popen"}),
        ("from timeit import Timer\nTimer('pass', setup='import subprocess').timeit()",
         {"subprocess"}, set()),
        ("import timeit\ntimeit.repeat(stmt='__import__(\"pty\").spawn(\"id\")')", {"pty"},
         {"pty.spawn"}),
        ("import cProfile\ncProfile.run('import socket')", {"socket"}, set()),
        ("import pdb\npdb.run('import os; os.system(1)')", {"os"}, {"os.system"}),
    ],
)  # fmt: skip
def test_python_text_a_function_runs_is_the_cells_own(
    code: str, imports: set[str], calls: set[str]
) -> None:
    """``timeit.timeit("import os; ...")`` ran code no rule saw, as ``exec`` of a literal
    did before it was analysed."""
    facts = analyse(code)
    assert imports <= facts.imports and calls <= facts.calls, facts
    assert not facts.unknown and not facts.dynamic_exec, facts


def test_python_text_built_for_such_a_function_is_unknown_and_a_callable_is_not() -> None:
    for code in ("import timeit\ntimeit.timeit('import o' + 's')", "cProfile.run(src)"):
        facts = analyse(code)
        assert facts.unknown == {"exec_source"} and facts.dynamic_exec, code
    facts = analyse("import timeit\ntimeit.timeit(f, number=3)\ntimeit.timeit(lambda: g(1))")
    assert not facts.unknown and not facts.dynamic_exec


def test_the_table_of_magics_called_by_hand_is_unknown() -> None:
    facts = analyse("get_ipython().magics_manager.magics['line']['sx']('id')")
    assert facts.unknown == {"magic"}
    assert analyse("import operator\noperator.attrgetter(name)(m)").unknown == {"getattr"}


def test_a_magic_line_that_is_not_python_is_unknown() -> None:
    assert analyse("%time f(").unknown == {"magic"}


@pytest.mark.parametrize(
    ("code", "call", "unknown"),
    [
        ("import os\nvars(os)['system']('ls')", "os.system", set()),
        ("import os\nos.__dict__['system']('ls')", "os.system", set()),
        ("import sys\nsys.modules['os'].system('ls')", "os.system", set()),
        ("import sys\nm = sys.modules['subprocess']\nm.run(['ls'])", "subprocess.run", set()),
        ("import sys\nsys.modules.get('os').system('ls')", "os.system", set()),
        ("import os\nvars(os).get('system')('ls')", "os.system", set()),
        ("import os as o\nf = o.__dict__['system']\nf('ls')", "os.system", set()),
        ("import os\nk = 'sys' + 'tem'\nvars(os)[k]('ls')", None, {"getattr"}),
        ("import sys\nsys.modules['o' + 's'].system('ls')", None, {"getattr"}),
    ],
)
def test_a_namespace_read_by_key_is_the_attribute(
    code: str, call: str | None, unknown: set[str]
) -> None:
    """``vars(os)["system"]``, ``os.__dict__["system"]`` and ``sys.modules["os"]`` are
    attribute access by another name: they were listed as evasions that reported nothing.
    A computed key is a computed attribute (``unknown: getattr``)."""
    facts = analyse(code)
    if call is not None:
        assert call in facts.calls, facts
    assert facts.unknown == unknown, facts


@pytest.mark.parametrize(("row", "code", "wanted", "unknown"), EVASIONS)
def test_known_evasions_are_not_caught(row: str, code: str, wanted: str, unknown: set[str]) -> None:
    facts = analyse(code)
    assert wanted not in facts.calls | facts.imports | facts.writes_outside_workspace
    assert not (wanted == "!" and facts.shell)
    assert facts.unknown == unknown


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("r = exec", "exec_source"),
        ("ev = eval", "exec_source"),
        ("c = compile", "exec_source"),
        ("fns = [exec]", "exec_source"),
        ("import builtins\nrun(builtins.exec)", "exec_source"),
        ("r = __builtins__.eval", "exec_source"),
        ("r = exec.__call__", "exec_source"),
        ("import timeit\nt = timeit.timeit", "exec_source"),
        ("run = get_ipython().run_cell", "exec_source"),
        ("imp = __import__", "import"),
        ("m = list(map(__import__, ['os']))[0]\nm.system('id')", "import"),
        ("import importlib\nmods = list(map(importlib.import_module, ['os']))", "import"),
        ("g = getattr", "getattr"),
        ("from functools import reduce\nreduce(getattr, ['a', 'b'], obj)", "getattr"),
        ("import builtins\nr = getattr(builtins, 'exec')", "exec_source"),
        ("r = vars(__builtins__)['exec']", "exec_source"),
        ("b = __builtins__", "introspection"),
        ("f = get_ipython().find_line_magic", "magic"),
        ("exec('x.y(1)')\nexec('r = exec')", "exec_source"),  # in literal sources too
    ],
)
def test_a_function_that_runs_or_imports_code_used_as_a_value_is_unknown(
    code: str, kind: str
) -> None:
    """``r = exec`` in one cell and ``r("import o" + "s")`` in the next, or
    ``map(__import__, ["os"])``, reported nothing: the later call is the bare name ``r``
    (found by an outside security tester). Used as a value, such a function is unknown."""
    facts = analyse(code)
    assert kind in facts.unknown, facts
    assert facts.dynamic_exec == (kind == "exec_source"), facts


def test_a_shell_method_used_as_a_value_is_the_shell() -> None:
    assert analyse("s = get_ipython().system").shell
    assert analyse("f(get_ipython().getoutput)").shell


@pytest.mark.parametrize(
    "code",
    [
        "exec('x = 1')\neval('1 + 2')\ncompile('1', 'f', 'eval')",
        "getattr(obj, 'a')\nhasattr(obj, 'b')",
        "import re\np = re.compile('a')\np.match('a')",
        "model.compile(optimizer='adam')\nmodel.eval()",
        "import pandas as pd\ndf.eval('a + b')\npd.eval('1 + 2')\ndf.apply(len)",
        "def f(eval):\n    return eval",
        "exec = print\nexec('x')",
        "x = obj.exec\ny = obj.getattr",
        "exec.__call__('x = 1')",
        "import builtins\nbuiltins.print('x')",
    ],
)
def test_those_functions_called_or_shadowed_are_not_values(code: str) -> None:
    facts = analyse(code)
    assert not facts.unknown and not facts.dynamic_exec, facts


@pytest.mark.parametrize(
    "code",
    [
        "w = [c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close']"
        "[0]\nw.__init__.__globals__['system']('id')",
        "object.__subclasses__()",
        "f.__globals__['system']('id')",
        "f.__code__",
        "f.__code__ = g.__code__",
        "len.__self__.__import__('os')",
        "import sys\nsys._getframe().f_globals['x']",
        "import inspect\ninspect.currentframe().f_back.f_locals",
        "g = (x for x in [1])\ng.gi_frame.f_globals",
        "getattr(f, '__globals__')",
        "import operator\noperator.attrgetter('__init__.__globals__')(c)",
        "pathlib.__builtins__",
        "vars(type)['__subclasses__'](object)",
        "object.__getattribute__(f, '__globals__')",
        "from functools import reduce\nreduce(getattr, ['__init__', '__globals__'], c)",
        "try:\n    1 / 0\nexcept Exception as e:\n    e.__traceback__.tb_frame.f_globals",
    ],
)
def test_introspection_of_the_interpreters_machinery_is_unknown(code: str) -> None:
    """The ``__subclasses__()`` walk to ``os._wrap_close.__init__.__globals__["system"]``
    started a process with no fact a rule could match, not even ``unknown`` (found by an
    outside security tester)."""
    assert "introspection" in analyse(code).unknown


@pytest.mark.parametrize(
    ("code", "shell", "unknown"),
    [
        ("ip.getoutput('id')", True, set()),
        ("shell.system_piped('id')", True, set()),
        ("ip.run_cell(text)", False, {"exec_source"}),
        ("r = ip.run_cell", False, {"exec_source"}),
        ("ip.run_line_magic('sx', 'id')", True, set()),
        ("ip.find_line_magic(name)('id')", False, {"magic"}),
        ("ip.run_line_magic('matplotlib', 'inline')", False, set()),
        ("import subprocess\nsubprocess.getoutput('true')", False, set()),
        ("object.__getattribute__(f, '__glo' + 'bals__')", False, {"getattr"}),
        ("x.__getattribute__('a')", False, set()),
    ],
)
def test_methods_known_by_their_name_on_any_object(
    code: str, shell: bool, unknown: set[str]
) -> None:
    """The IPython shell kept by an earlier cell (``ip = get_ipython()``) ran a command or
    built text past every rule: its methods that no other object has are the shell's on
    whatever object; ``__getattribute__`` with a computed name is ``getattr``'s."""
    facts = analyse(code)
    assert facts.shell == shell and facts.unknown == unknown, facts
