#!/usr/bin/env python3
"""Following the head (issue 25): `indexer work --follow` against anvil nodes, in one run.

- Lag: anvil mining on its own every `--block-times` seconds (1 and 0.25 by default), for
  `--duration` seconds each, with a transaction that emits logs sent every block time (so that
  blocks have rows to decode), followed by a pool of `--workers` from block 0 with
  INDEXER_CONFIRMATIONS=0 and INDEXER_USE_FINALIZED=false, the other settings at their defaults
  (INDEXER_HEAD_POLL_SECONDS=0.5). Once the pool has caught up with the node, this process's
  own threads watch: one asks the node `eth_blockNumber` every 50 ms and records when each block
  first shows there; one asks the database every 20 ms which blocks are stored (`blocks`) and
  how far they are decoded (`follow_state.progress(conn).decoded`). A block's lag is from when it first
  showed at the node until it showed stored, and until decoded. Prints p50/p99/max, and the same
  for the first and the last minute of the run (its halves if it is shorter than two minutes):
  a growing backlog shows as a last minute worse than the first. With `--ws` each block time is
  run again with INDEXER_WS_URL (the node's newHeads subscription, anvil's WebSocket).
- Reorgs: an unpruned anvil mining only when told; the pool follows it from block 0. For each
  depth of `--reorg-depths`, `--reorg-repeat` times: blocks mined and indexed, then
  `anvil_reorg` of that depth (new hashes, other transactions) and one block mined on the new
  fork (what makes a worker meet the fork); timed from the reorg call's return until the stored
  blocks are the node's canonical ones (every number up to the head, each with the node's hash,
  nothing above), and until they are decoded.
- Catch-up: `--catch-up` empty blocks mined at once by a pruned anvil, indexed from block 0 by
  `indexer plan --from 0 --to N+1` then `indexer work --drain`, and by `indexer work --follow
  --from 0`, each on a fresh database with the same workers and chunk (INDEXER_CHUNK), the two
  taking turns `--catch-up-repeat` times; each timed from its start (the `indexer plan`
  command's, or the follower's pool's) to its first range planned and its last range indexed (the
  database's clock: the `index_blocks` jobs' `created_at` and `finished_at`), and the drain to its
  exit too. Then the follower is shown 5 new blocks, one a second: their lag, measured as
  above (it settles to the head).
- Idle: a follower caught up with a node that mines nothing, its CPU time (the pool and every
  process under it, from /proc) over `--idle` seconds; with it, the CPU of its database
  sessions and of the node it polls.

PostgreSQL: `--database-url` (scratch databases are made there and dropped), or by default one
of its own started by scripts/pg-start (fsync off). anvil: INDEXER_TEST_ANVIL, or the one
scripts/install-anvil put in .cache. Prints Markdown tables; BENCHMARKS.md holds the figures
with this command. The default run takes about 7 minutes.

    .venv/bin/python scripts/bench_follow.py [--block-times 1,0.25] [--duration 120] [--ws]
        [--reorg-depths 1,2,5,10,20] [--reorg-repeat 2] [--catch-up 100000] [--catch-up-repeat 3]
        [--idle 30] [--workers 2] [--parts lag,reorg,catchup,idle] [--database-url URL]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import psycopg
from psycopg.conninfo import make_conninfo

from indexer.base import db
from indexer.base.settings import Settings
from indexer.operations import follow_state
from indexer.testing.anvil import EMITTER_INIT, Anvil, Node
from indexer.testing.cluster import postgres_at
from indexer.testing.processes import cpu_seconds, descendants
from indexer.testing.work import INDEXER, Work

# The test harness's `Work` starts pools with short leases and waits; a benchmark runs what a user
# runs: these back at their defaults, only the confirmations (0: every block is indexed as soon
# as the node has it) and the metrics port (none) set.
DEFAULTS = {f"INDEXER_{name.upper()}": str(Settings.model_fields[name].default)
            for name in ("poll_seconds", "reap_seconds", "backoff_base_seconds", "defer_seconds")}
FOLLOW_ENV = DEFAULTS | {"INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0"}
POLL = float(Settings.model_fields["head_poll_seconds"].default)

NODE_EVERY = 0.05
DB_EVERY = 0.02


def log(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


# -- databases --

def fresh_database(admin_url: str, name: str) -> str:
    drop_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(admin_url, dbname=name)
    with db.connect(url) as conn:
        db.migrate(conn)
    return url


def drop_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_clock(url: str) -> float:
    with psycopg.connect(url) as c:
        return c.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]


# -- watching the node and the database --

class NodeWatch(threading.Thread):
    """Asks the node for its head every 50 ms: `seen[n]` is when block n was first there (the
    monotonic clock when the answer that showed it came back)."""

    def __init__(self, node: Node) -> None:
        super().__init__(daemon=True)
        self.node = node
        self.seen: dict[int, float] = {}
        self.head = node.head()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                head = self.node.head()
            except Exception as exc:  # a node being stopped
                log(f"node watch: {exc}")
                head = self.head
            now = time.monotonic()
            for n in range(self.head + 1, head + 1):
                self.seen[n] = now
            self.head = max(self.head, head)
            self.stop.wait(max(0.0, NODE_EVERY - (now - began)))

    def finish(self) -> None:
        self.stop.set()
        self.join()


class DbWatch(threading.Thread):
    """Asks the database every 20 ms which blocks above the lowest not yet seen are stored, and
    how far the blocks are decoded (`follow_state.progress`): `stored[n]` and `decoded[n]` are when
    block n was first seen stored, and decoded. `hashes` is the stored chain as last read."""

    def __init__(self, url: str, low: int = 0) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(url, autocommit=True)
        self.low = low  # the lowest block not seen stored
        self.stored: dict[int, float] = {}
        self.decoded: dict[int, float] = {}
        self.decoded_through = low - 1
        self.stop = threading.Event()

    def run(self) -> None:
        with self.conn:
            while not self.stop.is_set():
                began = time.monotonic()
                # How far decoded first, then what is stored: a block is stored before it is decoded,
                # so every block this round finds decoded it finds stored too (read the other way
                # round, a block stored and decoded between the two reads was decoded but not
                # stored, and the run that waited for it to be decoded found no time it was stored).
                through = follow_state.progress(self.conn).decoded
                numbers = [r[0] for r in self.conn.execute("SELECT number FROM blocks WHERE number >= %s",
                                                           (self.low,))]
                now = time.monotonic()
                for n in numbers:
                    self.stored.setdefault(n, now)
                while self.low in self.stored:
                    self.low += 1
                for n in range(self.decoded_through + 1, through + 1):
                    self.decoded[n] = now
                self.decoded_through = max(self.decoded_through, through)
                self.stop.wait(max(0.0, DB_EVERY - (now - began)))

    def finish(self) -> None:
        self.stop.set()
        self.join()


def wait_until(predicate, what: str, timeout: float, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"bench_follow: timed out after {timeout:.0f} s waiting for {what}")


def caught_up(node: Node, url: str, timeout: float = 120) -> int:
    """Waits until the pool has stored and decoded every block the node has; returns that head."""
    with psycopg.connect(url, autocommit=True) as conn:
        def done() -> int | None:
            head = node.head()
            through = follow_state.progress(conn)
            return head if through.indexed >= head and through.decoded >= head else None
        return wait_until(done, "the pool to catch up with the node", timeout, every=0.1)


def follower(url: str, rpc_url: str, workers: int, *args: str, **env: str) -> Work:
    return Work(url, rpc_url, "--follow", "--from", "0", "--workers", str(workers), "--log-level", "WARNING",
                *args, **(FOLLOW_ENV | env))


def tree_cpu(pid: int) -> dict[int, float]:
    found = {}
    for p in [pid, *descendants(pid)]:
        try:
            found[p] = cpu_seconds(p)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return found


# -- figures --

def quantile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value at or above a share q of them."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return f"{1000 * seconds:,.0f}"


def spread(values: list[float]) -> str:
    """p50 / p99 / max in ms."""
    if not values:
        return "- / - / -"
    return f"{ms(quantile(values, 0.5))} / {ms(quantile(values, 0.99))} / {ms(max(values))}"


# -- lag --

def deploy_emitter(node: Node, mine: bool = False) -> str:
    """The address of a contract whose calls emit two logs, deployed (and mined, if `mine`)."""
    sender = node.rpc("eth_accounts")[0]
    tx = node.rpc("eth_sendTransaction", {"from": sender, "data": EMITTER_INIT, "gas": hex(200_000)})
    if mine:
        node.rpc("evm_mine")
    receipt = wait_until(lambda: node.rpc("eth_getTransactionReceipt", tx), "the emitter to be deployed", 30, every=0.05)
    return receipt["contractAddress"]


class Sender(threading.Thread):
    """One call of a log-emitting contract sent every `every` seconds: blocks with a transaction,
    two logs and something to decode."""

    def __init__(self, node: Node, every: float) -> None:
        super().__init__(daemon=True)
        self.node, self.every = node, every
        self.accounts = node.rpc("eth_accounts")
        self.emitter = deploy_emitter(node)
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            try:
                self.node.rpc("eth_sendTransaction", {"from": self.accounts[i % len(self.accounts)], "to": self.emitter,
                                                      "gas": hex(100_000), "data": "0x" + f"{i:064x}"})
            except Exception as exc:  # a node being stopped
                log(f"sender: {exc}")
            self.stop.wait(self.every)

    def finish(self) -> None:
        self.stop.set()
        self.join()


@dataclass
class LagRun:
    label: str
    block_time: float
    duration: float
    blocks: int = 0
    stored: list[float] = field(default_factory=list)
    decoded: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)  # stored lag of the blocks of the first minute
    last: list[float] = field(default_factory=list)
    first_decoded: list[float] = field(default_factory=list)
    last_decoded: list[float] = field(default_factory=list)
    window: float = 60.0
    pool_cores: float = 0.0
    node_cores: float = 0.0


def lag_run(admin_url: str, block_time: float, duration: float, workers: int, ws: bool) -> LagRun:
    name = f"bench_follow_{os.getpid()}_lag"
    url = fresh_database(admin_url, name)
    label = f"{block_time:g} s" + (", newHeads" if ws else "")
    run = LagRun(label, block_time, duration)
    try:
        with Anvil("--block-time", f"{block_time:g}") as node:
            sender = Sender(node, block_time)
            sender.start()
            env = {"INDEXER_WS_URL": node.url.replace("http://", "ws://")} if ws else {}
            with follower(url, node.url, workers, **env) as pool:
                head = caught_up(node, url)
                log(f"lag, {label}: caught up at block {head}; watching for {duration:g} s")
                watch_node, watch_db = NodeWatch(node), DbWatch(url, head + 1)
                watch_db.start()
                watch_node.start()
                started = time.monotonic()
                cpu_pool, cpu_node = sum(tree_cpu(pool.proc.pid).values()), cpu_seconds(node.proc.pid)
                time.sleep(duration)
                ended = time.monotonic()
                cpu_pool = sum(tree_cpu(pool.proc.pid).values()) - cpu_pool
                cpu_node = cpu_seconds(node.proc.pid) - cpu_node
                sender.finish()
                watch_node.finish()
                mined = {n: t for n, t in watch_node.seen.items() if started <= t <= ended}
                last = max(mined, default=head)
                wait_until(lambda: watch_db.decoded_through >= last, f"block {last} to be indexed and decoded",
                           60, every=0.1)
                watch_db.finish()
                if pool.proc.poll() is not None:
                    raise SystemExit(f"the pool exited: {pool.output()[-3000:]}")
    finally:
        drop_database(admin_url, name)
    run.blocks = len(mined)
    run.pool_cores, run.node_cores = cpu_pool / (ended - started), cpu_node / (ended - started)
    run.window = min(60.0, duration / 2)
    for n, seen in sorted(mined.items()):
        stored, decoded = watch_db.stored[n] - seen, watch_db.decoded[n] - seen
        run.stored.append(stored)
        run.decoded.append(decoded)
        if seen < started + run.window:
            run.first.append(stored)
            run.first_decoded.append(decoded)
        if seen >= ended - run.window:
            run.last.append(stored)
            run.last_decoded.append(decoded)
    log(f"lag, {label}: {run.blocks} blocks, stored p50/p99/max {spread(run.stored)} ms, "
        f"decoded {spread(run.decoded)} ms")
    return run


# -- reorgs --

@dataclass
class ReorgRun:
    depth: int
    to_mined: float  # from the reorg call's return until the new block is mined (the call returns)
    to_stored: float  # ... until the stored chain is the node's
    to_decoded: float  # ... and decoded


def stored_is(conn: psycopg.Connection, canonical: dict[int, str], head: int) -> bool:
    count, top = conn.execute("SELECT count(*), max(number) FROM blocks").fetchone()
    if count != head + 1 or top != head:
        return False
    low = min(canonical)
    stored = dict(conn.execute("SELECT number, '0x' || encode(hash, 'hex') FROM blocks WHERE number >= %s", (low,)))
    return stored == canonical


def canonical_hashes(node: Node, first: int, last: int) -> dict[int, str]:
    blocks = node.batch([("eth_getBlockByNumber", [hex(n), False]) for n in range(first, last + 1)])
    return {int(b["number"], 16): b["hash"] for b in blocks}


def reorg_runs(admin_url: str, depths: list[int], repeat: int, workers: int) -> tuple[list[ReorgRun], int]:
    name = f"bench_follow_{os.getpid()}_reorg"
    url = fresh_database(admin_url, name)
    runs = []
    try:
        with Anvil("--no-mining") as node:
            emitter = deploy_emitter(node, mine=True)
            node.mine(max(depths) + 10)
            accounts = node.rpc("eth_accounts")
            with follower(url, node.url, workers) as pool, psycopg.connect(url, autocommit=True) as conn:
                caught_up(node, url)
                for r in range(repeat):
                    for depth in depths:
                        for i in range(depth + 2):  # blocks with logs for the reorg to orphan
                            node.rpc("eth_sendTransaction", {"from": accounts[i % len(accounts)], "to": emitter,
                                                             "gas": hex(100_000), "data": "0x" + f"{i:064x}"})
                            node.rpc("evm_mine")
                        caught_up(node, url)
                        # At some point of the planner's poll, not just after one.
                        time.sleep((0.37 * (r * len(depths) + depth)) % POLL)
                        node.reorg(depth)
                        reorged = time.monotonic()
                        node.mine(1)
                        mined = time.monotonic()
                        head = node.head()
                        canonical = canonical_hashes(node, max(0, head - depth - 5), head)
                        wait_until(lambda: stored_is(conn, canonical, head), f"the reorg of depth {depth} to be rolled back",
                                   60)
                        stored = time.monotonic()
                        wait_until(lambda: follow_state.progress(conn).decoded >= head, "the new fork to be decoded", 60)
                        decoded = time.monotonic()
                        runs.append(ReorgRun(depth, mined - reorged, stored - reorged, decoded - reorged))
                        log(f"reorg of depth {depth}: stored as the node's {ms(stored - reorged)} ms after the reorg"
                            f" call returned, decoded {ms(decoded - reorged)} ms")
                # The whole chain is the node's, and each reorg was rolled back, none halted.
                head = node.head()
                assert stored_is(conn, canonical_hashes(node, 0, head), head), "the stored chain is not the node's"
                rolled = conn.execute("SELECT count(*) FILTER (WHERE rolled_back), count(*) FROM reorgs").fetchone()
                assert follow_state.state(conn).halted_at is None, follow_state.state(conn)
                if pool.proc.poll() is not None:
                    raise SystemExit(f"the pool exited: {pool.output()[-3000:]}")
    finally:
        drop_database(admin_url, name)
    assert rolled[0] == rolled[1] >= len(runs), rolled  # a reorg may be met, and rolled back, in two steps
    return runs, rolled[0]


# -- catch-up --

@dataclass
class CatchUp:
    mode: str
    repeat: int
    blocks: int  # blocks 0..head, all behind the head when the pool starts
    to_indexed: float = 0.0  # seconds from the pool's start to its last range indexed
    to_exit: float | None = None  # the drain's exit
    to_planned: float = 0.0  # ... to the first range planned (the plan command's, or the follower's planner)
    settle: list[float] = field(default_factory=list)  # the follower: lag of the new blocks after


LAST_INDEXED = "SELECT extract(epoch FROM max(finished_at))::float8 FROM jobs_history WHERE kind = 'index_blocks'"
FIRST_PLANNED = "SELECT extract(epoch FROM min(created_at))::float8 FROM jobs_history WHERE kind = 'index_blocks'"
INDEX_JOBS_LEFT = ("SELECT (SELECT count(*) FROM jobs WHERE kind = 'index_blocks'),"
                   " (SELECT planned_through FROM follow_state)")


def catch_up_run(admin_url: str, node: Anvil, mode: str, repeat: int, workers: int, settle_blocks: int = 5) -> CatchUp:
    name = f"bench_follow_{os.getpid()}_catchup"
    url = fresh_database(admin_url, name)
    head = node.head()
    result = CatchUp(mode, repeat, head + 1)
    try:
        if mode == "drain":
            env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
            env |= FOLLOW_ENV | {"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": node.url}
            # Timed from the plan on, as the follower's time includes its own planning.
            started_at = database_clock(url)
            subprocess.run([INDEXER, "plan", "--from", "0", "--to", str(head + 1)], env=env, check=True,
                           capture_output=True)
            with Work(url, node.url, "--drain", "--workers", str(workers), "--log-level", "WARNING",
                      **FOLLOW_ENV) as pool:
                rc = pool.wait(600)
                result.to_exit = database_clock(url) - started_at
                if rc != 0:
                    raise SystemExit(f"indexer work --drain exited with {rc}: {pool.output()[-3000:]}")
            with psycopg.connect(url) as c:
                stored = c.execute("SELECT count(*) FROM blocks").fetchone()[0]
                assert stored == head + 1, (stored, head)
        else:
            started_at = database_clock(url)
            with follower(url, node.url, workers) as pool, psycopg.connect(url, autocommit=True) as conn:
                def done() -> bool:
                    left, planned = conn.execute(INDEX_JOBS_LEFT).fetchone()
                    return left == 0 and planned is not None and planned >= head
                wait_until(done, f"the follower to index {head + 1:,} blocks", 600, every=0.1)
                # Settled at the head: new blocks, one a second, each stored as it comes.
                watch_node, watch_db = NodeWatch(node), DbWatch(url, head + 1)
                watch_db.start()
                watch_node.start()
                for _ in range(settle_blocks):
                    node.mine(1)
                    time.sleep(1.0)
                watch_node.finish()
                last = max(watch_node.seen, default=head)
                wait_until(lambda: watch_db.low > last, "the new blocks to be stored", 30)
                watch_db.finish()
                result.settle = [watch_db.stored[n] - t for n, t in sorted(watch_node.seen.items())]
                if pool.proc.poll() is not None:
                    raise SystemExit(f"the pool exited: {pool.output()[-3000:]}")
        with psycopg.connect(url) as c:
            # The catch-up's ranges only: the follower's new blocks came after.
            result.to_indexed = c.execute(LAST_INDEXED + " AND (payload->>'to')::bigint <= %s",
                                          (head,)).fetchone()[0] - started_at
            result.to_planned = c.execute(FIRST_PLANNED).fetchone()[0] - started_at
    finally:
        drop_database(admin_url, name)
    return result


def catch_up_runs(admin_url: str, blocks: int, repeat: int, workers: int) -> list[CatchUp]:
    runs = []
    with Anvil("--prune-history", "--hardfork", "cancun", "--no-mining") as node:
        t = time.perf_counter()
        node.rpc("anvil_mine", hex(blocks), "0x1")
        log(f"catch-up: {node.head() + 1:,} blocks mined in {time.perf_counter() - t:.1f} s")
        for r in range(repeat):
            # The two take turns, one first then the other: the machine's drift hits both alike.
            for mode in (("drain", "follow") if r % 2 == 0 else ("follow", "drain")):
                run = catch_up_run(admin_url, node, mode, r, workers)
                runs.append(run)
                log(f"catch-up, {mode}: {run.blocks:,} blocks, first range planned at {run.to_planned:.2f} s, "
                    f"{run.to_indexed:.2f} s to the last range indexed"
                    + (f", {run.to_exit:.2f} s to the pool's exit" if run.to_exit is not None else "")
                    + (f"; then new blocks stored {', '.join(ms(s) for s in run.settle)} ms after the node had them"
                       if run.settle else ""))
    return runs


# -- idle --

@dataclass
class Idle:
    seconds: float
    pool: float  # CPU seconds of the pool's processes
    processes: int
    sessions: float | None  # of its database sessions (None: not readable here)
    node: float


def idle_run(admin_url: str, seconds: float, workers: int) -> Idle:
    name = f"bench_follow_{os.getpid()}_idle"
    url = fresh_database(admin_url, name)
    try:
        with Anvil("--no-mining") as node:
            node.mine(20)
            with follower(url, node.url, workers) as pool, psycopg.connect(url, autocommit=True) as conn:
                caught_up(node, url)
                time.sleep(5)  # whatever follows the catch-up (its last decoding) is over
                me = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                sessions = [r[0] for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> %s", (me,))]

                def sessions_cpu() -> dict[int, float]:
                    """CPU seconds of each session still there: a short-lived one (a health check's)
                    may end between the listing and the reading."""
                    found = {}
                    for pid in sessions:
                        try:
                            found[pid] = cpu_seconds(pid)
                        except (FileNotFoundError, PermissionError, ProcessLookupError):
                            pass
                    return found

                before, before_sessions, before_node = tree_cpu(pool.proc.pid), sessions_cpu(), cpu_seconds(node.proc.pid)
                started = time.monotonic()
                time.sleep(seconds)
                after, after_sessions, after_node = tree_cpu(pool.proc.pid), sessions_cpu(), cpu_seconds(node.proc.pid)
                elapsed = time.monotonic() - started
                if set(after) != set(before):
                    log(f"idle: the pool's processes changed while measured: {sorted(before)} then {sorted(after)}")
                pool_cpu = sum(after[p] - before.get(p, 0.0) for p in after)
                # Over the sessions read at both ends (None: none readable here, as without /proc).
                both = before_sessions.keys() & after_sessions.keys()
                session_cpu = sum(after_sessions[p] - before_sessions[p] for p in both) if both else None
                if both != set(sessions):
                    log(f"idle: sessions not read at both ends (ended, or not readable): {sorted(set(sessions) - both)}")
    finally:
        drop_database(admin_url, name)
    result = Idle(elapsed, pool_cpu, len(after), session_cpu, after_node - before_node)
    log(f"idle: {len(after)} processes of the pool spent {pool_cpu:.2f} s of CPU in {elapsed:.1f} s")
    return result


# -- main --

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--block-times", default="1,0.25", help="anvil's --block-time for the lag runs, comma-separated")
    ap.add_argument("--duration", type=float, default=120, help="seconds each lag run is watched")
    ap.add_argument("--ws", action="store_true", help="run each block time again with INDEXER_WS_URL (newHeads)")
    ap.add_argument("--reorg-depths", default="1,2,5,10,20", help="depths of the reorgs, comma-separated")
    ap.add_argument("--reorg-repeat", type=int, default=2, help="reorgs of each depth")
    ap.add_argument("--catch-up", type=int, default=100_000, help="blocks behind the head for the catch-up")
    ap.add_argument("--catch-up-repeat", type=int, default=3, help="runs of each of the drain and the follower")
    ap.add_argument("--idle", type=float, default=30, help="seconds the idle follower's CPU is measured")
    ap.add_argument("--workers", type=int, default=2, help="worker processes of every pool")
    ap.add_argument("--parts", default="lag,reorg,catchup,idle", help="which measures to run, comma-separated")
    ap.add_argument("--database-url", help="a PostgreSQL to make scratch databases in (default: start one)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if parts - {"lag", "reorg", "catchup", "idle"} or not parts:
        ap.error(f"--parts takes lag, reorg, catchup and idle, not {args.parts!r}")
    block_times = [float(b) for b in args.block_times.split(",")]
    depths = [int(d) for d in args.reorg_depths.split(",")]
    if min(block_times) <= 0 or min(depths) < 1 or args.duration <= 0 or args.idle <= 0 or args.catch_up < 1:
        ap.error("block times, durations and block counts must be positive")

    lags: list[LagRun] = []
    reorgs: list[ReorgRun] = []
    rolled_back = 0
    catch_ups: list[CatchUp] = []
    idle = None
    with postgres_at(args.database_url) as admin_url:
        if "lag" in parts:
            for ws in ((False, True) if args.ws else (False,)):
                for block_time in block_times:
                    lags.append(lag_run(admin_url, block_time, args.duration, args.workers, ws))
        if "reorg" in parts:
            reorgs, rolled_back = reorg_runs(admin_url, depths, args.reorg_repeat, args.workers)
        if "catchup" in parts:
            catch_ups = catch_up_runs(admin_url, args.catch_up, args.catch_up_repeat, args.workers)
        if "idle" in parts:
            idle = idle_run(admin_url, args.idle, args.workers)

    print(f"{args.workers} workers; INDEXER_HEAD_POLL_SECONDS={POLL:g}, INDEXER_CONFIRMATIONS=0, the other settings"
          " at their defaults.\n")
    if lags:
        print(f"Lag, from a block's first showing at the node (asked every {ms(NODE_EVERY)} ms) until it shows stored, "
              f"and decoded (the database asked every {ms(DB_EVERY)} ms), in ms: p50 / p99 / max.\n")
        print("| block time | blocks | stored | decoded | stored, first minute | stored, last minute "
              "| decoded, first minute | decoded, last minute | cores busy: pool / node |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for run in lags:
            print(f"| {run.label} | {run.blocks:,} | {spread(run.stored)} | {spread(run.decoded)} | {spread(run.first)} "
                  f"| {spread(run.last)} | {spread(run.first_decoded)} | {spread(run.last_decoded)} "
                  f"| {run.pool_cores:.2f} / {run.node_cores:.2f} |")
        print()
        for run in lags:
            if run.window < 60:
                print(f"{run.label}: the first and last {run.window:g} s of a {run.duration:g} s run, not minutes.")
            if run.first and run.last:
                print(f"{run.label}: last against first minute, stored p50 {statistics.median(run.last) / statistics.median(run.first):.2f}x, "
                      f"p99 {quantile(run.last, 0.99) / quantile(run.first, 0.99):.2f}x; decoded p50 "
                      f"{statistics.median(run.last_decoded) / statistics.median(run.first_decoded):.2f}x")
        print()
    if reorgs:
        print("Reorgs: from the `anvil_reorg` call's return (one block mined on the new fork right after) until the "
              "stored chain is the node's canonical one, and decoded, in ms.\n")
        print("| depth | reorgs | new block mined after (ms) | stored as the node's: median / max (ms) "
              "| decoded: median / max (ms) |")
        print("|---:|---:|---:|---:|---:|")
        for depth in depths:
            of = [r for r in reorgs if r.depth == depth]
            print(f"| {depth} | {len(of)} | {ms(statistics.median(r.to_mined for r in of))} "
                  f"| {ms(statistics.median(r.to_stored for r in of))} / {ms(max(r.to_stored for r in of))} "
                  f"| {ms(statistics.median(r.to_decoded for r in of))} / {ms(max(r.to_decoded for r in of))} |")
        print(f"\nAll {len(reorgs)} reorgs: stored as the node's within {ms(max(r.to_stored for r in reorgs))} ms "
              f"(goal two polls, {ms(2 * POLL)} ms); {rolled_back} rollbacks recorded in `reorgs`, none refused.\n")
    if catch_ups:
        print(f"Catch-up: {args.catch_up:,} empty blocks behind the head, from block 0, jobs of INDEXER_CHUNK blocks, "
              "the two taking turns on the same node (each follower's 5 new blocks add to the chain); seconds from the "
              "`indexer plan` command's start (the drain) or the pool's start (the follower) to the first range "
              "planned and to the last range indexed.\n")
        print("| run | blocks | drain: first range planned (s) | drain: last range indexed (s) | drain: its exit (s) "
              "| blocks | follow: first range planned (s) | follow: last range indexed (s) | follow / drain, blocks/s "
              "| follow: 5 new blocks, one a second, then stored after (ms) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        ratios = []
        for r in range(args.catch_up_repeat):
            drain = next(c for c in catch_ups if c.repeat == r and c.mode == "drain")
            fol = next(c for c in catch_ups if c.repeat == r and c.mode == "follow")
            ratios.append((fol.blocks / fol.to_indexed) / (drain.blocks / drain.to_indexed))
            print(f"| {r + 1} | {drain.blocks:,} | {drain.to_planned:.2f} | {drain.to_indexed:.2f} | {drain.to_exit:.2f} "
                  f"| {fol.blocks:,} | {fol.to_planned:.2f} | {fol.to_indexed:.2f} | {ratios[-1]:.2f}x "
                  f"| {', '.join(ms(s) for s in fol.settle)} |")
        print(f"\nThe follower against the drain: {statistics.median(ratios):.2f}x in the median run (goal at least 0.90x).\n")
    if idle:
        sessions = "-" if idle.sessions is None else f"{100 * idle.sessions / idle.seconds:.2f}%"
        print(f"Idle: a follower caught up, the node mining nothing, over {idle.seconds:.0f} s: its {idle.processes} "
              "processes' CPU time over the wall time.\n")
        print("| pool (all its processes) | its database sessions | the node |")
        print("|---:|---:|---:|")
        print(f"| {100 * idle.pool / idle.seconds:.2f}% | {sessions} | {100 * idle.node / idle.seconds:.2f}% |")
        print()


if __name__ == "__main__":
    main()
