#!/usr/bin/env python3
"""Growth benchmark: a long backfill of mainnet-shaped blocks, measured as the tables grow.

`indexer work --drain` with the default settings (2 workers unless told) indexes `--blocks`
blocks of the mainnet-shaped node (indexer/testing/mainnet_node.py, every block precomputed
before the run, so that the node costs about a millisecond of CPU a block), planned in jobs of
`--chunk` blocks and partitions of `--partition-blocks` (small enough that several fill up and
get their query indexes during the run, as a mainnet backfill's 1,000,000-block partitions of
100 jobs each do over its days); every other setting is the default. Every `--sample` seconds:
blocks, transactions and logs stored; the CPU time of the indexer's processes, of the node, of
the database's processes by what they serve (the workers' sessions, the index builds,
autovacuum: `DatabaseCpu`, sampled every half second; the database must run on this machine)
and of the rest of the machine; the bytes of the chain tables and of their indexes; each
worker's peak RSS; the disk's free space. The run stops early, and says so, when the disk would
fall below `--min-free-gb`.

Prints, per tenth of the run (by blocks): blocks/s, transactions/s and logs/s, CPU microseconds
per row (a transaction or a log) of the indexer and of its database sessions, the CPU seconds of
the index builds and of autovacuum, the rest per row, bytes per row of tables and of indexes at
the tenth's end, WAL bytes per row written in it, and peak worker RSS; then the last tenth's
throughput against the first's, and every table's rows and bytes. With several
`--query-indexes` modes, each runs in turn on the same node (a fresh database each), and their
totals are compared: wall time to the last index built, CPU.

    .venv/bin/python scripts/bench_growth.py [--blocks 66000] [--first 17100000] [--workers 2]
        [--partition-blocks 10000] [--chunk 1000] [--query-indexes after[,during]] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from bench_backfill import INDEXER, drop_database, fresh_database, machine_busy_seconds

from indexer.testing.mainnet_server import NodeProcess
from indexer.testing.processes import cpu_seconds, descendants, stat

STORED = "SELECT count(*), coalesce(sum(transaction_count), 0), coalesce(sum(log_count), 0) FROM blocks"
# Bytes of each chain table's partitions: the table (heap and TOAST) and its indexes.
SIZES = """
SELECT p.relname, sum(pg_table_size(c.oid)), sum(pg_indexes_size(c.oid))
FROM pg_class p JOIN pg_inherits i ON i.inhparent = p.oid JOIN pg_class c ON c.oid = i.inhrelid
WHERE p.relname IN ('blocks', 'transactions', 'logs', 'withdrawals', 'token_transfers')
GROUP BY 1
"""
# Which database process serves what: the workers' own sessions, the index builds' (each a
# session of its own, with its parallel workers), autovacuum, or anything else (the background
# writers, the pool's health checks and reaper).
SESSIONS = """
SELECT pid, application_name, backend_type, leader_pid, datname = current_database() FROM pg_stat_activity
"""
WORKERS, BUILDS, AUTOVACUUM, OTHER = "workers' sessions", "index builds", "autovacuum", "other"
INDEXED = "SELECT count(*) FILTER (WHERE indexed_at IS NOT NULL), count(*) FROM chain_partitions"
WAL = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8"  # the cluster's: nothing else should write


class DatabaseCpu(threading.Thread):
    """The CPU time of this database's processes by what they serve (`WORKERS`, `BUILDS`,
    `AUTOVACUUM`, `OTHER`), sampled every `every` seconds from /proc: the database must run on
    this machine, in its process namespace. A process that exits loses what it spent since its
    last sample (at most `every` seconds of it); the workers' sessions and the background
    processes live through the run. Sessions of other databases of the cluster are left out."""

    def __init__(self, url: str, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(url, autocommit=True)
        self.every = every
        backend = self.conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.postmaster = int(stat(backend)[1]) if Path(f"/proc/{backend}").exists() else None
        if self.postmaster is None or b"postgres" not in Path(f"/proc/{self.postmaster}/cmdline").read_bytes():
            raise SystemExit("bench_growth: the database's processes are not this machine's (a container or another"
                             " host?): its CPU cannot be read from /proc")
        # (pid, start time) -> (what, CPU when first seen, CPU when last seen): a pid used again
        # is another process.
        self.seen: dict[tuple[int, int], tuple[str, float, float]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self._sample(baseline=True)

    def totals(self) -> dict[str, float]:
        """Sampled now."""
        self._sample()
        with self.lock:
            totals = dict.fromkeys((WORKERS, BUILDS, AUTOVACUUM, OTHER), 0.0)
            for what, first, last in self.seen.values():
                totals[what] += last - first
            return totals

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self._sample()

    def finish(self) -> None:
        self.stop.set()
        self.join()
        self.conn.close()

    def _sample(self, baseline: bool = False) -> None:
        """With `baseline`, what each process has spent already is not counted; a process first
        seen later counts from its start. One sample at a time (this thread's, and `totals`'):
        an older reading must not overwrite a newer one."""
        with self.lock:
            sessions = {pid: (app or "", kind, leader, mine)
                        for pid, app, kind, leader, mine in self.conn.execute(SESSIONS)}
            for pid in descendants(self.postmaster):
                try:
                    fields = stat(pid)
                    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except (FileNotFoundError, ProcessLookupError):
                    continue
                cpu = cpu_seconds(pid, fields)
                app, kind, leader, mine = sessions.get(pid, ("", "", None, None))
                if leader is None and (found := re.search(r"parallel worker for PID (\d+)", title)):
                    leader = int(found[1])
                if leader is not None:
                    app, _, _, mine = sessions.get(leader, ("", "", None, None))
                what = OTHER
                if mine:
                    what = (WORKERS if app.startswith("indexer worker") else
                            BUILDS if app.startswith("indexer index builder") else
                            AUTOVACUUM if kind == "autovacuum worker" else OTHER)
                key = (pid, int(fields[19]))
                known = self.seen.get(key)
                first = known[1] if known else cpu if baseline else 0.0
                self.seen[key] = (known[0] if known and known[0] != OTHER else what, first, cpu)


@dataclass
class Sample:
    at: float  # seconds since the pool started
    blocks: int
    transactions: int
    logs: int
    indexer_cpu: float  # seconds, all its processes
    node_cpu: float
    busy: float  # the machine's busy CPU seconds
    table_bytes: int
    index_bytes: int
    rss_mb: int  # the highest peak RSS of a worker so far
    indexed: tuple[int, int]  # partitions indexed, of
    wal: float  # bytes of WAL the cluster has written
    database: dict[str, float]  # CPU seconds of the database's processes, by what they serve (`DatabaseCpu`)


@dataclass
class Run:
    mode: str
    samples: list[Sample] = field(default_factory=list)
    stopped: str = ""  # why the run stopped before its last block, if it did
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)  # rows of each chain table at the end


def sample(conn: psycopg.Connection, started: float, pool: int, node: int, cpu: dict[int, float],
           peaks: dict[int, int], database: DatabaseCpu) -> Sample:
    for pid in [pool, *descendants(pool)]:
        try:
            cpu[pid] = cpu_seconds(pid)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:") and pid != pool:
                    peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]) // 1024)
        except (FileNotFoundError, ProcessLookupError):
            pass
    blocks, transactions, logs = conn.execute(STORED).fetchone()
    sizes = conn.execute(SIZES).fetchall()
    return Sample(time.perf_counter() - started, blocks, int(transactions), int(logs), sum(cpu.values()),
                  cpu_seconds(node), machine_busy_seconds(), sum(int(t) for _, t, _ in sizes),
                  sum(int(i) for _, _, i in sizes), max(peaks.values(), default=0),
                  tuple(conn.execute(INDEXED).fetchone()), conn.execute(WAL).fetchone()[0], database.totals())


def run(admin_url: str, node: NodeProcess, mode: str, args: argparse.Namespace) -> Run:
    name = f"bench_growth_{os.getpid()}_{mode}"
    url = fresh_database(admin_url, name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    env |= {"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": node.url, "INDEXER_USE_FINALIZED": "false",
            "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0", "INDEXER_QUERY_INDEXES": mode,
            "INDEXER_PARTITION_BLOCKS": str(args.partition_blocks)}
    for cmd in (["migrate"], ["plan", "--from", str(node.first), "--to", str(node.last + 1), "--chunk", str(args.chunk)]):
        subprocess.run([INDEXER, *cmd], env=env, check=True, capture_output=True)
    result = Run(mode)
    cpu: dict[int, float] = {}
    peaks: dict[int, int] = {}
    data_dir = Path(args.disk_path)
    database = DatabaseCpu(url)
    with psycopg.connect(url, autocommit=True) as conn:
        database.start()
        started = time.perf_counter()
        pool = subprocess.Popen([INDEXER, "work", "--drain", "--workers", str(args.workers), "--log-level", "WARNING"],
                                env=env)
        result.samples.append(sample(conn, started, pool.pid, node.proc.pid, cpu, peaks, database))
        while pool.poll() is None:
            try:
                pool.wait(args.sample)
            except subprocess.TimeoutExpired:
                pass
            result.samples.append(sample(conn, started, pool.pid, node.proc.pid, cpu, peaks, database))
            s = result.samples[-1]
            free_gb = shutil.disk_usage(data_dir).free / 1e9
            print(f"# {mode}: {s.at:,.0f} s, {s.blocks:,} blocks, {s.transactions:,} transactions, {s.logs:,} logs,"
                  f" {(s.table_bytes + s.index_bytes) / 1e9:.1f} GB, partitions indexed {s.indexed[0]} of"
                  f" {s.indexed[1]}, worker RSS {s.rss_mb} MB, {free_gb:.0f} GB free", file=sys.stderr, flush=True)
            if free_gb < args.min_free_gb and pool.poll() is None:
                result.stopped = f"stopped at {s.blocks:,} blocks: {free_gb:.1f} GB of disk left (--min-free-gb)"
                pool.send_signal(signal.SIGTERM)
        if pool.returncode not in (0, -signal.SIGTERM, 143) or (pool.returncode != 0 and not result.stopped):
            raise SystemExit(f"indexer work exited with {pool.returncode}")
        result.samples.append(sample(conn, started, pool.pid, node.proc.pid, cpu, peaks, database))
        database.finish()
        result.sizes = {t: (int(a), int(b)) for t, a, b in conn.execute(SIZES)}
        result.counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in result.sizes}
    drop_database(admin_url, name)
    return result


def at_blocks(samples: list[Sample], blocks: float) -> Sample:
    """The first sample with at least `blocks` stored (the samples are every few seconds)."""
    return next(s for s in samples if s.blocks >= blocks)


def report(result: Run, total_blocks: int) -> None:
    samples = result.samples
    last = samples[-1]
    # The tenths end once every block is stored; what is left (the last ranges' decoding, the
    # last partitions' index builds) is the run's tail, not the tables growing.
    stored = at_blocks(samples, last.blocks)
    print(f"\n### INDEXER_QUERY_INDEXES={result.mode}: {last.blocks:,} blocks, {last.transactions:,} transactions, "
          f"{last.logs:,} logs stored in {stored.at:,.0f} s, then {last.at - stored.at:,.0f} s to the end (decoding and"
          f" indexing the last ranges){'; ' + result.stopped if result.stopped else ''}\n")
    print("| tenth | blocks/s | transactions/s | logs/s | indexer CPU (us/row) | its database sessions (us/row) "
          "| index builds (CPU s) | autovacuum (CPU s) | the rest (us/row) | table bytes/row | index bytes/row "
          "| WAL bytes/row | partitions indexed | peak worker RSS (MB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rates, maintenance = [], []
    begin = samples[0]
    for tenth in range(1, 11):
        end = at_blocks(samples, last.blocks * tenth / 10)
        seconds = max(end.at - begin.at, 1e-9)
        rows = max((end.transactions - begin.transactions) + (end.logs - begin.logs), 1)
        indexer = end.indexer_cpu - begin.indexer_cpu
        sessions, built, vacuumed = (end.database[k] - begin.database[k] for k in (WORKERS, BUILDS, AUTOVACUUM))
        rest = max(0.0, (end.busy - begin.busy) - indexer - (end.node_cpu - begin.node_cpu) - sessions - built - vacuumed)
        all_rows = max(end.transactions + end.logs, 1)
        rate = (end.blocks - begin.blocks) / seconds
        rates.append(rate)
        maintenance.append((built + vacuumed, max(end.busy - begin.busy, 1e-9)))
        print(f"| {tenth} | {rate:,.1f} | {(end.transactions - begin.transactions) / seconds:,.0f} "
              f"| {(end.logs - begin.logs) / seconds:,.0f} | {1e6 * indexer / rows:.1f} | {1e6 * sessions / rows:.1f} "
              f"| {built:,.0f} | {vacuumed:,.0f} | {1e6 * rest / rows:.1f} | {end.table_bytes / all_rows:.0f} "
              f"| {end.index_bytes / all_rows:.0f} "
              f"| {(end.wal - begin.wal) / rows:.0f} | {end.indexed[0]} of {end.indexed[1]} "
              f"| {end.rss_mb} |")
        begin = end
    print(f"\nThe last tenth at {rates[-1] / rates[0] if rates[0] else float('nan'):.2f}x the blocks/s of the first; index builds and autovacuum took "
          f"{100 * maintenance[0][0] / maintenance[0][1]:.0f}% of the machine's busy CPU in the first tenth and "
          f"{100 * maintenance[-1][0] / maintenance[-1][1]:.0f}% in the last; at the end, {last.indexed[0]} of"
          f" {last.indexed[1]} partitions indexed, worker RSS at most {last.rss_mb} MB. In all: index builds"
          f" {last.database[BUILDS]:,.0f} CPU s ({last.database[BUILDS] - stored.database[BUILDS]:,.0f} after the last"
          f" block), autovacuum {last.database[AUTOVACUUM]:,.0f}.\n")
    print("| table | rows | table bytes | index bytes | bytes/row (table + indexes) |")
    print("|---|---:|---:|---:|---:|")
    for table, (heap, index) in sorted(result.sizes.items()):
        n = result.counts[table]
        print(f"| {table} | {n:,} | {heap:,} | {index:,} | {f'{(heap + index) / n:,.0f}' if n else '-'} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=66_000,
                    help="mainnet-shaped blocks to index (default 66,000: about 10 million transactions and 31 million"
                    " logs in the Shanghai era)")
    ap.add_argument("--first", type=int, default=17_100_000, help="the first block (its era sets the shape)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partition-blocks", type=int, default=10_000)
    ap.add_argument("--chunk", type=int, default=1_000,
                    help="blocks per job (default 1,000: ten jobs a partition, so that partitions finish, and get their"
                    " indexes, during the run, as a mainnet backfill's 100 jobs a partition do)")
    ap.add_argument("--query-indexes", default="after", help="comma-separated INDEXER_QUERY_INDEXES modes to run")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--min-free-gb", type=float, default=8.0, help="stop when the disk has less free than this")
    ap.add_argument("--disk-path", default="/var/lib/postgresql", help="a path on the database's disk")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    modes = args.query_indexes.split(",")
    if args.blocks < 10 or any(m not in ("after", "during") for m in modes):
        ap.error("--blocks must be at least 10; --query-indexes takes after and during")
    t = time.perf_counter()
    with NodeProcess(args.first, args.blocks) as node:
        print(f"# the node precomputed {args.blocks:,} blocks in {time.perf_counter() - t:.0f} s", file=sys.stderr,
              flush=True)
        results = [run(args.database_url, node, mode, args) for mode in modes]
    with psycopg.connect(make_conninfo(args.database_url)) as c:
        settings = {name: c.execute(f"SHOW {name}").fetchone()[0]
                    for name in ("server_version", "shared_buffers", "max_wal_size", "maintenance_work_mem")}
    print(f"PostgreSQL: {settings}; {args.workers} workers; jobs of {args.chunk:,} blocks, partitions of"
          f" {args.partition_blocks:,} blocks; "
          f"mainnet-shaped blocks from {args.first:,}.")
    for result in results:
        report(result, args.blocks)
    if len(results) > 1:
        print("| INDEXER_QUERY_INDEXES | wall time to the last index built (s) | blocks/s | indexer CPU (s) "
              "| PostgreSQL and the rest (s) |")
        print("|---|---:|---:|---:|---:|")
        for r in results:
            first, last = r.samples[0], r.samples[-1]
            indexer = last.indexer_cpu - first.indexer_cpu
            rest = (last.busy - first.busy) - indexer - (last.node_cpu - first.node_cpu)
            print(f"| {r.mode} | {last.at:,.0f} | {last.blocks / last.at:,.1f} | {indexer:,.0f} | {rest:,.0f} |")


if __name__ == "__main__":
    main()
