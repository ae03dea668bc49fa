"""Fetching ahead of the writer: a job's batches, `in_flight` at a time, and, once the job has
asked for all of its own, the first batches of the job claimed ahead, so that the node never
waits on a job boundary.

A batch is asked for with at most `batch_size` blocks, fewer where the density seen so far
would put more than `batch_transactions` transactions in it. The estimate keeps batches full on
a chain whose density holds; what bounds memory when it changes is the fetch: it stops at the
block that brings the batch to `batch_transactions` (`chain.fetch_json`), and the rest of the
batch's blocks are asked for again, in order, before the batches that follow (`Batches.hand_back`).

At most `in_flight` batches are fetched at once, and on a dense chain fewer: about
`TRANSACTIONS_AHEAD` batches' worth of transactions (`Prefetcher.limit`). A batch of 1,000 of
mainnet's transactions is about 10 MB of JSON, more once parsed, and four of them in flight
held a worker at about 210 MB; two keep the writer as busy, against a node that answers as fast
as the worker writes (BENCHMARKS.md, "Worker memory").
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator

from ..base import metrics
from ..jobqueue.claims import keeping_leases
from ..jobqueue.queue import Claim
from .chain import Rows

# Until a worker has seen how dense the chain is, its batches are this fraction of `batch_size`
# (50 blocks by default), and the pipeline is full from the first request. What keeps them safe
# on a dense chain is the fetch, which stops at `batch_transactions` (`chain.fetch_json`).
PROBE_FRACTION = 10
# Batches' worth of transactions (`batch_transactions` each) fetched ahead at most.
TRANSACTIONS_AHEAD = 2
# At a provider's rate limit, the calls of the batches in flight fit in this share of a lease at
# the rate the node allows: heartbeats come between batches, the worker's client gives a job
# back after half a lease of nothing but rate limits (`rpc_errors.RateLimited`), and the write and the
# heartbeat need the rest.
LEASE_SHARE = 0.5


def batch_blocks(density: float | None, batch_size: int, batch_transactions: int) -> int:
    """Blocks in a batch: `batch_size`, or fewer where `density` transactions a block would put
    more than about `batch_transactions` in it (`density` None: not known yet)."""
    if density is None:
        return max(1, batch_size // PROBE_FRACTION)
    # Compared by product, never by quotient: on a sparse chain the estimate halves with each
    # empty batch down to the smallest floats, and the quotient of a budget by one of them is
    # infinite. Past this test, density > batch_transactions / batch_size, so the quotient is
    # below batch_size.
    if density * batch_size <= batch_transactions:
        return batch_size
    return max(1, int(batch_transactions / density))


class Batches:
    """The blocks `first..last` of one job, and the batches of them asked of the node so far."""

    def __init__(self, job: Claim, first: int, last: int) -> None:
        self.job = job
        self.next_first = first
        self.last = last
        self.futures: deque[tuple[int, int, Future[Rows]]] = deque()  # each with the blocks asked

    def ask(self, room: int, size: int, submit: Callable[[int, int], Future[Rows]]) -> int:
        """Asks for up to `room` more batches of `size` blocks; returns how many."""
        asked = 0
        while asked < room and not self.all_asked():
            batch_last = min(self.next_first + size - 1, self.last)
            self.futures.append((self.next_first, batch_last, submit(self.next_first, batch_last)))
            self.next_first = batch_last + 1
            asked += 1
        return asked

    def hand_back(self, first: int, last: int, room: int, size: int,
                  submit: Callable[[int, int], Future[Rows]]) -> None:
        """Asks again for the blocks `first..last` of a batch that ended early, ahead of the
        batches asked after it: in up to `room` batches of `size` blocks, the last taking the rest."""
        parts = []
        while first <= last:
            part_last = last if len(parts) + 1 >= room else min(first + size - 1, last)
            parts.append((first, part_last, submit(first, part_last)))
            first = part_last + 1
        self.futures.extendleft(reversed(parts))

    def all_asked(self) -> bool:
        return self.next_first > self.last

    def shrink(self, last: int) -> None:
        """The job now ends at `last` (another worker took the rest: `queue.split`): nothing past
        it is asked for, and batches asked past it are dropped, the first one asked included (a
        split can land on the batch being written, so that the next one starts past the new
        end); one that straddles it stays, and the writer leaves out its blocks past `last`."""
        self.last = min(self.last, last)
        kept: deque[tuple[int, int, Future[Rows]]] = deque()
        for first, asked_last, future in self.futures:
            if first > last:
                future.cancel()
            else:
                kept.append((first, asked_last, future))
        self.futures = kept

    def in_flight(self) -> int:
        return len(self.futures)

    def cancel(self) -> None:
        for _, _, f in self.futures:
            f.cancel()
        self.futures.clear()


class Prefetcher:
    def __init__(self, fetch: Callable[[int, int, int], Rows], *, in_flight: int, batch_size: int,
                 batch_transactions: int, stop: threading.Event,
                 allowed_rate: Callable[[], float | None] = lambda: None, lease_seconds: float = 60.0,
                 keep_alive: Callable[[], None] = lambda: None) -> None:
        """`allowed_rate`: the calls per second the node allows now (None: no limit in force;
        `rpc.RpcClient.allowed_calls_per_second`); `keep_alive`: extends the leases of the jobs
        held, called from the thread that iterates `rows`."""
        self.fetch = fetch
        self.keep_alive = keep_alive
        self.allowed_rate = allowed_rate
        self.lease_seconds = lease_seconds
        self.in_flight = in_flight
        self.batch_size = batch_size
        self.batch_transactions = batch_transactions
        self.stop = stop
        self.executor = ThreadPoolExecutor(in_flight, thread_name_prefix="fetch")
        self.ahead: Batches | None = None  # of the job claimed ahead
        self.density: float | None = None  # transactions per block, as seen so far

    def batches(self, job: Claim, first: int, last: int) -> Batches:
        """The batches of `job` up to `last`: those already asked for if it was claimed ahead
        (its end moved up to `last`: the safe head may have grown since), else new ones."""
        if self.ahead is not None and self.ahead.job == job:
            batches, self.ahead = self.ahead, None
            batches.last = max(batches.last, last)
            return batches
        return Batches(job, first, last)

    def rows(self, batches: Batches, claim_ahead: Callable[[], Batches | None]) -> Iterator[Rows]:
        """The job's batches in order, fetched ahead of the caller. Once they are all asked for,
        `claim_ahead` is asked for the next job's batches, which share the room left; while it
        finds no job, it is asked again at each batch (a claim that finds nothing is cheap)."""
        try:
            while True:
                room = self.limit() - batches.in_flight()
                room -= batches.ask(room, self._size(), self._submit)
                if batches.all_asked() and room > 0:
                    if self.ahead is None and not self.stop.is_set():
                        self.ahead = claim_ahead()
                    if self.ahead is not None:
                        self.ahead.ask(room - self.ahead.in_flight(), self._size(), self._submit)
                if not batches.futures:
                    return
                _, asked_last, future = batches.futures.popleft()
                rows = self._result(future)
                density = len(rows.transactions) / (rows.last - rows.first + 1)
                self.density = density if self.density is None else (self.density + density) / 2
                if rows.last < min(asked_last, batches.last):
                    batches.hand_back(rows.last + 1, min(asked_last, batches.last), self.limit() - batches.in_flight(),
                                      self._size(), self._submit)
                yield rows
        finally:
            batches.cancel()

    def ahead_job(self) -> Claim | None:
        return self.ahead.job if self.ahead is not None else None

    def forget(self, job: Claim) -> None:
        """Drops what was asked ahead for `job` (its runner ended without taking it)."""
        if self.ahead is not None and self.ahead.job == job:
            self.drop_ahead()

    def drop_ahead(self) -> None:
        """Forgets the batches asked for ahead (the job itself stays held, to be given back)."""
        if self.ahead is not None:
            self.ahead.cancel()
            self.ahead = None

    def shutdown(self) -> None:
        self.drop_ahead()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def limit(self) -> int:
        """Batches to have in flight: `in_flight`, or fewer where the density seen so far would put
        more than `TRANSACTIONS_AHEAD` batches' worth of transactions in them (at least one), as
        many as that while the density is not known yet (a probe's blocks may be dense)."""
        if self.density is None:
            limit = min(self.in_flight, TRANSACTIONS_AHEAD)
        else:
            per_batch = self.density * self._size()
            ahead = TRANSACTIONS_AHEAD * self.batch_transactions
            if per_batch * self.in_flight <= ahead:  # by product, as in `batch_blocks`
                limit = self.in_flight
            else:
                limit = max(1, int(ahead / per_batch))
        blocks = self._blocks_within_the_rate()
        if blocks is not None and limit * self._size() > blocks:
            limit = max(1, int(blocks / self._size()))
        return limit

    def _size(self) -> int:
        size = batch_blocks(self.density, self.batch_size, self.batch_transactions)
        blocks = self._blocks_within_the_rate()
        if blocks is not None and size * self.in_flight > blocks:
            size = max(1, int(blocks / self.in_flight))
        return size

    def _blocks_within_the_rate(self) -> float | None:
        """The blocks that can be fetched in LEASE_SHARE of a lease at the rate the node allows
        (None: no limit in force). A block costs its header, and one with transactions its body and
        its receipts too; at most one block in `density` has any. (From a node without
        eth_getBlockReceipts, receipts cost a call each: the client's patience then defers a job
        whose batch takes too long, with no attempt spent.)"""
        rate = self.allowed_rate()
        if rate is None:
            return None
        calls_a_block = 1 + 2 * min(1.0, 1.0 if self.density is None else self.density)
        return LEASE_SHARE * rate * self.lease_seconds / calls_a_block

    def _submit(self, first: int, last: int) -> Future[Rows]:
        return self.executor.submit(self.fetch, first, last, self.batch_transactions)

    def _result(self, future: Future[Rows]) -> Rows:
        """The batch, once fetched. A wait of a third of a lease or more calls `keep_alive` (the
        worker extends the leases it holds): the node is slow, not the worker, and a batch asked
        before the node's rate limit was known may take longer than a lease to come."""
        started = time.perf_counter()
        try:
            return keeping_leases(future, keep_alive=self.keep_alive, lease_seconds=self.lease_seconds, stop=self.stop)
        finally:
            metrics.counted.wait_seconds.inc(time.perf_counter() - started)
