#!/usr/bin/env python3
"""Traces benchmark (issue 26): what an `index_traces` job costs per block beside an
`index_blocks` job, and whether the traces slow the blocks when both run, in one run.

For each chain, the mainnet-shaped node (indexer/testing/mainnet_node.py at `--first`, its call
trees shaped after the recorded mainnet block 24,298,763, every block and tree built before it
answers) and anvil's dense chain (`build_dense`: `--dense-txs` transactions a block, every other
one a call of a contract that emits two logs), `indexer work --drain` with `--workers` workers,
each run on a fresh database (migrated and planned first, not timed), jobs of `--chunk` blocks:
- blocks: INDEXER_TRACES=false, the block ranges alone;
- traces: then, on that run's database (its blocks stored), `indexer plan --traces` over the same
  range and the pool again: the `index_traces` jobs alone;
- both: INDEXER_TRACES=true on a fresh database: each range indexed enqueues its traces job, which
  the same pool runs beside the ranges still to index.
Each run: wall time from starting the pool to its exit, and to its last `index_blocks` job
finished (the database's clock: `jobs_history.finished_at`), as blocks/s; the CPU time of the
pool's processes (sampled from /proc, as bench_backfill.py's `Watch`), of the node, and the rest
of the machine's (PostgreSQL, mostly: `Cores`), per block, and for the traces run per trace row
too. `--repeat` runs the blocks and both runs again, alternating which goes first; the ratios
(both against blocks, same chain) are per repeat, and the median is reported.

PostgreSQL: `--database-url` (scratch databases are made there and dropped), or by default one of
its own started by scripts/pg-start (fsync off). anvil: INDEXER_TEST_ANVIL, or the one
scripts/install-anvil put in .cache. Prints Markdown tables; BENCHMARKS.md ("Traces") holds the
figures with this command. The default run takes about 3 minutes on 2 cores.

    .venv/bin/python scripts/bench_traces.py [--mainnet 400] [--first 18000000] [--dense 120]
        [--dense-txs 50] [--workers 2] [--chunk 20] [--repeat 1] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import psycopg

from bench_backfill import INDEXER, LAST_RANGE_INDEXED, Cores, drain, drop_database, fresh_database
from bench_growth import WORKERS, DatabaseCpu

from indexer.testing.anvil import Anvil, build_dense
from indexer.testing.cluster import postgres_at
from indexer.testing.mainnet_server import NodeProcess

STORED = "SELECT count(*), coalesce(sum(transaction_count), 0) FROM blocks"
TRACES = "SELECT count(*) FROM traces"
# The traces' blocks: each block with a transaction has its calls, one top-level call a transaction.
TRACED = "SELECT count(DISTINCT block_number), count(*) FILTER (WHERE trace_address = '{}') FROM traces"
UNFINISHED = "SELECT count(*) FROM jobs WHERE kind IN ('index_blocks', 'index_traces')"
FAILED = "SELECT count(*) FROM jobs WHERE status = 'failed'"
CLOCK = "SELECT extract(epoch FROM clock_timestamp())::float8"


def log(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


@dataclass
class Run:
    chain: str
    mode: str  # blocks, traces, both
    repeat: int
    blocks: int
    seconds: float  # to the pool's exit
    indexed_seconds: float | None  # to the last index_blocks job finished (None: no such job in the run)
    pool_cpu: float  # seconds, the pool's processes
    node_cpu: float
    sessions_cpu: float  # the pool's database sessions (bench_growth.py's `DatabaseCpu`)
    rest_cpu: float  # the machine's other busy CPU: PostgreSQL's other processes, and whatever else runs here
    traces: int  # rows in traces at the end
    transactions: int

    def per_block(self, seconds: float) -> str:
        return f"{1000 * seconds / self.blocks:.2f}"


def environment(url: str, rpc_url: str, traces: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    return env | {"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": rpc_url, "INDEXER_USE_FINALIZED": "false",
                  "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0",
                  "INDEXER_TRACES": "true" if traces else "false"}


def indexer(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([INDEXER, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"indexer {' '.join(args)} exited with {done.returncode}: {done.stderr[-2000:]}")


def pool(env: dict[str, str], workers: int, node_pid: int, chain: str, mode: str, repeat: int, first: int,
         head: int) -> Run:
    """`indexer work --drain` until it exits, its CPU and the machine's around it."""
    with psycopg.connect(env["INDEXER_DATABASE_URL"], autocommit=True) as c:
        started_at = c.execute(CLOCK).fetchone()[0]
    cores = Cores(node_pid)
    database = DatabaseCpu(env["INDEXER_DATABASE_URL"])
    database.start()
    rc, elapsed, _ = drain(env, workers, cores)
    sessions = database.totals()[WORKERS]
    database.finish()
    if rc != 0:
        raise SystemExit(f"indexer work exited with {rc} ({chain}, {mode})")
    with psycopg.connect(env["INDEXER_DATABASE_URL"], autocommit=True) as c:
        stored, transactions = c.execute(STORED).fetchone()
        left, failed = c.execute(UNFINISHED).fetchone()[0], c.execute(FAILED).fetchone()[0]
        traces = c.execute(TRACES).fetchone()[0]
        last_indexed = c.execute(LAST_RANGE_INDEXED).fetchone()[0]
        if mode != "blocks":
            traced_blocks, tops = c.execute(TRACED).fetchone()
            busy = c.execute("SELECT count(*) FROM blocks WHERE transaction_count > 0").fetchone()[0]
            assert (traced_blocks, tops) == (busy, transactions), (chain, mode, traced_blocks, busy, tops, transactions)
    blocks = head - first + 1
    assert stored == blocks and left == 0 and failed == 0, (chain, mode, stored, blocks, left, failed)
    return Run(chain, mode, repeat, blocks, elapsed,
               None if mode == "traces" or last_indexed is None else last_indexed - started_at,
               cores.client * elapsed, cores.node * elapsed, sessions, max(0.0, cores.rest * elapsed - sessions), traces,
               int(transactions))


def runs_on(chain: str, rpc_url: str, node_pid: int, first: int, head: int, args: argparse.Namespace,
            admin_url: str) -> list[Run]:
    found = []
    plan = ["plan", "--from", str(first), "--to", str(head + 1), "--chunk", str(args.chunk)]
    for repeat in range(args.repeat):
        # Which goes first alternates, so that a machine slowing down over the run favours neither.
        for mode in (("blocks", "both") if repeat % 2 == 0 else ("both", "blocks")):
            name = f"bench_traces_{os.getpid()}_{chain}_{mode}"
            env = environment(fresh_database(admin_url, name), rpc_url, traces=mode == "both")
            indexer(env, "migrate")
            indexer(env, *plan)
            found.append(pool(env, args.workers, node_pid, chain, mode, repeat, first, head))
            log(describe(found[-1]))
            if mode == "blocks" and repeat == 0:
                indexer(env, *plan, "--traces")
                found.append(pool(env, args.workers, node_pid, chain, "traces", repeat, first, head))
                log(describe(found[-1]))
            drop_database(admin_url, name)
    return found


def describe(run: Run) -> str:
    return (f"{run.chain} {run.mode} (run {run.repeat + 1}): {run.blocks / run.seconds:,.0f} blocks/s to the exit, "
            f"{run.traces:,} traces; ms CPU a block: pool {run.per_block(run.pool_cpu)}, node "
            f"{run.per_block(run.node_cpu)}, its database sessions {run.per_block(run.sessions_cpu)}, rest "
            f"{run.per_block(run.rest_cpu)}")


def cost(r: Run) -> float:
    """What the run cost, in CPU seconds: the pool, its database sessions and the node (not the
    rest of the machine, where other work on a shared machine shows)."""
    return r.pool_cpu + r.sessions_cpu + r.node_cpu


def report(runs: list[Run], args: argparse.Namespace) -> None:
    print(f"{args.workers} workers, jobs of {args.chunk} blocks, the other settings at their defaults"
          f" (INDEXER_TRACE_BATCH_TRANSACTIONS 500); {args.repeat} repeat(s). CPU in ms a block: the pool's processes,"
          " their database sessions, the node, and the rest of the machine (PostgreSQL's other processes, and anything"
          " else running: not counted in the cost).\n")
    print("| chain | run | blocks | transactions | traces | traces/tx | blocks/s to the exit "
          "| blocks/s to the last range indexed | pool | its sessions | node | rest of the machine "
          "| cost: pool + sessions + node (ms CPU/block) | cost (us CPU/trace) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        indexed = f"{r.blocks / r.indexed_seconds:,.0f}" if r.indexed_seconds else "-"
        per_trace = f"{1e6 * cost(r) / r.traces:.1f}" if r.mode == "traces" and r.traces else "-"
        print(f"| {r.chain} | {r.mode}{f' ({r.repeat + 1})' if args.repeat > 1 else ''} | {r.blocks:,} "
              f"| {r.transactions:,} | {r.traces:,} | {r.traces / max(r.transactions, 1):.2f} "
              f"| {r.blocks / r.seconds:,.1f} | {indexed} | {r.per_block(r.pool_cpu)} | {r.per_block(r.sessions_cpu)} "
              f"| {r.per_block(r.node_cpu)} | {r.per_block(r.rest_cpu)} | {r.per_block(cost(r))} | {per_trace} |")
    print()
    for chain in dict.fromkeys(r.chain for r in runs):
        mine = [r for r in runs if r.chain == chain]
        blocks = {r.repeat: r for r in mine if r.mode == "blocks"}
        both = {r.repeat: r for r in mine if r.mode == "both"}
        traces = next(r for r in mine if r.mode == "traces")
        alone = blocks[0]
        indexed = statistics.median(blocks[k].indexed_seconds / both[k].indexed_seconds for k in blocks)
        exits = statistics.median(blocks[k].seconds / both[k].seconds for k in blocks)
        print(f"{chain}: the traces job alone costs {cost(traces) / cost(alone):.2f}x the CPU of the blocks' job per"
              f" block (pool {traces.pool_cpu / alone.pool_cpu:.2f}x, its sessions"
              f" {traces.sessions_cpu / max(alone.sessions_cpu, 1e-9):.2f}x, node"
              f" {traces.node_cpu / max(alone.node_cpu, 1e-9):.2f}x). With INDEXER_TRACES=true the blocks are indexed at"
              f" {indexed:.2f}x the blocks/s of INDEXER_TRACES=false (to the last range indexed), and the pool exits at"
              f" {exits:.2f}x (median of {len(blocks)}).")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mainnet", type=int, default=400, help="mainnet-shaped blocks (0 to skip)")
    ap.add_argument("--first", type=int, default=18_000_000, help="the first mainnet-shaped block (its era: the shape)")
    ap.add_argument("--dense", type=int, default=120, help="blocks of anvil's dense chain (0 to skip)")
    ap.add_argument("--dense-txs", type=int, default=50, help="transactions per dense block")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of every pool")
    ap.add_argument("--chunk", type=int, default=20, help="blocks per job (index_blocks and index_traces)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of blocks and both on each chain")
    ap.add_argument("--database-url", help="a PostgreSQL to make scratch databases in (default: start one)")
    args = ap.parse_args()
    if args.mainnet < 0 or args.dense < 0 or args.mainnet + args.dense == 0:
        ap.error("--mainnet and --dense must be 0 or more, and not both 0")
    if args.workers < 1 or args.chunk < 1 or args.repeat < 1 or args.dense_txs < 1:
        ap.error("--workers, --chunk, --repeat and --dense-txs must be at least 1")
    runs: list[Run] = []
    with postgres_at(args.database_url) as admin_url:
        if args.mainnet:
            t = time.perf_counter()
            with NodeProcess(args.first, args.mainnet, traces=True) as node:
                log(f"mainnet-shaped node: {args.mainnet:,} blocks from {args.first:,} and their call trees built in "
                    f"{time.perf_counter() - t:.0f} s")
                runs += runs_on("mainnet", node.url, node.proc.pid, node.first, node.last, args, admin_url)
        if args.dense:
            t = time.perf_counter()
            with Anvil("--no-mining") as node:
                build_dense(node, args.dense - 1, args.dense_txs)
                log(f"dense chain: {node.head() + 1:,} blocks built in {time.perf_counter() - t:.0f} s")
                runs += runs_on("dense", node.url, node.proc.pid, 0, node.head(), args, admin_url)
    if args.mainnet:
        print(f"Mainnet-shaped blocks from {args.first:,} (the node's call trees: indexer/testing/mainnet_node.py); "
              f"anvil's dense chain of {args.dense_txs} transactions a block.\n")
    report(runs, args)


if __name__ == "__main__":
    main()
