#!/usr/bin/env python3
"""What turning a batch of blocks into COPY lines costs (`rows.decode`), with the C lines in front
(`indexer/chaindata/_native_rows.c`, what a worker runs) and with rows.py alone (an install
without a C compiler): CPU microseconds per block of this process, the two alternating round by round in
one process (so that the machine's drift falls on both), the median of `--repeat` rounds each.

Three batches:
- recorded: mainnet block 18,000,000 (tests/fixtures/mainnet-18000000.json: 94 transactions,
  291 logs, 16 withdrawals);
- dense: blocks mined here by anvil as scripts/bench_backfill.py mines its dense chain (`--txs`
  transactions a block, every other one a contract call emitting two logs; `--blocks` of them);
- sparse: `--empty` empty blocks mined by anvil, in one batch.

    .venv/bin/python scripts/bench_rows.py [--blocks 20] [--txs 50] [--empty 1000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

from indexer.chaindata import chain, rows
from indexer.node.rpc import RpcClient
from indexer.testing import fixtures
from indexer.testing.anvil import Anvil, build_dense

Batch = tuple[int, list[Any], dict[int, Any]]  # decode's arguments


def mined(blocks: int, txs: int, empty: int) -> tuple[Batch, Batch]:
    """The dense batch and the sparse one, mined by one anvil and fetched as a worker fetches."""
    with Anvil("--no-mining") as node:
        build_dense(node, blocks, txs)
        dense_head = node.head()
        node.mine(empty)
        client = RpcClient([node.url], timeout=120, max_attempts=1)
        dense = chain.fetch_json(client, 2, dense_head)  # block 1 deploys the contract
        sparse = chain.fetch_json(client, dense_head + 1, dense_head + empty)
    return (2, *dense), (dense_head + 1, *sparse)


def cpu_seconds(fn: Callable[[], Any], calls: int) -> float:
    began = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - began) / calls


def alternating(batch: Batch, repeat: int, round_seconds: float = 0.2) -> tuple[float, float]:
    """CPU microseconds per block of decoding `batch`, with C and with Python alone: medians of `repeat`
    rounds, the two taking turns within each round."""
    native = rows._native_rows
    if native is None:
        raise SystemExit("bench_rows: indexer/chaindata/_native_rows.c is not built: run scripts/setup-venv")

    def decode() -> rows.Rows:
        return rows.decode(*batch)

    try:
        with_c = decode()
        rows._native_rows = None
        assert decode() == with_c, "C and Python made different rows"
        calls = max(1, int(round_seconds / max(cpu_seconds(decode, 1), 1e-6)))
        spent: dict[Any, list[float]] = {native: [], None: []}
        for _ in range(repeat):
            for backend in spent:
                rows._native_rows = backend
                spent[backend].append(cpu_seconds(decode, calls))
    finally:
        rows._native_rows = native
    per_block = 1e6 / len(batch[1])
    return statistics.median(spent[native]) * per_block, statistics.median(spent[None]) * per_block


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=20, help="dense blocks to mine")
    ap.add_argument("--txs", type=int, default=50, help="transactions per dense block")
    ap.add_argument("--empty", type=int, default=1000, help="empty blocks to mine for the sparse batch")
    ap.add_argument("--repeat", type=int, default=7, help="rounds per figure (the median is shown)")
    args = ap.parse_args()

    recorded = fixtures.load("mainnet-18000000")
    number = int(recorded["block"]["number"], 16)
    dense, sparse = mined(args.blocks, args.txs, args.empty)
    batches = {"mainnet 18,000,000 (94 transactions, 291 logs, 16 withdrawals)":
               (number, [recorded["block"]], {number: recorded["receipts"]}),
               f"dense anvil blocks, {args.txs} transactions ({args.blocks} blocks)": dense,
               f"empty anvil blocks ({args.empty} in one batch)": sparse}
    print(f"rows.decode, CPU µs per block, median of {args.repeat} rounds, C and Python alternating:\n")
    print("| batch | C in front | rows.py alone | C / Python |")
    print("|---|---:|---:|---:|")
    for name, batch in batches.items():
        c, python = alternating(batch, args.repeat)
        print(f"| {name} | {c:.1f} | {python:.1f} | {c / python:.2f}x |")


if __name__ == "__main__":
    main()
