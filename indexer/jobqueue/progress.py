"""Progress of the backfill: blocks indexed of planned, the speed, the ETA, and the height up to
which every planned block is indexed. One definition, read by `indexer status` and by the
metrics (`indexer_blocks_remaining`, `indexer_indexed_through_block`).

Counted from the jobs alone (the `block_ranges` view over `jobs` and `jobs_history`), never
from the chain tables, which may hold millions of rows: an archived job counts whole, a live
one up to its resume cursor. What remains is what the workers have left to do, the blocks of
pending and running jobs: a failed job's blocks are neither indexed nor remaining until
`indexer retry --failed` puts them back, so a backfill that failed a job still ends, and its
ETA says when the rest is done.

Some of what remains may wait for the chain: a worker that reached the safe head put its job
back to pending for later (`queue.defer`, with INDEXER_DEFER_SECONDS), its cursor at the first
block past it. No speed brings those blocks nearer, so they have no ETA: they wait for a block.
Such a job is told from a job backing off after an error by its columns alone: deferred with
a delay, its `run_at` is after its `updated_at`, and, never having failed, it has no attempt
spent (a deferral gives back the attempt its claim took). A job that failed once and was
deferred later counts as backing off.

The speed is measured over the last SPEED_WINDOW_SECONDS, or since the work was planned if that
is more recent, up to now while the workers have blocks they can index; once they have none
(all indexed, failed, or waiting for the chain), up to the moment the last one was indexed, so
that a finished backfill shows the speed it ran at rather than one that falls as time passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from ..base.block_range import JOB_KIND
from .queue import DONE_SQL, PENDING_SQL, RUNNING_SQL

# A live job put back by a worker at the safe head, to wait for the chain (above).
_WAITS_FOR_THE_CHAIN = f"status = {PENDING_SQL} AND attempts = 0 AND run_at > updated_at"

# Planned blocks, blocks indexed, blocks the workers have left, the lowest block of an
# unfinished job not yet indexed, and the highest block of a finished one.
PROGRESS = f"""
SELECT
    coalesce(sum(last_block - first_block + 1), 0),
    coalesce(sum(CASE WHEN finished_at IS NOT NULL THEN last_block - first_block + 1
                      ELSE coalesce(cursor, first_block) - first_block END), 0),
    coalesce(sum(last_block - coalesce(cursor, first_block) + 1)
             FILTER (WHERE status IN ({PENDING_SQL}, {RUNNING_SQL})), 0),
    min(coalesce(cursor, first_block)) FILTER (WHERE finished_at IS NULL),
    coalesce(max(last_block) FILTER (WHERE finished_at IS NOT NULL), -1)
FROM block_ranges
"""

# The first block the jobs waiting for the chain wait for, and their blocks.
WAITING_FOR_THE_CHAIN = f"""
SELECT min(greatest(cursor, b.first)), coalesce(sum(b.last - greatest(cursor, b.first) + 1), 0)
FROM jobs,
     LATERAL (SELECT job_block_number(payload->'from') AS first, job_block_number(payload->'to') AS last) b
WHERE kind = %(kind)s AND {_WAITS_FOR_THE_CHAIN}
"""

# The speed: when its window ends (now, or when the last block was indexed if the workers have
# none left that they can index), whether that is now, the blocks of the jobs finished within
# the window, and its length: `window` seconds, or less when the work was planned more recently
# (the oldest live job's or job finished within the window's creation), at least a second.
SPEED = f"""
WITH live AS (
    SELECT count(*) FILTER (WHERE NOT ({_WAITS_FOR_THE_CHAIN})) AS runnable, min(created_at) AS created
    FROM jobs WHERE kind = %(kind)s AND status IN ({PENDING_SQL}, {RUNNING_SQL})
), span AS (
    SELECT CASE WHEN runnable > 0 THEN now()
                ELSE coalesce((SELECT max(finished_at) FROM jobs_history WHERE kind = %(kind)s AND status = {DONE_SQL}),
                              now()) END AS ended,
           created
    FROM live
), finished AS (
    SELECT coalesce(sum(job_block_number(payload->'to') - job_block_number(payload->'from') + 1), 0) AS blocks,
           min(created_at) AS created
    FROM span, jobs_history
    WHERE kind = %(kind)s AND status = {DONE_SQL}
      AND finished_at > span.ended - make_interval(secs => %(window)s) AND finished_at <= span.ended
)
SELECT span.ended, span.ended < now(), finished.blocks,
       least(%(window)s::float8,
             greatest(1.0, extract(epoch FROM span.ended - least(span.created, finished.created))::float8))
FROM span, finished
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
    waiting_for_block: int | None = None  # the first block jobs wait for the chain to reach
    waiting_blocks: int = 0  # of those jobs: part of remaining_blocks
    ended_at: datetime | None = None  # when the last block was indexed, if the workers have none left they can index

    @property
    def percent_done(self) -> float | None:
        return 100.0 * self.indexed_blocks / self.planned_blocks if self.planned_blocks else None

    @property
    def eta_seconds(self) -> float | None:
        """When the blocks the workers can index now will be: None when nothing is planned, when
        all that remains waits for the chain, or when nothing finished lately to measure a speed by."""
        if not self.planned_blocks:
            return None
        if not self.remaining_blocks:
            return 0.0
        runnable = self.remaining_blocks - self.waiting_blocks
        if not runnable:
            return None
        return runnable / self.blocks_per_second if self.blocks_per_second else None


def measure(conn: psycopg.Connection, *, window_seconds: float = SPEED_WINDOW_SECONDS) -> Progress:
    params = {"window": window_seconds, "kind": JOB_KIND}
    planned, indexed, remaining, lowest_unfinished, highest_finished = conn.execute(PROGRESS).fetchone()
    waiting_for, waiting = conn.execute(WAITING_FOR_THE_CHAIN, params).fetchone()
    ended, before_now, recent, window = conn.execute(SPEED, params).fetchone()
    through = lowest_unfinished - 1 if lowest_unfinished is not None else highest_finished
    return Progress(int(planned), int(indexed), int(remaining), int(through), float(recent) / window, window,
                    waiting_for, int(waiting), ended if before_now else None)
