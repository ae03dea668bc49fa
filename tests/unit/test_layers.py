"""The package's layers, read from the code's own imports: a module imports only from its own
layer or those below, and no modules import each other round in a circle (docs/architecture.md,
"Layers"). Every import counts, a function's own and one under TYPE_CHECKING too: a runner that
imports the Worker "for its type" is still a runner that knows the worker."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "indexer"

# Bottom to top. A new module goes in the lowest layer its imports allow.
LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"errors", "states", "block_range", "wording", "urls", "signals", "settings", "logs", "db", "metrics"}),
    ("queue", {"queue", "queue_counts", "claims", "progress", "retention"}),
    ("chain", {"rpc_errors", "rpc_rate", "rpc_transport", "rpc_batch", "columns", "rows", "rlp_codec", "ordered_trie", "encodings", "json_encodings", "roots", "stored_roots", "traces", "rpc", "endpoints", "chain", "store", "forks", "prefetch",
               "heads", "health"}),
    ("decoding", {"abi_names", "abi_parse", "abi_decode", "abi", "token_transfers"}),
    ("jobs", {"job_context", "index_blocks", "decode_logs", "index_traces", "partitions", "planner", "reaper"}),
    ("operations", {"follow", "verify", "verify_node", "rollback", "status", "exporter", "worker", "pool"}),
    ("cli", {"cli_parser", "cli"}),
]


def imports_of(source: str) -> set[str]:
    """The package's own modules that `source` (a module of the package) imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("indexer."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names if a.name.startswith("indexer."))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: imports_of(path.read_text()) & modules.keys() for name, path in modules.items()}


def upward(graph: dict[str, set[str]], layers: list[tuple[str, set[str]]]) -> list[str]:
    """Each import that climbs to a higher layer, as "module (layer) -> module (layer)"."""
    level = {module: (i, name) for i, (name, members) in enumerate(layers) for module in members}
    return sorted(f"{a} ({level[a][1]}) -> {b} ({level[b][1]})"
                  for a, targets in graph.items() for b in targets if level[b][0] > level[a][0])


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


def test_every_module_has_a_layer_and_only_one():
    placed = [m for _, members in LAYERS for m in members]
    assert len(placed) == len(set(placed)), "a module in two layers"
    assert set(placed) == set(import_graph()), "modules without a layer, or layers naming modules that are gone"


def test_no_module_imports_up_a_layer():
    assert upward(import_graph(), LAYERS) == []


def test_no_modules_import_each_other_in_a_circle():
    assert circles(import_graph()) == []


@pytest.mark.parametrize("source, imported", [
    ("from . import queue, rows", {"queue", "rows"}),
    ("from .worker import Worker", {"worker"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .worker import Worker", {"worker"}),
    ("def f():\n    from indexer.pool import Counters", {"pool"}),
    ("import indexer.cli", {"cli"}),
    ("import json\nfrom psycopg import sql", set()),
])
def test_every_kind_of_import_is_seen(source, imported):
    assert imports_of(source) == imported


def test_a_back_import_and_a_circle_are_caught():
    """What the checks above would say of the circle this package had: a runner importing the
    worker that dispatches to it."""
    layers = [("jobs", {"index_blocks"}), ("operations", {"worker"})]
    graph = {"worker": {"index_blocks"}, "index_blocks": {"worker"}}
    assert upward(graph, layers) == ["index_blocks (jobs) -> worker (operations)"]
    assert circles(graph) == [["index_blocks", "worker"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_the_package_is_over_400_lines():
    """A module reads in one sitting: past 400 lines it holds more than one concern."""
    long = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
