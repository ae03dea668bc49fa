#!/usr/bin/env python3
"""Chaos backfill: whatever happens to workers, the node or the database, every planned block
ends up indexed exactly once, and no stale worker completes a claim that is no longer its own.

On loopback only, bounded in time: a PostgreSQL of its own, anvil with a chain of transfers,
contract calls and logs, and a fault-injecting proxy in front of it (errors, 429s, timeouts,
truncated and reordered batch answers). `indexer work --workers N` backfills through the proxy
while, for --seconds, the run kills random workers with SIGKILL (the pool starts new ones),
stalls others with SIGSTOP past their lease and resumes them, and restarts PostgreSQL (fast
shutdown) --restarts times. It also reorganises the chain below stored blocks: the top blocks
but the last few are planned first, and once they are stored, anvil replaces the top
REORG_DEPTH blocks; the last few, indexed later from the new fork, do not link to the stored
orphans, and the workers defer their jobs (no attempt spent) until, as an operator answering the alert would,
the run has `indexer verify --against-node --repair` delete the orphans and plan them again.
Then it lets the backfill finish and checks, and prints: every block present once, the
parent-hash chain continuous, transaction and log counts equal to the node's, every stored hash
the node's (`verify --against-node`, repaired and drained again if it is not), no job left
running, stale heartbeats and completions rejected, batches refused by the link check, orphans
repaired, jobs run more than once, and blocks lost. Exit code 0 only when all checks hold.

    scripts/chaos [--seconds 60] [--workers 8] [--busy-blocks 60] [--blocks 5000]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from indexer import verify
from indexer.testing.anvil import Anvil, build_chain
from indexer.testing.cluster import OwnPostgres
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.processes import signal_quietly, workers

INDEXER = str(Path(sys.executable).with_name("indexer"))
LEASE = 2.0
BATCH = 5
CHUNK = 10
REORG_DEPTH = 40
LATE = 20  # the top blocks planned last, so that they are indexed after the reorg, from its fork
FIRST = 100  # the top blocks (but the LATE) planned first, so that the reorg finds them stored


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60, help="how long faults are injected")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--busy-blocks", type=int, default=60, help="blocks with transactions and logs")
    ap.add_argument("--blocks", type=int, default=5000, help="chain height (the rest are empty blocks)")
    ap.add_argument("--restarts", type=int, default=2, help="PostgreSQL restarts during the run")
    ap.add_argument("--fault-rate", type=float, default=0.1, help="share of node answers that are faulty")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rnd = random.Random(args.seed)

    pg = OwnPostgres()
    # The pool's output, and by TMPDIR its own temporary files (which a pool killed with SIGKILL
    # could not remove), in a directory removed at the end.
    tmp = tempfile.TemporaryDirectory(prefix="chaos-work-")
    log = Path(tmp.name) / "work.log"
    try:
        # Not --prune-history, which mines empty blocks faster: anvil_reorg needs the history.
        with Anvil("--no-mining", "--hardfork", "cancun") as node:
            build_chain(node, busy_blocks=args.busy_blocks, empty_every=0)
            node.mine(max(0, args.blocks - 1 - node.head()))
            head = node.head()
            env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
            env |= {
                "TMPDIR": tmp.name,
                "INDEXER_DATABASE_URL": pg.url, "INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0",
                "INDEXER_LEASE_SECONDS": str(LEASE), "INDEXER_REAP_SECONDS": "0.5", "INDEXER_POLL_SECONDS": "1",
                "INDEXER_BACKOFF_BASE_SECONDS": "0.05", "INDEXER_MAX_ATTEMPTS": "50", "INDEXER_METRICS_PORT": "0",
                "INDEXER_RPC_TIMEOUT": "2", "INDEXER_RPC_MAX_ATTEMPTS": "20", "INDEXER_BATCH_SIZE": str(BATCH),
                "INDEXER_RPC_IN_FLIGHT": "1",
            }
            late = head + 1 - LATE
            for cmd in (["migrate"], ["plan", "--from", str(max(0, late - FIRST)), "--to", str(late), "--chunk", str(CHUNK)],
                        ["plan", "--from", "0", "--to", str(head + 1), "--chunk", str(CHUNK)]):
                subprocess.run([INDEXER, *cmd], env=env, check=True, capture_output=True)
            reorg = Reorg(env, node, head)
            # Slow the node down so that the backfill outlasts the storm (two requests a batch).
            delay = 1.3 * args.seconds * args.workers / (2 * (head + 1) / BATCH)
            with FaultProxy(node.url, rate=args.fault_rate, hold_seconds=2.5, retry_after="0.3", delay=delay,
                            seed=args.seed) as proxy:
                env["INDEXER_RPC_URL"] = proxy.url
                with log.open("w") as out:
                    pool = subprocess.Popen([INDEXER, "work", "--workers", str(args.workers), "--drain"],
                                            env=env, stdout=out, stderr=subprocess.STDOUT)
                events = {"killed": 0, "stalled": 0, "postgres restarts": 0, "reorgs": 0}
                restart_at = sorted(rnd.uniform(0.2, 0.8) * args.seconds for _ in range(args.restarts))
                started = time.monotonic()
                while (elapsed := time.monotonic() - started) < args.seconds and pool.poll() is None:
                    if not events["reorgs"] and (reorg.due() or elapsed >= 0.5 * args.seconds):
                        node.reorg(REORG_DEPTH)
                        events["reorgs"] += 1
                    reorg.repair_once_refused(log)
                    if restart_at and elapsed >= restart_at[0]:
                        restart_at.pop(0)
                        pg.pg_ctl("-m", "fast", "restart")
                        events["postgres restarts"] += 1
                    pool_workers = workers(pool.pid)
                    action = rnd.random()
                    # At least one kill and one stall in any run, however short or unlucky.
                    if not events["killed"] and elapsed > 0.3 * args.seconds:
                        action = 0.0
                    elif not events["stalled"] and elapsed > 0.5 * args.seconds:
                        action = 0.2
                    if pool_workers and action < 0.15:
                        events["killed"] += signal_quietly(rnd.choice(pool_workers), signal.SIGKILL)
                    elif pool_workers and action < 0.25:
                        victim = rnd.choice(pool_workers)
                        if signal_quietly(victim, signal.SIGSTOP):
                            events["stalled"] += 1
                            time.sleep(LEASE * 1.5)  # past its lease: the reaper takes the job back
                            signal_quietly(victim, signal.SIGCONT)
                    time.sleep(0.5)
                proxy.rate = 0.0  # the storm is over: let the backfill finish
                deadline = time.monotonic() + 600
                while pool.poll() is None and time.monotonic() < deadline:
                    reorg.repair_once_refused(log)
                    time.sleep(0.5)
                if pool.poll() is None:
                    pool.kill()
                    pool.wait()
                    code: object = "timeout"
                else:
                    code = pool.returncode
                served = dict(proxy.served)
            output = log.read_text()
            # Orphans written after the repair (a batch fetched from the old fork before the reorg
            # and written after it) are found now: repaired, and drained again.
            drained_again = None
            if reorg.against_node(repair=True):
                with log.open("a") as out:
                    drained_again = subprocess.run([INDEXER, "work", "--workers", str(args.workers), "--drain"],
                                                   env=env | {"INDEXER_RPC_URL": node.url}, stdout=out,
                                                   stderr=subprocess.STDOUT, timeout=600).returncode
                output = log.read_text()
            return report(pg.url, node, head, code, events, served, output, reorg, drained_again)
    finally:
        pg.stop()
        tmp.cleanup()


class Reorg:
    """When to reorganise the chain, and `indexer verify --against-node` run as an operator would."""

    def __init__(self, env: dict[str, str], node: Anvil, head: int) -> None:
        self.env, self.node, self.head = env, node, head
        self.orphans_repaired = 0
        self.repairs = 0
        self.clean = False  # the last `verify --against-node` found all well

    def due(self) -> bool:
        """Whether the blocks the reorg will orphan, planned first, are stored."""
        try:
            with psycopg.connect(self.env["INDEXER_DATABASE_URL"], connect_timeout=2) as conn:
                stored = conn.execute("SELECT count(*) FROM blocks WHERE number > %s AND number <= %s",
                                      (self.head - REORG_DEPTH, self.head - LATE)).fetchone()[0]
        except psycopg.OperationalError:  # PostgreSQL restarting: look again later
            return False
        return stored == REORG_DEPTH - LATE

    def repair_once_refused(self, log: Path) -> None:
        """Repairs the orphans once a worker has deferred a job because it did not link."""
        if not self.repairs and "does not link" in log.read_text():
            self.against_node(repair=True)

    def against_node(self, *, repair: bool) -> int:
        """The orphaned blocks `indexer verify --against-node` finds (and with `repair` removes),
        asked again while PostgreSQL restarts."""
        command = [INDEXER, "verify", "--from", "0", "--to", str(self.head + 1), "--against-node",
                   "--rpc-url", self.node.url, *(["--repair"] if repair else [])]
        for _ in range(30):
            result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=300)
            if result.stdout:  # an error is one line on stderr and nothing here
                break
            time.sleep(1)
        else:
            raise RuntimeError(f"indexer verify --against-node failed: {result.stderr.strip()}")
        self.clean = result.returncode == 0
        found = re.match(r"([\d,]+) orphaned blocks", result.stdout)
        orphans = int(found[1].replace(",", "")) if found else 0
        if repair and orphans:
            self.orphans_repaired += orphans
            self.repairs += 1
        return orphans


def report(url: str, node: Anvil, head: int, code: object, events: dict, served: dict, output: str,
           reorg: Reorg, drained_again: int | None) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        blocks = conn.execute("SELECT count(*), count(DISTINCT number) FROM blocks").fetchone()
        check = verify.check(conn, 0, head + 1)
        stored = dict(conn.execute("SELECT number, transaction_count * 1000000 + log_count FROM blocks").fetchall())
        left = dict(conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1").fetchall())
        archived = conn.execute("SELECT count(*), count(*) FILTER (WHERE attempts > 1) FROM jobs_history").fetchone()
        expired = conn.execute("SELECT count(*) FROM lease_expirations").fetchone()[0]
    mismatched = 0
    for first in range(0, head + 1, 100):
        numbers = list(range(first, min(first + 100, head + 1)))
        for n in numbers:
            block = node.rpc("eth_getBlockByNumber", hex(n), False)
            receipts = node.rpc("eth_getBlockReceipts", block["hash"]) or []
            expected = len(block["transactions"]) * 1000000 + sum(len(r["logs"]) for r in receipts)
            mismatched += stored.get(n) != expected
    stale = output.count("lost claim on job")
    refused = output.count("does not link")
    lost = check.missing
    reorg.against_node(repair=False)
    checks = {
        "indexer work --drain exited 0" + (" (and again after the last repair)" if drained_again is not None else ""):
            code == 0 and drained_again in (None, 0),
        "a worker killed and a worker stalled": events["killed"] > 0 and events["stalled"] > 0,
        f"every block 0..{head} present once ({blocks[0]} rows)": blocks[0] == blocks[1] == head + 1,
        "parent-hash chain continuous": not check.broken_links,
        "transaction and log counts equal the node's": mismatched == 0 and not check.wrong_counts,
        "no job left running or pending": not left,
        "a reorg below stored blocks: batches refused by the link check, orphans repaired":
            refused > 0 and reorg.orphans_repaired > 0,
        "every stored hash the node's (indexer verify --against-node)": reorg.clean,
        "blocks lost: 0": lost == 0,
    }
    print(f"faults injected: {events}; node answers: {served}")
    print(f"leases taken back by the reaper: {expired}; stale heartbeats/completions rejected: {stale}; "
          f"jobs run more than once: {archived[1]} of {archived[0]}; blocks lost: {lost}")
    print(f"reorg of the top {REORG_DEPTH} blocks: batches refused by the link check (job deferred): {refused}; "
          f"orphaned blocks deleted and planned again: {reorg.orphans_repaired} in {reorg.repairs} repair(s)"
          f"{'; drained again after the last repair' if drained_again is not None else ''}")
    for what, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not all(checks.values()):
        print(output[-4000:])
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
