"""Traces indexed by the real pool from a real anvil (issue 26): the traces chain's every kind of
internal call (indexer/testing/trace_contracts.py), stored as both tracer families say, whichever
the node serves; the native transfers they add up to; traces planned for a range indexed already;
a repair that gives back the traces it deleted, and a reorg rolled back with its traces."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Iterator

import psycopg
import pytest

from indexer.base import db
from indexer.base.settings import DEFAULT_BATCH_SIZE, SMALL_BATCH_BLOCKS
from indexer.chaindata import traces
from indexer.testing.anvil import Anvil, build_dense
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.node_compare import copy_is_the_node_s
from indexer.testing.trace_contracts import TraceChain, build_trace_chain
from indexer.testing.waiting import wait_for

from .conftest import run_indexer

# What a user reads of a trace; `extra` aside, where the families differ by design (each keeps
# its own keys, and its own top-level gas used).
COLUMNS = ("block_number, position, transaction_index, transaction_hash, trace_address, type, from_address,"
           " to_address, value, gas, gas_used, input, output, reverted, subtraces")
ROWS = f"SELECT {COLUMNS} FROM traces ORDER BY block_number, position"


class TraceNode:
    def __init__(self, node: Anvil, chain: TraceChain) -> None:
        self.node, self.chain = node, chain
        self.head = node.head()


@pytest.fixture(scope="module")
def trace_node() -> Iterator[TraceNode]:
    with Anvil() as node:
        yield TraceNode(node, build_trace_chain(node))


def index(db_url: str, rpc_url: str, work, *, end: int, traces_on: bool = True, **env: str) -> str:
    assert run_indexer("plan", "--from", "0", "--to", str(end), db_url=db_url).returncode == 0
    pool = work(db_url, rpc_url, "--drain", INDEXER_TRACES=str(traces_on).lower(), **env)
    assert pool.wait() == 0, pool.output()
    return pool.output()


def rows(url: str) -> list[tuple[Any, ...]]:
    with db.connect(url) as conn:
        return conn.execute(ROWS).fetchall()


def jobs(conn: psycopg.Connection) -> list[tuple[str, str]]:
    return conn.execute("SELECT kind, status FROM jobs UNION ALL SELECT kind, status FROM jobs_history"
                        " ORDER BY 1, 2").fetchall()


def test_every_call_is_stored_as_both_tracer_families_say(trace_node, db_url, other_db_url, work):
    """The pool asks the call tracer; behind a node without it (go-ethereum's own error for a
    method it lacks), trace_block. Both databases hold the same rows, each row what the node's
    tracer says of the call, the top-level call's gas used the receipt's."""
    node, chain = trace_node.node, trace_node.chain
    index(db_url, node.url, work, end=trace_node.head + 1)
    with FaultProxy(node.url, lacks=("debug_traceBlockByHash", "debug_traceTransaction")) as parity_only:
        index(other_db_url, parity_only.url, work, end=trace_node.head + 1)
        assert parity_only.calls["trace_block"] == trace_node.head + 1
    by_call_tracer, by_trace_block = rows(db_url), rows(other_db_url)
    assert by_call_tracer == by_trace_block

    stored = {(r[0], r[1]): r for r in by_call_tracer}
    expected_rows = 0
    for n in range(trace_node.head + 1):
        block = node.rpc("eth_getBlockByNumber", hex(n), True)
        receipts = [node.rpc("eth_getTransactionReceipt", t["hash"]) for t in block["transactions"]]
        said = traces.from_call_tracer(n, node.rpc("debug_traceBlockByNumber", hex(n), {"tracer": "callTracer"}))
        expected_rows += len(said)
        for position, t in enumerate(said):
            row = stored[(n, position)]
            receipt = receipts[t.transaction_index]
            assert row[2:4] == (t.transaction_index, bytes.fromhex(receipt["transactionHash"][2:]))
            assert (row[4], row[5]) == (list(t.trace_address), t.type)
            assert row[6:9] == (bytes.fromhex(t.from_address[2:]),
                                None if t.to_address is None else bytes.fromhex(t.to_address[2:]),
                                None if t.value is None else Decimal(t.value))
            if t.trace_address == ():
                assert row[10] == int(receipt["gasUsed"], 16)  # not the tracer's: the receipt's
                assert row[13] == (receipt["status"] == "0x0")
            else:
                assert row[10] == t.gas_used
    assert len(by_call_tracer) == expected_rows

    # What the chain was built to show, as a user would look for it.
    with db.connect(db_url) as conn:
        def calls_of(kind: str) -> list[tuple[Any, ...]]:
            return conn.execute("SELECT trace_address, type, to_address, error IS NOT NULL, reverted FROM traces"
                                " WHERE transaction_hash = %s ORDER BY position",
                                [bytes.fromhex(chain.tx(kind).hash[2:])]).fetchall()

        child2 = bytes.fromhex(chain.addresses["child2"][2:].lower())
        assert any(t == "CREATE2" and to == child2 for _, t, to, _, _ in calls_of("create2"))
        caught = calls_of("try_catch")
        assert [(a, failed, reverted) for a, _, _, failed, reverted in caught if failed] == [([0], True, True),
                                                                                            ([1], True, True)]
        assert not caught[0][4]  # the transaction itself succeeded
        # The failed transaction: its inner call that sent value succeeded, then was undone.
        failed = calls_of("failed")
        assert failed[0][3:] == (True, True) and failed[1][3:] == (False, True)
        assert {t for _, t, _, _, _ in calls_of("deep")} >= {"CALL", "STATICCALL", "DELEGATECALL"}
        assert jobs(conn) == [("decode_logs", "done"), ("index_blocks", "done"), ("index_partition", "done"),
                              ("index_traces", "done")]


def test_native_transfers_add_up_to_every_contracts_balance(trace_node, db_url, work):
    """"All ETH that moved" (docs/traces.md): for each contract of the chain, what the view says came in
    less what went out is its balance on the node, to the wei. A contract pays no gas, so nothing
    else moves its balance; the view is the only account of its internal transfers."""
    node, chain = trace_node.node, trace_node.chain
    index(db_url, node.url, work, end=trace_node.head + 1)
    with db.connect(db_url) as conn:
        for name, address in chain.addresses.items():
            raw = bytes.fromhex(address[2:].lower())
            came, went = conn.execute(
                "SELECT coalesce(sum(value) FILTER (WHERE to_address = %(a)s), 0),"
                "       coalesce(sum(value) FILTER (WHERE from_address = %(a)s), 0)"
                " FROM native_transfers WHERE %(a)s IN (from_address, to_address)", {"a": raw}).fetchone()
            assert came - went == int(node.rpc("eth_getBalance", address, "latest"), 16), name
        kinds = {k for k, in conn.execute("SELECT DISTINCT kind FROM native_transfers")}
        assert kinds == {"transaction", "call", "create", "create2", "selfdestruct"}
        # The failed transaction moved nothing, and a DELEGATECALL's value is its caller's, not a transfer.
        failed = bytes.fromhex(chain.tx("failed").hash[2:])
        assert conn.execute("SELECT count(*) FROM native_transfers WHERE transaction_hash = %s",
                            [failed]).fetchone()[0] == 0


def test_traces_are_planned_for_a_range_indexed_without_them(trace_node, db_url, work):
    node = trace_node.node
    end = str(trace_node.head + 1)
    index(db_url, node.url, work, end=trace_node.head + 1, traces_on=False)
    with db.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM traces").fetchone()[0] == 0
    planned = run_indexer("plan", "--from", "0", "--to", end, "--traces", db_url=db_url)
    assert planned.returncode == 0 and planned.stdout.startswith("planned 1 index_traces job"), planned
    again = run_indexer("plan", "--from", "0", "--to", end, "--traces", db_url=db_url)
    assert again.stdout.startswith("planned 0 index_traces jobs"), again.stdout
    pool = work(db_url, node.url, "--drain")
    assert pool.wait() == 0, pool.output()
    with db.connect(db_url) as conn:
        assert conn.execute("SELECT count(DISTINCT block_number) FROM traces").fetchone()[0] == \
            conn.execute("SELECT count(*) FROM blocks WHERE transaction_count > 0").fetchone()[0]
        assert ("index_traces", "done") in jobs(conn)
    status = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
    assert list(status["jobs_by_kind"])[:3] == ["index_blocks", "decode_logs", "index_traces"]
    assert status["jobs_by_kind"]["index_traces"]["done"] == 1


def test_traces_of_blocks_never_indexed_fail_saying_what_to_plan(trace_node, db_url, work):
    """Traces are checked against the stored transactions: without them, and with no job to store
    them, the job fails with the command that would, and writes nothing."""
    assert run_indexer("plan", "--from", "2", "--to", "4", "--traces", db_url=db_url).returncode == 0
    pool = work(db_url, trace_node.node.url, "--drain", INDEXER_MAX_ATTEMPTS="1")
    assert pool.wait() == 1 and "1 job(s) failed" in pool.output(), pool.output()
    with db.connect(db_url) as conn:
        status, error = conn.execute("SELECT status, last_error FROM jobs WHERE kind = 'index_traces'").fetchone()
        assert conn.execute("SELECT count(*) FROM traces").fetchone()[0] == 0
    assert status == "failed"
    assert "block 2 is not stored" in error and "indexer plan --from 2 --to 3" in error, error


@pytest.mark.parametrize("traces_on", [False, True])
def test_a_repair_gives_back_the_traces_it_deleted(traces_on, trace_node, db_url, work):
    """`verify --repair` deletes a damaged block with every row of it, its traces included, and
    plans its traces again beside its blocks: a pool without INDEXER_TRACES brings them back, and
    one with it does not trace them twice."""
    node = trace_node.node
    index(db_url, node.url, work, end=trace_node.head + 1)
    before = rows(db_url)
    with db.connect(db_url) as conn:
        conn.execute("DELETE FROM transactions WHERE block_number = 3 AND transaction_index = 0")
    repaired = run_indexer("verify", "--from", "0", "--to", str(trace_node.head + 1), "--repair", db_url=db_url)
    assert "wrong transaction or log counts" in repaired.stdout, repaired
    with db.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM traces WHERE block_number = 3").fetchone()[0] == 0
        assert conn.execute("SELECT kind, payload FROM jobs WHERE status = 'pending' ORDER BY kind").fetchall() == [
            ("index_blocks", {"from": 3, "to": 3}), ("index_traces", {"from": 3, "to": 3})]
    pool = work(db_url, node.url, "--drain", INDEXER_TRACES=str(traces_on).lower())
    assert pool.wait() == 0, pool.output()
    assert rows(db_url) == before
    with db.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM jobs_history WHERE kind = 'index_traces'"
                            " AND payload = '{\"from\": 3, \"to\": 3}'").fetchone()[0] == 1


def test_a_reorg_rolled_back_while_following_takes_its_orphans_traces_and_brings_the_new_blocks(db_url, work):
    """A pool follows with traces on; the node replaces its top two blocks, whose transactions
    made internal calls, with two others. The rollback deletes the orphans' traces with their
    rows, and the traces stored are then the node's, block for block."""
    with Anvil() as node:
        build_trace_chain(node)
        pool = work(db_url, node.url, "--follow", "--from", "0", "--workers", "1", INDEXER_TRACES="true")

        def traces_are_the_node_s() -> bool:
            with db.connect(db_url) as conn:
                if not copy_is_the_node_s(conn, node):
                    return False
                stored = conn.execute("SELECT block_number, count(*), array_agg(transaction_hash ORDER BY position)"
                                      " FILTER (WHERE trace_address = '{}') FROM traces GROUP BY 1").fetchall()
            expected = {}
            for n in range(node.head() + 1):
                said = node.rpc("debug_traceBlockByNumber", hex(n), {"tracer": "callTracer"})
                if said:
                    expected[n] = (len(traces.from_call_tracer(n, said)),
                                   [bytes.fromhex(item["txHash"][2:]) for item in said])
            return {n: (count, hashes) for n, count, hashes in stored} == expected

        wait_for(traces_are_the_node_s, "the traces of the chain")
        orphaned = node.batch([("eth_getBlockByNumber", [hex(n), False]) for n in (node.head() - 1, node.head())])
        assert all(b["transactions"] for b in orphaned)
        node.reorg(2)
        node.mine(1)
        wait_for(traces_are_the_node_s, "the traces of the new blocks")
        pool.kill()
    with db.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM reorgs WHERE rolled_back").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM traces WHERE transaction_hash = ANY(%s)",
                            [[bytes.fromhex(h[2:]) for b in orphaned for h in b["transactions"]]]).fetchone()[0] == 0


def test_traces_planned_before_their_blocks_wait_for_them(trace_node, db_url, work):
    """Traces planned ahead of the blocks they are checked against (claimed first: planned first)
    wait, no attempt spent, while the job that stores the blocks is live; then they are stored."""
    end = str(trace_node.head + 1)
    assert run_indexer("plan", "--from", "0", "--to", end, "--traces", db_url=db_url).returncode == 0
    assert run_indexer("plan", "--from", "0", "--to", end, db_url=db_url).returncode == 0
    pool = work(db_url, trace_node.node.url, "--drain", "--workers", "1", INDEXER_MAX_ATTEMPTS="1")
    assert pool.wait() == 0, pool.output()
    assert "block 0 is not stored yet; an index_blocks job will store it; deferred" in pool.output()
    with db.connect(db_url) as conn:
        assert ("index_traces", "done") in jobs(conn)
        assert conn.execute("SELECT count(DISTINCT block_number) FROM traces").fetchone()[0] == \
            conn.execute("SELECT count(*) FROM blocks WHERE transaction_count > 0").fetchone()[0] > 0


def test_at_the_default_batch_size_a_traces_window_holds_at_most_a_small_batch_of_blocks(db_url, conn, work):
    """A window is one transaction of the database, so the traces it wrote share an xmin. On a chain
    of one transaction a block, INDEXER_BATCH_SIZE (500) would let a window hold 250 blocks (250
    calls with no sizing to a provider's rate); it holds SMALL_BATCH_BLOCKS."""
    assert DEFAULT_BATCH_SIZE > 2 * SMALL_BATCH_BLOCKS
    with Anvil("--no-mining") as node:
        build_dense(node, 2 * SMALL_BATCH_BLOCKS + 50, 1)  # a block deploying the emitter, then one call a block
        index(db_url, node.url, work, end=node.head() + 1)
    windows = [n for (n,) in conn.execute("SELECT count(DISTINCT block_number) FROM traces GROUP BY xmin::text")]
    assert sum(windows) == 2 * SMALL_BATCH_BLOCKS + 51 and max(windows) == SMALL_BATCH_BLOCKS, windows
