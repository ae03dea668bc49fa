"""The bounds of `indexer abi`, against a real PostgreSQL (indexer/abi.py): an ABI past them is
refused before anything is written, and long names are printed shortened."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from indexer import abi

from .conftest import run_indexer


def event_tables(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'abi\\_%%' AND tablename <> 'abi_events'"
                        ).fetchone()[0]


def registry(conn: psycopg.Connection) -> tuple[int, int]:
    return conn.execute("SELECT (SELECT count(*) FROM abis), (SELECT count(*) FROM abi_events)").fetchone()


def deep_tuple(depth: int) -> dict[str, Any]:
    item: dict[str, Any] = {"name": "x", "type": "uint256"}
    for _ in range(depth):
        item = {"name": "t", "type": "tuple", "components": [item]}
    return item


def one_event(*inputs: dict[str, Any], name: str = "E") -> list[dict[str, Any]]:
    return [{"type": "event", "name": name, "inputs": list(inputs)}]


@pytest.mark.parametrize("document, message", [
    ([{"type": "event", "name": f"E{n}", "inputs": []} for n in range(abi.MAX_EVENTS + 1)],
     f"the ABI has {abi.MAX_EVENTS + 1} events; at most {abi.MAX_EVENTS} are allowed"),
    (one_event(*[{"name": f"a{n}", "type": "uint8"} for n in range(abi.MAX_PARAMS + 1)]),
     f"has {abi.MAX_PARAMS + 1} parameters; at most {abi.MAX_PARAMS} are allowed"),
    (one_event({"name": "a", "type": "uint256" + "[]" * 5000}),
     f"[][]… (10,007 characters)' has more than {abi.MAX_DIMENSIONS} array dimensions"),
    (one_event({"name": "a", "type": "uint256[99999999999999999999]"}),
     f"'uint256[99999999999999999999]' has fixed-size arrays of more than {abi.MAX_STATIC_WORDS:,} words in all"),
    (one_event(deep_tuple(abi.MAX_DEPTH + 1)), f"tuples nested more than {abi.MAX_DEPTH} deep"),
], ids=["events", "parameters", "dimensions", "array size", "nesting"])
def test_an_abi_past_a_bound_is_refused_with_one_line_and_nothing_written(db_url, conn, tmp_path, document,
                                                                          message):
    path = tmp_path / "abi.json"
    path.write_text(json.dumps(document))
    result = run_indexer("abi", "add", "past", str(path), db_url=db_url)
    assert result.returncode == 2, result
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr[:2000]
    assert result.stderr.startswith("indexer abi add: error: ") and message in result.stderr, result.stderr[:2000]
    assert registry(conn) == (0, 0) and event_tables(conn) == 0


def test_long_names_are_printed_shortened(db_url, conn, tmp_path):
    name = "Transfer" + "X" * 10_000
    path = tmp_path / "long.json"
    path.write_text(json.dumps([
        {"type": "event", "name": name, "inputs": [{"name": "who" * 3000, "type": "address", "indexed": True}]},
        {"type": "event", "name": name, "anonymous": True, "inputs": []}]))
    added = run_indexer("abi", "add", "long", str(path), db_url=db_url)
    assert added.returncode == 0, added.stderr[:2000]
    listed = run_indexer("abi", "list", db_url=db_url)
    shown = f"… ({len(name) + len('(address)'):,} characters)"
    (table,) = conn.execute("SELECT table_name FROM abi_events").fetchone()
    assert f"  Transfer{'X' * 71}{shown} -> {table}" in added.stdout.splitlines()
    assert f"  Transfer{'X' * 71}{shown} -> {table}: 0 row(s)" in listed.stdout.splitlines()
    assert "skipped anonymous event TransferXXX" in added.stdout
    for output in (added.stdout, listed.stdout):
        assert max(map(len, output.splitlines())) < 200, output[:2000]

    path.write_text(json.dumps([{"type": "event", "name": name, "inputs": [{"name": "a", "type": "uint7"}]}]))
    refused = run_indexer("abi", "add", "bad", str(path), db_url=db_url)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert "not a type eth-abi can decode: 'uint7'" in refused.stderr and len(refused.stderr) < 300, refused.stderr
    refused = run_indexer("abi", "drop", "n" * 10_000, db_url=db_url)
    assert refused.returncode == 2 and len(refused.stderr) < 300, refused.stderr[:2000]
    assert refused.stderr.startswith("indexer abi drop: error: not an ABI name: 'nnnn")
