"""Following the chain's head: `indexer work --follow`, the backfill its first phase.

- One head planner for the fleet. Every pool that follows runs a `HeadPlanner` thread; only the
  one holding PLANNER_LOCK (a session-level advisory lock, on the planner's own connection)
  plans. A pool that dies closes its connection, which frees the lock, and another pool takes
  it at its next poll; a host that vanishes is found out by TCP keepalives within seconds. A
  holder that stalls (SIGSTOP, a paused VM) keeps its session, so a pool that finds the holder's
  `follow_state.polled_at` older than a lease ends that session (`pg_terminate_backend`), which
  frees the lock.
- Each poll (INDEXER_HEAD_POLL_SECONDS, and at once when the node announces a new head over
  INDEXER_WS_URL: `heads.py`) asks the node for its latest block and its safe head (the node's
  finalized or safe block, or the head minus INDEXER_CONFIRMATIONS), and plans the blocks above
  `follow_state.planned_through` up to the safe head (`planner.plan`, whose NOTIFY wakes the idle
  workers), moving `planned_through` up in the same transaction. Jobs are cut on the chunk grid:
  far behind the head whole chunks (catching up runs at backfill speed), at the head the few
  blocks that came since the last poll. A finished range enqueues its decoding as it always does,
  so decoded events follow too.
- Reorgs at the head are met by the workers (the link check, `forks.check_links`) and rolled
  back by them (`rollback.py`). One that cannot be rolled back (deeper than
  INDEXER_MAX_REORG_DEPTH, or a node that fails the checks) halts the following: the planner
  plans nothing more, `status` and the `indexer_follow_halted` metric say so and what to run,
  until a repair (`indexer verify --against-node --repair`) clears `follow_state.halted_at`.

Every poll also records where the fleet stands, for `indexer status` and the metrics: the node's
head and its time, the blocks indexed and decoded without a gap, the lag in blocks and seconds.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any

import psycopg

from ..base import chains, db, metrics
from ..base.errors import IndexerError, first_line, redact
from ..base.settings import Settings
from ..chaindata import chain
from ..jobs import planner
from ..node import heads
from ..node.rpc import RpcClient
from ..node.rpc_errors import RpcError
from .follow_state import Head, progress, state

log = logging.getLogger(__name__)

# pg_try_advisory_lock(int, int): "skip", then "head" for the default chain (as before chains
# existed, so that pools upgraded and not yet upgraded share one planner) or a hash of another
# chain's name, so that each chain has its own planner. Two keys, so that pg_locks shows them as
# classid and objid, which the statement that ends a silent holder's session matches; the hash is
# kept positive, as objid shows it.
PLANNER_LOCK_KEYS = {"k1": 0x736B6970}
CHAIN_KEY = (f"(CASE WHEN current_schema() = '{chains.DEFAULT_CHAIN}' THEN {0x68656164}"
             " ELSE hashtext('skiplock-indexer:head:' || current_schema()) & 2147483647 END)")
TRY_PLANNER_LOCK = f"SELECT pg_try_advisory_lock(%(k1)s, {CHAIN_KEY})"

# A pool that finds the holder silent for `silent` seconds ends its session: the lock goes with it.
# Advisory locks are per database, and another database on the server may be indexed too, with
# the same keys: only this database's holder is looked at.
END_SILENT_HOLDER = f"""
SELECT pg_terminate_backend(l.pid)
FROM pg_locks l JOIN follow_state f ON f.planner_pid = l.pid
WHERE l.locktype = 'advisory' AND l.classid = %(k1)s AND l.objid = {CHAIN_KEY}::oid AND l.objsubid = 2
  AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND f.polled_at < now() - make_interval(secs => %(silent)s)
"""

# The session holding this database's planner lock: its pid, its application name ("indexer head
# planner NAME:PID") and the pool it polled for last (None until its first poll). For the chaos
# run and the tests, which watch the lock change hands.
PLANNER_SESSION = f"""
SELECT l.pid, a.application_name, f.planner
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid LEFT JOIN follow_state f ON f.planner_pid = l.pid
WHERE l.locktype = 'advisory' AND l.classid = %(k1)s AND l.objid = {CHAIN_KEY}::oid AND l.objsubid = 2
  AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

HIGHEST_PLANNED = "SELECT max(last_block) FROM block_ranges"

START = "INSERT INTO follow_state (planned_through) VALUES (%(through)s) ON CONFLICT (singleton) DO NOTHING"

# `--from` above what was planned: the planner goes on from there (never back below it).
SKIP_TO = "UPDATE follow_state SET planned_through = %(through)s WHERE planned_through < %(through)s"

# In the transaction that plans the blocks up to `through`.
ADVANCE = "UPDATE follow_state SET planned_through = %(through)s WHERE planned_through < %(through)s"

# Each poll, whatever the node answered: the holder is alive.
POLLED = """
UPDATE follow_state
SET planner = %(planner)s, planner_pid = pg_backend_pid(), polled_at = now(),
    head = coalesce(%(head)s, head), head_timestamp = coalesce(%(head_timestamp)s, head_timestamp),
    head_seen_at = CASE WHEN %(head)s::bigint IS NULL THEN head_seen_at ELSE now() END,
    safe_head = coalesce(%(safe_head)s, safe_head)
"""

def prepare(conn: psycopg.Connection, start: int | None) -> int:
    """Before a pool follows: the block the following plans from (the first not planned). Where
    no pool followed before, it starts above what is planned, or at `start` (`--from`); a
    `start` above where it stands moves it up. IndexerError when nothing is planned and no
    `start` is given."""
    current = state(conn)
    if current is None:
        highest = conn.execute(HIGHEST_PLANNED).fetchone()[0]
        if highest is None and start is None:
            raise IndexerError("nothing is planned yet, so there is no block to follow from: give `--from BLOCK`"
                               " (or plan a backfill first with `indexer plan`)")
        through = max(-1 if highest is None else highest, -1 if start is None else start - 1)
        conn.execute(START, {"through": through})
    elif start is not None:
        conn.execute(SKIP_TO, {"through": start - 1})
    return state(conn).planned_through + 1  # type: ignore[union-attr]


def node_head(client: RpcClient) -> Head:
    """The node's latest block: its number and time, in one call."""
    return client.call("eth_getBlockByNumber", "latest", False, parse=_head)


def _head(block: Any) -> Head:
    if not isinstance(block, dict):
        raise ValueError(f"the latest block is {str(block)[:40]!r}, not a block")
    return Head(chain.quantity(block.get("number")), _time(block.get("timestamp")))


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromtimestamp(chain.quantity(value), timezone.utc)
    except (ValueError, TypeError, OverflowError, OSError):
        return None


# Polls at most this often, however often the node announces a head: a fast chain's wakes merge.
MIN_POLL_GAP = 0.1


class Following:
    """The threads of a following pool: its head planner, and, with INDEXER_WS_URL, the node's
    newHeads subscription (`heads.py`) that wakes it at each new head. They end when `stop` is
    set and `join` is called."""

    def __init__(self, cfg: Settings, name: str, stop: threading.Event) -> None:
        client = RpcClient.from_settings(cfg, rate_limit=cfg.rpc_rate_limit, patience=cfg.lease_seconds / 2)
        self.planner = HeadPlanner(cfg, name, client)
        self.stop = stop
        self._planning = threading.Thread(target=self.planner.run, args=(stop,), name="head planner", daemon=True)
        self._planning.start()
        self._listening: threading.Thread | None = None
        if cfg.ws_url:
            subscription = heads.HeadSubscription(cfg.ws_url, self.planner.wake)
            self._listening = threading.Thread(target=subscription.run, args=(stop,), name="head subscription",
                                               daemon=True)
            self._listening.start()

    def join(self) -> None:
        """Once `stop` is set: the planner is woken from its wait, a poll in progress (statements
        and node calls of bounded time) ends; a subscription being opened holds nothing of the
        fleet and ends with the process."""
        self.planner.wake.set()
        self._planning.join(10.0)
        if self._listening is not None:
            self._listening.join(heads.STOP_SECONDS)


class HeadPlanner:
    """The planner thread of one following pool (see the module's docstring)."""

    def __init__(self, cfg: Settings, name: str, client: RpcClient, *, wake: threading.Event | None = None) -> None:
        self.cfg = cfg
        self.name = name
        self.client = client
        self.wake = wake or threading.Event()  # set by a newHeads subscription: poll now
        self.holding = False
        self._conn: psycopg.Connection | None = None

    def run(self, stop: threading.Event) -> None:
        metrics.counted.following.set(1)
        failures = 0
        while not stop.is_set():
            try:
                self._once()
                failures = 0
                delay = self.cfg.head_poll_seconds
            except psycopg.OperationalError as exc:
                failures += 1
                delay = min(30.0, 0.5 * 2 ** min(failures, 6))
                log.warning("head planner: database unavailable (%s); again in %.1f s", redact(first_line(exc)), delay)
                self._drop()
            except psycopg.Error as exc:
                delay = self.cfg.head_poll_seconds * 10
                log.warning("head planner: %s", redact(first_line(exc)))
                self._drop()
            polled = time.monotonic()
            self.wake.wait(delay)
            self.wake.clear()
            stop.wait(max(0.0, MIN_POLL_GAP - (time.monotonic() - polled)))
        self._drop()
        metrics.counted.following.set(0)

    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            # Keepalives both ways: a holder whose host vanished loses its session (and the lock)
            # within seconds, not after the kernel's two hours.
            self._conn = psycopg.connect(
                self.cfg.chain_url, autocommit=True, application_name=f"indexer head planner {self.name}",
                connect_timeout=10, keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=3,
                options=db.options_with(self.cfg.chain_url, "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2"
                                        f" -c tcp_keepalives_count=3 -c statement_timeout={db.WORKER_STATEMENT_TIMEOUT_MS}"))
            self.holding = False
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass
        self._conn = None
        if self.holding:
            log.info("head planner: no longer the fleet's planner")
        self.holding = False
        # What this pool measured as the holder is the new holder's to say now.
        counted = metrics.counted
        for gauge in (counted.planner_holding, counted.follow_head, counted.follow_indexed_through,
                      counted.follow_decoded_through, counted.follow_lag_blocks, counted.follow_lag_seconds,
                      counted.follow_halted):
            gauge.set(0)

    def _once(self) -> None:
        conn = self._connect()
        if not self.holding:
            conn.execute(END_SILENT_HOLDER, PLANNER_LOCK_KEYS | {"silent": self.cfg.lease_seconds})
            self.holding = bool(conn.execute(TRY_PLANNER_LOCK, PLANNER_LOCK_KEYS).fetchone()[0])
            metrics.counted.planner_holding.set(1 if self.holding else 0)
            if not self.holding:
                return
            log.info("head planner: this pool plans the new blocks of the fleet")
        self.poll(conn)

    def poll(self, conn: psycopg.Connection) -> None:
        """One poll of the lock's holder: the node's head, the plan up to the safe head, and
        where the fleet stands."""
        head: Head | None = None
        safe: int | None = None
        try:
            head = node_head(self.client)
            safe = self._safe_head(head)
        except RpcError as exc:  # the node may answer again; the holder stays alive meanwhile
            log.warning("head planner: cannot ask the node for its head (%s)", redact(first_line(exc)))
        current = state(conn)
        if current is None:  # a database migrated but never prepared by this version: nothing to plan from
            raise IndexerError("follow_state is empty: restart `indexer work --follow`")
        if safe is not None and current.halted_at is None and safe > current.planned_through:
            with conn.transaction():
                planner.plan(conn, current.planned_through + 1, safe + 1, self.cfg.chunk,
                             partition_blocks=self.cfg.partition_blocks, index_now=self.cfg.query_indexes == "during")
                conn.execute(ADVANCE, {"through": safe})
            log.debug("head planner: planned blocks %d..%d", current.planned_through + 1, safe)
        conn.execute(POLLED, {"planner": self.name, "head": None if head is None else head.number,
                              "head_timestamp": None if head is None else head.timestamp, "safe_head": safe})
        self._measure(conn, head)

    def _safe_head(self, head: Head) -> int:
        if self.cfg.safe_tag is None:
            return head.number - self.cfg.confirmations
        return chain.safe_head(self.client, confirmations=self.cfg.confirmations, tag=self.cfg.safe_tag)

    def _measure(self, conn: psycopg.Connection, head: Head | None) -> None:
        through = progress(conn)
        counted = metrics.counted
        counted.follow_halted.set(1 if through.halted else 0)
        counted.follow_indexed_through.set(through.indexed)
        counted.follow_decoded_through.set(through.decoded)
        if head is None:
            return
        counted.follow_head.set(head.number)
        counted.follow_lag_blocks.set(max(0, head.number - through.indexed))
        lag = through.lag_seconds(conn, head)
        if lag is not None:
            counted.follow_lag_seconds.set(lag)
