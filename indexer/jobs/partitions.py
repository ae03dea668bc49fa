"""The partitions of the chain tables, and the query indexes built on each once its blocks are in.

`blocks`, `transactions`, `logs`, `withdrawals`, `token_transfers` and `traces` are partitioned by
block number (schema/011_partitioned_chain_tables.sql, 015_traces.sql). `indexer plan` makes the partitions of its range
(`ensure`) in the transaction that makes its jobs, so every row a worker writes has a partition.

The query indexes (transactions by hash, by sender and by recipient, logs by contract and event,
token transfers by token and by address, blocks by hash: `chain_query_indexes` in the schema) are
built on each partition when INDEXER_QUERY_INDEXES says:
- `after` (the default): once no job is left that writes the partition (`index_blocks` or
  `decode_logs`, pending, running or failed), the reaper (`enqueue_index_jobs`, every pool, every
  INDEXER_REAP_SECONDS; a draining worker too, before it exits) enqueues an `index_partition` job
  for it, which a worker runs (`run`): each index built with CREATE INDEX CONCURRENTLY, so the
  partition stays readable and writable (a repair may write into it), then the partition marked
  indexed. One sort of a finished table costs less than keeping eight indexes, most of them of
  random keys (hashes, addresses), up to date row by row while it fills (BENCHMARKS.md measures
  both).
- `during`: the indexes are made with each partition, empty, and kept up to date as rows arrive,
  so that a partition is queryable by hash or address while it fills.
A query reads a partition without its indexes by scanning it; `indexer status` says which
partitions are indexed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

from ..base import db, metrics
from ..base.block_range import INDEX_PARTITION, BlockRange
from ..base.settings import DEFAULT_PARTITION_BLOCKS
from ..base.states import Outcome
from ..jobqueue import queue
from ..jobqueue.claims import Ended, LostClaim, Stopping, Unrunnable
from ..jobqueue.queue import Claim

if TYPE_CHECKING:
    from .job_context import JobContext

log = logging.getLogger(__name__)

# The most grid cells one plan may make partitions for: each is five tables and their indexes,
# and a query plans over every partition of a table. 1,000 cells of the default 1,000,000 blocks
# cover fifty times Ethereum's history.
MAX_PARTITIONS = 1_000

ENSURE = "SELECT chain_ensure_partitions(%(first)s, %(last)s, %(size)s, %(index_now)s)"

# A partition is ready for its index job when nothing is left to write into it: no job that
# writes blocks or decoded events overlaps it, whatever its status (a failed job's blocks are
# missing, so the partition is not done), nor a live one that writes traces (failed traces, from a
# node that serves no tracer, must not keep the partition's blocks from their indexes). One statement marks the partitions and enqueues their
# jobs, so two reapers at once enqueue each job once (the second finds index_job_at set). Claims
# go by run_at: dated just before the plan that made the partition, an index job is claimed
# before the ranges planned with it, so a backfill indexes its partitions as they fill, not after
# its last range.
ENQUEUE_INDEX_JOBS = f"""
WITH live AS (  -- one pass over the jobs, however many partitions wait
    SELECT coalesce(range_agg(int8range(job_block_number(payload->'from'), job_block_number(payload->'to'), '[]')),
                    '{{}}'::int8multirange) AS blocks
    FROM jobs WHERE kind IN ('index_blocks', 'decode_logs') OR (kind = 'index_traces' AND status <> 'failed')
), ready AS (
    UPDATE chain_partitions p SET index_job_at = now()
    FROM live
    WHERE p.indexed_at IS NULL AND p.index_job_at IS NULL
      AND NOT live.blocks && int8range(p.first_block, p.last_block, '[]')
    RETURNING p.first_block, p.last_block, p.created_at
)
INSERT INTO jobs (kind, payload, run_at)
SELECT '{INDEX_PARTITION}', jsonb_build_object('from', first_block, 'to', last_block),
       created_at - interval '1 microsecond'
FROM ready ORDER BY first_block
RETURNING (payload->>'from')::bigint
"""

QUERY_INDEXES = """
SELECT index_name, create_sql, drop_sql, valid FROM chain_query_indexes(%(first)s, true)
"""

MARK_INDEXED = "UPDATE chain_partitions SET indexed_at = now() WHERE first_block = %(first)s"

PARTITIONS = """
SELECT first_block, last_block, created_at, index_job_at, indexed_at FROM chain_partitions ORDER BY first_block
"""


# A partition's state, as `indexer status` shows it: jobs still write into it (filling), its
# index job is queued or running (indexing), or its query indexes are built (indexed).
FILLING, INDEXING, INDEXED = "filling", "indexing", "indexed"
STATES = (INDEXED, INDEXING, FILLING)


@dataclass(frozen=True)
class Partition:
    first: int
    last: int
    created_at: datetime
    index_job_at: datetime | None
    indexed_at: datetime | None

    @property
    def state(self) -> str:
        return INDEXED if self.indexed_at else INDEXING if self.index_job_at else FILLING


def cells(first: int, last: int, size: int) -> int:
    """The grid cells of `size` blocks that blocks first..last meet."""
    return last // size - first // size + 1


def ensure(conn: psycopg.Connection, first: int, last: int, *, size: int = DEFAULT_PARTITION_BLOCKS,
           index_now: bool = False) -> int:
    """Makes the partitions blocks first..last still lack, on the grid of `size` blocks, with their
    query indexes at once if `index_now`; returns how many. In the caller's transaction, which
    must serialise with other callers (the planner's lock)."""
    return conn.execute(ENSURE, {"first": first, "last": last, "size": size, "index_now": index_now}).fetchone()[0]


def enqueue_index_jobs(conn: psycopg.Connection) -> list[int]:
    """Enqueues the index job of every partition that nothing is left to write into; returns
    their first blocks. Notifies the idle workers when there are any."""
    with conn.transaction():
        firsts = [row[0] for row in conn.execute(ENQUEUE_INDEX_JOBS)]
        if firsts:
            queue.notify(conn)
    return firsts


def partitions(conn: psycopg.Connection) -> list[Partition]:
    return [Partition(*row) for row in conn.execute(PARTITIONS)]


def run(ctx: JobContext, job: Claim) -> Ended:
    """Builds the query indexes of one partition, CONCURRENTLY, each on a session of its own while
    this one heartbeats; drops first what an interrupted build left (an invalid index). Then marks
    the partition indexed and completes the job."""
    blocks = BlockRange.from_payload(job.payload)
    if blocks is None:
        raise Unrunnable(f"malformed job: kind {job.kind!r}, payload {job.payload!r}")
    conn = ctx.conn
    built = 0
    for name, create, drop, valid in conn.execute(QUERY_INDEXES, {"first": blocks.first}).fetchall():
        if valid:
            continue
        with metrics.counted.index_build_seconds.time():
            if valid is False:
                _heartbeating(ctx, job, drop)
            _heartbeating(ctx, job, create)
        log.info("built index %s", name)
        built += 1
    conn.execute(MARK_INDEXED, {"first": blocks.first})
    metrics.counted.partitions_indexed.inc()
    return ctx.complete_and_claim(
        job, Ended(Outcome.DONE, f"built {built} index(es) of the partition of blocks {blocks.first}..{blocks.last}"))


def _heartbeating(ctx: JobContext, job: Claim, statement: str) -> None:
    """Runs `statement` on a session of its own (a worker's sessions time statements out, and an
    index of a full partition takes minutes) while the worker's session extends the lease; a
    lost claim or a stop request cancels it. A cancelled CONCURRENTLY build leaves an invalid
    index, which the next run drops."""
    errors: list[BaseException] = []
    with db.connect(ctx.cfg.chain_url, application_name=f"indexer index builder {ctx.name}") as ddl:
        def build() -> None:
            try:
                ddl.execute(statement)
            except BaseException as exc:  # handed to the heartbeating thread
                errors.append(exc)

        thread = threading.Thread(target=build, name="index-build", daemon=True)
        thread.start()
        beat = max(1.0, ctx.cfg.lease_seconds / 4)
        while True:
            thread.join(beat)
            if not thread.is_alive():
                break
            if ctx.stop.is_set() or not queue.heartbeat(ctx.conn, job, lease_seconds=ctx.cfg.lease_seconds):
                ddl.cancel_safe()
                thread.join()
                raise Stopping() if ctx.stop.is_set() else LostClaim()
    if errors:
        raise errors[0]
