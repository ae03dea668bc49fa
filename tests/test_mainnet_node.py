"""The mainnet-shaped node for benchmarks: its blocks pass every check the indexer makes (roots
proven, parents linked, receipts belonging to their blocks), are the same on every run, and a
backfill against it completes and verifies."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import orjson
import pytest

from indexer.chaindata import chain, json_encodings, ordered_trie, rlp_codec, roots, traces
from indexer.jobs import planner
from indexer.node.rpc import RpcClient
from indexer.testing.mainnet_eras import ERAS
from indexer.testing.mainnet_node import MainnetNode
from indexer.testing.mainnet_server import NodeProcess

from .conftest import run_indexer

# Ten blocks from a little after each era's first block.
SAMPLES = [max(era.start, 1) + 1_000 for era in ERAS]


def rpc(node: MainnetNode, method: str, *params: object) -> object:
    return RpcClient([node.url], timeout=60, max_attempts=1).call(method, *params)


@pytest.fixture(scope="module")
def node():
    with MainnetNode(0, 23_000_000, templates=8) as n:
        yield n


def test_a_block_in_the_middle_of_a_batch_whose_receipts_were_changed_is_refused(node, monkeypatch):
    """Each block's roots are checked as its rows are made: the sixth block of ten, one of its
    receipts' gas changed by the node, refuses the batch naming that block, and the same batch
    as the node made it is proven whole."""
    first = SAMPLES[-1]
    client = RpcClient([node.url], timeout=60, max_attempts=1)
    assert chain.fetch(client, first, first + 9, verify_roots=True, chain_id=1).unproven == []
    made = node._receipts

    def changed(number: int) -> list[bytes]:
        answer = made(number)
        if number != first + 5:
            return answer
        receipts = orjson.loads(b"".join(answer))
        receipts[3]["cumulativeGasUsed"] = hex(int(receipts[3]["cumulativeGasUsed"], 16) + 1)
        return [orjson.dumps(receipts)]

    monkeypatch.setattr(node, "_receipts", changed)
    with pytest.raises(roots.RootMismatch, match=f"^receipts root mismatch at block {first + 5} from "):
        chain.fetch(client, first, first + 9, verify_roots=True, chain_id=1, max_transactions=10**6)


@pytest.mark.parametrize("first", SAMPLES, ids=[era.name for era in ERAS])
def test_every_era_decodes_and_every_root_is_proven(node, first):
    client = RpcClient([node.url], timeout=60, max_attempts=1)
    last = first + 9
    # Headers first, then the dense blocks by hash, as a worker fetches them.
    rows = chain.fetch(client, first, last, verify_roots=True, chain_id=1, max_transactions=10**6)
    assert (rows.first, rows.last, len(rows.blocks), rows.unproven) == (first, last, 10, [])

    blocks, receipts = chain.fetch_json(client, first, last)
    txs = [tx for b in blocks for tx in b["transactions"]]
    # Each transaction hash is the keccak of its signed encoding, not merely a root that matches.
    assert all("0x" + rlp_codec.keccak(json_encodings.encode_transaction_json(tx)).hex() == tx["hash"] for tx in txs)
    assert len({tx["hash"] for tx in txs}) == len(txs)
    era = next(e for e in reversed(ERAS) if e.start <= first)
    types = Counter(int(tx["type"], 16) for tx in txs)
    if era.start >= 17_034_870:
        assert all(len(b["withdrawals"]) == 16 for b in blocks)
        assert 80 <= len(txs) / 10 <= 260 and types[2] > types[0] > 0
    if era.start >= 19_426_587:
        assert types[3] > 0
    if era.start >= 22_431_084:
        assert types[4] > 0 and all("requestsHash" in b for b in blocks)
    if era.start < 12_244_000:
        assert set(types) <= {0}
    if era.start < 4_370_000:  # receipts carry the state root, as before Byzantium
        assert all("root" in r and "status" not in r for rs in receipts.values() for r in rs)
    if era.start == 0:
        assert sum(1 for b in blocks if not b["transactions"]) >= 3


def test_blocks_link_by_parent_hash_and_are_found_by_hash(node):
    first = 19_426_587 - 5  # across the Cancun boundary
    headers = [rpc(node, "eth_getBlockByNumber", hex(n), False) for n in range(first, first + 10)]
    for below, above in zip(headers, headers[1:]):
        assert above["parentHash"] == below["hash"]
    assert "blobGasUsed" not in headers[4] and "blobGasUsed" in headers[5]
    for header in headers:
        full = rpc(node, "eth_getBlockByHash", header["hash"], True)
        assert full["number"] == header["number"]
        assert [tx["hash"] for tx in full["transactions"]] == header["transactions"]
        by_hash = rpc(node, "eth_getBlockReceipts", header["hash"])
        assert by_hash == rpc(node, "eth_getBlockReceipts", header["number"])
        assert [r["transactionHash"] for r in by_hash] == header["transactions"]
        one = header["transactions"][len(header["transactions"]) // 2]
        assert rpc(node, "eth_getTransactionReceipt", one)["transactionHash"] == one
    assert rpc(node, "eth_getBlockByHash", "0x" + "11" * 32, False) is None
    assert rpc(node, "eth_blockNumber") == hex(23_000_000)
    assert rpc(node, "eth_getBlockByNumber", "finalized", False)["number"] == hex(23_000_000)
    assert rpc(node, "eth_getBlockByNumber", hex(23_000_001), False) is None


def test_the_same_block_is_the_same_bytes_and_no_transaction_repeats():
    with MainnetNode(18_000_000, 18_000_099, templates=2) as a, MainnetNode(18_000_000, 18_000_099, templates=2) as b:
        for n in (18_000_000, 18_000_057):
            assert a.block(n, True) == b.block(n, True)
            assert a.receipts(n) == b.receipts(n)
        # With two templates, blocks share their shape; their transactions still differ.
        hashes = [tx for n in range(18_000_000, 18_000_010) for tx in orjson.loads(a.block(n, False))["transactions"]]
        assert len(set(hashes)) == len(hashes)


@pytest.mark.parametrize("first, blocks, processes", [(17_100_000, 20, 1), (1_200_000, 2_500, 2)],
                         ids=["shanghai, in this process", "homestead, in two forked processes"])
def test_a_precomputed_node_serves_every_block_without_hashing_its_transactions(monkeypatch, first, blocks, processes):
    # More blocks than the node keeps when it computes as it serves: a benchmark's node precomputes
    # tens of thousands, and one that hashed every transaction again while serving would take the
    # indexer's cores. What is left per block is its own hash, its parent's and its state root.
    last = first + blocks - 1
    hashed = []
    keccak = rlp_codec.keccak
    with MainnetNode(first, last, templates=2) as reference:
        expected = {n: (reference.block(n, True), reference.receipts(n)) for n in (first, first + blocks // 2, last)}
    counted = lambda data: hashed.append(data) or keccak(data)  # noqa: E731
    monkeypatch.setattr(rlp_codec, "keccak", counted)  # the node's own hashes
    monkeypatch.setattr(ordered_trie, "keccak", counted)  # its tries' nodes
    with MainnetNode(first, last, templates=2, cache_blocks=4) as node:
        node.precompute(processes)
        # Forked, the hashing is counted in the processes that did it, not here.
        assert (len(hashed) < blocks) if processes > 1 else (len(hashed) > blocks * 5)
        hashed.clear()
        served = [node.block(n, True) for n in range(first, last + 1)]
        assert len(hashed) == blocks * 3
        assert sum(len(orjson.loads(b)["transactions"]) for b in served) > blocks * 5
        for n, (block, receipts) in expected.items():  # the same as a node that computes as it serves
            assert (served[n - first], node.receipts(n)) == (block, receipts)


def test_a_backfill_against_it_completes_and_verifies(db_url, conn, work):
    first, last = 19_426_587 - 50, 19_426_587 + 49  # Shanghai into Cancun
    with NodeProcess(first, last - first + 1, templates=8) as node:
        planner.plan(conn, first, last + 1, 40)
        pool = work(db_url, node.url, "--drain", "--workers", "2", INDEXER_VERIFY_ROOTS="true")
        assert pool.wait(600) == 0, pool.output()[-3000:]
    stored = conn.execute("SELECT count(*), sum(transaction_count), sum(log_count) FROM blocks").fetchone()
    assert stored[0] == 100 and stored[1] > 100 * 80 and stored[2] > stored[1]
    assert conn.execute("SELECT count(*) FROM withdrawals").fetchone()[0] == 100 * 16
    checked = run_indexer("verify", "--from", str(first), "--to", str(last + 1), "--roots", db_url=db_url, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[0] == f"blocks {first:,}..{last:,}: all present, linked and complete"


@pytest.mark.parametrize("first", SAMPLES, ids=[era.name for era in ERAS])
def test_every_era_s_call_trees_pass_the_indexer_s_checks(node, first):
    client = RpcClient([node.url], timeout=60, max_attempts=1)
    blocks, receipts = chain.fetch_json(client, first, first + 4)
    shapes = Counter()
    for block in blocks:
        number = int(block["number"], 16)
        answer = rpc(node, "debug_traceBlockByHash", block["hash"], {"tracer": "callTracer"})
        assert answer == rpc(node, "debug_traceBlockByNumber", block["number"], {"tracer": "callTracer"})
        assert [item["txHash"] for item in answer] == [tx["hash"] for tx in block["transactions"]]
        rows = traces.from_call_tracer(number, answer)
        # Top-level call equal to the transaction, failed exactly when its receipt says so, every
        # log emitted by a call that was not undone, subtraces counted.
        traces.check_against_block(number, rows, block, receipts.get(number, []))
        shapes.update(t.type for t in rows)
        shapes["frames"] += len(rows)
        shapes["transactions"] += len(block["transactions"])
        shapes["deep"] += sum(len(t.trace_address) >= 3 for t in rows)
        if block["transactions"]:
            one = block["transactions"][-1]["hash"]
            assert rpc(node, "debug_traceTransaction", one, {"tracer": "callTracer"}) == answer[-1]["result"]
    if first >= 4_370_000:  # busy eras: trees as deep and as mixed as mainnet's
        assert shapes["frames"] > 2 * shapes["transactions"], shapes
        assert shapes["STATICCALL"] and shapes["DELEGATECALL"] and shapes["deep"], shapes


def test_call_trees_are_the_same_on_every_run_and_only_the_call_tracer_is_served():
    with MainnetNode(18_000_000, 18_000_009, templates=2) as a, MainnetNode(18_000_000, 18_000_009, templates=2) as b:
        block = orjson.loads(a.block(18_000_003, False))
        assert rpc(a, "debug_traceBlockByHash", block["hash"], {"tracer": "callTracer"}) == \
            rpc(b, "debug_traceBlockByHash", block["hash"], {"tracer": "callTracer"})
        with pytest.raises(Exception, match="callTracer"):
            rpc(a, "debug_traceBlockByHash", block["hash"], {"tracer": "prestateTracer"})
        with pytest.raises(Exception, match="not found"):
            rpc(a, "debug_traceBlockByNumber", hex(18_000_010), {"tracer": "callTracer"})


def test_a_backfill_with_traces_writes_every_call_and_fails_no_job(db_url, conn, work):
    first, last = 18_000_000, 18_000_039
    with NodeProcess(first, last - first + 1, templates=8, traces=True) as node:
        planner.plan(conn, first, last + 1, 10)
        pool = work(db_url, node.url, "--drain", "--workers", "2", INDEXER_TRACES="true")
        assert pool.wait(600) == 0, pool.output()[-3000:]
        expected = 0
        client = RpcClient([node.url], timeout=60, max_attempts=1)
        for n in range(first, last + 1):
            answer = client.call("debug_traceBlockByNumber", hex(n), {"tracer": "callTracer"})
            expected += len(traces.from_call_tracer(n, answer))
    assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    done = dict(conn.execute("SELECT kind, count(*) FROM jobs_history WHERE status = 'done' GROUP BY kind").fetchall())
    assert done["index_blocks"] == done["index_traces"] == 4, done
    transactions = conn.execute("SELECT sum(transaction_count) FROM blocks").fetchone()[0]
    found = conn.execute("SELECT count(*), count(*) FILTER (WHERE trace_address = '{}'), count(DISTINCT block_number),"
                         " count(*) FILTER (WHERE reverted) FROM traces").fetchone()
    assert found[:3] == (expected, transactions, 40) and found[0] > 2 * transactions and found[3] > 0, found


@pytest.mark.parametrize("args, message", [
    (["--blocks", "0"], "mainnet_node: error: --blocks must be at least 1, not 0"),
    (["--first", "-1"], "mainnet_node: error: --first must be 0 or more, not -1"),
    (["--port", "70000"], "mainnet_node: error: --port must be 0..65535, not 70000"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message):
    done = subprocess.run([sys.executable, "-m", "indexer.testing.mainnet_server", *args], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (2, message + "\n", "")
