"""Every import arrow in ``interpreter/`` points down, and there is no import cycle.

The imports of every module are read with ``ast`` (module level, inside functions, and
under ``TYPE_CHECKING``), so a lazy import cannot hide an upward arrow. Each module belongs
to a layer; a layer may import itself and the layers it names below. A module that is in
no layer fails the test, so the table stays complete as modules are added.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "interpreter"

# Layer -> the layers it may import (besides its own). Lowest first.
_SERVICE = ["base", "storage", "image", "backends", "runtime", "session", "launch"]
LAYERS: dict[str, set[str]] = {
    "base": set(),
    "storage": {"base"},
    "image": {"base"},
    "backends": {"base", "image"},
    "runtime": {"base", "storage", "image", "backends"},
    "session": {"base", "storage", "image", "backends", "runtime"},
    "launch": {"base", "storage", "image", "backends", "runtime", "session"},
    "recovery": set(_SERVICE),
    "broker": {*_SERVICE, "recovery"},
    "openapi": {"base"},
    "api": {*_SERVICE, "recovery", "broker", "openapi"},
    "server": {*_SERVICE, "recovery", "broker", "openapi", "api"},
    # The SDK, and what is built on it, reach the service only over HTTP.
    "client": {"base"},
    "facade": {"base", "client"},
    "consumers": {"base", "client"},
    "cli": {
        *_SERVICE,
        "recovery",
        "broker",
        "openapi",
        "api",
        "server",
        "client",
        "facade",
        "consumers",
    },
}

# Module name patterns (fnmatch) -> layer; the first match wins.
MODULES: list[tuple[str, str]] = [
    ("interpreter", "facade"),
    ("interpreter._version", "base"),
    ("interpreter.errors", "base"),
    ("interpreter.ids", "base"),
    ("interpreter.models", "base"),
    ("interpreter.settings", "base"),
    ("interpreter.mime", "base"),
    ("interpreter.terminal", "base"),
    ("interpreter.exposure", "base"),
    ("interpreter.cells", "base"),
    ("interpreter.endings", "base"),
    ("interpreter.notes", "base"),
    ("interpreter.execution", "base"),
    ("interpreter.overwrite", "base"),
    ("interpreter.metrics", "base"),
    ("interpreter.shares", "base"),
    ("interpreter.logs", "base"),
    ("interpreter.audit", "base"),
    ("interpreter.notebook_repair", "base"),
    ("interpreter.notebook_budget", "base"),
    ("interpreter.memory", "base"),
    ("interpreter.kernelspecs", "base"),
    ("interpreter.memory", "base"),
    ("interpreter.artifacts", "storage"),
    ("interpreter.store", "storage"),
    ("interpreter.audit_verify", "storage"),
    ("interpreter.tree", "base"),
    ("interpreter.write_gate", "base"),
    ("interpreter.workspace", "storage"),
    ("interpreter.upload", "storage"),
    ("interpreter.form_upload", "storage"),
    ("interpreter.body_encoding", "base"),
    ("interpreter.storage_floor", "storage"),
    ("interpreter.datadir_lock", "storage"),
    ("interpreter.spill", "storage"),
    ("interpreter.idempotency", "storage"),
    ("interpreter.notebook", "storage"),
    ("interpreter.image", "image"),
    ("interpreter.image.*", "image"),
    ("interpreter.backends", "backends"),
    ("interpreter.quota", "backends"),
    ("interpreter.backends.*", "backends"),
    ("interpreter.policy", "base"),
    ("interpreter.policy.facts", "base"),
    ("interpreter.policy.rules", "base"),
    ("interpreter.policy.explain", "base"),
    ("interpreter.policy.loader", "storage"),
    ("interpreter.policy.approvals", "runtime"),
    ("interpreter.policy.gate", "runtime"),
    ("interpreter.policy.held", "session"),
    ("interpreter.handle", "runtime"),
    ("interpreter.outputs", "runtime"),
    ("interpreter.kernel", "runtime"),
    ("interpreter.wire", "runtime"),
    ("interpreter.kernel_manager", "runtime"),
    ("interpreter.iopub_watch", "runtime"),
    ("interpreter.waiting", "runtime"),
    ("interpreter.fifo", "runtime"),
    ("interpreter.heartbeat", "base"),
    ("interpreter.channels", "base"),
    ("interpreter.zmqctx", "base"),
    ("interpreter.channel_reader", "base"),
    ("interpreter.release", "runtime"),
    ("interpreter.retention", "runtime"),
    ("interpreter.restore_cells", "storage"),
    ("interpreter.restarts", "runtime"),
    ("interpreter.routing", "runtime"),
    ("interpreter.late", "runtime"),
    ("interpreter.snapshot", "runtime"),
    ("interpreter.displays", "runtime"),
    ("interpreter.readiness", "base"),
    ("interpreter.session", "session"),
    ("interpreter.launch", "launch"),
    ("interpreter.rebuild", "launch"),
    ("interpreter.recovery", "recovery"),
    ("interpreter.broker", "broker"),
    ("interpreter.openapi", "openapi"),
    ("interpreter.api", "api"),
    ("interpreter.api.*", "api"),
    ("interpreter.server", "server"),
    ("interpreter.client", "client"),
    ("interpreter.client.*", "client"),
    ("interpreter.tools", "consumers"),
    ("interpreter.tools.*", "consumers"),
    ("interpreter.replay", "consumers"),
    ("interpreter.replay.*", "consumers"),
    ("interpreter.mcp_server", "consumers"),
    ("interpreter.cli_settings", "consumers"),
    ("interpreter.cli_mcp", "consumers"),
    ("interpreter.cli_approvals", "consumers"),
    ("interpreter.mcp_executor", "consumers"),
    ("interpreter.mcp_auth", "consumers"),
    ("interpreter.mcp_service", "consumers"),
    ("interpreter.mcp_sessions", "consumers"),
    ("interpreter.cli_client", "consumers"),
    ("interpreter.cli", "cli"),
    ("interpreter.__main__", "cli"),
]

#: The only modules that may import tornado (the HTTP layer); domain code never does.
TORNADO_ALLOWED = ("interpreter.api", "interpreter.api.*", "interpreter.server")

Graph = dict[str, set[str]]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path, name: str, modules: set[str]) -> set[str]:
    """Every module name ``path`` imports, absolute, wherever the import statement is.

    ``from pkg import name`` imports the module ``pkg.name`` when there is one in
    ``modules``, else ``pkg`` (parent packages that any import loads are not arrows).
    """
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                prefix = ".".join([*base, node.module] if node.module else base)
            else:
                prefix = node.module or ""
            for alias in node.names:
                full = f"{prefix}.{alias.name}"
                found.add(full if full in modules else prefix)
    return found


def import_graph(root: Path = PACKAGE) -> tuple[Graph, dict[str, set[str]]]:
    """(arrows between modules of the package, every external top-level import)."""
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: Graph = {}
    external: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = imported_names(path, name, set(paths))
        graph[name] = {t for t in targets if t in paths and t != name}
        external[name] = {t.split(".")[0] for t in targets if t.split(".")[0] != root.name}
    return graph, external


def find_cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def layer_of(module: str, table: list[tuple[str, str]] = MODULES) -> str | None:
    for pattern, layer in table:
        if fnmatch.fnmatchcase(module, pattern):
            return layer
    return None


def upward_arrows(
    graph: Graph,
    table: list[tuple[str, str]] = MODULES,
    layers: dict[str, set[str]] = LAYERS,
) -> list[str]:
    problems = []
    for source, targets in sorted(graph.items()):
        source_layer = layer_of(source, table)
        if source_layer is None:
            problems.append(f"{source} is in no layer: add it to MODULES in {__name__}")
            continue
        allowed = layers[source_layer] | {source_layer}
        for target in sorted(targets):
            target_layer = layer_of(target, table)
            if target_layer is not None and target_layer not in allowed:
                problems.append(
                    f"{source} ({source_layer}) imports {target} ({target_layer}): "
                    f"{source_layer} may import only {', '.join(sorted(allowed))}"
                )
    return problems


def test_there_is_no_import_cycle() -> None:
    graph, _ = import_graph()
    assert find_cycles(graph) == []


def test_every_arrow_points_down() -> None:
    graph, _ = import_graph()
    assert upward_arrows(graph) == []


def test_only_the_http_layer_imports_tornado() -> None:
    _, external = import_graph()
    users = sorted(m for m, names in external.items() if "tornado" in names)
    assert users and all(any(fnmatch.fnmatchcase(m, p) for p in TORNADO_ALLOWED) for m in users), (
        users
    )


def test_every_layer_names_only_known_layers() -> None:
    assert {layer for _, layer in MODULES} <= set(LAYERS)
    assert all(deps <= set(LAYERS) for deps in LAYERS.values())


# ---------------------------------------------------------------- the checker itself


@pytest.mark.parametrize(
    ("graph", "cycles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_checker_finds_cycles(graph: Graph, cycles: list[list[str]]) -> None:
    assert sorted(find_cycles(graph)) == cycles


def test_the_checker_finds_upward_arrows_and_unknown_modules() -> None:
    table = [("pkg.low", "low"), ("pkg.high", "high")]
    layers: dict[str, set[str]] = {"low": set(), "high": {"low"}}
    graph = {"pkg.low": {"pkg.high"}, "pkg.high": {"pkg.low"}, "pkg.new": set()}
    problems = upward_arrows(graph, table, layers)
    assert problems == [
        "pkg.low (low) imports pkg.high (high): low may import only low",
        f"pkg.new is in no layer: add it to MODULES in {__name__}",
    ]


def test_the_checker_reads_lazy_relative_and_type_checking_imports(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "low.py").write_text("X = 1\n")
    (root / "sub" / "__init__.py").write_text("from .. import low\n")
    (root / "sub" / "mod.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import low\n"
        "def f():\n    from ..sub import mod\n    from . import other\n"
        "    import tornado.web\n"
    )
    graph, external = import_graph(root)
    assert graph["pkg.sub"] == {"pkg.low"}
    assert graph["pkg.sub.mod"] == {"pkg.low", "pkg.sub"}
    assert "tornado" in external["pkg.sub.mod"]
