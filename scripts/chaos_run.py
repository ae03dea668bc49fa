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
repaired, jobs run more than once, and blocks lost.

Then the follow phase (--follow-seconds, 0 to skip it): two pools of `indexer work --follow`
(half the workers each) through a new fault-injecting proxy, so that both compete for the head
planner's lock, while the run mines a block every 0.3 to 0.5 s (some with ERC-20 Transfer logs
of a token that only emits) and every 1 to 3 s reorganises the top 1 to 20 blocks (`anvil_reorg`,
then a block on the new fork), with no command run: the workers meet the forks and roll them
back. The pool holding the planner's lock (pg_locks, and follow_state.planner) is killed whole
with SIGKILL twice and stalled with SIGSTOP once until another pool ends its session and takes
the lock; a killed pool is started again a second later, as a supervisor would. Random workers
are killed, or stalled past their lease. Once the mining stops, the copy must reach the node's
head, and the run checks and prints: every block 0..head present once with the node's hash
(compared, and `verify --against-node`), the parent-hash chain continuous, transaction and log
counts (stored and as rows) the node's, every field of the blocks followed the node's, decoding
through the head with exactly the canonical chain's token transfers, the following not halted,
the reorgs met recorded as rolled back and none refused, and how long each handover of the
planner's lock took. Exit code 0 only when all checks of both phases hold.

    scripts/chaos [--seconds 60] [--workers 8] [--busy-blocks 60] [--blocks 5000] [--follow-seconds 12]
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

from indexer.operations import follow, follow_state, verify
from indexer.testing.anvil import Anvil, build_chain
from indexer.testing.cluster import OwnPostgres
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.node_compare import assert_matches_node
from indexer.testing.processes import descendants, kill_all, signal_quietly, workers

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
    ap.add_argument("--follow-seconds", type=float, default=12,
                    help="how long the follow phase grows and reorganises the chain (0: no follow phase)")
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
            result = report(pg.url, node, head, code, events, served, output, reorg, drained_again)
            if args.follow_seconds > 0:
                result = max(result, follow_phase(args, rnd, pg.url, node, env, Path(tmp.name)))
            return result
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


# -- the follow phase ------------------------------------------------------------------------------

# A token that only emits: its runtime copies the calldata (from, to, amount: three words) to
# memory and emits LOG3(data = amount, Transfer, from, to), an ERC-20 Transfer log the decoder
# turns into a `token_transfers` row.
TRANSFER_TOPIC = "ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
TOKEN_RUNTIME = "366000600037" + "602035" + "600035" + "7f" + TRANSFER_TOPIC + "60206040a300"
TOKEN_INIT = f"0x60{len(TOKEN_RUNTIME) // 2:02x}600c60003960{len(TOKEN_RUNTIME) // 2:02x}6000f3" + TOKEN_RUNTIME
MAX_FOLLOW_REORG = 20
HANDOVER_WAIT = 20  # the longest a handover of the planner's lock is waited for



def planner_holder(conn: psycopg.Connection) -> tuple[int, str | None] | None:
    """The session holding the head planner's lock, and the pool it plans for
    (follow_state.planner, "NAME:PID", written by the holder at each poll with its session's pid)."""
    row = conn.execute(follow.PLANNER_SESSION, follow.PLANNER_LOCK_KEYS).fetchone()
    return None if row is None else (row[0], row[2])


class Pools:
    """The following pools, slot by slot: `indexer work --follow` named chaos-a, chaos-b, ...,
    started again in the same slot (as a supervisor would) after being killed."""

    def __init__(self, env: dict[str, str], directory: Path, count: int, workers: int) -> None:
        self.env, self.directory, self.workers = env, directory, workers
        self.procs: dict[str, subprocess.Popen] = {}
        self.starts = 0
        for slot in "ab"[:count]:
            self.start(slot)

    def start(self, slot: str) -> None:
        with (self.directory / f"follow-{slot}.log").open("a") as out:
            self.procs[slot] = subprocess.Popen(
                [INDEXER, "work", "--follow", "--workers", str(self.workers)],
                env=self.env | {"INDEXER_WORKER_NAME": f"chaos-{slot}"}, stdout=out, stderr=subprocess.STDOUT)
        self.starts += 1

    def slot_of(self, planner: str | None) -> str | None:
        """The slot of the pool named by follow_state.planner ("chaos-a:PID"), if it runs."""
        if not planner or ":" not in planner:
            return None
        name, pid = planner.rsplit(":", 1)
        slot = name.removeprefix("chaos-")
        proc = self.procs.get(slot)
        return slot if proc is not None and str(proc.pid) == pid and proc.poll() is None else None

    def kill(self, slot: str) -> None:
        """SIGKILL to the pool and every process it started, as when its machine dies."""
        proc = self.procs[slot]
        kill_all([*descendants(proc.pid), proc.pid])
        proc.wait()

    def workers_of(self) -> list[int]:
        return [w for p in self.procs.values() if p.poll() is None for w in workers(p.pid)]

    def stop(self) -> dict[str, object]:
        """SIGTERM, as an operator stops a pool; SIGKILL to what is left after 20 s. Their exit codes."""
        for proc in self.procs.values():
            signal_quietly(proc.pid, signal.SIGCONT)
            signal_quietly(proc.pid, signal.SIGTERM)
        codes: dict[str, object] = {}
        for slot, proc in self.procs.items():
            try:
                codes[slot] = proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill(slot)
                codes[slot] = "killed after 20 s"
        return codes

    def output(self) -> str:
        return "".join((self.directory / f"follow-{slot}.log").read_text() for slot in sorted(self.procs))


def follow_phase(args: argparse.Namespace, rnd: random.Random, url: str, node: Anvil, env: dict[str, str],
                 directory: Path) -> int:
    """Two pools follow the head through a faulty proxy while the chain grows and reorganises, the
    planner's pool is killed and stalled, workers are killed and stalled; then the copy must be
    the node's, decoded, with every reorg rolled back and the following not halted."""
    phase_started = time.monotonic()
    print(f"\nfollow phase: {args.follow_seconds:g} s, two pools of {max(1, args.workers // 2)} worker(s)"
          " following the head", flush=True)
    accounts = node.rpc("eth_accounts")
    tokens: list[str] = []

    def token() -> str:
        """The token, created again when the chain no longer holds it: anvil_reorg on a chain of a
        thousand blocks restores an older state than the fork point's, without the contract."""
        if not tokens or node.rpc("eth_getCode", tokens[-1], "latest") in ("0x", "0x0"):
            node.rpc("eth_sendTransaction", {"from": accounts[0], "data": TOKEN_INIT, "gas": hex(200_000)})
            node.rpc("evm_mine")
            tokens.append(node.rpc("eth_getBlockReceipts", "latest")[0]["contractAddress"].lower())
        return tokens[-1]

    token()
    first_followed = node.head()
    with psycopg.connect(url, autocommit=True) as conn:
        reorgs_before = conn.execute("SELECT coalesce(max(id), 0) FROM reorgs").fetchone()[0]

    def mine(transfers: int) -> None:
        for _ in range(transfers):
            sender, to = rnd.sample(accounts, 2)
            data = "0x" + "".join(f"{int(a, 16):064x}" for a in (sender, to)) + f"{rnd.randrange(1, 10**20):064x}"
            node.rpc("eth_sendTransaction", {"from": sender, "to": token(), "data": data, "gas": hex(60_000)})
        node.rpc("evm_mine")

    events = {"blocks mined": 0, "reorgs": 0, "reorgs below stored blocks": 0, "planner pool killed": 0, "planner pool stalled": 0,
              "workers killed": 0, "workers stalled": 0}
    depths: list[int] = []
    handovers: list[tuple[str, float, str | None, str | None]] = []  # (how, seconds, from, to)
    seconds = args.follow_seconds
    # What happens to the planner's pool, and when: kill, stall, kill, ... (one every 4 s or so, at least three).
    count = max(3, int(seconds / 4))
    plan = [("stall" if i % 2 else "kill", (0.2 + 0.65 * i / (count - 1)) * seconds) for i in range(count)]
    with FaultProxy(node.url, rate=args.fault_rate, hold_seconds=2.5, retry_after="0.3", delay=0.01,
                    seed=args.seed + 1) as proxy, psycopg.connect(url, autocommit=True) as conn:
        follow_env = env | {"INDEXER_RPC_URL": proxy.url, "INDEXER_DEFER_SECONDS": "0.5",
                            "INDEXER_HEAD_POLL_SECONDS": "0.5"}
        pools = Pools(follow_env, directory, 2, max(1, args.workers // 2))
        resume: list[tuple[float, int]] = []  # (when, pid) of the processes stopped with SIGSTOP
        watching: dict | None = None  # a handover being timed: the holder's session taken from it
        restart: list[tuple[float, str]] = []  # (when, slot) of the pools killed
        started = time.monotonic()
        next_block, next_reorg = started, started + rnd.uniform(1.0, 2.5)
        while (now := time.monotonic()) - started < seconds:
            if now >= next_block:
                mine(rnd.choice([0, 1, 2]))
                events["blocks mined"] += 1
                next_block = now + rnd.uniform(0.3, 0.5)
            if now >= next_reorg:
                depth = rnd.randint(1, MAX_FOLLOW_REORG)
                tip = node.head()
                events["reorgs below stored blocks"] += conn.execute(
                    "SELECT count(*) > 0 FROM blocks WHERE number > %s", (tip - depth,)).fetchone()[0]
                node.reorg(depth)
                mine(1)  # the next block links to the new fork: a worker meets the fork there
                events["reorgs"] += 1
                depths.append(depth)
                next_reorg = now + rnd.uniform(1.0, 3.0)
            if watching is not None:
                watching = handed_over(conn, watching, handovers)
            holder = planner_holder(conn)
            if watching is None and plan and now - started >= plan[0][1] and holder is not None:
                slot = pools.slot_of(holder[1])
                if slot is not None:
                    how = plan.pop(0)[0]
                    watching = {"how": how, "at": time.monotonic(), "session": holder[0], "from": holder[1]}
                    if how == "kill":
                        pools.kill(slot)
                        events["planner pool killed"] += 1
                        restart.append((now + 1.0, slot))
                    else:  # resumed once another pool has ended its session and taken the lock
                        watching["stalled"] = pools.procs[slot].pid
                        signal_quietly(watching["stalled"], signal.SIGSTOP)
                        events["planner pool stalled"] += 1
            for when, slot in [r for r in restart if r[0] <= now]:
                restart.remove((when, slot))
                pools.start(slot)
            for when, pid in [r for r in resume if r[0] <= now]:
                resume.remove((when, pid))
                signal_quietly(pid, signal.SIGCONT)
            action = rnd.random()
            if not events["workers killed"] and now - started > 0.3 * seconds:
                action = 0.0
            elif not events["workers stalled"] and now - started > 0.5 * seconds:
                action = 0.03
            victims = pools.workers_of()
            if victims and action < 0.02:
                events["workers killed"] += signal_quietly(rnd.choice(victims), signal.SIGKILL)
            elif victims and action < 0.035:
                victim = rnd.choice(victims)
                if signal_quietly(victim, signal.SIGSTOP):
                    events["workers stalled"] += 1
                    resume.append((now + 1.5 * LEASE, victim))
            time.sleep(0.1)
        for _, pid in resume:
            signal_quietly(pid, signal.SIGCONT)
        mine(1)  # the last reorg has a block above it too
        proxy.rate = 0.0  # the storm is over: let the copy catch up
        mined_until = time.monotonic()
        head = node.head()
        while watching is not None:
            watching = handed_over(conn, watching, handovers)
            time.sleep(0.1)
        caught_up = wait_for_the_copy(conn, node, head, timeout=120)
        caught_up_in = time.monotonic() - mined_until
        codes = pools.stop()
        served = dict(proxy.served)
        checking = time.monotonic()
        result = follow_report(conn, node, env, head, first_followed, reorgs_before, tokens, events, depths,
                               handovers, caught_up, caught_up_in, codes, served, pools.output(), pools.starts)
    print(f"follow phase: {time.monotonic() - phase_started:.0f} s in all, of which the checks"
          f" {time.monotonic() - checking:.0f} s")
    return result


def handed_over(conn: psycopg.Connection, watching: dict, handovers: list) -> dict | None:
    """Whether another session holds the planner's lock now (then recorded, and a stalled pool
    resumed); None when no longer watching (also after HANDOVER_WAIT seconds, then not recorded)."""
    holder = planner_holder(conn)
    took = time.monotonic() - watching["at"]
    if holder is not None and holder[0] != watching["session"] and holder[1]:
        handovers.append((watching["how"], took, watching["from"], holder[1]))
        print(f"  planner lock handed over after the {watching['how']} of {watching['from']}: to {holder[1]}"
              f" in {took:.2f} s", flush=True)
    elif took < HANDOVER_WAIT:
        return watching
    else:
        print(f"  planner lock NOT handed over {took:.0f} s after the {watching['how']} of {watching['from']}")
    if "stalled" in watching:
        signal_quietly(watching["stalled"], signal.SIGCONT)
    return None


def node_hashes(node: Anvil, head: int) -> list[str]:
    hashes: list[str] = []
    for first in range(0, head + 1, 500):
        calls = [("eth_getBlockByNumber", [hex(n), False]) for n in range(first, min(first + 500, head + 1))]
        hashes += [b["hash"] for b in node.batch(calls)]
    return hashes


def stored_hashes(conn: psycopg.Connection) -> dict[int, str]:
    return dict(conn.execute("SELECT number, '0x' || encode(hash, 'hex') FROM blocks").fetchall())


def wait_for_the_copy(conn: psycopg.Connection, node: Anvil, head: int, *, timeout: float) -> bool:
    """Until every block up to `head` is indexed and decoded with the node's hash."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        through = follow_state.progress(conn)
        if through.indexed >= head and through.decoded >= head:
            stored = stored_hashes(conn)
            if len(stored) == head + 1 and all(stored.get(n) == h for n, h in enumerate(node_hashes(node, head))):
                return True
        time.sleep(0.5)
    return False


def follow_report(conn: psycopg.Connection, node: Anvil, env: dict[str, str], head: int, first_followed: int,
                  reorgs_before: int, tokens: list[str], events: dict, depths: list[int],
                  handovers: list[tuple[str, float, str | None, str | None]], caught_up: bool, caught_up_in: float,
                  codes: dict, served: dict, output: str, starts: int) -> int:
    blocks = conn.execute("SELECT count(*), count(DISTINCT number), min(number), max(number) FROM blocks").fetchone()
    stored = stored_hashes(conn)
    canonical = node_hashes(node, head)
    wrong = [n for n, h in enumerate(canonical) if stored.get(n) != h]
    check = verify.check(conn, 0, head + 1)
    against = subprocess.run([INDEXER, "verify", "--from", "0", "--to", str(head + 1), "--against-node",
                              "--rpc-url", node.url], env=env, capture_output=True, text=True, timeout=300)
    # Transactions and logs: the counts of every block, as stored in the block and as rows.
    counted = {n: (t, lg) for n, t, lg in conn.execute("SELECT number, transaction_count, log_count FROM blocks")}
    tx_rows = dict(conn.execute("SELECT block_number, count(*) FROM transactions GROUP BY 1").fetchall())
    log_rows = dict(conn.execute("SELECT block_number, count(*) FROM logs GROUP BY 1").fetchall())
    mismatched = 0
    for first in range(0, head + 1, 200):
        numbers = range(first, min(first + 200, head + 1))
        got = node.batch([("eth_getBlockByNumber", [hex(n), False]) for n in numbers])
        receipts = node.batch([("eth_getBlockReceipts", [hex(n)]) for n in numbers])
        for n, block, rs in zip(numbers, got, receipts):
            expected = (len(block["transactions"]), sum(len(r["logs"]) for r in rs or []))
            mismatched += not (counted.get(n) == expected == (tx_rows.get(n, 0), log_rows.get(n, 0)))
    mismatched += sum(n > head for n in (*tx_rows, *log_rows))
    try:  # every field of the blocks followed (and of those a reorg may have reached below them)
        assert_matches_node(conn, node.url, max(0, first_followed - MAX_FOLLOW_REORG), head)
        fields_equal = True
    except AssertionError:
        fields_equal = False
    # The decoded token transfers: those of the canonical chain's Transfer logs, no orphan's.
    logs = node.rpc("eth_getLogs", {"fromBlock": "0x0", "toBlock": hex(head), "topics": ["0x" + TRANSFER_TOPIC]})
    expected_transfers = {(int(lg["blockNumber"], 16), int(lg["logIndex"], 16)) for lg in logs
                          if lg["address"].lower() in tokens}
    decoded = set(conn.execute("SELECT block_number, log_index FROM token_transfers").fetchall())
    through = follow_state.progress(conn)
    state = follow_state.state(conn)
    recorded = conn.execute("SELECT depth, rolled_back, reason FROM reorgs WHERE id > %s ORDER BY id",
                            (reorgs_before,)).fetchall()
    failed = conn.execute("SELECT count(*) FROM jobs WHERE status = 'failed'").fetchone()[0]
    rolled_back = [d for d, ok, _ in recorded if ok]
    kills = [h for h in handovers if h[0] == "kill"]
    checks = {
        f"the copy caught up with the node's head {head} ({caught_up_in:.1f} s after the mining stopped)": caught_up,
        f"every block 0..{head} present once ({blocks[0]} rows)":
            blocks[0] == blocks[1] == head + 1 and (blocks[2], blocks[3]) == (0, head),
        "every stored hash the node's (compared, and `indexer verify --against-node`)":
            not wrong and against.returncode == 0,
        "parent-hash chain continuous": not check.broken_links and not check.missing,
        "transaction and log counts equal the node's, as rows too": mismatched == 0 and not check.wrong_counts,
        f"every field of blocks {max(0, first_followed - MAX_FOLLOW_REORG)}..{head} the node's": fields_equal,
        f"decoded through the head, token transfers the canonical chain's ({len(decoded)})":
            through.decoded >= head and decoded == expected_transfers and bool(decoded),
        "the following not halted": state is not None and state.halted_at is None,
        f"reorgs recorded as rolled back ({len(rolled_back)}; {events['reorgs']} injected,"
        f" {events['reorgs below stored blocks']} of them below stored blocks), none refused":
            bool(rolled_back) and all(ok for _, ok, _ in recorded),
        "the planner's pool killed (and stalled), and the lock handed over each time":
            events["planner pool killed"] > 0 and len(kills) == events["planner pool killed"]
            and len(handovers) == events["planner pool killed"] + events["planner pool stalled"],
        "a worker killed and a worker stalled": events["workers killed"] > 0 and events["workers stalled"] > 0,
        "no job failed": failed == 0,
    }
    print(f"faults injected: {events}; pools started: {starts}; node answers: {served}")
    print(f"reorgs injected, depths: {depths}; recorded: {[(d, ok) for d, ok, _ in recorded]}")
    print(f"token transfers: {len(expected_transfers)} on the node, {len(decoded)} decoded; indexed through"
          f" {through.indexed}, decoded through {through.decoded}")
    print("planner lock handed over after each kill or stall of its pool in: "
          + ", ".join(f"{took:.2f} s ({how})" for how, took, _, _ in handovers))
    print(f"rollbacks in the pools' logs: {output.count('reorg rolled back')}; refused: "
          f"{output.count('NOT rolled back')}; put off (the node's answers changed, or it could not be asked): "
          f"{output.count('cannot roll back now')}; batches refused by the link check: {output.count('does not link')};"
          f" pools stopped with SIGTERM: {codes}")
    if wrong:
        print(f"blocks whose stored hash is not the node's: {wrong[:20]}")
    if against.returncode:
        print(against.stdout.strip()[-2000:], against.stderr.strip()[-1000:])
    for what, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not all(checks.values()):
        print(output[-6000:])
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
