"""Runs one `index_blocks` claim: its blocks, batch by batch, then its completion.

1. The range runs from the job's resume cursor (batches an earlier claim committed are not
   redone) to its last block, or to the safe head if the job reaches past it.
2. Its batches are fetched ahead of the writer (`prefetch.py`); once the last of them is asked
   for, the worker claims its next job and that job's first batches fill the room left.
3. Each batch is one short transaction: `forks.check_links` (the batch must link to the stored
   blocks on either side of it, or the job is deferred: it would write a second fork), then
   `store.write`, then `queue.heartbeat` (extends the lease, records the resume cursor, checks
   the token). A heartbeat that finds no row means the reaper took the job back: the
   transaction, batch and all, is rolled back, and the claim ends as lost. The heartbeat also
   reads the job's end: an idle worker may have split the job (`queue.split`), and the run then
   stops at the new end (a batch already past it is rolled back and written again, cut).
4. At the end the job is archived, again only if the token still holds: by `queue.complete`
   when the next job was claimed ahead, else by `queue.complete_and_claim`, which claims the
   next one in the same statement. A range reaching past the safe head is indexed as far as is
   safe, then deferred with no attempt spent.
Errors are raised to the worker, which gives the job back (`operations/worker.py`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import tenacity

from ..base import metrics
from ..base.block_range import BlockRange
from ..base.errors import ChainDataError
from ..base.states import Outcome
from ..chaindata import chain, forks, store
from ..chaindata.chain import Rows
from ..chaindata.prefetch import Batches
from ..jobqueue import queue
from ..jobqueue.claims import LOST, Ended, LostClaim, Stopping, Unrunnable
from ..jobqueue.queue import Claim
from ..node.rpc import RpcClient
from ..node.rpc_errors import RpcError

if TYPE_CHECKING:
    from .job_context import JobContext

log = logging.getLogger(__name__)


def fetch(client: RpcClient, first: int, last: int, max_transactions: int | None = None, *, verify_roots: bool,
          chain_id: int | None) -> Rows:
    """Blocks `first..last` as rows (in a fetch thread), asked again when the answers disagree
    (a root that does not match is such a disagreement); with `max_transactions`, they may end
    early (`chain.fetch`)."""
    for attempt in tenacity.Retrying(
        stop=tenacity.stop_after_attempt(chain.CHAIN_DATA_ATTEMPTS),
        wait=tenacity.wait_random_exponential(multiplier=0.2, max=5),
        retry=tenacity.retry_if_exception_type(ChainDataError),
        reraise=True,
    ):
        with attempt, metrics.counted.fetch_seconds.time():
            return chain.fetch(client, first, last, verify_roots=verify_roots, chain_id=chain_id,
                               max_transactions=max_transactions)
    raise AssertionError("unreachable")


def _range(job: Claim) -> BlockRange:
    blocks = BlockRange.of(job.kind, job.payload)
    if blocks is None:
        raise Unrunnable(f"malformed job: kind {job.kind!r}, payload {job.payload!r}")
    return blocks


def _resume_at(job: Claim, blocks: BlockRange) -> int:
    """The first block still to index: batches an earlier claim committed are not redone."""
    return max(blocks.first, job.cursor or blocks.first)


def ask_ahead(ctx: JobContext, job: Claim) -> Batches:
    """What to fetch of a job claimed ahead: its blocks from its cursor up to the safe head."""
    blocks = BlockRange.of(job.kind, job.payload)
    if blocks is None:  # running it fails it
        return Batches(job, 0, -1)
    first = _resume_at(job, blocks)
    try:
        last = min(blocks.last, ctx.safe_head.at_least(blocks.last))
    except RpcError:  # not this job's failure: nothing is asked ahead, and running it asks again
        last = first - 1
    return Batches(job, first, last)


class _Split(Exception):
    """The heartbeat found the job's end moved below the batch being written (another worker
    split the job since the batch was asked for): the batch is rolled back and cut."""

    def __init__(self, end: int) -> None:
        self.end = end


def _write(ctx: JobContext, job: Claim, rows: Rows) -> int | None:
    """Writes one batch and heartbeats, in one transaction; returns the job's end as the
    heartbeat found it."""
    # The heartbeat goes last: it locks the job's row, and a worker stalled while holding
    # that lock would hide the job from the reaper's SKIP LOCKED.
    with metrics.counted.write_seconds.time(), ctx.conn.transaction():
        try:
            forks.check_links(ctx.conn, rows)
        except forks.ForkMismatch:
            metrics.counted.fork_mismatches.inc()
            raise
        for table in store.write(ctx.conn, rows):
            metrics.counted.text_copies.labels(table).inc()
        lease = queue.heartbeat(ctx.conn, job, lease_seconds=ctx.cfg.lease_seconds, cursor=rows.last + 1)
        if lease is None:
            raise LostClaim()
        if lease.end is not None and lease.end < rows.last:
            raise _Split(lease.end)
    return lease.end


def _write_up_to(ctx: JobContext, job: Claim, rows: Rows, end: int) -> tuple[Rows | None, int]:
    """Writes the blocks of `rows` up to `end`, cut again if the heartbeat finds the job split
    below them meanwhile; returns what was written (None: nothing of `rows` is the job's any
    more) and the job's end as the heartbeat found it."""
    while rows.first <= end:
        if rows.last > end:
            rows = rows.up_to(end)
        try:
            now_ends_at = _write(ctx, job, rows)
        except _Split as split:
            end = split.end
            continue
        return rows, end if now_ends_at is None else min(end, now_ends_at)
    return None, end


def run(ctx: JobContext, job: Claim) -> Ended:
    blocks = _range(job)
    cfg = ctx.cfg
    cursor = _resume_at(job, blocks)
    end = blocks.last  # lowered when another worker splits the job (`queue.split`)
    safe = ctx.safe_head.at_least(blocks.last)
    batches = ctx.prefetch.batches(job, cursor, min(blocks.last, safe))
    for rows in ctx.prefetch.rows(batches, ctx.claim_ahead):
        if ctx.stop.is_set():
            raise Stopping()
        kept, end = _write_up_to(ctx, job, rows, end)
        if kept is None:
            break  # the job was split below this batch: the rest is another job's
        rows = kept
        if end < batches.last:
            log.debug("job %d was split: it now ends at block %d", job.id, end)
            batches.shrink(end)
        ctx.endpoint_rates.maybe_record(ctx.conn)  # at most every INDEXER_RPC_STATUS_SECONDS
        cursor = rows.last + 1
        written = rows.last - rows.first + 1
        metrics.counted.blocks.inc(written)
        metrics.counted.transactions.inc(len(rows.transactions))
        metrics.counted.logs.inc(len(rows.logs))
        for reason in rows.unproven:
            metrics.counted.blocks_unproven.labels(reason).inc()
        if ctx.counters:
            ctx.counters.add(blocks=written)

    if cursor <= end:
        if not queue.defer(ctx.conn, job, delay_seconds=cfg.defer_seconds):
            return LOST
        return Ended(Outcome.DEFERRED, f"blocks {cursor}..{end} are past the safe head {safe}")
    done = Ended(Outcome.DONE, f"blocks {blocks.first}..{end}")
    if ctx.prefetch.ahead_job() is not None:
        return done if queue.complete(ctx.conn, job, traces=ctx.cfg.traces) else LOST
    return ctx.complete_and_claim(job, done)
