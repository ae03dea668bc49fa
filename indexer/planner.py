"""`indexer plan`: block ranges -> `index_blocks` jobs.

Jobs are cut on the grid of multiples of `chunk` (`block_range.cut`), so overlapping plans
produce the same boundaries. A plan adds jobs only for the part of its range that no job covers
yet, in `jobs` (any status) or in `jobs_history`: re-running a plan adds nothing, and widening
it adds only the new blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from . import queue
from .block_range import JOB_KIND, cut

# Serialises planners: two overlapping plans at once must not both see a range as uncovered.
PLAN_LOCK = "SELECT pg_advisory_xact_lock(hashtext('skiplock-indexer:plan'))"

# The parts of [start, end) not yet covered by any index_blocks job, as half-open ranges.
UNCOVERED_RANGES = """
WITH covered AS (
    SELECT int8range(first_block, last_block, '[]') AS r
    FROM block_ranges
    WHERE first_block IS NOT NULL  -- a malformed job covers nothing
)
SELECT lower(u), upper(u)
FROM unnest(
    int8multirange(int8range(%(start)s, %(end)s))
    - coalesce((SELECT range_agg(r) FROM covered WHERE r && int8range(%(start)s, %(end)s)),
               '{}'::int8multirange)
) AS u
ORDER BY 1
"""


@dataclass(frozen=True)
class PlanResult:
    jobs_added: int
    blocks_added: int
    blocks_already_planned: int


def plan(conn: psycopg.Connection, start: int, end: int, chunk: int) -> PlanResult:
    """Plans [start, end) in one transaction with at most one NOTIFY."""
    if not 0 <= start < end:
        raise ValueError(f"need 0 <= start < end, got [{start}, {end})")
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    with conn.transaction():
        conn.execute(PLAN_LOCK)
        gaps = conn.execute(UNCOVERED_RANGES, {"start": start, "end": end}).fetchall()
        ranges = [r for lo, hi in gaps for r in cut(lo, hi, chunk)]
        queue.enqueue(conn, JOB_KIND, [r.payload() for r in ranges])
    blocks_added = sum(hi - lo for lo, hi in gaps)
    return PlanResult(len(ranges), blocks_added, (end - start) - blocks_added)
