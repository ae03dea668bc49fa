"""Progress of the backfill: blocks indexed of planned, the speed, the ETA, and the height up to
which every planned block is indexed. One definition, read by `indexer status` and by the
metrics (`indexer_blocks_remaining`, `indexer_indexed_through_block`).

Counted from the jobs alone (the `block_ranges` view over `jobs` and `jobs_history`), never
from the chain tables, which may hold millions of rows: an archived job counts whole, a live
one up to its resume cursor. What remains is what the workers have left to do, the blocks of
pending and running jobs: a failed job's blocks are neither indexed nor remaining until
`indexer retry --failed` puts them back, so a backfill that failed a job still ends, and its
ETA says when the rest is done.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from .states import JobStatus

# Planned blocks, blocks indexed, blocks the workers have left, blocks of jobs finished within
# the window, the lowest block of an unfinished job not yet indexed, and the highest block of a
# finished one.
PROGRESS = f"""
SELECT
    coalesce(sum(last_block - first_block + 1), 0),
    coalesce(sum(CASE WHEN finished_at IS NOT NULL THEN last_block - first_block + 1
                      ELSE coalesce(cursor, first_block) - first_block END), 0),
    coalesce(sum(last_block - coalesce(cursor, first_block) + 1)
             FILTER (WHERE status IN ('{JobStatus.PENDING}', '{JobStatus.RUNNING}')), 0),
    coalesce(sum(last_block - first_block + 1)
             FILTER (WHERE finished_at > now() - make_interval(secs => %(window)s)), 0),
    min(coalesce(cursor, first_block)) FILTER (WHERE finished_at IS NULL),
    coalesce(max(last_block) FILTER (WHERE finished_at IS NOT NULL), -1)
FROM block_ranges
"""

# The speed window: the last `window` seconds, or less when the work began more recently (the
# oldest live job, or the oldest job finished within the window, was planned then).
SPEED_WINDOW = """
SELECT least(%(window)s::float8, greatest(1.0, extract(epoch FROM now() - least(
    (SELECT min(created_at) FROM jobs),
    (SELECT min(created_at) FROM jobs_history WHERE finished_at > now() - make_interval(secs => %(window)s))
)))::float8)
"""

SPEED_WINDOW_SECONDS = 300.0


@dataclass(frozen=True)
class Progress:
    planned_blocks: int
    indexed_blocks: int
    remaining_blocks: int  # of pending and running jobs
    indexed_through: int  # every planned block up to this one is indexed (-1: none yet)
    blocks_per_second: float  # of the jobs finished within the speed window
    speed_window_seconds: float

    @property
    def percent_done(self) -> float | None:
        return 100.0 * self.indexed_blocks / self.planned_blocks if self.planned_blocks else None

    @property
    def eta_seconds(self) -> float | None:
        """None: nothing planned, or nothing finished lately to measure a speed by."""
        if not self.planned_blocks:
            return None
        if not self.remaining_blocks:
            return 0.0
        return self.remaining_blocks / self.blocks_per_second if self.blocks_per_second else None


def measure(conn: psycopg.Connection, *, window_seconds: float = SPEED_WINDOW_SECONDS) -> Progress:
    params = {"window": window_seconds}
    planned, indexed, remaining, recent, lowest_unfinished, highest_finished = conn.execute(PROGRESS, params).fetchone()
    window = conn.execute(SPEED_WINDOW, params).fetchone()[0]
    through = lowest_unfinished - 1 if lowest_unfinished is not None else highest_finished
    return Progress(int(planned), int(indexed), int(remaining), int(through), float(recent) / window, window)
