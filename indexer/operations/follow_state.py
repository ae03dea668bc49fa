"""Where following the head stands, kept in `follow_state` and `reorgs`: the planner's state (`state`),
the halt and what ends it, the reorgs met (`record_reorg`, `last_reorg`), and the blocks indexed
and decoded with no gap (`progress`). What `indexer status`, the metrics and the repair read and
write; the head planner that moves it is `follow.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from ..base import metrics


STATE = """
SELECT planned_through, head, head_timestamp, head_seen_at, safe_head, planner, polled_at, halted_at, halted_reason,
       halted_command
FROM follow_state
"""

# What a fleet that starts following has planned already: once, when no pool followed before.

# The blocks indexed, and decoded, with no gap below them: up to the lowest block a live
# `index_blocks` job (pending, running or failed) has still to write, else all that is planned;
# decoding, up to the lowest block of a live `decode_logs` job. `run_at IS NOT NULL` keeps the
# view to live jobs (its archived branch has no run_at), as `queue_counts.BEYOND_THE_HEAD` does.
THROUGH = """
SELECT (SELECT min(greatest(coalesce(cursor, first_block), first_block)) FROM block_ranges
        WHERE run_at IS NOT NULL AND first_block IS NOT NULL),
       (SELECT min(job_block_number(payload->'from')) FROM jobs WHERE kind = 'decode_logs')
"""

BLOCK_TIME = "SELECT timestamp FROM blocks WHERE number = %(number)s"

HALT = """
UPDATE follow_state SET halted_at = now(), halted_reason = %(reason)s, halted_command = %(command)s
WHERE halted_at IS NULL
"""
RESUME = "UPDATE follow_state SET halted_at = NULL, halted_reason = NULL, halted_command = NULL WHERE halted_at IS NOT NULL"

RECORD_REORG = """
INSERT INTO reorgs (anchor, first_block, last_block, depth, rolled_back, reason)
VALUES (%(anchor)s, %(first)s, %(last)s, %(depth)s, %(rolled_back)s, %(reason)s)
"""
LAST_REORG = """
SELECT detected_at, anchor, first_block, last_block, depth, rolled_back, reason FROM reorgs ORDER BY id DESC LIMIT 1
"""


@dataclass(frozen=True)
class Head:
    number: int
    timestamp: datetime | None


@dataclass(frozen=True)
class Reorg:
    detected_at: datetime
    anchor: int | None
    first: int | None
    last: int | None
    depth: int | None
    rolled_back: bool
    reason: str | None


@dataclass(frozen=True)
class State:
    """Where the following stands (one row, written by the planner holding the lock)."""

    planned_through: int
    head: int | None
    head_timestamp: datetime | None
    head_seen_at: datetime | None  # when the node last answered the planner's poll
    safe_head: int | None
    planner: str | None
    polled_at: datetime | None
    halted_at: datetime | None
    halted_reason: str | None
    halted_command: str | None


def state(conn: psycopg.Connection) -> State | None:
    """None where no pool has followed (or the schema predates following)."""
    if conn.execute("SELECT to_regclass('follow_state') IS NULL").fetchone()[0]:
        return None
    row = conn.execute(STATE).fetchone()
    return State(*row) if row else None


def last_reorg(conn: psycopg.Connection) -> Reorg | None:
    if conn.execute("SELECT to_regclass('reorgs') IS NULL").fetchone()[0]:
        return None
    row = conn.execute(LAST_REORG).fetchone()
    return Reorg(*row) if row else None


def record_reorg(conn: psycopg.Connection, *, anchor: int | None, first: int | None, last: int | None,
                 depth: int | None, rolled_back: bool, reason: str | None = None) -> None:
    """Records a reorg met; a rollback also ends a halt (in the caller's transaction, the one
    that deletes the orphans): the fork that halted the following may be this very one."""
    conn.execute(RECORD_REORG, {"anchor": anchor, "first": first, "last": last, "depth": depth,
                                "rolled_back": rolled_back, "reason": reason})
    if rolled_back:
        conn.execute(RESUME)
        if depth is not None:
            metrics.counted.reorg_depth.observe(depth)


def halt(conn: psycopg.Connection, reason: str, command: str) -> bool:
    """Stops the following until a repair: returns False if it was halted already."""
    return conn.execute(HALT, {"reason": reason, "command": command}).rowcount > 0


@dataclass(frozen=True)
class Through:
    indexed: int  # every block up to this one is indexed
    decoded: int  # ... and decoded
    halted: bool

    def lag_seconds(self, conn: psycopg.Connection, head: Head) -> float | None:
        """From the time of the newest block indexed without a gap to the time of the node's
        newest block."""
        row = conn.execute(BLOCK_TIME, {"number": self.indexed}).fetchone()
        if row is None or head.timestamp is None:
            return None
        return max(0.0, (head.timestamp - row[0]).total_seconds())


def progress(conn: psycopg.Connection) -> Through:
    """The blocks indexed and decoded without a gap, as the following measures them."""
    current = state(conn)
    planned = -1 if current is None else current.planned_through
    lowest_unindexed, lowest_undecoded = conn.execute(THROUGH).fetchone()
    indexed = planned if lowest_unindexed is None else lowest_unindexed - 1
    decoded = indexed if lowest_undecoded is None else min(indexed, lowest_undecoded - 1)
    return Through(indexed, decoded, current is not None and current.halted_at is not None)
