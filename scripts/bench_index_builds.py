#!/usr/bin/env python3
"""Index builds benchmark: one partition's query indexes built again under each way of building
them, to choose how the index jobs build (indexer/jobs/partitions.py).

Fills one partition of `--blocks` mainnet-shaped blocks (`indexer work --drain`, 2 workers, the
default settings, the partition as large as the range), then for each `--ways` entry drops the
partition's query indexes and builds them one after the other as `chain_query_indexes` says,
CONCURRENTLY as the index jobs do or plainly, with the session's `maintenance_work_mem` and
`max_parallel_maintenance_workers` set as the entry says; a CHECKPOINT before each build, so
that none pays for the last one's dirty pages. Prints, per way: wall seconds and the machine's
busy CPU seconds (all processes: the build's parallel workers are processes of their own; the
machine should be otherwise idle).

    .venv/bin/python scripts/bench_index_builds.py [--blocks 10000] [--first 17100000]
        [--ways concurrently:64MB:2,concurrently:64MB:0,concurrently:512MB:2,plain:64MB:2] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time

import psycopg

from bench_backfill import INDEXER, drop_database, fresh_database, machine_busy_seconds

from indexer.testing.mainnet_server import NodeProcess

QUERY_INDEXES = "SELECT index_name, create_sql, drop_sql FROM chain_query_indexes(%(first)s, %(online)s)"
ROWS = """
SELECT (SELECT count(*) FROM transactions), (SELECT count(*) FROM logs), (SELECT count(*) FROM token_transfers)
"""


def fill(url: str, node: NodeProcess, blocks: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    env |= {"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": node.url, "INDEXER_USE_FINALIZED": "false",
            "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0", "INDEXER_PARTITION_BLOCKS": str(blocks)}
    for cmd in (["migrate"], ["plan", "--from", str(node.first), "--to", str(node.last + 1), "--chunk", "1000"],
                ["work", "--drain", "--workers", "2", "--log-level", "WARNING"]):
        subprocess.run([INDEXER, *cmd], env=env, check=True, capture_output=True)


def build(url: str, first: int, way: str) -> tuple[float, float]:
    """Wall and busy CPU seconds of building the partition's query indexes `way`."""
    online, memory, parallel = way.split(":")
    wall = busy = 0.0
    with psycopg.connect(url, autocommit=True) as conn:
        indexes = conn.execute(QUERY_INDEXES, {"first": first, "online": online == "concurrently"}).fetchall()
        for _, _, drop in indexes:
            conn.execute(drop)
        conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (memory,))
        conn.execute("SELECT set_config('max_parallel_maintenance_workers', %s, false)", (parallel,))
        for _, create, _ in indexes:
            conn.execute("CHECKPOINT")
            cpu, started = machine_busy_seconds(), time.perf_counter()
            conn.execute(create)
            wall += time.perf_counter() - started
            busy += machine_busy_seconds() - cpu
    return wall, busy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=10_000, help="blocks in the partition (default 10,000)")
    ap.add_argument("--first", type=int, default=17_100_000,
                    help="its first block, a multiple of --blocks (its era sets the shape; default 17100000)")
    ap.add_argument("--ways", default="concurrently:64MB:2,concurrently:64MB:0,concurrently:512MB:2,plain:64MB:2",
                    help="comma-separated HOW:MAINTENANCE_WORK_MEM:PARALLEL_WORKERS, HOW concurrently or plain")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    ways = args.ways.split(",")
    if args.blocks < 1 or args.first % args.blocks:
        ap.error("--blocks must be at least 1, and --first a multiple of it")
    if any(len(w.split(":")) != 3 or w.split(":")[0] not in ("concurrently", "plain") for w in ways):
        ap.error(f"--ways takes HOW:MAINTENANCE_WORK_MEM:PARALLEL_WORKERS entries, HOW concurrently or plain: {args.ways!r}")
    name = f"bench_index_builds_{os.getpid()}"
    url = fresh_database(args.database_url, name)
    try:
        with NodeProcess(args.first, args.blocks) as node:
            fill(url, node, args.blocks)
        with psycopg.connect(url) as conn:
            transactions, logs, transfers = conn.execute(ROWS).fetchone()
        print(f"One partition of {args.blocks:,} mainnet-shaped blocks from {args.first:,}: {transactions:,} transactions,"
              f" {logs:,} logs, {transfers:,} token transfers; its query indexes built one after the other.\n")
        print("| how | maintenance_work_mem | max_parallel_maintenance_workers | wall (s) | machine busy CPU (s) |")
        print("|---|---|---:|---:|---:|")
        for way in ways:
            wall, busy = build(url, args.first, way)
            how, memory, parallel = way.split(":")
            print(f"| {how} | {memory} | {parallel} | {wall:.1f} | {busy:.1f} |", flush=True)
    finally:
        drop_database(args.database_url, name)


if __name__ == "__main__":
    main()
