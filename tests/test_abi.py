"""`indexer abi add/list/drop` and the decoding of stored logs into an ABI's event tables
(indexer/decoding/abi.py), with a contract of our own compiled by solc and run on anvil: every decoded
row is compared with what web3.py's own event decoding makes of the same receipts."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest
from eth_abi import grammar
from eth_utils import keccak
from hexbytes import HexBytes
from psycopg.rows import dict_row
from web3.logs import DISCARD

from indexer.chaindata import chain, store
from indexer.decoding import abi_decode
from indexer.jobqueue import queue
from indexer.jobs import partitions, planner
from indexer.node.rpc import RpcClient
from indexer.testing.anvil import Anvil
from indexer.testing.contracts import compile, deploy, mined

from .conftest import run_indexer

SOURCE = """
// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

contract Everything {
    struct Point { uint256 x; string label; }

    event Kinds(address indexed who, bool indexed flag, uint8 small, uint256 big, int256 signed,
                bytes32 id, bytes blob, string text, uint256[] list, Point point);
    event Hashed(string indexed name, Point indexed where, int256 indexed delta, bytes4 sel);
    event Widths(uint64 u64, int64 i64, uint56 u56, int8 i8, address[2] pair, Point[] points);
    event Deposit(uint256 amount);
    event Deposit(address indexed from, uint256 amount);
    event Untitled(uint256, bool indexed on);
    event Quiet(uint256 amount) anonymous;

    // One struct for the arguments: ten parameters leave the compiler no room on the stack.
    struct Args {
        address who; bool flag; uint8 small; uint256 big; int256 signed; bytes32 id; bytes blob; string text;
        uint256[] list; Point point;
    }

    function emitAll(Args calldata a) external {
        emit Kinds(a.who, a.flag, a.small, a.big, a.signed, a.id, a.blob, a.text, a.list, a.point);
        emit Hashed(a.text, a.point, a.signed, bytes4(a.id));
        Point[] memory points = new Point[](2);
        points[0] = a.point;
        points[1] = Point(a.big, a.text);
        emit Widths(uint64(a.big), int64(a.signed), uint56(a.big), int8(a.signed), [a.who, msg.sender], points);
        emit Deposit(a.big);
        emit Deposit(a.who, a.big);
        emit Untitled(a.small, a.flag);
        emit Quiet(a.big);
    }

    // A log of any shape, as a contract that does not follow its ABI could emit.
    function raw(bytes32[] calldata topics, bytes calldata data) external {
        bytes memory d = data;
        if (topics.length == 1) { bytes32 t0 = topics[0]; assembly { log1(add(d, 32), mload(d), t0) } }
        if (topics.length == 2) {
            bytes32 t0 = topics[0]; bytes32 t1 = topics[1];
            assembly { log2(add(d, 32), mload(d), t0, t1) }
        }
    }
}
"""

MAX_UINT256, MIN_INT256 = 2**256 - 1, -(2**255)


def emit_all(node: Anvil, contract, *args: Any) -> tuple:
    tx = contract.functions.emitAll(args).transact({"from": contract.w3.eth.accounts[0], "gas": 3_000_000})
    receipt = mined(node, tx)
    assert receipt["status"] == 1
    return contract, args, receipt


class Chain:
    """anvil with two deployed copies of the contract, their events emitted, and the receipts."""

    def __init__(self, node: Anvil) -> None:
        self.node = node
        built = compile({"Everything.sol": SOURCE})
        self.abi, bytecode = built["Everything"]
        self.a = deploy(node, self.abi, bytecode)
        self.b = deploy(node, self.abi, bytecode)
        accounts = self.a.w3.eth.accounts
        self.calls = [
            emit_all(node, self.a, accounts[1], True, 7, 10**18, -5, b"\x01" * 32, b"\x00\xff", "plain", [1, 2, 3],
                     (4, "four")),
            emit_all(node, self.a, accounts[2], False, 255, MAX_UINT256, MIN_INT256, b"\xab" * 32, b"", "", [],
                     (MAX_UINT256, "tab\there\nnew line\\ back slash é ☃")),
        ]
        self.b_from = node.head() + 1
        self.calls.append(emit_all(node, self.b, accounts[3], True, 0, 2**64 - 1, 2**63 - 1, b"\x00" * 32, b"\x01" * 100,
                                   "a string longer than one word of thirty-two bytes, é", [MAX_UINT256], (0, "x")))
        deposit = self.a.get_event_by_signature("Deposit(uint256)").topic
        hashed = self.a.events.Hashed().topic
        raw = self.a.functions.raw
        mined(node, raw([deposit], b"\x01\x02").transact({"from": accounts[0]}))  # 2 bytes are no uint256
        mined(node, raw([hashed, b"\x00" * 32], b"").transact({"from": accounts[0]}))  # 2 topics of 4
        self.calls.append(emit_all(node, self.a, accounts[1], True, 1, 1, 1, b"\x02" * 32, b"", "nul \x00 inside", [],
                                   (1, "fine")))
        self.head = node.head()
        w3 = self.a.w3
        self.receipts = [r for n in range(self.head + 1) for r in w3.eth.get_block_receipts(n)]


@pytest.fixture(scope="module")
def everything() -> Iterator[Chain]:
    with Anvil() as node:
        yield Chain(node)


@pytest.fixture
def abi_file(tmp_path: Path, everything: Chain) -> Path:
    path = tmp_path / "Everything.json"
    path.write_text(json.dumps({"contractName": "Everything", "abi": everything.abi}))  # as an artifact
    return path


def store_chain(conn: psycopg.Connection, node: Anvil, head: int) -> None:
    rows = chain.fetch(RpcClient([node.url]), 0, head)
    partitions.ensure(conn, 0, head)
    store.prepare(conn)
    with conn.transaction():
        store.write(conn, rows)


# ---------------------------------------------------------------------------------------------
# What web3.py makes of the receipts, in the columns' representation (see indexer/decoding/abi.py)


def expected_rows(contract, receipts: list, signature: str, first_block: int = 0,
                  address: str | None = None) -> list[dict[str, Any]]:
    event = contract.get_event_by_signature(signature)
    entry = event.abi
    rows = []
    for receipt in receipts:
        for decoded in event().process_receipt(receipt, errors=DISCARD):
            if decoded["blockNumber"] < first_block or (address and decoded["address"] != address):
                continue
            row = {"block_number": decoded["blockNumber"], "log_index": decoded["logIndex"],
                   "transaction_hash": bytes(decoded["transactionHash"]),
                   "address": bytes.fromhex(decoded["address"][2:])}
            for i, param in enumerate(entry["inputs"]):
                value = decoded["args"][param["name"]] if param["name"] else decoded["args"][""]
                row[param["name"] or f"arg{i}"] = _column_value(param, value)
            rows.append(row)
    return rows


def expected_hashed(calls: list, first_block: int = 0, address: str | None = None) -> list[dict[str, Any]]:
    """The rows of Hashed, computed from the arguments emitted: web3 cannot decode an event with
    an indexed struct (it reads the struct's hash as the struct). An indexed string's or struct's
    topic is the keccak-256 of its in-place encoding: a string's bytes, a struct's members each
    padded to a multiple of 32 bytes (Solidity's ABI specification, "Events")."""
    rows = []
    for contract, (who, flag, small, big, signed, id_, blob, text, list_, point), receipt in calls:
        if receipt["blockNumber"] < first_block or (address and contract.address != address):
            continue
        (log,) = [log for log in receipt["logs"] if log["topics"][:1] == [HexBytes(contract.events.Hashed().topic)]]
        label = point[1].encode()
        rows.append({"block_number": receipt["blockNumber"], "log_index": log["logIndex"],
                     "transaction_hash": bytes(receipt["transactionHash"]),
                     "address": bytes.fromhex(contract.address[2:]), "name": keccak(text.encode()),
                     "where": keccak(point[0].to_bytes(32, "big") + label + b"\0" * (-len(label) % 32)),
                     "delta": signed, "sel": id_[:4]})
    return rows


def _column_value(param: dict[str, Any], value: Any) -> Any:
    parsed = grammar.parse(_type(param))
    if param.get("indexed") and (parsed.is_dynamic or parsed.is_array or isinstance(parsed, grammar.TupleType)):
        return bytes(value)  # the topic: the hash of the value
    if parsed.is_array or isinstance(parsed, grammar.TupleType):
        return _json(param, value)
    if parsed.base == "address":
        return bytes.fromhex(value[2:])
    if parsed.base == "bytes":
        return bytes(value)
    return value


def _json(param: dict[str, Any], value: Any) -> Any:
    parsed = grammar.parse(_type(param))
    if parsed.is_array:
        item = dict(param, type=param["type"][:param["type"].rindex("[")])
        return [_json(item, v) for v in value]
    if isinstance(parsed, grammar.TupleType):
        return {c["name"]: _json(c, value[c["name"]]) for c in param["components"]}
    if parsed.base == "address":
        return value.lower()
    if parsed.base == "bytes":
        return "0x" + bytes(value).hex()
    return value


def _type(param: dict[str, Any]) -> str:
    if param["type"].startswith("tuple"):
        return "(" + ",".join(_type(c) for c in param["components"]) + ")" + param["type"][5:]
    return param["type"]


def decoded_rows(conn: psycopg.Connection, table: str) -> list[dict[str, Any]]:
    columns = conn.execute("SELECT columns FROM abi_events WHERE table_name = %s", (table,)).fetchone()[0]
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(f"SELECT * FROM {table} ORDER BY block_number, log_index").fetchall()
    # The columns under the ABI's parameter names, as web3 gives them (unnamed: argN).
    entry = conn.execute("SELECT event FROM abi_events WHERE table_name = %s", (table,)).fetchone()[0]
    names = [p["name"] or f"arg{i}" for i, p in enumerate(entry["inputs"])]
    return [{**{k: row[k] for k in ("block_number", "log_index", "transaction_hash", "address")},
             **{name: _plain(row[column]) for name, column in zip(names, columns)}} for row in rows]


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(map(_holds_nul, value.values()))
    return isinstance(value, (list, tuple)) and any(map(_holds_nul, value))


def _plain(value: Any) -> Any:
    return int(value) if isinstance(value, Decimal) else value


def table_of(conn: psycopg.Connection, abi_name: str, signature: str) -> str:
    rows = conn.execute("SELECT table_name FROM abi_events WHERE abi_name = %s AND signature = %s",
                        (abi_name, signature)).fetchall()
    assert len(rows) == 1, rows
    return rows[0][0]


SIGNATURES = [
    "Kinds(address,bool,uint8,uint256,int256,bytes32,bytes,string,uint256[],(uint256,string))",
    "Hashed(string,(uint256,string),int256,bytes4)",
    "Widths(uint64,int64,uint56,int8,address[2],(uint256,string)[])",
    "Deposit(uint256)",
    "Deposit(address,uint256)",
    "Untitled(uint256,bool)",
]


def assert_decoded(conn: psycopg.Connection, everything: Chain, name: str, first_block: int = 0,
                   address: str | None = None) -> None:
    """Every table of ABI `name` holds exactly the events web3 decodes from the receipts (those
    of `address` from `first_block` on, if given)."""
    for signature in SIGNATURES:
        if signature.startswith("Hashed"):
            expected = expected_hashed(everything.calls, first_block, address)
        else:
            # web3 decodes a text with a NUL; PostgreSQL cannot store it, so that log is skipped.
            expected = [r for r in expected_rows(everything.a, everything.receipts, signature, first_block, address)
                        if not _holds_nul(r)]
        assert len(expected) >= (1 if address else 3), signature
        assert decoded_rows(conn, table_of(conn, name, signature)) == expected, signature


# ---------------------------------------------------------------------------------------------


def test_decoded_rows_equal_web3s_decoding_of_the_receipts(db_url, conn, everything, abi_file):
    store_chain(conn, everything.node, everything.head)
    added = run_indexer("abi", "add", "every", str(abi_file), db_url=db_url)
    assert added.returncode == 0, added.stderr
    assert "skipped anonymous event Quiet(uint256 amount)" in added.stdout
    only_b = run_indexer("abi", "add", "only_b", str(abi_file), "--address", everything.b.address,
                         "--from-block", str(everything.b_from), db_url=db_url)
    assert only_b.returncode == 0, only_b.stderr

    with conn.transaction():
        skipped = abi_decode.decode_range(conn, 0, everything.head)
    # The two logs `raw` emitted, and the Kinds and Widths events whose text holds a NUL, which
    # PostgreSQL cannot store: all of contract a, so the ABI restricted to b meets none of them.
    assert skipped == {abi_decode.SKIP_UNDECODABLE: 1, abi_decode.SKIP_TOPIC_COUNT: 1, abi_decode.SKIP_NUL_IN_TEXT: 2}

    assert_decoded(conn, everything, "every")
    assert_decoded(conn, everything, "only_b", everything.b_from, everything.b.address)

    kinds = table_of(conn, "every", SIGNATURES[0])
    types = dict(conn.execute("SELECT column_name, data_type FROM information_schema.columns"
                              " WHERE table_name = %s", (kinds,)).fetchall())
    assert types == {"block_number": "bigint", "log_index": "integer", "transaction_hash": "bytea",
                     "address": "bytea", "who": "bytea", "flag": "boolean", "small": "bigint", "big": "numeric",
                     "signed": "numeric", "id": "bytea", "blob": "bytea", "text": "text", "list": "jsonb",
                     "point": "jsonb"}

    before = conn.execute(f"SELECT xmin::text, * FROM {kinds} ORDER BY block_number, log_index").fetchall()
    with conn.transaction():
        assert abi_decode.decode_range(conn, 0, everything.head) == skipped
    again = conn.execute(f"SELECT xmin::text, * FROM {kinds} ORDER BY block_number, log_index").fetchall()
    assert [row[1:] for row in again] == [row[1:] for row in before]  # the same rows,
    assert {row[0] for row in again}.isdisjoint(row[0] for row in before)  # written again


def test_decoding_through_the_queue_as_blocks_are_indexed_and_for_those_indexed_before(db_url, conn, everything,
                                                                                       abi_file, work):
    # Registered before the backfill: its decode jobs come with each indexed range.
    assert run_indexer("abi", "add", "every", str(abi_file), db_url=db_url).returncode == 0
    assert run_indexer("plan", "--from", "0", "--to", str(everything.head + 1), "--chunk", "5",
                       db_url=db_url).returncode == 0
    assert work(db_url, everything.node.url, "--workers", "2", "--drain").wait() == 0
    assert_decoded(conn, everything, "every")

    # Registered after it: `abi add` plans the decoding of the blocks indexed so far.
    added = run_indexer("abi", "add", "only_b", str(abi_file), "--address", everything.b.address,
                        "--from-block", str(everything.b_from), "--chunk", "5", db_url=db_url)
    assert added.returncode == 0, added.stderr
    assert f"planned {len(range(everything.b_from // 5, everything.head // 5 + 1))} decode job(s)" in added.stdout
    assert work(db_url, everything.node.url, "--workers", "2", "--drain").wait() == 0
    assert_decoded(conn, everything, "only_b", everything.b_from, everything.b.address)
    assert_decoded(conn, everything, "every")


def test_abi_add_plans_decode_jobs_for_the_blocks_indexed(db_url, conn, abi_file):
    planner.plan(conn, 0, 35, 10)
    planner.plan(conn, 50, 60, 10)
    jobs = queue.claim(conn, "w", lease_seconds=60, limit=10)
    queue.complete_many(conn, [j for j in jobs if j.payload["from"] != 20])  # 20..29 still running
    before = conn.execute("SELECT max(id) FROM jobs").fetchone()[0] or 0

    result = run_indexer("abi", "add", "every", str(abi_file), "--from-block", "5", db_url=db_url,
                         env={"INDEXER_CHUNK": "10"})
    assert result.returncode == 0, result.stderr
    planned = conn.execute("SELECT payload FROM jobs WHERE kind = 'decode_logs' AND id > %s ORDER BY id",
                           (before,)).fetchall()
    # 20..29 is not indexed yet: its decode job comes when its index_blocks job completes.
    assert [p for (p,) in planned] == [{"from": 5, "to": 9}, {"from": 10, "to": 19}, {"from": 30, "to": 34},
                                       {"from": 50, "to": 59}]
    assert "planned 4 decode job(s) (30 blocks)" in result.stdout


def test_list_and_drop(db_url, conn, everything, abi_file):
    store_chain(conn, everything.node, everything.head)
    for name, extra in (("every", []), ("only_b", ["--address", everything.b.address, "--from-block", "3"])):
        assert run_indexer("abi", "add", name, str(abi_file), *extra, db_url=db_url).returncode == 0
    with conn.transaction():
        abi_decode.decode_range(conn, 0, everything.head)

    listed = run_indexer("abi", "list", db_url=db_url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0] == "every: any address, from block 0, 6 event table(s)"
    deposit = table_of(conn, "every", "Deposit(uint256)")
    assert f"  Deposit(uint256) -> {deposit}: 4 row(s)" in lines
    assert f"only_b: {everything.b.address.lower()}, from block 3, 6 event table(s)" in lines

    only_b_tables = [t for (t,) in conn.execute("SELECT table_name FROM abi_events WHERE abi_name = 'only_b'")]
    dropped = run_indexer("abi", "drop", "only_b", db_url=db_url)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout.strip() == "dropped ABI only_b and its 6 table(s)"
    assert conn.execute("SELECT to_regclass(t) FROM unnest(%s::text[]) t", (only_b_tables,)).fetchall() == [
        (None,)] * 6
    assert conn.execute("SELECT DISTINCT abi_name FROM abi_events").fetchall() == [("every",)]
    assert conn.execute(f"SELECT count(*) FROM {deposit}").fetchone()[0] == 4

    again = run_indexer("abi", "drop", "only_b", db_url=db_url)
    assert again.returncode == 2
    assert again.stderr.splitlines() == [
        "indexer abi drop: error: no ABI named 'only_b' is registered (see `indexer abi list`)"]


def event_tables(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'abi\\_%%' AND tablename <> 'abi_events'"
                        ).fetchone()[0]


@pytest.mark.parametrize("args, message", [
    (["Every", "{abi}"], "not an ABI name: 'Every' (the name must be a lower-case letter, then up to 30"
                         " lower-case letters, digits or underscores)"),
    (['"; DROP TABLE logs; --', "{abi}"], "not an ABI name: '\"; DROP TABLE logs; --'"),
    (["x", "{missing}"], "cannot read the ABI file"),
    (["x", "{not_json}"], "is not JSON"),
    (["x", "{not_abi}"], "not an ABI: expected a JSON list of entries"),
    (["x", "{no_events}"], "the ABI has no event to decode"),
    (["x", "{abi}", "--address", "0x1234"], "not an address (0x and 40 hex digits): '0x1234'"),
    (["x", "{abi}", "--address", "0x52908400098527886e0F7030069857D2E4169EE7"], "not its EIP-55 checksum"),
    (["x", "{abi}", "--from-block", "-1"], "block numbers cannot be negative"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(db_url, conn, tmp_path, abi_file, args, message):
    planner.plan(conn, 0, 10, 10)
    queue.complete_many(conn, queue.claim(conn, "w", lease_seconds=60))
    jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    files = {"abi": abi_file, "missing": tmp_path / "nope.json", "not_json": tmp_path / "x.json",
             "not_abi": tmp_path / "y.json", "no_events": tmp_path / "z.json"}
    files["not_json"].write_text("{nope")
    files["not_abi"].write_text('{"bytecode": "0x00"}')
    files["no_events"].write_text('[{"type": "function", "name": "f", "inputs": []}]')
    result = run_indexer("abi", "add", *(a.format(**files) for a in args), db_url=db_url)
    assert result.returncode == 2, result
    assert len(result.stderr.splitlines()) == 1 and result.stdout == "", result
    assert result.stderr.startswith("indexer abi add: error: "), result.stderr
    assert message in result.stderr
    assert conn.execute("SELECT count(*) FROM abis").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == jobs
    assert event_tables(conn) == 0


def test_a_name_registered_twice_is_refused(db_url, conn, abi_file):
    assert run_indexer("abi", "add", "every", str(abi_file), db_url=db_url).returncode == 0
    tables = event_tables(conn)
    result = run_indexer("abi", "add", "every", str(abi_file), db_url=db_url)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "indexer abi add: error: an ABI named every is registered already (`indexer abi drop every` first)"]
    assert event_tables(conn) == tables


PAUSER = """
// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

contract Pauser {
    event Paused();
    event Unpaused() anonymous;
    function pause() external { emit Paused(); emit Unpaused(); }
}
"""


def test_an_event_without_parameters_has_a_table_of_the_key_columns_alone(db_url, conn, tmp_path):
    built = compile({"Pauser.sol": PAUSER})
    path = tmp_path / "Pauser.json"
    path.write_text(json.dumps(built["Pauser"][0]))
    with Anvil() as node:
        pauser = deploy(node, *built["Pauser"])
        receipts = [mined(node, pauser.functions.pause().transact({"from": pauser.w3.eth.accounts[0]}))
                    for _ in range(2)]
        store_chain(conn, node, node.head())
    added = run_indexer("abi", "add", "pauser", str(path), db_url=db_url)
    assert added.returncode == 0, added.stderr
    table = table_of(conn, "pauser", "Paused()")
    with conn.transaction():
        assert abi_decode.decode_range(conn, 0, receipts[-1]["blockNumber"]) == {}
    assert conn.execute(f"SELECT block_number, log_index, transaction_hash, address FROM {table}"
                        " ORDER BY block_number").fetchall() == [
        (r["blockNumber"], r["logs"][0]["logIndex"], bytes(r["transactionHash"]), bytes.fromhex(pauser.address[2:]))
        for r in receipts]
