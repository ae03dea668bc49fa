"""Traces of real chains through the real pool (issue 26): recorded blocks, receipts and tracer
answers (tests/fixtures, sources in its README.md) served by the replay node, planned, indexed by
`indexer work --drain` with INDEXER_TRACES=true, and the `traces` rows read back as a user would:
what the recorded answer says, normalised, call for call.

Only blocks whose block, every receipt and tracer answer were all recorded can go through the
pool (the traces are checked against the stored block): OP Goerli 5003318 (`debug_traceBlockByHash`
and `debug_traceTransaction`, call tracer, op-geth) and OP Sepolia 4089330 (its one transaction's
`debug_traceTransaction` only). No mainnet block with a recorded `trace_block` answer has its
full block and receipts recorded in a public repository found so far (tests/fixtures/README.md)."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import psycopg
import requests

from indexer.base import db
from indexer.chaindata import traces
from indexer.testing import fixtures
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.fixtures import TRACES, recorded_trace
from indexer.testing.replay import ReplayNode

from .conftest import run_indexer

GOERLI, SEPOLIA = "optimism-goerli-5003318", "optimism-sepolia-4089330"
CHAIN_IDS = {GOERLI: 420, SEPOLIA: 11155420}

COLUMNS = ("block_number, position, transaction_index, transaction_hash, trace_address, type, from_address,"
           " to_address, value, gas, gas_used, input, output, error, revert_reason, reverted, subtraces, extra")


def index(db_url: str, rpc_url: str, work, numbers: list[int]) -> str:
    for n in numbers:
        planned = run_indexer("plan", "--from", str(n), "--to", str(n + 1), db_url=db_url)
        assert planned.returncode == 0, planned.stderr
    pool = work(db_url, rpc_url, "--drain", INDEXER_TRACES="true")
    assert pool.wait() == 0, pool.output()
    return pool.output()


def jobs(conn: psycopg.Connection) -> list[tuple[str, str, str | None]]:
    return conn.execute("SELECT kind, status, last_error FROM jobs UNION ALL"
                        " SELECT kind, status, last_error FROM jobs_history ORDER BY 1, 2").fetchall()


def stored(conn: psycopg.Connection, number: int) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT {COLUMNS} FROM traces WHERE block_number = %s ORDER BY position", [number]).fetchall()


def raw(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value[2:])


def recorded_rows(name: str) -> list[traces.Trace]:
    """What the recording says of the block, normalised: from the block's answer where it was
    recorded, else from its transactions' answers."""
    number = int(fixtures.load(name)["block"]["number"], 16)
    recorded = TRACES[name]
    if "debug_traceBlockByHash" in recorded:
        return traces.from_call_tracer(number, recorded_trace(recorded["debug_traceBlockByHash"]))
    return traces.from_call_tracer(number, [recorded_trace(f) for f in recorded["debug_traceTransaction"]])


def assert_stored_as_recorded(conn: psycopg.Connection, name: str) -> list[tuple[Any, ...]]:
    """The rows of the block are the recorded answer's calls, one for one, in order: place, type,
    addresses, value, gas, data, error, reverted and subtraces as the tracer said; the top-level
    call's gas used the receipt's, the tracer's own kept in `extra` where it differs."""
    recorded = fixtures.load(name)
    block, receipts = recorded["block"], recorded["receipts"]
    number = int(block["number"], 16)
    expected = recorded_rows(name)
    rows = stored(conn, number)
    assert len(rows) == len(expected), (name, rows)
    # As many calls per transaction as the recording has, each transaction its own hash.
    assert Counter(r[2] for r in rows) == Counter(t.transaction_index for t in expected)
    for position, (row, t) in enumerate(zip(rows, expected)):
        tx = block["transactions"][t.transaction_index]
        assert row[:8] == (number, position, t.transaction_index, raw(tx["hash"]), list(t.trace_address), t.type,
                           raw(t.from_address), raw(t.to_address)), (name, position)
        assert row[8] == (None if t.value is None else Decimal(t.value))
        assert row[9] == t.gas
        assert (row[11], row[12]) == (raw(t.input), raw(t.output))
        assert (row[13], row[14], row[15], row[16]) == (t.error, t.revert_reason, t.reverted, t.subtraces)
        if t.trace_address == ():
            receipt = receipts[t.transaction_index]
            assert row[10] == int(receipt["gasUsed"], 16)
            assert row[15] == (receipt.get("status") == "0x0")
            if t.gas_used != row[10]:
                assert row[17]["gasUsed"] == hex(t.gas_used)  # the tracer's figure, kept
            # The top-level call is the transaction itself.
            assert (row[6], row[7]) == (raw(tx["from"]), raw(tx["to"]))
            assert row[11] == raw(tx["input"])
        else:
            assert row[10] == t.gas_used
    return rows


def assert_no_failure(conn: psycopg.Connection) -> None:
    found = jobs(conn)
    assert "index_traces" in {k for k, _, _ in found}
    assert not [j for j in found if j[1] == "failed" or (j[2] and "ChainDataError" in j[2])], found
    assert all(s == "done" for _, s, _ in found), found


def test_a_recorded_op_goerli_block_is_stored_as_its_call_tracer_said(db_url, work):
    """OP Goerli 5003318 (Bedrock, op-geth): the L1-attributes deposit, whose receipt says 0 gas
    used where the tracer says 46,889, and a `transmit` call whose 10 logs come from four
    accounts its subcalls reach."""
    with ReplayNode([GOERLI], chain_id=CHAIN_IDS[GOERLI]) as node:
        index(db_url, node.url, work, [5003318])
        assert node.served["debug_traceBlockByHash"] == 1
        assert "debug_traceTransaction" not in node.served
    with db.connect(db_url) as conn:
        rows = assert_stored_as_recorded(conn, GOERLI)
        assert_no_failure(conn)
    deposit, transmit = [r for r in rows if r[4] == []]
    assert (deposit[5], deposit[10], deposit[17]["gasUsed"]) == ("CALL", 0, "0xb729")
    assert deposit[6] == raw("0xdeaddeaddeaddeaddeaddeaddeaddeaddead0001")
    assert [(r[4], r[5]) for r in rows if r[2] == 0] == [([], "CALL"), ([0], "DELEGATECALL")]
    assert transmit[10] == 0x4a853 and not transmit[15]
    assert len([r for r in rows if r[2] == 1]) == 23
    assert {r[5] for r in rows} == {"CALL", "DELEGATECALL", "STATICCALL"}


def test_without_the_blocks_form_the_transactions_answers_give_the_same_rows(db_url, other_db_url, work):
    """The same block through `debug_traceTransaction`, transaction by transaction (a node that
    lacks `debug_traceBlockByHash`): the recorded per-transaction answers, taken at other times
    than the block's (its DELEGATECALL names a value of 0 where the block's says none), give the
    same rows."""
    with ReplayNode([GOERLI], chain_id=CHAIN_IDS[GOERLI]) as node:
        index(db_url, node.url, work, [5003318])
        with FaultProxy(node.url, lacks=("debug_traceBlockByHash",)) as proxy:
            index(other_db_url, proxy.url, work, [5003318])
        assert node.served["debug_traceTransaction"] == 2
    with db.connect(db_url) as one, db.connect(other_db_url) as other:
        assert stored(one, 5003318) == stored(other, 5003318)
        assert_no_failure(other)


def test_a_block_with_only_its_transactions_traces_recorded_falls_back_to_them(db_url, work):
    """OP Sepolia 4089330 (the first Canyon block): only its one transaction's trace was
    recorded, so the node answers -32601 for the block's form, and the pool's fallback to
    `debug_traceTransaction` stores it."""
    with ReplayNode([SEPOLIA], chain_id=CHAIN_IDS[SEPOLIA]) as node:
        index(db_url, node.url, work, [4089330])
        assert node.refused["method_not_found"] >= 1
        assert node.served["debug_traceTransaction"] == 1
        assert "debug_traceBlockByHash" not in node.served
    with db.connect(db_url) as conn:
        rows = assert_stored_as_recorded(conn, SEPOLIA)
        assert_no_failure(conn)
    assert [(r[4], r[5], r[10]) for r in rows] == [([], "CALL", 0xb705), ([0], "DELEGATECALL", 0x4a28)]


def test_the_replay_node_serves_only_what_was_recorded():
    """Each recorded answer as recorded; -32601 for a method with no recording of that block;
    go-ethereum's errors for what the node does not know; only the call tracer."""
    def call(node: ReplayNode, method: str, *params: Any) -> dict[str, Any]:
        return requests.post(node.url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)},
                             timeout=10).json()

    tracer = {"tracer": "callTracer"}
    block = fixtures.load(GOERLI)["block"]
    with ReplayNode([GOERLI, "mainnet-47218"]) as node:
        assert call(node, "debug_traceBlockByHash", block["hash"], tracer)["result"] == \
            recorded_trace(TRACES[GOERLI]["debug_traceBlockByHash"])
        for tx, file in zip(block["transactions"], TRACES[GOERLI]["debug_traceTransaction"]):
            assert call(node, "debug_traceTransaction", tx["hash"], tracer)["result"] == recorded_trace(file)
        not_there = {"code": -32601, "message": "the method trace_block does not exist/is not available"}
        assert call(node, "trace_block", block["number"])["error"] == not_there
        mainnet = fixtures.load("mainnet-47218")["block"]
        assert call(node, "debug_traceBlockByHash", mainnet["hash"], tracer)["error"]["code"] == -32601
        assert call(node, "debug_traceBlockByHash", "0x" + "ab" * 32, tracer)["error"] == \
            {"code": -32000, "message": "block 0x" + "ab" * 32 + " not found"}
        assert call(node, "debug_traceTransaction", "0x" + "cd" * 32, tracer)["error"] == \
            {"code": -32000, "message": "transaction not found"}
        assert call(node, "trace_block", "0x1")["result"] is None
        assert call(node, "trace_transaction", "0x" + "cd" * 32)["result"] is None
        assert call(node, "debug_traceBlockByHash", block["hash"], {})["error"]["code"] == -32602
