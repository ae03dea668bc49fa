"""The package's layers, read from the code's own imports: each layer is a package of `indexer/`
(the command line on top, in `indexer/` itself), a module imports only from its own layer or
those below, and no modules import each other round in a circle (docs/architecture.md,
"Layers"). Every import counts, a function's own and one under TYPE_CHECKING too: a runner that
imports the Worker "for its type" is still a runner that knows the worker. The test kit
(`indexer/testing`) stands beside the layers, for the tests and benchmarks alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "indexer"

# Bottom to top; "" is indexer/ itself: the command line.
LAYERS = ["base", "jobqueue", "node", "chaindata", "decoding", "jobs", "operations", ""]


def imports_of(source: str, package: str) -> set[str]:
    """The modules of indexer/ (dotted below it, "node.rpc") that `source`, a module of
    `package` ("node"; "" for indexer/ itself), imports, anywhere in it; a name imported from a
    package counts as that module when it is one (`from ..base import db`)."""
    here = package.split(".") if package else []
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
            target = base + (node.module.split(".") if node.module else [])
            if (PACKAGE.joinpath(*target).with_suffix(".py")).exists():
                found.add(".".join(target))
            else:  # a package: its names are modules
                found.update(".".join(target + [a.name]) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("indexer."):
            target = node.module.split(".")[1:]
            found.add(".".join(target) if PACKAGE.joinpath(*target).with_suffix(".py").exists()
                      else ".".join(target + [node.names[0].name]))
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".", 1)[1] for a in node.names if a.name.startswith("indexer."))
    return found


def modules() -> dict[str, Path]:
    """Every module of the package but the test kit, dotted below indexer/."""
    return {".".join(p.relative_to(PACKAGE).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py" and p.relative_to(PACKAGE).parts[0] != "testing"}


def layer_of(module: str) -> str:
    return module.rsplit(".", 1)[0] if "." in module else ""


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: {m for m in imports_of(path.read_text(), layer_of(name)) if m in found}
            for name, path in found.items()}


def upward(graph: dict[str, set[str]], layers: list[str]) -> list[str]:
    """Each import that climbs to a higher layer, as "module -> module"."""
    level = {name: i for i, name in enumerate(layers)}
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if level[layer_of(b)] > level[layer_of(a)])


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import one another round in a circle (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph.get(v, ()):
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_is_in_a_layer():
    assert {layer_of(m) for m in modules()} <= set(LAYERS)
    assert all((PACKAGE / layer / "__init__.py").exists() for layer in LAYERS if layer)


def test_no_module_imports_up_a_layer():
    assert upward(import_graph(), LAYERS) == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(import_graph()) == []


@pytest.mark.parametrize("source, package, imported", [
    ("from . import queue, claims", "jobqueue", {"jobqueue.queue", "jobqueue.claims"}),
    ("from ..base import db, logs", "operations", {"base.db", "base.logs"}),
    ("from ..node.rpc import RpcClient", "jobs", {"node.rpc"}),
    ("from .operations import worker", "", {"operations.worker"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..operations.worker import Worker", "jobs",
     {"operations.worker"}),
    ("def f():\n    from indexer.operations.pool import Counters", "jobs", {"operations.pool"}),
    ("import indexer.cli", "", {"cli"}),
    ("import json\nfrom psycopg import sql", "base", set()),
])
def test_every_kind_of_import_is_seen(source, package, imported):
    assert imports_of(source, package) == imported


def test_a_back_import_and_a_circle_are_caught():
    """What the checks above would say of the circle this package had: a runner importing the
    worker that dispatches to it."""
    graph = {"operations.worker": {"jobs.index_blocks"}, "jobs.index_blocks": {"operations.worker"}}
    assert upward(graph, LAYERS) == ["jobs.index_blocks -> operations.worker"]
    assert circles(graph) == [["jobs.index_blocks", "operations.worker"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_is_over_400_lines():
    """A module reads in one sitting: past 400 lines it holds more than one concern."""
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
