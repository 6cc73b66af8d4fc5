"""What a cell would do, derived from its source before it runs: the facts a policy matches.

Pure: code in, :class:`Facts` out, with the standard library's :mod:`ast` (never a regex
over the source). IPython syntax (``!cmd``, ``%magic``, ``%%cell_magic``) is turned into
the Python IPython itself would run first, so a shell escape is seen as the
``get_ipython().system(...)`` call it becomes.

Names are resolved through the cell's own imports and assignments (plain, chained,
tuple, annotated and walrus): after ``import subprocess as sp`` the call ``sp.run`` is
``subprocess.run``; after ``from os import system as s`` the call ``s`` is ``os.system``;
``os.path.join`` is an attribute chain on ``os``. A chain that reaches a module through
another module's attribute is the module itself: ``os.path.os.system``,
``shutil.os.system`` and ``tempfile._os.system`` are ``os.system``, and ``os`` counts as
imported (for the modules in :data:`REEXPORTED_MODULES`; as does ``sys.modules["os"]``).
Such a chain may start at a name of an earlier cell (``pandas.io.common.os`` after
``import pandas`` ran before) or at a value the analyser cannot name (``[pathlib][0].os``),
so any root counts but a name this cell binds to something else (a parameter, a loop
variable, a call's result); ``arr.ctypes`` (a numpy array's attribute) is ``ctypes`` only
when ``arr`` is a module the cell imports.
``from os import *`` binds the names the module exports, for the modules in
:data:`STAR_MODULES`; a star import of any other module is ``unknown: star_import``.
The literal source given to ``exec``/``eval``/``compile`` is analysed as code too (nested
up to :data:`MAX_NESTED_SOURCE` deep). What cannot be known without running the code (an
import whose name is a variable, ``getattr`` with a computed name, ``eval`` of a string
built at run time) is reported in :attr:`Facts.unknown` instead of guessed; so is such a
function used as a value rather than called (``r = exec``: a later cell's ``r(text)`` is a
call no rule reads) and an attribute of the interpreter's machinery
(:data:`INTROSPECTION_ATTRIBUTES`: ``__subclasses__``, ``__globals__``, frames), also
named by a string. Methods that only the IPython shell has (``getoutput``, ``run_cell``)
are the shell's on any object, as a shell kept by an earlier cell (``ip``) is. A policy
is not a sandbox: README "Policies" lists what this analysis does not catch.
"""

from __future__ import annotations

import ast
import importlib
import posixpath
import re
import shlex
from dataclasses import dataclass
from functools import cache
from typing import Any

#: Line magics (after ``%``) and cell magics (after ``%%``) that run a shell: IPython's
#: own, ``alias`` and ``rehashx`` (they make shell commands into magics), and the aliases
#: every IPython defines (``%ls``, ``%ll``, ``%cat``, ``%rm`` ... run them in a shell).
SHELL_MAGICS = frozenset(
    {"sx", "system", "sh", "bash", "script", "pip", "conda", "mamba", "run", "perl", "ruby",
     "alias", "rehashx", "mkdir", "rmdir", "mv", "rm", "cp", "cat", "ls", "ll", "lf", "lk",
     "ldir", "lx", "clear", "less", "man", "more"}
)  # fmt: skip
#: Magics that run Python given to them, on their line (after options) or as their cell:
#: what they run is analysed as the cell's own code (``%%time`` then ``import x``).
CODE_MAGICS = {"time": (True, True), "timeit": (True, True), "prun": (True, True),
               "debug": (True, True), "capture": (False, True)}  # fmt: skip
#: Leading options of a magic's line (``-n 1 -r1 -q``), before its code.
_MAGIC_OPTIONS = re.compile(r"\s*(?:-\w+(?:\s+\d+)?\s+)*")
#: Methods of the IPython shell that run a cell's text (its magics too).
_CELL_RUNNERS = frozenset({"run_cell", "run_cell_async", "ex", "ev"})
#: Methods of the IPython shell that run a shell command (``!cmd`` is ``system``, ``!!cmd``
#: and ``%sx`` are ``getoutput``), and those that look up a magic to call it.
_SHELL_METHODS = frozenset({"system", "getoutput", "system_piped", "system_raw"})
_MAGIC_FINDERS = frozenset({"find_line_magic", "find_cell_magic", "find_magic"})
_MAGIC_RUNNERS = frozenset({"run_line_magic", "run_cell_magic", "magic"})
#: Of those, the names no other common object has: called or used as a value on any object,
#: they are the shell's (``ip = get_ipython()`` in an earlier cell, ``ip.getoutput("ls")``).
_IPYTHON_ONLY_METHODS = frozenset(
    {"getoutput", "system_piped", "system_raw", "run_cell", "run_cell_async",
     "find_line_magic", "find_cell_magic", "find_magic", "run_line_magic", "run_cell_magic"}
)  # fmt: skip
#: IPython's own functions that run a shell command (what ``get_ipython().system`` uses).
_IPYTHON_SHELL_FUNCTIONS = frozenset(
    {"IPython.utils.process.system", "IPython.utils.process.getoutput",
     "IPython.utils.process.getoutputerror", "IPython.utils.process.get_output_error_code"}
)  # fmt: skip
_IPYTHON_PROCESS_MODULES = ("IPython.utils._process_",)
#: Methods of an asyncio event loop that start a process, whatever object they are called
#: on (``loop.subprocess_exec``): the call is ``asyncio.AbstractEventLoop.<method>``.
_LOOP_SPAWNERS = frozenset({"subprocess_exec", "subprocess_shell"})
#: Characters without which IPython leaves a cell as it is (magics, shell, help).
_IPYTHON_MARKS = ("!", "%", "?")
#: Calls that open a path for writing when given a writing mode.
_OPENERS = frozenset({"open", "io.open", "os.open", "pathlib.Path.open", "codecs.open"})
_PATH_WRITERS = frozenset({"write_text", "write_bytes", "touch", "mkdir", "unlink", "rmdir"})
_DYNAMIC_RUNNERS = frozenset({"eval", "exec", "compile", "builtins.eval", "builtins.exec"})
#: Other functions that run Python text given to them (its positions and keywords): a
#: literal is analysed as the cell's code, text built by an expression is unknown. The
#: ``timeit`` ones also take a callable, so a name or a lambda given to them is taken to be
#: one; the others take text only.
_STATEMENT = ((0, "statement"),)
_TEXT_RUNNERS: dict[str, tuple[tuple[int, str], ...]] = {
    "timeit.timeit": ((0, "stmt"), (1, "setup")),
    "timeit.repeat": ((0, "stmt"), (1, "setup")),
    "timeit.Timer": ((0, "stmt"), (1, "setup")),
    "cProfile.run": _STATEMENT,
    "cProfile.runctx": _STATEMENT,
    "profile.run": _STATEMENT,
    "profile.runctx": _STATEMENT,
    "pdb.run": _STATEMENT,
    "pdb.runctx": _STATEMENT,
    "pdb.runeval": ((0, "expression"),),
}
_CALLABLE_TAKERS = frozenset({"timeit.timeit", "timeit.repeat", "timeit.Timer"})
#: Methods of a mapping that read one key (``sys.modules.get("os")``).
_ITEM_READERS = frozenset({"get", "__getitem__", "pop", "setdefault"})
#: Calls that find or load the module named by their first argument, without importing
#: it by that name (``importlib.util.find_spec("os")``, ``__loader__.load_module("os")``).
_MODULE_FINDERS = frozenset(
    {"importlib.util.find_spec", "importlib.find_loader", "pkgutil.get_loader",
     "pkgutil.find_loader", "importlib.machinery.PathFinder.find_spec"}
)  # fmt: skip
_IMPORTERS = frozenset(
    {"__import__", "builtins.__import__", "importlib.import_module", "importlib.__import__",
     "__builtins__.__import__"}
)  # fmt: skip
#: Attributes that reach into the interpreter's own machinery: a class's subclasses (every
#: class loaded, ``os._wrap_close`` among them), a function's module globals and code, the
#: builtins of a module or of a builtin function (``len.__self__``), a frame's or a
#: generator's namespaces. Reading or writing one is ``unknown: introspection``: what it
#: leads to is found by running code (``().__class__.__base__.__subclasses__()``).
INTROSPECTION_ATTRIBUTES = frozenset(
    {"__subclasses__", "__globals__", "__builtins__", "__code__", "__closure__", "__self__",
     "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "gi_frame", "gi_code",
     "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next"}
)  # fmt: skip
#: Modules whose names, reached as an attribute of another module's chain, are taken to be
#: that module re-exported (``os.path.os`` is ``os``, ``shutil.os`` is ``os``), also with
#: one leading underscore (``tempfile._os``, ``random._os`` are ``os``). A fixed list, not
#: every module name: ``numpy.random`` or ``pandas.io`` are not ``random``/``io``.
REEXPORTED_MODULES = frozenset(
    {"os", "posix", "sys", "subprocess", "shutil", "socket", "ctypes", "importlib", "builtins",
     "pty", "pickle", "marshal", "multiprocessing", "asyncio", "_posixsubprocess",
     # Packages of the kernel image with functions that run a command they are given.
     "pexpect", "ptyprocess", "psutil", "tornado", "jupyter_client"}
)  # fmt: skip
#: Of those, names that common objects have as attributes (a numpy array's ``.ctypes``):
#: the module only in a chain that starts at a module the cell itself imports.
OBJECT_ATTRIBUTES = frozenset({"ctypes"})
#: Modules whose ``from M import *`` binds the names M exports (its ``__all__``, read from
#: the broker's own copy of the standard library); any other star import is unknown.
STAR_MODULES = frozenset({"os", "posix", "subprocess", "shutil", "socket"})
#: How deep literal sources of ``exec("...")`` inside ``exec("...")`` are analysed, and the
#: most source text analysed that way per cell; beyond either, ``unknown: exec_source``.
MAX_NESTED_SOURCE = 3
MAX_NESTED_CHARS = 100_000
#: Methods that write the file named by their first argument (pandas, numpy), whatever
#: object they are called on, and the keywords that name the path instead.
_DATA_WRITERS = frozenset(
    {"to_csv", "to_parquet", "to_excel", "to_json", "to_pickle", "to_feather", "to_hdf",
     "to_stata", "to_orc", "to_xml", "to_html", "to_latex", "to_markdown", "tofile"}
)  # fmt: skip
_PATH_KEYWORDS = ("path_or_buf", "path", "excel_writer", "fname", "file", "fid", "buf")
_NUMPY_SAVERS = frozenset({"numpy.save", "numpy.savetxt", "numpy.savez", "numpy.savez_compressed"})
#: Calls that write their second argument (the destination), and those that also change
#: their first (a rename removes the source).
_COPIERS = frozenset(
    {"shutil.copy", "shutil.copyfile", "shutil.copy2", "shutil.copytree", "os.link",
     "os.symlink"}
)  # fmt: skip
_MOVERS = frozenset({"shutil.move", "os.rename", "os.replace", "os.renames"})
#: Where a Docker session's files live; the local backend passes its own directory.
WORKSPACE_ROOTS = ("/workspace",)
#: What :meth:`_Walker._namespace` answers for ``f.__globals__`` (its keys are names).
_GLOBALS = "<globals>"


@dataclass(frozen=True)
class Facts:
    """What the analyser found in one cell.

    Attributes:
        syntax_error: the cell is not valid Python, even after IPython's transforms.
        imports: modules imported, with their parents (``os.path`` adds ``os``).
        calls: called names, resolved to dotted module paths where possible
            (``os.system``, ``subprocess.run``, ``eval``, ``pathlib.Path.unlink``).
        magics: IPython magics used (``bash``, ``pip``, ...), and ``!`` for a shell escape.
        shell: the cell starts a shell (``!cmd``, ``%sx``, ``%%bash``, ``%pip`` ...).
        dynamic_exec: ``eval``/``exec``/``compile`` of something other than a literal.
        writes_outside_workspace: literal paths opened for writing outside the workspace.
        unknown: what could not be determined (``import``, ``getattr``, ``write_path``,
            ``exec_source``, ``introspection``, ``magic``, ``star_import``); a rule can
            match on it.
    """

    syntax_error: bool = False
    imports: frozenset[str] = frozenset()
    calls: frozenset[str] = frozenset()
    magics: frozenset[str] = frozenset()
    shell: bool = False
    dynamic_exec: bool = False
    writes_outside_workspace: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()

    def summary(self) -> dict[str, Any]:
        """The facts as JSON data (sorted lists; empty ones left out)."""
        out: dict[str, Any] = {}
        for name in ("imports", "calls", "magics", "writes_outside_workspace", "unknown"):
            values = getattr(self, name)
            if values:
                out[name] = sorted(values)
        for flag in ("syntax_error", "shell", "dynamic_exec"):
            if getattr(self, flag):
                out[flag] = True
        return out


def analyse(code: str, workspaces: tuple[str, ...] = WORKSPACE_ROOTS) -> Facts:
    """The facts of one cell (never raises); relative paths are in the workspace, and
    absolute ones are when under one of ``workspaces``."""
    source = _python_of(_automagic(code))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Facts(syntax_error=True, **_line_magics_only(code))
    walker = _Walker(workspaces, _bound_names(tree))
    try:
        walker.visit(tree)
    except RecursionError:
        return Facts(syntax_error=True, unknown=frozenset({"too_deep"}))
    return walker.facts()


# ------------------------------------------------------------------- IPython syntax


def _python_of(code: str) -> str:
    """The Python IPython would run for ``code`` (its magics and ``!`` made calls)."""
    if not any(mark in code for mark in _IPYTHON_MARKS):
        return code  # nothing for IPython to transform (and its transforms are slow)
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with ipykernel
        return code
    try:
        result: str = TransformerManager().transform_cell(code)  # type: ignore[no-untyped-call]
    except Exception:
        return code
    return result


def _automagic(code: str) -> str:
    """``code``, with the ``%`` IPython's automagic gives a one-line cell that starts with
    a shell magic's name (``ls -la``, ``pip install x``, ``ll /etc``): IPython runs such a
    line as the magic unless a variable has its name, which a policy cannot know, so it
    is taken to be the magic (an assignment, a call or an attribute is not)."""
    line = code.strip()
    if "\n" in line or not line:
        return code
    word, _, rest = line.partition(" ")
    rest = rest.lstrip()
    if word not in SHELL_MAGICS or rest[:1] in ("=", "(", "[", ".", ","):
        return code
    return "%" + line + "\n"


def _line_magics_only(code: str) -> dict[str, Any]:
    """Magic facts of a cell that does not parse, from its lines' prefixes alone."""
    magics: set[str] = set()
    for line in code.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("!"):
            magics.add("!")
        elif stripped.startswith("%"):
            name = stripped.lstrip("%").split(maxsplit=1)
            if name:
                magics.add(name[0])
    return {"magics": frozenset(magics), "shell": bool(magics & (SHELL_MAGICS | {"!"}))}


# ------------------------------------------------------------------------ the walker


def _module_named(attr: str) -> str | None:
    """The module an attribute named ``attr`` is taken to be (``os`` and ``_os`` are
    ``os``), or None."""
    if attr in REEXPORTED_MODULES:
        return attr
    if attr.startswith("_") and attr[1:] in REEXPORTED_MODULES:
        return attr[1:]
    return None


def _builtin(path: str) -> str:
    """``path`` without a leading ``builtins.`` or ``__builtins__.`` (``__builtins__.exec``
    is ``exec``)."""
    for prefix in ("builtins.", "__builtins__."):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _value_kind(path: str) -> str | None:
    """The ``unknown`` kind of a function that runs or imports code given to it, or reads a
    computed attribute, when it is used as a value (assigned, passed, put in a container)
    instead of being called: what it is given is then decided where it is called, which
    may be a later cell (``r = exec``, then ``r("import o" + "s")``). None for any other."""
    name = _builtin(path)
    if name in _IMPORTERS:
        return "import"
    if name in _DYNAMIC_RUNNERS or name in _TEXT_RUNNERS:
        return "exec_source"
    if name == "getattr":
        return "getattr"
    if path in ("__builtins__", "builtins"):
        return "introspection"  # the builtins themselves: exec, __import__ by attribute
    return None


#: Statements and patterns that bind the name they carry (``def f``, ``except E as e``).
_NAMED_BINDERS = (
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs,
    ast.MatchStar,
)  # fmt: skip


def _bound_names(tree: ast.AST) -> set[str]:
    """The names ``tree`` binds other than by an import: assignment and loop targets,
    parameters, functions, classes, ``except ... as``, ``match`` captures."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, _NAMED_BINDERS) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


class _Walker(ast.NodeVisitor):
    def __init__(self, workspaces: tuple[str, ...], bound: set[str]) -> None:
        self.workspaces = workspaces
        #: Names the cell binds other than by an import (not modules, as far as it knows).
        self.bound = bound
        #: Local name -> the dotted path it stands for (``sp`` -> ``subprocess``).
        self.aliases: dict[str, str] = {}
        self.imports: set[str] = set()
        self.calls: set[str] = set()
        self.magics: set[str] = set()
        self.writes: set[str] = set()
        self.unknown: set[str] = set()
        self.dynamic_exec = False
        #: How deep in literal ``exec`` sources the walk is, and how much it has read.
        self.depth = 0
        self.nested_chars = 0
        #: Nodes that are called or read an attribute or item of, not used as values.
        self.used: set[ast.AST] = set()  # the nodes themselves: an id may be reused

    def facts(self) -> Facts:
        shell = bool(self.magics & (SHELL_MAGICS | {"!"}))
        return Facts(
            imports=frozenset(self.imports),
            calls=frozenset(self.calls),
            magics=frozenset(self.magics),
            shell=shell,
            dynamic_exec=self.dynamic_exec,
            writes_outside_workspace=frozenset(self.writes),
            unknown=frozenset(self.unknown),
        )

    # -- names

    def _import(self, module: str) -> None:
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            self.imports.add(".".join(parts[:i]))

    def _may_be_module(self, root: str, module: str) -> bool:
        """Whether the first name of a chain may hold a module (so its attribute
        ``module`` is that module): one this cell imports, or one it does not bind at all
        (an earlier cell's ``import pandas``)."""
        if root in self.imports:
            return True
        return root not in self.bound and module not in OBJECT_ATTRIBUTES

    def normal(self, path: str) -> str:
        """``path`` with a module re-exported by a module's chain taken as itself, and
        counted as imported: ``os.path.os.system`` and ``pathlib.os.system`` are
        ``os.system`` (the last such module wins)."""
        parts = path.split(".")
        for i in range(len(parts) - 2, 0, -1):
            module = _module_named(parts[i])
            if module is not None and self._may_be_module(parts[0], module):
                self._import(module)
                return ".".join([module, *parts[i + 1 :]])
        return path

    def _reach(self, base: str, attr: str) -> None:
        """``base.attr`` is read: a module's chain that ends at a module named in
        :data:`REEXPORTED_MODULES` (``x = pathlib.os``) imports it."""
        module = _module_named(attr)
        if module is not None and self._may_be_module(base.split(".")[0], module):
            self._import(module)

    def _bind(self, target: ast.AST, value: ast.AST | None) -> None:
        """``target = value``: a name takes the value's path, or forgets its alias."""
        if isinstance(target, ast.Name):
            path = self.resolve(value) if value is not None else None
            if path is not None and isinstance(
                value, ast.Name | ast.Attribute | ast.Call | ast.NamedExpr | ast.Subscript
            ):
                self.aliases[target.id] = path
            else:
                self.aliases.pop(target.id, None)
        elif isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) else None
            if values is not None and len(values) != len(target.elts):
                values = None
            for i, element in enumerate(target.elts):
                self._bind(element, values[i] if values is not None else None)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, None)

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted path of a name or attribute chain, through known aliases."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base is not None else None
        if isinstance(node, ast.Subscript):
            return self._item_path(node.value, node.slice)
        if isinstance(node, ast.Call):
            inner = self.resolve(node.func)
            if inner is not None and _builtin(inner) == "getattr":
                return self._getattr_path(node)
            if (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in _ITEM_READERS
                and node.args
                and self._namespace(node.func.value) is not None
            ):
                # ``sys.modules.get("os")``, ``vars(os).get("system")``: as an item.
                return self._item_path(node.func.value, node.args[0])
            if (
                inner is not None
                and _builtin(inner) in _IMPORTERS
                and node.args
                and _literal_str(node.args[0]) is not None
            ):
                return _literal_str(node.args[0])
            if inner in ("get_ipython", "IPython.get_ipython") or (
                inner is not None and inner.endswith("InteractiveShell.instance")
            ):
                return "get_ipython()"
            if inner is not None and inner.endswith(("pathlib.Path", "pathlib.PurePath")):
                return "pathlib.Path"
        return None

    def _namespace(self, node: ast.AST) -> str | None:
        """What a mapping of names stands for: ``""`` for ``sys.modules`` (its keys are
        modules), a path for ``vars(path)`` or ``path.__dict__`` (its keys are attributes);
        None for any other value."""
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            if func == "vars" and len(node.args) == 1 and not node.keywords:
                return self.resolve(node.args[0])
            if func in ("globals", "locals", "vars") and not node.args:
                return _GLOBALS  # the cell's own names: its keys are names
            return None
        path = self.resolve(node)
        if path is None:
            return None
        if self.normal(path) == "sys.modules":
            return ""
        if path.endswith(".__globals__"):
            return _GLOBALS
        if path == "__builtins__" or path.endswith(".__builtins__"):
            return "builtins"  # a module's __builtins__ is the builtins' dict
        if path.endswith(".__dict__"):
            return path[: -len(".__dict__")]
        return None

    def _item_path(self, mapping: ast.AST, key: ast.AST) -> str | None:
        """``sys.modules["os"]`` is ``os``, ``vars(os)["system"]`` and
        ``os.__dict__["system"]`` are ``os.system``: attribute access by another name. A
        computed key there is a computed attribute (``unknown: getattr``)."""
        base = self._namespace(mapping)
        if base is None:
            return None
        name = _literal_str(key)
        if name is None:
            self.unknown.add("getattr")
            return None
        if base == _GLOBALS:
            # A function's module globals: ``f.__globals__["os"]`` is a module.
            module = _module_named(name)
            if module is not None:
                self._import(module)
            return module or name
        if not base:
            self._import(name)  # sys.modules["os"] is os, imported
            return name
        self._reach(base, name)
        return f"{base}.{name}"

    def _getattr_path(self, call: ast.Call) -> str | None:
        if len(call.args) < 2:
            return None
        base = self.resolve(call.args[0])
        attr = _literal_str(call.args[1])
        if attr is None:
            self.unknown.add("getattr")
            return None
        if base is None:
            return None
        self._reach(base, attr)
        return f"{base}.{attr}"

    # -- statements

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._import(alias.name)
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.unknown.add("import")  # relative: depends on where the code runs
        if module:
            self._import(module)
        for alias in node.names:
            if alias.name == "*":
                self._star(module if not node.level else "")
                continue
            full = f"{module}.{alias.name}" if module else alias.name
            self.aliases[alias.asname or alias.name] = full
            if module:
                self.imports.add(full)  # `from os import path` may import a submodule
                reexported = _module_named(alias.name)
                if reexported is not None:
                    self._import(reexported)  # `from pathlib import os` is os

    def _star(self, module: str) -> None:
        names = _exported(module) if module in STAR_MODULES else None
        if names is None:
            self.unknown.add("star_import")
            return
        for name in names:
            self.aliases[name] = f"{module}.{name}"

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        for target in node.targets:
            self._bind(target, node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.generic_visit(node)
        if node.value is not None:
            self._bind(node.target, node.value)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.generic_visit(node)
        self._bind(node.target, node.value)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.used.add(node.value)
        self.generic_visit(node)
        if node.attr in INTROSPECTION_ATTRIBUTES:
            self.unknown.add("introspection")  # read, written or deleted
        if not isinstance(node.ctx, ast.Load):
            return
        if node not in self.used:
            self._value(node)
        module = _module_named(node.attr)
        if module is not None:
            base = self.resolve(node.value)
            if base is not None:
                self._reach(base, node.attr)
            elif module not in OBJECT_ATTRIBUTES:
                # ``[pathlib][0].os``, ``f().os``: read off a value the analyser cannot
                # name; an ordinary object has no attribute named like these modules.
                self._import(module)
        elif node.attr == "magics_manager" and self.resolve(node.value) == "get_ipython()":
            self.unknown.add("magic")  # its table of magics, called by hand

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load) or node in self.used:
            return
        if node.id in self.aliases or node.id not in self.bound:
            self._value(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self.used.add(node.value)
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and node not in self.used:
            self._value(node)  # ``vars(builtins)["exec"]`` as a value

    def _value(self, node: ast.AST) -> None:
        """A name, attribute or item used as a value, not called: a function that runs,
        imports or looks up code given to it is ``unknown`` of its kind (the shell's
        methods are the shell), since where it is called no rule may see it."""
        if isinstance(node, ast.Attribute) and node.attr in _IPYTHON_ONLY_METHODS:
            self._value_path(f"get_ipython().{node.attr}")
            return
        path = self.resolve(node)
        if path is not None:
            self._value_path(path)

    def visit_Constant(self, node: ast.Constant) -> None:
        if node.value in INTROSPECTION_ATTRIBUTES:
            # Such a name as text: ``vars(type)["__subclasses__"]``,
            # ``object.__getattribute__(f, "__globals__")``, ``reduce(getattr, [...], x)``.
            self.unknown.add("introspection")

    def _value_path(self, path: str) -> None:
        while path.endswith(".__call__"):
            path = path.removesuffix(".__call__")
        path = self.normal(path)
        if path.startswith("get_ipython()."):
            method = path.removeprefix("get_ipython().").removeprefix("kernel.shell.")
            if method in _SHELL_METHODS:
                self.magics.add("!")
            elif method in _CELL_RUNNERS:
                self.dynamic_exec = True
                self.unknown.add("exec_source")
            elif method in _MAGIC_FINDERS or method in _MAGIC_RUNNERS:
                self.unknown.add("magic")
            return
        kind = _value_kind(path)
        if kind is not None:
            self.unknown.add(kind)
            if kind == "exec_source":
                self.dynamic_exec = True

    # -- calls

    def visit_Call(self, node: ast.Call) -> None:
        func: ast.AST = node.func
        self.used.add(func)
        while isinstance(func, ast.Attribute) and func.attr == "__call__":
            func = func.value  # ``exec.__call__(...)`` calls exec
            self.used.add(func)
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _DATA_WRITERS:
            self._data_write(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _LOOP_SPAWNERS:
            self.calls.add(f"asyncio.AbstractEventLoop.{node.func.attr}")
        raw = self.resolve(node.func)
        if isinstance(node.func, ast.Attribute):
            self._method_of_any(node.func.attr, raw, node)
        if raw is None:
            return
        # ``f.__call__(x)`` is ``f(x)``.
        while raw.endswith(".__call__"):
            raw = raw.removesuffix(".__call__")
        name = self.normal(raw)
        self.calls.add(raw)
        self.calls.add(name)
        if name.startswith(("builtins.", "__builtins__.")):
            name = _builtin(name)  # ``__builtins__.exec(...)`` is ``exec(...)``
            self.calls.add(name)
        if name == "getattr" and len(node.args) > 1:
            self._getattr_value(node)
        if name in _IMPORTERS:
            module = _literal_str(node.args[0]) if node.args else None
            if module is None:
                self.unknown.add("import")
            else:
                self._import(module)
        elif name in _DYNAMIC_RUNNERS:
            source = _literal_str(node.args[0]) if node.args else None
            if source is None:
                self.dynamic_exec = True
                self.unknown.add("exec_source")
            else:
                self._nested(source)
        elif name in _TEXT_RUNNERS:
            self._text_run(name, node)
        elif name in _MODULE_FINDERS or name.endswith(".load_module"):
            module = _literal_str(node.args[0]) if node.args else None
            if module is None:
                self.unknown.add("import")
            else:
                self._import(module)
        elif name == "operator.attrgetter":
            self._attrgetter(node)
        elif name.startswith("get_ipython()."):
            # ``get_ipython().kernel.shell`` is the same shell: its method is the last name.
            method = name.removeprefix("get_ipython().")
            self._ipython_call(method.removeprefix("kernel.shell."), node)
        elif name in _IPYTHON_SHELL_FUNCTIONS or name.startswith(_IPYTHON_PROCESS_MODULES):
            self.magics.add("!")  # what `!cmd` runs, called by hand
        self._check_write(name, node)

    def _method_of_any(self, method: str, raw: str | None, node: ast.Call) -> None:
        """A method known by its name, whatever it is called on: the IPython shell's own
        (``ip.getoutput("ls")``, ``ip.run_cell(text)``) and ``__getattribute__``, which
        is ``getattr`` (a computed name is ``unknown: getattr``)."""
        if method in _IPYTHON_ONLY_METHODS:
            if raw is None or not (
                self.normal(raw).startswith("get_ipython().") or raw.split(".")[0] in self.imports
            ):
                self._ipython_call(method, node)  # not a module's own (subprocess.getoutput)
        elif method == "__getattribute__" and node.args and _literal_str(node.args[-1]) is None:
            self.unknown.add("getattr")

    def _getattr_value(self, node: ast.Call) -> None:
        """``getattr(builtins, "exec")`` not called at once is ``exec`` used as a value (a
        literal such as ``"__globals__"`` is seen as text: :meth:`visit_Constant`)."""
        attr = _literal_str(node.args[1])
        if attr is not None and node not in self.used:
            base = self.resolve(node.args[0])
            if base is not None:
                self._value_path(f"{base}.{attr}")

    def _attrgetter(self, node: ast.Call) -> None:
        """``operator.attrgetter("os.system")(pathlib)``: attribute access by another name,
        of an object the analyser does not see; a module named in it is reached."""
        for arg in node.args:
            dotted = _literal_str(arg)
            if dotted is None:
                self.unknown.add("getattr")
                continue
            for part in dotted.split("."):
                if part in INTROSPECTION_ATTRIBUTES:
                    self.unknown.add("introspection")
                module = _module_named(part)
                if module is not None and module not in OBJECT_ATTRIBUTES:
                    self._import(module)

    def _text_run(self, name: str, node: ast.Call) -> None:
        """``timeit.timeit("...")``, ``cProfile.run("...")``: Python text run by a
        function, analysed as ``exec``'s is."""
        for position, keyword in _TEXT_RUNNERS[name]:
            arg = _argument(node, position, (keyword,))
            source = _literal_str(arg) if arg is not None else None
            if source is not None:
                self._nested(source)
            elif arg is not None and not (
                name in _CALLABLE_TAKERS and isinstance(arg, ast.Name | ast.Attribute | ast.Lambda)
            ):
                self.dynamic_exec = True
                self.unknown.add("exec_source")

    def _nested(self, source: str) -> None:
        """Analyse the literal source of ``exec("...")`` as code of this cell (it runs in
        the same namespace, so the cell's aliases hold in it and its own carry on)."""
        self.nested_chars += len(source)
        if self.depth >= MAX_NESTED_SOURCE or self.nested_chars > MAX_NESTED_CHARS:
            self.unknown.add("exec_source")
            return
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, MemoryError):
            return  # raises SyntaxError when run: nothing of it runs
        self.depth += 1
        try:
            self.visit(tree)
        finally:
            self.depth -= 1

    def _ipython_call(self, method: str, node: ast.Call) -> None:
        if method in _SHELL_METHODS:
            self.magics.add("!")
        elif method in _MAGIC_FINDERS:
            # get_ipython().find_line_magic("sx")(...): the magic, called by hand.
            magic = _literal_str(node.args[0]) if node.args else None
            if magic is None:
                self.unknown.add("magic")
            else:
                self.magics.add(magic)
        elif method.startswith("alias_manager."):
            self.magics.add("alias")  # a shell command made a magic
        elif method in _CELL_RUNNERS:
            source = _literal_str(node.args[0]) if node.args else None
            if source is None:
                self.dynamic_exec = True
                self.unknown.add("exec_source")
            else:
                self._nested(_python_of(source))
        elif method in _MAGIC_RUNNERS:
            magic = _literal_str(node.args[0]) if node.args else None
            if magic is None:
                self.unknown.add("magic")
            else:
                name = magic.split()[0] if magic.split() else magic
                self.magics.add(name)
                if name == "writefile" and method == "run_cell_magic":
                    self._writefile(node.args[1] if len(node.args) > 1 else None)
                if name in CODE_MAGICS:
                    self._magic_code(name, method == "run_cell_magic", node)

    def _magic_code(self, name: str, cell: bool, node: ast.Call) -> None:
        """The Python a code-running magic runs (``%time stmt``, ``%%timeit setup`` and
        its cell, ``%%capture``'s cell): analysed as this cell's, or ``unknown: magic``
        when it is not a literal or its line does not read as Python."""
        on_line, in_cell = CODE_MAGICS[name]
        parts = []
        if on_line and len(node.args) > 1:
            parts.append((node.args[1], True))
        if cell and in_cell and len(node.args) > 2:
            parts.append((node.args[2], False))
        for arg, is_line in parts:
            text = _literal_str(arg)
            if text is None:
                self.unknown.add("magic")
                continue
            if is_line:
                text = text[_MAGIC_OPTIONS.match(text).end() :]  # type: ignore[union-attr]
            source = _python_of(text)
            try:
                ast.parse(source)
            except (SyntaxError, ValueError, MemoryError):
                self.unknown.add("magic")
                continue
            self._nested(source)

    def _writefile(self, line: ast.AST | None) -> None:
        """``%%writefile [-a] path``: the path is the line's last word."""
        text = _literal_str(line) if line is not None else None
        try:
            words = shlex.split(text) if text is not None else []
        except ValueError:
            words = []
        path = words[-1] if words and not words[-1].startswith("-") else None
        self._write_target(ast.Constant(path) if path is not None else None)

    def _data_write(self, node: ast.Call) -> None:
        """``df.to_csv(path)``, ``arr.tofile(path)``: a write when a path is given."""
        target: ast.AST | None = node.args[0] if node.args else None
        for kw in node.keywords:
            if kw.arg in _PATH_KEYWORDS:
                target = kw.value
        if target is not None:
            self._write_target(target)

    def _check_write(self, name: str, node: ast.Call) -> None:
        method = name.rsplit(".", 1)[-1]
        if name in _OPENERS or (method == "open" and name.startswith("pathlib.Path")):
            path_node: ast.AST | None = (
                node.args[0] if node.args and name != "pathlib.Path.open" else None
            )
            if name == "pathlib.Path.open":
                path_node = _path_arg(node.func)
            mode = _mode_of(node, name)
            if mode is None or not any(c in mode for c in "wax+"):
                return
            self._write_target(path_node)
        elif name.startswith("pathlib.Path.") and method in _PATH_WRITERS:
            self._write_target(_path_arg(node.func))
        elif name in _NUMPY_SAVERS:
            self._write_target(_argument(node, 0, ("file", "fname")))
        elif name in _COPIERS or name in _MOVERS:
            if name in _MOVERS:
                self._write_target(_argument(node, 0, ("src",)))
            self._write_target(_argument(node, 1, ("dst",)))
        elif name.startswith("pathlib.Path.") and method in ("rename", "replace"):
            self._write_target(_path_arg(node.func))
            self._write_target(_argument(node, 0, ("target",)))

    def _write_target(self, node: ast.AST | None) -> None:
        path = _literal_str(node) if node is not None else None
        if path is None:
            self.unknown.add("write_path")
        elif _outside_workspace(path, self.workspaces):
            self.writes.add(path)


def _argument(node: ast.Call, position: int, keywords: tuple[str, ...]) -> ast.AST | None:
    """The argument at ``position``, or given by one of ``keywords``."""
    for kw in node.keywords:
        if kw.arg in keywords:
            return kw.value
    return node.args[position] if len(node.args) > position else None


@cache
def _exported(module: str) -> tuple[str, ...] | None:
    """The names ``from module import *`` binds (the broker's copy of the module)."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in dir(mod) if not n.startswith("_")]
    return tuple(str(n) for n in names)


def _path_arg(func: ast.AST) -> ast.AST | None:
    """The path given to ``Path(...)`` in ``Path(...).method``."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and func.value.args:
        return func.value.args[0]
    return None


def _mode_of(node: ast.Call, name: str) -> str | None:
    position = 0 if name == "pathlib.Path.open" else 1
    for kw in node.keywords:
        if kw.arg in ("mode", "flags"):
            return _literal_str(kw.value) or ("w" if name == "os.open" else None)
    if len(node.args) > position:
        value = node.args[position]
        if name == "os.open":
            return "w"  # flags are numbers; treat every os.open as a possible write
        return _literal_str(value)
    return "w" if name == "os.open" else "r"


def _literal_str(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _outside_workspace(path: str, roots: tuple[str, ...]) -> bool:
    if path.startswith("~"):
        return True
    if not path.startswith("/"):
        normal = posixpath.normpath(path)
        return normal == ".." or normal.startswith("../")
    normal = posixpath.normpath(path)
    return not any(normal == root or normal.startswith(root + "/") for root in roots)
