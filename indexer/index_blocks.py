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
Errors are raised to the worker, which gives the job back (`worker.py`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import tenacity

from . import chain, forks, metrics, queue, store
from .block_range import BlockRange
from .chain import ChainDataError, Rows
from .claims import LOST, Ended, LostClaim, Stopping, Unrunnable
from .prefetch import Batches
from .queue import Claim
from .rpc import ERROR, UNSUPPORTED, RpcClient, RpcError
from .states import Outcome

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger(__name__)


# Answers that disagree with each other (a reorg under the fetch, a node behind a load balancer
# answering from two heights) are asked again this many times before the job is given back.
CHAIN_DATA_ATTEMPTS = 3


class SafeHead:
    """The highest block that may be indexed, asked of the node only when a job reaches past the
    one known already: a job inside it starts without a round trip to a busy node."""

    def __init__(self, client: RpcClient, *, confirmations: int, tag: str | None) -> None:
        self.client = client
        self.confirmations = confirmations
        self.tag = tag  # the node's tag read ("finalized", "safe"), or None: head - confirmations
        self.known: int | None = None  # it only grows

    def at_least(self, wanted: int) -> int:
        """The safe head; asks the node unless the one known is at `wanted` or above."""
        if self.known is not None and self.known >= wanted:
            return self.known
        try:
            safe = chain.safe_head(self.client, confirmations=self.confirmations, tag=self.tag)
        except RpcError as exc:
            # Only a node that answers the question with an error ("finalized block not found"
            # before the merge, an unknown tag) cannot report one; a node that is down, rate
            # limited or talking nonsense is no reason to stop using it for good.
            if self.tag is None or exc.kind not in (ERROR, UNSUPPORTED):
                raise
            log.warning("the node cannot report a %s block; using head - %d", self.tag, self.confirmations)
            self.tag = None
            safe = chain.safe_head(self.client, confirmations=self.confirmations, tag=None)
        metrics.counted.safe_head.set(safe)
        self.known = safe
        return safe


def fetch(client: RpcClient, first: int, last: int, max_transactions: int | None = None, *, verify_roots: bool,
          chain_id: int | None) -> Rows:
    """Blocks `first..last` as rows (in a fetch thread), asked again when the answers disagree
    (a root that does not match is such a disagreement); with `max_transactions`, they may end
    early (`chain.fetch`)."""
    for attempt in tenacity.Retrying(
        stop=tenacity.stop_after_attempt(CHAIN_DATA_ATTEMPTS),
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


def ask_ahead(worker: Worker, job: Claim) -> Batches:
    """What to fetch of a job claimed ahead: its blocks from its cursor up to the safe head."""
    blocks = BlockRange.of(job.kind, job.payload)
    if blocks is None:  # running it fails it
        return Batches(job, 0, -1)
    first = _resume_at(job, blocks)
    try:
        last = min(blocks.last, worker.safe_head.at_least(blocks.last))
    except RpcError:  # not this job's failure: nothing is asked ahead, and running it asks again
        last = first - 1
    return Batches(job, first, last)


class _Split(Exception):
    """The heartbeat found the job's end moved below the batch being written (another worker
    split the job since the batch was asked for): the batch is rolled back and cut."""

    def __init__(self, end: int) -> None:
        self.end = end


def _write(worker: Worker, job: Claim, rows: Rows) -> int | None:
    """Writes one batch and heartbeats, in one transaction; returns the job's end as the
    heartbeat found it."""
    # The heartbeat goes last: it locks the job's row, and a worker stalled while holding
    # that lock would hide the job from the reaper's SKIP LOCKED.
    with metrics.counted.write_seconds.time(), worker.conn.transaction():
        try:
            forks.check_links(worker.conn, rows)
        except forks.ForkMismatch:
            metrics.counted.fork_mismatches.inc()
            raise
        store.write(worker.conn, rows)
        lease = queue.heartbeat(worker.conn, job, lease_seconds=worker.cfg.lease_seconds, cursor=rows.last + 1)
        if lease is None:
            raise LostClaim()
        if lease.end is not None and lease.end < rows.last:
            raise _Split(lease.end)
    return lease.end


def _write_up_to(worker: Worker, job: Claim, rows: Rows, end: int) -> tuple[Rows | None, int]:
    """Writes the blocks of `rows` up to `end`, cut again if the heartbeat finds the job split
    below them meanwhile; returns what was written (None: nothing of `rows` is the job's any
    more) and the job's end as the heartbeat found it."""
    while rows.first <= end:
        if rows.last > end:
            rows = rows.up_to(end)
        try:
            now_ends_at = _write(worker, job, rows)
        except _Split as split:
            end = split.end
            continue
        return rows, end if now_ends_at is None else min(end, now_ends_at)
    return None, end


def run(worker: Worker, job: Claim) -> Ended:
    blocks = _range(job)
    cfg = worker.cfg
    cursor = _resume_at(job, blocks)
    end = blocks.last  # lowered when another worker splits the job (`queue.split`)
    safe = worker.safe_head.at_least(blocks.last)
    batches = worker.prefetch.batches(job, cursor, min(blocks.last, safe))
    for rows in worker.prefetch.rows(batches, worker.claim_ahead):
        if worker.stop.is_set():
            raise Stopping()
        kept, end = _write_up_to(worker, job, rows, end)
        if kept is None:
            break  # the job was split below this batch: the rest is another job's
        rows = kept
        if end < batches.last:
            log.debug("job %d was split: it now ends at block %d", job.id, end)
            batches.shrink(end)
        worker.endpoint_rates.maybe_record(worker.conn)  # at most every INDEXER_RPC_STATUS_SECONDS
        cursor = rows.last + 1
        written = rows.last - rows.first + 1
        metrics.counted.blocks.inc(written)
        metrics.counted.transactions.inc(len(rows.transactions))
        metrics.counted.logs.inc(len(rows.logs))
        for reason in rows.unproven:
            metrics.counted.blocks_unproven.labels(reason).inc()
        if worker.counters:
            worker.counters.add(blocks=written)

    if cursor <= end:
        if not queue.defer(worker.conn, job, delay_seconds=cfg.defer_seconds):
            return LOST
        return Ended(Outcome.DEFERRED, f"blocks {cursor}..{end} are past the safe head {safe}")
    done = Ended(Outcome.DONE, f"blocks {blocks.first}..{end}")
    if worker.prefetch.ahead_job() is not None:
        return done if queue.complete(worker.conn, job, traces=worker.cfg.traces) else LOST
    return worker.complete_and_claim(job, done)
