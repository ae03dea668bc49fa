"""`indexer plan`: block ranges -> `index_blocks` jobs (with --traces, `index_traces` jobs).

Jobs are cut on the grid of multiples of `chunk` (as `block_range.cut` cuts them), so
overlapping plans produce the same boundaries. A plan adds jobs only for the part of its range
that no job covers yet, in `jobs` (any status) or in `jobs_history`: re-running a plan adds
nothing, and widening it adds only the new blocks.

The jobs are made by the database, in one statement, so a plan's memory does not grow with its
size; one plan makes at most `MAX_JOBS` of them. The partitions of the chain tables that the range
lacks are made first, in the same transaction (`partitions.ensure`), so that no worker writes a
block without a partition to hold it.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from ..base import chains
from ..base.block_range import INDEX_TRACES, JOB_KIND, MAX_END
from ..base.errors import IndexerError
from ..base.settings import DEFAULT_PARTITION_BLOCKS, MAX_CHUNK
from ..jobqueue import queue
from . import partitions

# The most jobs one plan makes: a million rows insert in seconds and leave the queue's claim
# index small. A backfill bigger than that is planned in parts, or with a bigger --chunk.
MAX_JOBS = 1_000_000

# Serialises the planners of one chain (its schema): two overlapping plans at once must not both
# see a range as uncovered.
PLAN_LOCK = f"SELECT pg_advisory_xact_lock(hashtext({chains.own('skiplock-indexer:plan')}))"

# Adds a job for each cell of the chunk grid that meets a part of [start, end) no job covers
# yet, unless that would be more than max_jobs jobs (then it adds none); returns the jobs and
# blocks that are (or would have been) added. The jobs' ids follow their block order. Cell ends
# are computed as least(g, hi - chunk) + chunk, never g + chunk, which could pass the bigint
# maximum at the top of the range.
_PLAN = """
WITH covered AS (
    -- The block ranges of `block_ranges`, read here from the tables: the finished ones only from
    -- the plan's start up (jobs_history_last_block_idx), so that a plan at the head of a followed
    -- chain reads a few recent rows, not every month of history. Each live payload is read once
    -- (OFFSET 0), as in the view. A malformed job covers nothing.
    SELECT int8range(b.first, b.last, '[]') AS r
    FROM jobs, LATERAL (SELECT job_block_number(payload->'from') AS first, job_block_number(payload->'to') AS last
                        OFFSET 0) b
    WHERE jobs.kind = '{kind}' AND b.first <= b.last
    UNION ALL
    SELECT int8range(job_block_number(payload->'from'), job_block_number(payload->'to'), '[]')
    FROM jobs_history
    WHERE kind = '{kind}' AND job_block_number(payload->'to') >= %(start)s::bigint
      AND job_block_number(payload->'from') <= job_block_number(payload->'to')
),
gaps AS MATERIALIZED (
    SELECT lower(u) AS lo, upper(u) AS hi
    FROM unnest(
        int8multirange(int8range(%(start)s::bigint, %(end)s::bigint))
        - coalesce((SELECT range_agg(r) FROM covered WHERE r && int8range(%(start)s::bigint, %(end)s::bigint)),
                   '{{}}'::int8multirange)
    ) AS u
),
totals AS MATERIALIZED (
    SELECT coalesce(sum((hi - 1) / %(chunk)s::bigint - lo / %(chunk)s::bigint + 1), 0) AS jobs,
           coalesce(sum(hi - lo), 0) AS blocks
    FROM gaps
),
added AS (
    INSERT INTO jobs (kind, payload)
    SELECT '{kind}',
           jsonb_build_object('from', greatest(g, lo), 'to', least(g, hi - %(chunk)s::bigint) + %(chunk)s::bigint - 1)
    FROM gaps, generate_series(lo / %(chunk)s::bigint * %(chunk)s::bigint, hi - 1, %(chunk)s::bigint) AS g
    -- No column of the join: a one-time filter, so an oversized plan generates no cell at all.
    WHERE (SELECT jobs FROM totals) <= %(max_jobs)s
    ORDER BY g
)
SELECT jobs, blocks FROM totals
"""
PLAN_JOBS = _PLAN.format(kind=JOB_KIND)
# `indexer plan --traces`: the same for the traces of blocks (indexed already, or to be).
PLAN_TRACES = _PLAN.format(kind=INDEX_TRACES)


class PlanTooLarge(IndexerError):
    exit_code = 2  # bad input: the range or the chunk


@dataclass(frozen=True)
class PlanResult:
    jobs_added: int
    blocks_added: int
    blocks_already_planned: int


def plan(conn: psycopg.Connection, start: int, end: int, chunk: int, *, partition_blocks: int = DEFAULT_PARTITION_BLOCKS,
         index_now: bool = False, max_jobs: int = MAX_JOBS, traces: bool = False) -> PlanResult:
    """Plans [start, end) in one transaction with at most one NOTIFY, after making the partitions
    it lacks, on the grid of `partition_blocks` (with their query indexes if `index_now`).
    PlanTooLarge, and nothing written, if that would make more than `max_jobs` jobs or meet more
    than `partitions.MAX_PARTITIONS` grid cells. With `traces`, the jobs are `index_traces` jobs,
    for the part of the range no such job covers yet."""
    if not 0 <= start < end <= MAX_END:
        raise ValueError(f"need 0 <= start < end <= {MAX_END}, got [{start}, {end})")
    if not 0 < chunk <= MAX_CHUNK:
        raise ValueError(f"chunk must be between 1 and {MAX_CHUNK}, got {chunk}")
    params = {"start": start, "end": end, "chunk": chunk, "max_jobs": max_jobs}
    with conn.transaction():
        conn.execute(PLAN_LOCK)
        jobs, blocks = (int(n) for n in conn.execute(PLAN_TRACES if traces else PLAN_JOBS, params).fetchone())
        if jobs > max_jobs:
            raise PlanTooLarge(
                f"blocks {start:,}..{end - 1:,} in chunks of {chunk:,} would make {jobs:,} new jobs; one plan"
                f" makes at most {max_jobs:,}: plan the range in parts (--from/--to), or raise --chunk"
                f" (up to {MAX_CHUNK:,})")
        if (cells := partitions.cells(start, end - 1, partition_blocks)) > partitions.MAX_PARTITIONS:
            raise PlanTooLarge(
                f"blocks {start:,}..{end - 1:,} meet {cells:,} partitions of {partition_blocks:,} blocks; one plan"
                f" makes at most {partitions.MAX_PARTITIONS:,}: plan the range in parts (--from/--to), or raise"
                " INDEXER_PARTITION_BLOCKS")
        # In the same transaction as the jobs: no worker sees a job before its partitions exist.
        partitions.ensure(conn, start, end - 1, size=partition_blocks, index_now=index_now)
        if jobs:
            queue.notify(conn)
    return PlanResult(jobs, blocks, (end - start) - blocks)
