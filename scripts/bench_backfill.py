#!/usr/bin/env python3
"""Backfill benchmark: the raw JSON-RPC ceiling against `indexer work` end to end, in one run.

For each chain (sparse: empty blocks mined by a pruned anvil; dense: many transactions and logs
per block), on the same node and blocks:
- raw ceiling: a plain HTTP client (requests + orjson) fetching batches of 100 blocks with full
  transactions plus `eth_getBlockReceipts` for every block, 4 batches in flight, decoding the
  JSON, writing nothing;
- `indexer work --drain` with N workers on a fresh database: migrate and plan first (not timed),
  then the wall time from starting the pool to its exit, process start-up included (jobs of
  10,000 blocks, or on a short chain 1/20 of it but at least 100 blocks);
- peak RSS of each worker process (VmHWM, sampled until it exits);
- the cores the node kept busy during each (its CPU time over the wall time), which shows how
  much of this 2-core machine the indexer's own work took from the node.
Prints a Markdown table; BENCHMARKS.md holds the figures with this command.

    .venv/bin/python scripts/bench_backfill.py [--sparse 200000] [--dense 2000] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import psycopg
import requests
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.anvil import EMITTER_INIT, Anvil  # noqa: E402 - the tests' anvil launcher

INDEXER = str(Path(sys.executable).with_name("indexer"))


def post(session: requests.Session, url: str, calls: list) -> list:
    body = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls)])
    answer = orjson.loads(session.post(url, data=body, headers={"Content-Type": "application/json"}, timeout=120).content)
    return [a["result"] for a in sorted(answer, key=lambda a: a["id"])]


def raw_ceiling(url: str, head: int, batch: int = 100, in_flight: int = 4) -> float:
    local = threading.local()

    def fetch(first: int) -> int:
        s = getattr(local, "s", None) or setattr(local, "s", requests.Session()) or local.s
        nums = range(first, min(first + batch, head + 1))
        blocks = post(s, url, [("eth_getBlockByNumber", [hex(n), True]) for n in nums])
        receipts = post(s, url, [("eth_getBlockReceipts", [hex(n)]) for n in nums])
        assert len(blocks) == len(receipts) == len(nums)
        return len(nums)

    started = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        total = sum(pool.map(fetch, range(0, head + 1, batch)))
    assert total == head + 1
    return total / (time.perf_counter() - started)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class NodeLoad:
    """How many cores the node kept busy while a block is timed: on a 2-core machine the node
    and the indexer (Python and Postgres) share them, so this is the node's share."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> "NodeLoad":
        self.cpu, self.wall = cpu_seconds(self.pid), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cores = (cpu_seconds(self.pid) - self.cpu) / (time.perf_counter() - self.wall)


def peak_rss_watch(root_pid: int, peaks: dict[int, int], stop: threading.Event) -> None:
    while not stop.is_set():
        out = subprocess.run(["pgrep", "-P", str(root_pid)], capture_output=True, text=True).stdout
        for pid in map(int, out.split()):
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]))
            except FileNotFoundError:
                pass
        stop.wait(0.1)


def indexer_run(admin_url: str, rpc_url: str, head: int, workers: int, name: str) -> tuple[float, int]:
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        c.execute(f'CREATE DATABASE "{name}"')
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    env |= {"INDEXER_DATABASE_URL": make_conninfo(admin_url, dbname=name), "INDEXER_RPC_URL": rpc_url,
            "INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0"}
    # The article's 10,000-block jobs, or fewer blocks per job (at least 100) on a short chain so
    # that every worker gets several jobs.
    chunk = str(max(100, min(10_000, (head + 1) // 20)))
    for cmd in (["migrate"], ["plan", "--from", "0", "--to", str(head + 1), "--chunk", chunk]):
        subprocess.run([INDEXER, *cmd], env=env, check=True, capture_output=True)
    peaks: dict[int, int] = {}
    stop = threading.Event()
    started = time.perf_counter()
    proc = subprocess.Popen([INDEXER, "work", "--drain", "--workers", str(workers), "--log-level", "WARNING"], env=env)
    watcher = threading.Thread(target=peak_rss_watch, args=(proc.pid, peaks, stop))
    watcher.start()
    rc = proc.wait()
    elapsed = time.perf_counter() - started
    stop.set()
    watcher.join()
    if rc != 0:
        raise SystemExit(f"indexer work exited with {rc}")
    with psycopg.connect(env["INDEXER_DATABASE_URL"]) as c:
        stored = c.execute("SELECT count(*) FROM blocks").fetchone()[0]
    assert stored == head + 1, (stored, head + 1)
    return (head + 1) / elapsed, max(peaks.values(), default=0) // 1024


def build_dense(node: Anvil, blocks: int, txs: int) -> None:
    s = requests.Session()
    accounts = node.rpc("eth_accounts")
    node.rpc("eth_sendTransaction", {"from": accounts[0], "data": EMITTER_INIT, "gas": hex(200_000)})
    node.rpc("evm_mine")
    emitter = node.rpc("eth_getBlockReceipts", "latest")[0]["contractAddress"]
    for b in range(blocks):
        calls = []
        for i in range(txs):
            tx = {"from": accounts[i % len(accounts)], "gas": hex(100_000)}
            if i % 2:
                tx |= {"to": accounts[(i + b) % len(accounts)], "value": hex(i + 1)}
            else:
                tx |= {"to": emitter, "data": "0x" + f"{b:064x}{i:064x}"}
            calls.append(("eth_sendTransaction", [tx]))
        post(s, node.url, calls)
        node.rpc("evm_mine")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sparse", type=int, default=200_000, help="empty blocks on the sparse chain (0 to skip)")
    ap.add_argument("--dense", type=int, default=2_000, help="blocks on the dense chain (0 to skip)")
    ap.add_argument("--dense-txs", type=int, default=50, help="transactions per dense block")
    ap.add_argument("--workers", default="2", help="comma-separated worker counts, e.g. 1,2,4")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    rows = []
    chains = []
    if args.sparse:
        chains.append(("sparse", args.sparse, ("--prune-history", "--hardfork", "cancun")))
    if args.dense:
        chains.append(("dense", args.dense, ("--no-mining",)))
    for kind, size, anvil_args in chains:
        with Anvil(*anvil_args) as node:
            t = time.perf_counter()
            if kind == "sparse":
                node.rpc("anvil_mine", hex(size - 1), "0x1")
            else:
                build_dense(node, size - 1, args.dense_txs)
            head = node.head()
            print(f"# {kind}: {head + 1:,} blocks built in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
            with NodeLoad(node.proc.pid) as ceiling_load:
                ceiling = raw_ceiling(node.url, head)
            for n in workers:
                with NodeLoad(node.proc.pid) as load:
                    rate, rss = indexer_run(args.database_url, node.url, head, n, f"bench_{kind}_{n}")
                rows.append((kind, head + 1, n, ceiling, rate, rss, ceiling_load.cores, load.cores))
                print(f"# {kind} workers={n}: ceiling {ceiling:,.0f} blocks/s, indexer {rate:,.0f} blocks/s "
                      f"({rate / ceiling:.2f}x), peak worker RSS {rss} MB", file=sys.stderr, flush=True)
    print("| chain | blocks | workers | raw ceiling (blocks/s) | indexer work (blocks/s) | ratio "
          "| peak worker RSS (MB) | node's cores busy: ceiling / indexer |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, blocks, n, ceiling, rate, rss, c_load, i_load in rows:
        print(f"| {kind} | {blocks:,} | {n} | {ceiling:,.0f} | {rate:,.0f} | {rate / ceiling:.2f}x | {rss} "
              f"| {c_load:.2f} / {i_load:.2f} |")


if __name__ == "__main__":
    main()
