#!/usr/bin/env python3
"""Backfill benchmark: the raw JSON-RPC ceiling against `indexer work` end to end, in one run.

For each chain (sparse: empty blocks mined by a pruned anvil; dense: many transactions and logs
per block; mainnet: blocks with mainnet's shape at a chosen height, from the mainnet-shaped node
of indexer/testing/mainnet_node.py, which costs almost nothing to serve, so that the indexer's
own CPU shows rather than anvil's), on the same node and blocks:
- raw ceiling: a plain HTTP client (requests + orjson) fetching batches of 100 blocks with full
  transactions plus `eth_getBlockReceipts` for every block, 4 batches in flight, decoding the
  JSON, writing nothing; measured before the first indexer run and after each, and every run is
  held against the mean of the two around it (the machine's speed drifts by 10% and more);
- `indexer work --drain` with N workers on a fresh database: migrate and plan first (not timed),
  then the wall time from starting the pool to its exit, process start-up included (jobs of
  10,000 blocks, or on a short chain 1/20 of it but at least 100 blocks);
- peak RSS of each worker process (VmHWM, sampled until it exits);
- where the machine's cores went during each (CPU time over wall time): the node, the
  client or the indexer's own processes, and the rest (PostgreSQL, mostly); on a 2-core machine
  whatever the indexer and PostgreSQL take, the node cannot have; and the same as milliseconds
  of CPU per block, with the node's capacity (blocks/s it could serve on one core: its GIL
  holds it to one) against what the indexer took from it; for the mainnet-shaped node, also
  the blocks/s it served to two client processes that read without parsing (`node_capacity`);
- a breakdown, in one process and in order, of what `indexer work` does per block with the
  project's own functions: JSON-RPC (`chain.fetch_json`, and the CPU it takes this process),
  decoding and checking (`chain.decode`) and writing (`store.write` and its commit, with a
  worker's session settings).
Prints Markdown tables (and with --plot, a PNG of blocks/s against workers); BENCHMARKS.md holds
the figures with this command.

    .venv/bin/python scripts/bench_backfill.py [--sparse 200000] [--dense 2000] [--workers 1,2,4]
        [--mainnet 2000 --mainnet-era 18000000]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
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

from indexer.base import db
from indexer.base.db import worker_session_options
from indexer.base.settings import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TRANSACTIONS
from indexer.chaindata import chain, store
from indexer.chaindata.prefetch import batch_blocks
from indexer.decoding import token_transfers
from indexer.jobs import partitions
from indexer.node.rpc import RpcClient
from indexer.testing.anvil import Anvil, build_dense
from indexer.testing.mainnet_eras import block_hash
from indexer.testing.mainnet_server import NodeProcess
from indexer.testing.processes import cpu_seconds, descendants

INDEXER = str(Path(sys.executable).with_name("indexer"))
# The plain clients read the node's answers uncompressed, as the indexer asks a node on this
# machine for them (INDEXER_RPC_COMPRESSION=auto); requests alone would ask for gzip.
HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "identity"}


def post(session: requests.Session, url: str, calls: list) -> list:
    body = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls)])
    answer = orjson.loads(session.post(url, data=body, headers=HEADERS, timeout=120).content)
    return [a["result"] for a in sorted(answer, key=lambda a: a["id"])]


def raw_ceiling(url: str, first: int, head: int, batch: int = 100, in_flight: int = 4) -> float:
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
        total = sum(pool.map(fetch, range(first, head + 1, batch)))
    assert total == head - first + 1
    return total / (time.perf_counter() - started)


def _fetch_unparsed(job: tuple[str, int, int]) -> None:
    url, first, last = job
    session = requests.Session()
    for start in range(first, last + 1, 100):
        numbers = range(start, min(start + 100, last + 1))
        for calls in ([("eth_getBlockByNumber", [hex(n), False]) for n in numbers],
                      [("eth_getBlockByHash", [block_hash(n), True]) for n in numbers],
                      [("eth_getBlockReceipts", [block_hash(n)]) for n in numbers]):
            body = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": m, "params": p}
                                 for i, (m, p) in enumerate(calls)])
            session.post(url, data=body, headers=HEADERS, timeout=120).content


def node_capacity(url: str, pid: int, first: int, head: int, processes: int = 2) -> tuple[float, float]:
    """Blocks/s the mainnet-shaped node serves, and its CPU milliseconds per block, to
    `processes` clients asking as a worker does (headers, then full blocks and receipts by hash,
    100 blocks a batch) that read the answers without parsing them: the raw ceiling's single
    client spends a core parsing about 1.5 MB of JSON a block and measures itself, not the node."""
    processes = min(processes, head - first + 1)
    step = (head - first + 1) // processes
    jobs = [(url, first + i * step, first + (i + 1) * step - 1) for i in range(processes)]
    with multiprocessing.Pool(processes) as pool:
        cpu, started = cpu_seconds(pid), time.perf_counter()
        pool.map(_fetch_unparsed, jobs)
        wall, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu
    return step * processes / wall, 1000 * cpu / (step * processes)


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent on anything but idling and waiting for I/O."""
    user, nice, system, idle, iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


class Cores:
    """Where the cores went while a block is timed: the node, the client (this process, or the
    processes of `indexer work` as sampled by a `Watch`), and the rest (PostgreSQL, mostly)."""

    def __init__(self, node_pid: int) -> None:
        self.node_pid = node_pid
        self.client_seconds: float | None = None  # set by the timed block when not this process

    def __enter__(self) -> "Cores":
        self.node, self.own, self.busy = cpu_seconds(self.node_pid), own_cpu_seconds(), machine_busy_seconds()
        self.wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.wall
        self.node = (cpu_seconds(self.node_pid) - self.node) / wall
        client = own_cpu_seconds() - self.own if self.client_seconds is None else self.client_seconds
        self.client = client / wall
        self.rest = max(0.0, (machine_busy_seconds() - self.busy) / wall - self.node - self.client)

    def __str__(self) -> str:
        return f"{self.node:.2f} / {self.client:.2f} / {self.rest:.2f}"


class Watch(threading.Thread):
    """Samples every process under `root_pid` (the pool, its fork server and the workers) four
    times a second: peak RSS of each, and the CPU time of all (a process's last quarter second
    before it exits is missed)."""

    def __init__(self, root_pid: int) -> None:
        super().__init__()
        self.root_pid = root_pid
        self.peaks: dict[int, int] = {}
        self.cpu: dict[int, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for pid in [self.root_pid, *descendants(self.root_pid)]:
                try:
                    self.cpu[pid] = cpu_seconds(pid)
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peaks[pid] = max(self.peaks.get(pid, 0), int(line.split()[1]))
                except (FileNotFoundError, ProcessLookupError):
                    pass
            self.stop.wait(0.25)

    def finish(self) -> None:
        self.stop.set()
        self.join()


def fresh_database(admin_url: str, name: str) -> str:
    drop_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(admin_url, dbname=name)


def partitioned_database(admin_url: str, name: str, first: int, last: int, *, index_now: bool = False) -> str:
    """A fresh database, migrated, with the partitions of blocks first..last, as `indexer plan`
    makes them."""
    url = fresh_database(admin_url, name)
    with db.connect(url) as conn:
        db.migrate(conn)
        partitions.ensure(conn, first, last, index_now=index_now)
    return url


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# When the last range was indexed (its job archived), in seconds since the epoch.
LAST_RANGE_INDEXED = "SELECT extract(epoch FROM max(finished_at))::float8 FROM jobs_history WHERE kind = 'index_blocks'"


def drain(env: dict[str, str], workers: int, cores: Cores) -> tuple[int, float, Watch]:
    """`indexer work --drain` until it exits, inside `cores` (which gets the pool's own CPU as
    its client's): its exit code, its seconds, and the watch of its processes."""
    with cores:
        started = time.perf_counter()
        proc = subprocess.Popen([INDEXER, "work", "--drain", "--workers", str(workers), "--log-level", "WARNING"],
                                env=env)
        watch = Watch(proc.pid)
        watch.start()
        rc = proc.wait()
        elapsed = time.perf_counter() - started
        watch.finish()
        cores.client_seconds = sum(watch.cpu.values())
    return rc, elapsed, watch


def indexer_run(admin_url: str, rpc_url: str, first: int, head: int, workers: int, name: str, cores: Cores,
                chunk: int | None = None, settings: dict[str, str] | None = None,
                tree: Path | None = None) -> tuple[float, float, int]:
    """`indexer work --drain` over a fresh database; with `tree`, the `indexer` package of that
    source tree (an older version, say) instead of this one. Returns blocks/s to the pool's exit
    (the ranges' decoding and the query indexes included) and to the last range indexed (its
    blocks all stored), and the peak worker RSS in MB."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    env |= {"INDEXER_DATABASE_URL": fresh_database(admin_url, name), "INDEXER_RPC_URL": rpc_url,
            "INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0",
            "INDEXER_METRICS_PORT": "0",  # unscraped: two runs side by side would want the same default port
            **(settings or {})}
    # The article's 10,000-block jobs, or fewer blocks per job (at least 100) on a short chain so
    # that every worker gets several jobs.
    blocks = head - first + 1
    chunk = chunk or max(100, min(10_000, blocks // 20))
    for cmd in (["migrate"], ["plan", "--from", str(first), "--to", str(head + 1), "--chunk", str(chunk)]):
        subprocess.run([INDEXER, *cmd], env=env, check=True, capture_output=True)
    with psycopg.connect(env["INDEXER_DATABASE_URL"]) as c:  # the database's clock, which dates the jobs
        started_at = c.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
    rc, elapsed, watch = drain(env, workers, cores)
    if rc != 0:
        raise SystemExit(f"indexer work exited with {rc}")
    with psycopg.connect(env["INDEXER_DATABASE_URL"]) as c:
        stored = c.execute("SELECT count(*) FROM blocks").fetchone()[0]
        indexed = c.execute(LAST_RANGE_INDEXED).fetchone()[0] - started_at
    assert stored == blocks, (stored, blocks)
    drop_database(admin_url, name)
    return blocks / elapsed, blocks / indexed, max(watch.peaks.values(), default=0) // 1024


def breakdown(admin_url: str, rpc_url: str, first_block: int, head: int,
              batch_transactions: int = DEFAULT_BATCH_TRANSACTIONS) -> dict[str, float]:
    """Milliseconds per block of each step of a worker, done in order in this one process, with
    the worker's batch size (500 blocks, fewer when dense: about 600 transactions a batch); and of
    this process's CPU in the JSON-RPC step (its HTTP client and JSON parsing, not the node's)."""
    name = f"bench_{os.getpid()}_breakdown"
    url = partitioned_database(admin_url, name, first_block, head)
    client = RpcClient([rpc_url], timeout=120, max_attempts=1)
    spent = dict.fromkeys(("rpc", "decode", "write", "rpc_cpu"), 0.0)
    with psycopg.connect(url, autocommit=True, options=worker_session_options(300)) as conn:
        store.prepare(conn)
        first, size = first_block, DEFAULT_BATCH_SIZE
        while first <= head:
            last = min(first + size - 1, head)
            t0, cpu = time.perf_counter(), time.process_time()
            blocks, receipts = chain.fetch_json(client, first, last)
            t1, cpu = time.perf_counter(), time.process_time() - cpu
            rows = chain.decode(first, blocks, receipts)
            t2 = time.perf_counter()
            with conn.transaction():
                store.write(conn, rows)
            t3 = time.perf_counter()
            for step, t in zip(spent, (t1 - t0, t2 - t1, t3 - t2, cpu)):
                spent[step] += t
            size = batch_blocks(len(rows.transactions) / (last - first + 1), DEFAULT_BATCH_SIZE, batch_transactions)
            first = last + 1
        stored = conn.execute("SELECT count(*) FROM blocks").fetchone()[0]
    blocks = head - first_block + 1
    assert stored == blocks, (stored, blocks)
    drop_database(admin_url, name)
    return {step: 1000 * t / blocks for step, t in spent.items()}


# -- the database's own limit: the same rows, pre-encoded, copied by a loader that does nothing else --

# One batch a list of (COPY statement, its data: binary bytes or text), as store.write sends them;
# forked into the loaders.
Encoded = list[list[tuple[str, bytes | str]]]
_ENCODED: Encoded = []


def encode_rows(admin_url: str, rpc_url: str, first_block: int, head: int,
                batch_transactions: int = DEFAULT_BATCH_TRANSACTIONS) -> Encoded:
    """Every row `indexer work` writes for blocks first..head, as COPY data in the worker's
    batches: the chain tables' rows as `chain.decode` makes them, in the form `store.write` sends
    them (binary where it can), and the token transfers the decode jobs make of them (decoded
    here in a scratch database, then copied out as text)."""
    name = f"bench_{os.getpid()}_encode"
    url = partitioned_database(admin_url, name, first_block, head)
    client = RpcClient([rpc_url], timeout=120, max_attempts=1)
    batches = []
    with psycopg.connect(url, autocommit=True, options=worker_session_options(300)) as conn:
        store.prepare(conn)
        first, size = first_block, DEFAULT_BATCH_SIZE
        while first <= head:
            last = min(first + size - 1, head)
            blocks, receipts = chain.fetch_json(client, first, last)
            rows = chain.decode(first, blocks, receipts)
            with conn.transaction():
                store.write(conn, rows)
                token_transfers.decode_range(conn, first, last)
            with conn.cursor().copy(LOADED_TRANSFERS, {"first": first, "last": last}) as copy:
                transfers = b"".join(copy).decode().splitlines()
            batches.append([(LOADER_COPIES[table], store.encoded(table, lines))
                            for table, lines in store.table_lines(rows)])
            if transfers:
                batches[-1].append((LOADER_COPIES["token_transfers"], "\n".join(transfers) + "\n"))
            size = batch_blocks(len(rows.transactions) / (last - first + 1), DEFAULT_BATCH_SIZE, batch_transactions)
            first = last + 1
    drop_database(admin_url, name)
    return batches


LOADED_TRANSFERS = ("COPY (SELECT * FROM token_transfers WHERE block_number BETWEEN %(first)s AND %(last)s"
                    " ORDER BY block_number, log_index, position) TO STDOUT")
LOADER_COPIES = store.COPY_NEW | {"token_transfers": "COPY token_transfers FROM STDIN"}


def _load(job: tuple[str, int, int]) -> None:
    """One loader session: its share of the batches, each in a transaction of its own, with the
    workers' session settings, nothing else."""
    url, start, step = job
    with psycopg.connect(url, autocommit=True, options=worker_session_options(300)) as conn:
        for batch in _ENCODED[start::step]:
            with conn.transaction():
                for statement, data in batch:
                    store.copy(conn, statement, data)


def lean_loader(admin_url: str, first: int, head: int, encoded: Encoded, cores: Cores,
                *, sessions: int = 2, index_now: bool = False) -> float:
    """Blocks/s of copying the pre-encoded rows into a fresh database, `sessions` at a time (its
    partitions made first, as a plan makes them, not timed), then building the query indexes as
    the index jobs do (CONCURRENTLY), unless they were made with the partitions (`index_now`):
    the database's own limit on this machine, for the same rows, tables and indexes."""
    global _ENCODED
    name = f"bench_{os.getpid()}_loader"
    url = partitioned_database(admin_url, name, first, head, index_now=index_now)
    _ENCODED = encoded
    fork = multiprocessing.get_context("fork")
    with cores:
        started = time.perf_counter()
        with fork.Pool(sessions) as pool:
            pool.map(_load, [(url, i, sessions) for i in range(sessions)])
        with db.connect(url) as conn:
            for p in partitions.partitions(conn):
                for _, create, _, valid in conn.execute(partitions.QUERY_INDEXES, {"first": p.first}).fetchall():
                    if not valid:
                        conn.execute(create)
        elapsed = time.perf_counter() - started
    _ENCODED = []
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM blocks").fetchone()[0] == head - first + 1
    drop_database(admin_url, name)
    return (head - first + 1) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sparse", type=int, default=200_000, help="empty blocks on the sparse chain (0 to skip)")
    ap.add_argument("--dense", type=int, default=2_000, help="blocks on the dense chain (0 to skip)")
    ap.add_argument("--dense-txs", type=int, default=50, help="transactions per dense block")
    ap.add_argument("--mainnet", type=int, default=0,
                    help="blocks with mainnet's shape, from the mainnet-shaped node (0, the default, to skip)")
    ap.add_argument("--mainnet-era", type=int, default=18_000_000,
                    help="height of the first mainnet-shaped block: its era sets the shape (default 18000000)")
    ap.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    ap.add_argument("--repeat", type=int, default=1, help="runs per chain; the run of median ratio is reported")
    ap.add_argument("--chunk", type=int, default=0,
                    help="blocks per job (default: a twentieth of the chain, 100 to 10,000); a chunk as long as the"
                    " chain plans one job, which the workers share only by splitting it")
    ap.add_argument("--loader", action="store_true",
                    help="on the mainnet-shaped chain, also time a lean loader copying the same rows, pre-encoded, into"
                    " the same tables and indexes with 2 sessions, before and after the indexer runs")
    ap.add_argument("--query-indexes", choices=("after", "during"), default="after",
                    help="INDEXER_QUERY_INDEXES for the indexer runs (and what the loader does likewise)")
    ap.add_argument("--partition-blocks", type=int, default=1_000_000, help="INDEXER_PARTITION_BLOCKS for the runs")
    ap.add_argument("--indexer-tree", type=Path,
                    help="run `indexer` from this source tree (e.g. a `git archive` of an older commit) instead of this one;"
                    " the nodes, the ceiling and the breakdown stay this tree's")
    ap.add_argument("--setting", action="append", default=[], metavar="INDEXER_NAME=VALUE",
                    help="another setting for the indexer runs (repeatable), e.g. INDEXER_BATCH_TRANSACTIONS=1000")
    ap.add_argument("--plot", type=Path, help="write a PNG of blocks/s against workers here")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    for name in ("sparse", "dense", "dense_txs", "mainnet", "mainnet_era", "repeat", "chunk"):
        if getattr(args, name) < 0 or (name == "repeat" and args.repeat < 1):
            ap.error(f"--{name.replace('_', '-')} must be {'at least 1' if name == 'repeat' else '0 or more'}")
    workers = [int(w) for w in args.workers.split(",")]
    settings = {"INDEXER_QUERY_INDEXES": args.query_indexes, "INDEXER_PARTITION_BLOCKS": str(args.partition_blocks)}
    for setting in args.setting:
        name, _, value = setting.partition("=")
        if not name.startswith("INDEXER_") or not value:
            ap.error(f"--setting takes INDEXER_NAME=VALUE, not {setting!r}")
        settings[name] = value
    loaded: list[tuple[int, float, Cores]] = []  # (indexer workers, loader blocks/s, its cores), for each run
    paired: dict[tuple[str, int, int], tuple[float, float]] = {}  # (chain, repeat, workers) -> both blocks/s
    rows = []
    chains = []
    breakdowns = {}
    if args.sparse:
        chains.append(("sparse", args.sparse, ("--prune-history", "--hardfork", "cancun")))
    if args.dense:
        chains.append(("dense", args.dense, ("--no-mining",)))
    if args.mainnet:
        chains.append(("mainnet", args.mainnet, ()))
    for kind, size, anvil_args in chains:
        t = time.perf_counter()
        # The mainnet-shaped node computes every block's hashes before it answers: not timed.
        with (NodeProcess(args.mainnet_era, size) if kind == "mainnet" else Anvil(*anvil_args)) as node:
            first = args.mainnet_era if kind == "mainnet" else 0
            if kind == "sparse":
                node.rpc("anvil_mine", hex(size - 1), "0x1")
            elif kind == "dense":
                build_dense(node, size - 1, args.dense_txs)
            head = node.head()
            print(f"# {kind}: {head - first + 1:,} blocks built in {time.perf_counter() - t:.0f} s", file=sys.stderr,
                  flush=True)
            if kind == "mainnet":
                capacity = node_capacity(node.url, node.proc.pid, first, head)
                print(f"# mainnet-shaped node: {capacity[0]:,.0f} blocks/s served to 2 processes reading without "
                      f"parsing, {capacity[1]:.2f} ms of its CPU per block", file=sys.stderr, flush=True)
            with Cores(node.proc.pid) as before_cores:
                before = raw_ceiling(node.url, first, head)
            encoded = encode_rows(args.database_url, node.url, first, head) if kind == "mainnet" and args.loader else []

            def load() -> tuple[float, Cores]:
                cores = Cores(node.proc.pid)
                rate = lean_loader(args.database_url, first, head, encoded, cores,
                                   index_now=args.query_indexes == "during")
                print(f"# lean loader: {rate:,.0f} blocks/s, cores node/client/rest {cores}", file=sys.stderr, flush=True)
                return rate, cores

            if encoded:
                loader_before = load()
            for repeat in range(args.repeat):
                for n in workers:
                    cores = Cores(node.proc.pid)
                    rate, indexed_rate, rss = indexer_run(args.database_url, node.url, first, head, n,
                                            f"bench_{os.getpid()}_{kind}_{n}", cores, chunk=args.chunk or None,
                                            settings=settings, tree=args.indexer_tree)
                    with Cores(node.proc.pid) as after_cores:
                        after = raw_ceiling(node.url, first, head)
                    # The machine's speed drifts: each run is held against the ceilings measured
                    # just before and just after it.
                    ceiling = (before + after) / 2
                    rows.append((kind, head - first + 1, n, ceiling, rate, rss, before_cores, cores, indexed_rate))
                    paired[kind, repeat, n] = rate, indexed_rate
                    print(f"# {kind} workers={n}: ceiling {before:,.0f} then {after:,.0f} blocks/s, indexer "
                          f"{rate:,.0f} blocks/s ({rate / ceiling:.2f}x; {indexed_rate:,.0f} to the last range indexed), "
                          f"peak worker RSS {rss} MB, cores "
                          f"node/client/rest: ceiling {before_cores}, indexer {cores}", file=sys.stderr, flush=True)
                    before, before_cores = after, after_cores
                    if encoded:
                        # Like the ceiling: each indexer run against the loader runs just around it.
                        loader_after = load()
                        loaded.append((n, rate, (loader_before[0] + loader_after[0]) / 2, loader_after[1], cores))
                        loader_before = loader_after
            encoded = []
            breakdowns[kind] = breakdown(args.database_url, node.url, first, head)
    rows = median_rows(rows)
    if args.mainnet:
        print(f"The mainnet-shaped node ({args.mainnet:,} blocks from {args.mainnet_era:,}) served {capacity[0]:,.0f} "
              f"blocks/s to 2 client processes that read its answers without parsing them, at {capacity[1]:.2f} ms "
              "of its CPU per block.\n")
    print(f"Median of {args.repeat} run(s) at each worker count; each held against the mean of the ceilings measured just "
          "before and just after it.\n")
    print("| chain | blocks | workers | raw ceiling (blocks/s) | indexer work (blocks/s) | ratio "
          "| indexer work, to the last range indexed (blocks/s) "
          "| peak worker RSS (MB) | cores busy, ceiling: node / client / rest | cores busy, indexer: node / indexer / rest |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind, blocks, n, ceiling, rate, rss, c_cores, i_cores, indexed_rate in rows:
        print(f"| {kind} | {blocks:,} | {n} | {ceiling:,.0f} | {rate:,.0f} | {rate / ceiling:.2f}x | {indexed_rate:,.0f} "
              f"| {rss} | {c_cores} | {i_cores} |")
    print()
    # More workers against one on the same chain, each run against the 1-worker run of its own
    # repeat (the machine's speed drifts): to the pool's exit, and to the last range indexed (the
    # decoding and query index builds that follow it left out).
    for (kind, repeat, n), (rate, indexed_rate) in paired.items():
        one = paired.get((kind, repeat, 1))
        if one is not None and n > 1:
            print(f"{kind}, run {repeat + 1}: {n} workers against 1: {rate / one[0]:.2f}x to the pool's exit, "
                  f"{indexed_rate / one[1]:.2f}x to the last range indexed")
    print()
    print("CPU per block (cores busy over blocks/s) in the indexer runs; the node's capacity is what one core (its "
          "GIL) could serve at its CPU per block, against the blocks/s the indexer took from it.\n")
    print("| run | node (ms CPU/block) | indexer processes (ms CPU/block) | rest, PostgreSQL mostly (ms CPU/block) "
          "| node's capacity (blocks/s) | capacity / indexer |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, blocks, n, ceiling, rate, rss, c_cores, i_cores, _ in rows:
        node_ms = 1000 * i_cores.node / rate
        one_core = f"{1000 / node_ms:,.0f} | {1000 / node_ms / rate:,.1f}x" if node_ms > 0 else "- | -"
        print(f"| {n} workers on {kind} | {node_ms:.2f} | {1000 * i_cores.client / rate:.2f} "
              f"| {1000 * i_cores.rest / rate:.2f} | {one_core} |")
    print()
    if loaded:
        print("The lean loader: the same rows (the chain tables' and the decoded token transfers'), pre-encoded as"
              " store.write sends them (binary COPY where it can),"
              " copied by 2 sessions in the workers' batches with their session settings, then the query indexes"
              f" built (INDEXER_QUERY_INDEXES={args.query_indexes}); held against the mean of the loader runs just"
              " before and just after each indexer run. CPU in ms per block.\n")
        print("| workers | indexer work (blocks/s) | lean loader (blocks/s) | indexer / loader "
              "| loader: PostgreSQL and its sessions (ms CPU/block) | indexer: its processes / PostgreSQL and the rest (ms CPU/block) |")
        print("|---:|---:|---:|---:|---:|---:|")
        for n, rate, loader, l_cores, i_cores in loaded:
            print(f"| {n} | {rate:,.0f} | {loader:,.0f} | {rate / loader:.2f}x | {1000 * l_cores.rest / loader:.2f} "
                  f"| {1000 * i_cores.client / rate:.2f} / {1000 * i_cores.rest / rate:.2f} |")
        print()
    print("| chain | JSON-RPC (ms/block) | its CPU in this process (ms/block) | decoding and checks (ms/block) "
          "| writing (ms/block) |")
    print("|---|---:|---:|---:|---:|")
    for kind, b in breakdowns.items():
        print(f"| {kind} | {b['rpc']:.3f} | {b['rpc_cpu']:.3f} | {b['decode']:.3f} | {b['write']:.3f} |")
    if args.plot:
        plot(rows, args.plot)


def median_rows(rows: list) -> list:
    """Per chain and worker count, the run of median ratio (its own ceiling and cores)."""
    picked = []
    for key in dict.fromkeys((r[0], r[2]) for r in rows):
        runs = sorted((r for r in rows if (r[0], r[2]) == key), key=lambda r: r[4] / r[3])
        mid = runs[len(runs) // 2]
        picked.append((*mid[:5], max(r[5] for r in runs), *mid[6:]))
    return picked


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for kind in dict.fromkeys(r[0] for r in rows):
        mine = sorted((r for r in rows if r[0] == kind), key=lambda r: r[2])
        label = f"{kind} ({mine[0][1]:,} blocks)"
        left.plot([r[2] for r in mine], [r[4] / r[3] for r in mine], marker="o", label=label)
        right.plot([r[2] for r in mine], [r[4] for r in mine], marker="o", label=label)
    left.axhline(1.0, color="gray", linestyle="--", label="raw JSON-RPC ceiling")
    left.set_ylabel("indexer work / raw ceiling, same run")
    left.set_ylim(0, 1.2)
    right.set_ylabel("blocks per second (indexer work)")
    right.set_yscale("log")
    for ax in (left, right):
        ax.set_xticks(sorted({r[2] for r in rows}))
        ax.set_xlabel("worker processes")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle("backfill end to end against the node's raw JSON-RPC throughput (2 cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
