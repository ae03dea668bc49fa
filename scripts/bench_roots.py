#!/usr/bin/env python3
"""What recomputing a block's roots costs (`indexer.chaindata.roots.check_block`), in CPU time, against
the rest of what a worker's process spends on the same block; and the project's own ordered-trie
function against py-trie's HexaryTrie.

Two blocks, or kinds of block:
- recorded: mainnet block 18,000,000 (tests/fixtures/mainnet-18000000.json: 94 transactions,
  291 logs, 16 withdrawals);
- dense: blocks mined here by anvil as scripts/bench_backfill.py mines its dense chain (50
  transactions a block, every other one a contract call emitting two logs; `--txs`, `--blocks`).

Measured, all with time.process_time (the CPU time of this process only, so the node's and
PostgreSQL's do not count), each the median of `--repeat` rounds:
- tries: ms per block to compute the block's roots (transactions, receipts and, where the
  header has one, withdrawals) from their encodings, made beforehand: `ordered_trie.ordered_trie_root`
  against `trie.HexaryTrie` (pip install trie: not a dependency of the project; skipped without
  it), each inserting rlp(i) -> encoding in a fresh in-memory trie, plain and in one
  `squash_changes()` batch (the faster is shown);
- check_block: ms per block, as a worker runs it (the C check in front, `_native_roots.c`, the
  receipts' own blooms in their encodings), with the blooms recomputed from the logs (as
  `indexer verify --roots` does), and with the Python check alone (an install that had no C
  compiler), with the keccak backend rlp_codec.py picks;
- the rest of a worker's CPU per block, in one process and in order as a worker does it
  (the same steps as bench_backfill.py's breakdown, there in wall time): the JSON-RPC calls
  (`chain.fetch_json`: the HTTP client and the JSON parsing, against the anvil node), decoding
  (`chain.decode`) and writing (`store.write` and its commit, with a worker's session settings,
  into a fresh database: `--database-url`, or a PostgreSQL of its own started by
  scripts/pg-start; `--no-write` to leave writing out). The recorded block has no node: its
  "JSON-RPC" is parsing its recorded JSON with orjson, the client's part of the call that
  costs most.

    .venv/bin/python scripts/bench_roots.py [--blocks 40] [--txs 50] [--repeat 5] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import nullcontext
from typing import Any, Callable

import orjson
import psycopg

from bench_backfill import drop_database, partitioned_database

from indexer.base import db
from indexer.base.settings import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TRANSACTIONS
from indexer.chaindata import chain, json_encodings, ordered_trie, rlp_codec, roots, store
from indexer.chaindata.prefetch import batch_blocks
from indexer.node.rpc import RpcClient
from indexer.testing import fixtures
from indexer.testing.anvil import Anvil, build_dense
from indexer.testing.cluster import postgres_at

RECORDED = "mainnet-18000000"
SCRATCH = f"bench_roots_{os.getpid()}"  # the database each measure of writing makes, then drops


def cpu_ms(fn: Callable[[], Any], repeat: int, per: int = 1, min_seconds: float = 0.2) -> float:
    """Median over `repeat` rounds of the CPU milliseconds of one call of fn, divided by `per`;
    each round calls fn as often as fits in `min_seconds`."""
    calls = 1
    t = time.process_time()
    fn()
    elapsed = time.process_time() - t
    if elapsed < min_seconds:
        calls = max(1, int(min_seconds / max(elapsed, 1e-6)))
    rounds = []
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(calls):
            fn()
        rounds.append((time.process_time() - t) / calls)
    return 1000 * statistics.median(rounds) / per


# --- the blocks -----------------------------------------------------------------------------------



def encodings(block: dict[str, Any], receipts: list[dict[str, Any]]) -> list[list[bytes]]:
    """The values of the block's tries, encoded."""
    txs = [json_encodings.encode_transaction_json(tx) for tx in block["transactions"]]
    types = [enc[0] if enc[0] < 0x80 else 0 for enc in txs]
    lists = [txs, [json_encodings.encode_receipt_json(r, types[i])[0] for i, r in enumerate(receipts)]]
    if "withdrawalsRoot" in block:
        lists.append([json_encodings.encode_withdrawal_json(w) for w in block.get("withdrawals") or ()])
    return lists


# --- tries ----------------------------------------------------------------------------------------


def trie_ms(blocks: list[tuple[dict, list]], repeat: int) -> dict[str, float | str]:
    values = [encodings(b, r) for b, r in blocks]
    expected = [[bytes.fromhex(b[k][2:]) for k in ("transactionsRoot", "receiptsRoot", "withdrawalsRoot") if k in b]
                for b, _ in blocks]
    own = [[ordered_trie.ordered_trie_root(v) for v in lists] for lists in values]
    assert own == expected, "ordered_trie_root disagrees with a header"
    result: dict[str, float | str] = {
        "own": cpu_ms(lambda: [[ordered_trie.ordered_trie_root(v) for v in lists] for lists in values], repeat, len(blocks))}
    try:
        import rlp
        from trie import HexaryTrie
    except ImportError:
        result["hexary"] = "not installed"
        return result

    def hexary(v: list[bytes]) -> bytes:
        t = HexaryTrie({})
        for i, x in enumerate(v):
            t[rlp.encode(i)] = x
        return t.root_hash

    def hexary_squashed(v: list[bytes]) -> bytes:
        t = HexaryTrie({})
        with t.squash_changes() as batch:
            for i, x in enumerate(v):
                batch[rlp.encode(i)] = x
        return t.root_hash

    for fn in (hexary, hexary_squashed):
        assert [[fn(v) for v in lists] for lists in values] == expected, f"{fn.__name__} disagrees with a header"
    result["hexary"] = min(cpu_ms(lambda: [[fn(v) for v in lists] for lists in values], repeat, len(blocks))
                           for fn in (hexary, hexary_squashed))
    return result


# --- check_block ----------------------------------------------------------------------------------


def check_ms(blocks: list[tuple[dict, list]], repeat: int, *, recompute_blooms: bool, native: bool) -> float:
    saved = roots._native_roots
    if not native:
        roots._native_roots = None
    elif saved is None:
        raise SystemExit("bench_roots: indexer/chaindata/_native_roots.c is not built: run scripts/setup-venv")
    try:
        for b, r in blocks:
            assert roots.check_block(b, r, recompute_blooms=recompute_blooms) is None, "a block was not proven"
        return cpu_ms(lambda: [roots.check_block(b, r, recompute_blooms=recompute_blooms) for b, r in blocks],
                      repeat, len(blocks))
    finally:
        roots._native_roots = saved


# --- the rest of a worker's CPU -------------------------------------------------------------------


def worker_ms(rpc_url: str, first: int, last: int, database_url: str | None, repeat: int) -> dict[str, float]:
    """CPU ms per block of a worker's steps over blocks first..last, in batches of about 1,000
    transactions as a worker sizes them; the median of `repeat` passes (each into a fresh
    database)."""
    client = RpcClient([rpc_url], timeout=120, max_attempts=1)
    passes = []
    for p in range(repeat):
        spent = dict.fromkeys(("rpc", "decode", "write"), 0.0)
        conn = None
        if database_url:
            url = partitioned_database(database_url, SCRATCH, first, last)
            conn = psycopg.connect(url, autocommit=True, options=db.worker_session_options(300))
            store.prepare(conn)
        n = first
        size = batch_blocks(None, DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TRANSACTIONS)
        while n <= last:
            end = min(n + size - 1, last)
            t0 = time.process_time()
            blocks, receipts = chain.fetch_json(client, n, end)
            t1 = time.process_time()
            rows = chain.decode(n, blocks, receipts)
            t2 = time.process_time()
            if conn is not None:
                with conn.transaction():
                    store.write(conn, rows)
            t3 = time.process_time()
            for step, t in zip(spent, (t1 - t0, t2 - t1, t3 - t2)):
                spent[step] += t
            size = batch_blocks(len(rows.transactions) / (end - n + 1), DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TRANSACTIONS)
            n = end + 1
        if conn is not None:
            conn.close()
            drop_database(database_url, SCRATCH)
        passes.append(spent)
    count = last - first + 1
    return {step: 1000 * statistics.median(p[step] for p in passes) / count for step in ("rpc", "decode", "write")}


def recorded_worker_ms(database_url: str | None, repeat: int) -> dict[str, float]:
    raw = (fixtures.FIXTURES / f"{RECORDED}.json").read_bytes()
    recorded = orjson.loads(raw)
    number = int(recorded["block"]["number"], 16)
    result = {
        "rpc": cpu_ms(lambda: orjson.loads(raw), repeat),
        "decode": cpu_ms(lambda: chain.decode(number, [recorded["block"]], {number: recorded["receipts"]}), repeat),
        "write": 0.0,
    }
    if database_url:
        rows = chain.decode(number, [recorded["block"]], {number: recorded["receipts"]})
        url = partitioned_database(database_url, SCRATCH, number, number)
        with psycopg.connect(url, autocommit=True, options=db.worker_session_options(300)) as conn:
            store.prepare(conn)

            def write() -> None:  # written, then rolled back, so that every round writes anew
                with conn.transaction(force_rollback=True):
                    store.write(conn, rows)

            result["write"] = cpu_ms(write, repeat)
        drop_database(database_url, SCRATCH)
    return result


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=40, help="dense blocks to mine")
    ap.add_argument("--txs", type=int, default=50, help="transactions per dense block")
    ap.add_argument("--repeat", type=int, default=5, help="rounds per figure (the median is shown)")
    ap.add_argument("--database-url", help="a PostgreSQL to create a scratch database in (default: start one)")
    ap.add_argument("--no-write", action="store_true", help="leave writing out of the worker's CPU")
    args = ap.parse_args()

    with nullcontext(None) if args.no_write else postgres_at(args.database_url) as database_url:
        with Anvil("--no-mining") as node:
            t = time.perf_counter()
            build_dense(node, args.blocks, args.txs)
            head = node.head()
            print(f"# dense: {args.blocks} blocks of {args.txs} transactions mined in {time.perf_counter() - t:.0f} s;"
                  f" keccak: {rlp_codec.KECCAK_BACKEND}", file=sys.stderr, flush=True)
            first = 2  # block 1 deploys the contract
            blocks, receipts = chain.fetch_json(RpcClient([node.url], timeout=120, max_attempts=1), first, head)
            dense = [(b, receipts[int(b["number"], 16)]) for b in blocks]
            other = {"dense": worker_ms(node.url, first, head, database_url, args.repeat)}
        recorded = fixtures.load(RECORDED)
        other["recorded"] = recorded_worker_ms(database_url, args.repeat)
    cases = {"recorded": [(recorded["block"], recorded["receipts"])], "dense": dense}

    print(f"Ordered-trie roots per block (all of the block's tries, from their encodings; CPU ms, median of "
          f"{args.repeat}):\n")
    print("| block | transactions | logs | ordered_trie.ordered_trie_root | trie.HexaryTrie | HexaryTrie / own |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, blocks_ in cases.items():
        tries = trie_ms(blocks_, args.repeat)
        txs = sum(len(b["transactions"]) for b, _ in blocks_) / len(blocks_)
        logs = sum(len(x["logs"]) for _, r in blocks_ for x in r) / len(blocks_)
        hexary = tries["hexary"]
        ratio = f"{hexary / tries['own']:.1f}x" if isinstance(hexary, float) else "-"
        hexary_text = f"{hexary:.3f}" if isinstance(hexary, float) else hexary
        print(f"| {kind} | {txs:.0f} | {logs:.0f} | {tries['own']:.3f} | {hexary_text} | {ratio} |")
    print()
    print("check_block against the rest of a worker's CPU per block (CPU ms, median of "
          f"{args.repeat}; the rest: JSON-RPC client, decoding, writing; in brackets check_block as a share of "
          "the rest):\n")
    print("| block | JSON-RPC | decoding | writing | rest in all | check_block (a worker: C, sent blooms) "
          "| C, blooms recomputed (verify --roots) | Python alone, sent blooms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, blocks_ in cases.items():
        o = other[kind]
        rest = o["rpc"] + o["decode"] + o["write"]

        def share(ms: float) -> str:
            return f"{ms:.3f} ({100 * ms / rest:.0f}%)"

        worker = check_ms(blocks_, args.repeat, recompute_blooms=False, native=True)
        recomputed = check_ms(blocks_, args.repeat, recompute_blooms=True, native=True)
        python = check_ms(blocks_, args.repeat, recompute_blooms=False, native=False)
        write = f"{o['write']:.3f}" if database_url else "not measured"
        print(f"| {kind} | {o['rpc']:.3f} | {o['decode']:.3f} | {write} | {rest:.3f} | {share(worker)} "
              f"| {share(recomputed)} | {share(python)} |")


if __name__ == "__main__":
    main()
