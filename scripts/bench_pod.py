#!/usr/bin/env python3
"""What one pod of deploy/kubernetes needs: the memory and CPU of a whole `indexer work` pool (the
pool process, its fork server and its workers, as a container's cgroup counts them), of
`indexer monitor`, `migrate` and `plan`, and how long the pool takes to give its jobs back and
exit after SIGTERM (what terminationGracePeriodSeconds must cover).

Against the mainnet-shaped node (indexer/testing/mainnet_node.py, blocks of `--era`), on a fresh
database: `migrate`, `plan` in jobs of `--chunk` blocks, then `indexer work --workers N` sampled
four times a second (PSS and RSS of every process of the pool, summed; their CPU time) until
`--stop-at` of the blocks are stored, when it gets SIGTERM. Afterwards the database says what
became of the jobs: none left running, and those given back mid-way with no attempt spent.

    .venv/bin/python scripts/bench_pod.py [--blocks 2000] [--era 18000000] [--workers 2] --database-url URL
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from indexer.testing.mainnet_server import NodeProcess
from indexer.testing.processes import cpu_seconds, descendants
from indexer.testing.work import INDEXER

NAME = f"bench_pod_{os.getpid()}"

STORED = "SELECT count(*) FROM blocks"
# Every session of the pool: its workers' own and their LISTEN sessions, the reaper's, the checks'.
CONNECTIONS = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
LEFT_RUNNING = "SELECT count(*) FROM jobs WHERE status = 'running'"
# Pending jobs with a cursor were running, and were given back on SIGTERM: their claim's attempt
# refunded (0 again), to be resumed from the cursor.
GIVEN_BACK = "SELECT attempts, count(*) FROM jobs WHERE status = 'pending' AND cursor IS NOT NULL GROUP BY 1 ORDER BY 1"


def kib(pid: int, field: str, file: str = "status") -> int:
    for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """Every process under `root`: the peak of their summed PSS and RSS, each one's peak RSS, and
    the CPU time of all (a process's last quarter second is missed)."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.pss = self.rss = self.largest = 0
        self.cpu: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            pss = rss = 0
            for pid in [self.root, *descendants(self.root)]:
                try:
                    pss += kib(pid, "Pss", "smaps_rollup")
                    one = kib(pid, "VmRSS")
                    rss += one
                    self.largest = max(self.largest, kib(pid, "VmHWM"))
                    self.cpu[pid] = cpu_seconds(pid)
                except (FileNotFoundError, ProcessLookupError):
                    pass
            self.pss, self.rss = max(self.pss, pss), max(self.rss, rss)
            self.stop.wait(0.25)


def peak_rss_mb(args: list[str], env: dict[str, str]) -> float:
    proc = subprocess.Popen([INDEXER, *args], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"indexer {args[0]} exited with {proc.returncode}")
    return usage.ru_maxrss / 1024


def sample_monitor(env: dict[str, str], seconds: float) -> tuple[float, float]:
    """`indexer monitor` refreshing its gauges every second: (peak RSS in MB, cores busy)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monitor = subprocess.Popen([INDEXER, "monitor"], env=env | {"INDEXER_METRICS_PORT": str(port),
                                                              "INDEXER_DB_METRICS_SECONDS": "1"})
    time.sleep(seconds)
    rss, cpu = kib(monitor.pid, "VmHWM") / 1024, cpu_seconds(monitor.pid)
    monitor.send_signal(signal.SIGTERM)
    monitor.wait(30)
    return rss, cpu / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=2000, help="mainnet-shaped blocks served")
    ap.add_argument("--era", type=int, default=18_000_000, help="the first block's height: its era sets the shape")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of the pool (a pod's --workers)")
    ap.add_argument("--chunk", type=int, default=100, help="blocks per job")
    ap.add_argument("--stop-at", type=float, default=0.6, help="share of the blocks stored when SIGTERM is sent")
    ap.add_argument("--monitor-seconds", type=float, default=10, help="how long `indexer monitor` is sampled")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    if not 0 < args.stop_at < 1 or min(args.blocks, args.workers, args.chunk) < 1:
        ap.error("--blocks, --workers and --chunk must be at least 1, and --stop-at between 0 and 1")
    with psycopg.connect(args.database_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{NAME}"')
    url = make_conninfo(args.database_url, dbname=NAME)
    try:
        with NodeProcess(args.era, args.blocks) as node:
            env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
            env |= {"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": node.url, "INDEXER_USE_FINALIZED": "false",
                    "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0", "INDEXER_LOG_LEVEL": "WARNING"}
            migrate = peak_rss_mb(["migrate"], env)
            plan = peak_rss_mb(["plan", "--from", str(node.first), "--to", str(node.last + 1), "--chunk",
                                str(args.chunk)], env)
            with psycopg.connect(url, autocommit=True) as conn:
                pool = subprocess.Popen([INDEXER, "work", "--workers", str(args.workers)], env=env)
                sampler = Sampler(pool.pid)
                sampler.start()
                started = time.perf_counter()
                connections = 0
                while conn.execute(STORED).fetchone()[0] < args.stop_at * args.blocks:
                    connections = max(connections, conn.execute(CONNECTIONS).fetchone()[0])
                    if pool.poll() is not None:
                        raise SystemExit(f"indexer work exited with {pool.returncode}")
                    time.sleep(0.1)
                ran = time.perf_counter() - started
                stored = conn.execute(STORED).fetchone()[0]
                cpu = sum(sampler.cpu.values())
                pool.send_signal(signal.SIGTERM)
                signalled = time.perf_counter()
                code = pool.wait(120)
                stopping = time.perf_counter() - signalled
                sampler.stop.set()
                sampler.join()
                running = conn.execute(LEFT_RUNNING).fetchone()[0]
                given_back = conn.execute(GIVEN_BACK).fetchall()
            monitor_rss, monitor_cores = sample_monitor(env, args.monitor_seconds)
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{NAME}" WITH (FORCE)')
    print(f"mainnet-shaped blocks from {args.era:,}, jobs of {args.chunk} blocks, `indexer work --workers "
          f"{args.workers}`: {stored:,} blocks in {ran:.1f} s ({stored / ran:,.0f} blocks/s)\n")
    print("| what | value |\n|---|---:|")
    print(f"| pool: peak of the processes' PSS, summed (MB) | {sampler.pss / 1024:,.0f} |")
    print(f"| pool: peak of the processes' RSS, summed (MB) | {sampler.rss / 1024:,.0f} |")
    print(f"| pool: the largest process's peak RSS (MB) | {sampler.largest / 1024:,.0f} |")
    print(f"| pool: cores busy, all its processes | {cpu / ran:.2f} |")
    print(f"| pool: most database sessions at once | {connections} |")
    print(f"| pool: SIGTERM to exit (s) | {stopping:.2f} |")
    print(f"| pool: exit code | {code} |")
    print(f"| jobs left running | {running} |")
    print(f"| jobs given back mid-way, by attempts spent | {', '.join(f'{a}: {n}' for a, n in given_back) or 'none'} |")
    print(f"| `indexer monitor`, gauges every second for {args.monitor_seconds:g} s: peak RSS (MB) | {monitor_rss:,.0f} |")
    print(f"| `indexer monitor`: cores busy | {monitor_cores:.3f} |")
    print(f"| `indexer migrate`: peak RSS (MB) | {migrate:,.0f} |")
    print(f"| `indexer plan`: peak RSS (MB) | {plan:,.0f} |")


if __name__ == "__main__":
    main()
