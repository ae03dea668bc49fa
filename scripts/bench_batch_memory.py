#!/usr/bin/env python3
"""Peak memory of `indexer work` on a chain whose density changes: `--empty` empty blocks, then
`--dense` blocks of `--txs` transactions each (half of them calls that emit two logs), indexed by
one worker with the default settings (INDEXER_BATCH_TRANSACTIONS 600, INDEXER_BATCH_SIZE 500).
After the empty blocks a worker's estimate of the chain's density is 0; the batches it asks for
then must still hold about INDEXER_BATCH_TRANSACTIONS transactions, not 500 dense blocks.

Prints the peak RSS of the largest `indexer` process run (getrusage of the descendants waited
for, exact: migrate, plan, the pool and its worker, the worker being the largest; read before
anvil is stopped), the batches as written (one transaction each, read back by `xmin`) and the
wall time.

    .venv/bin/python scripts/bench_batch_memory.py ADMIN_DATABASE_URL [--empty 2000] [--dense 200] [--txs 400]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from indexer.testing.anvil import Anvil, build_dense

INDEXER = str(Path(sys.executable).with_name("indexer"))

WRITTEN_BATCHES = "SELECT count(*), sum(transaction_count) FROM blocks GROUP BY xmin::text"


def build(node: Anvil, empty: int, dense: int, txs: int) -> None:
    for start in range(0, empty, 1000):  # anvil mines about a thousand empty blocks a second
        node.mine(min(1000, empty - start))
    build_dense(node, dense, txs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("admin_url", help="a PostgreSQL URL allowed to create databases")
    ap.add_argument("--empty", type=int, default=2000)
    ap.add_argument("--dense", type=int, default=200)
    ap.add_argument("--txs", type=int, default=400)
    args = ap.parse_args()
    name = f"batch_memory_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(args.admin_url, dbname=name)
    try:
        with Anvil("--no-mining") as node:
            started = time.perf_counter()
            build(node, args.empty, args.dense, args.txs)
            head = node.head()
            print(f"chain: {head + 1:,} blocks built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
            env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
            env |= {"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": node.url, "INDEXER_USE_FINALIZED": "false",
                    "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0"}
            for cmd in (["migrate"], ["plan", "--from", "0", "--to", str(head + 1), "--chunk", str(head + 1)]):
                subprocess.run([INDEXER, *cmd], env=env, check=True, capture_output=True)
            started = time.perf_counter()
            subprocess.run([INDEXER, "work", "--drain", "--workers", "1", "--log-level", "WARNING"], env=env, check=True)
            elapsed = time.perf_counter() - started
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        with psycopg.connect(url) as conn:
            batches = conn.execute(WRITTEN_BATCHES).fetchall()
    finally:
        with psycopg.connect(args.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"{args.empty:,} empty blocks, then {args.dense:,} of {args.txs:,} transactions: "
          f"peak RSS {peak_mb:.0f} MB, {len(batches)} batches, the largest {max(t for _, t in batches):,} "
          f"transactions in {max(b for b, _ in batches)} blocks at most, {elapsed:.1f} s")


if __name__ == "__main__":
    main()
