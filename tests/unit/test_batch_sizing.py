"""How many blocks a batch holds: by the density of the chain seen so far, and, whatever came
before, never much more than the transaction budget."""

from __future__ import annotations

import math
import sys
import threading
import time
import uuid
from datetime import datetime, timezone

import pytest

from indexer.base.block_range import JOB_KIND
from indexer.chaindata.chain import Rows
from indexer.chaindata.prefetch import PROBE_FRACTION, Prefetcher, batch_blocks
from indexer.jobqueue.queue import Claim


def test_an_unknown_density_probes_with_small_batches():
    assert batch_blocks(None, 100, 1000) == 100 // PROBE_FRACTION
    assert batch_blocks(None, 5, 1000) == 1  # never zero


def test_empty_blocks_get_whole_batches():
    assert batch_blocks(0.0, 100, 1000) == 100


def test_dense_blocks_keep_a_batch_near_its_transaction_budget():
    assert batch_blocks(50.0, 100, 1000) == 20  # 20 blocks x 50 transactions = 1000
    assert batch_blocks(5.0, 100, 1000) == 100  # the block cap binds first
    assert batch_blocks(5000.0, 100, 1000) == 1  # one block even if it alone is over budget


# A chain of 300 empty blocks, then 100 blocks of 400 transactions: the estimate says 0 when
# the dense blocks come, and each batch then asks for `batch_size` of them.
DENSITY = [0] * 300 + [400] * 100


def fetch_within(first: int, last: int, max_transactions: int) -> Rows:
    """As `chain.fetch` cuts a batch: at the block that brings it to `max_transactions`."""
    rows = Rows(first, first - 1)
    for number in range(first, last + 1):
        rows.transactions.extend(f"{number}:{i}" for i in range(DENSITY[number]))
        rows.last = number
        if len(rows.transactions) >= max_transactions:
            break
    return rows


def written(in_flight: int) -> list[Rows]:
    prefetcher = Prefetcher(fetch_within, in_flight=in_flight, batch_size=100, batch_transactions=1000,
                            stop=threading.Event())
    job = Claim(1, JOB_KIND, {"from": 0, "to": len(DENSITY) - 1}, 1, uuid.uuid4(), datetime.now(timezone.utc), None)
    try:
        return list(prefetcher.rows(prefetcher.batches(job, 0, len(DENSITY) - 1), lambda: None))
    finally:
        prefetcher.shutdown()


def test_a_batch_cut_short_hands_the_rest_back_and_every_block_comes_once_in_order():
    for in_flight in (1, 4):
        batches = written(in_flight)
        assert [n for rows in batches for n in range(rows.first, rows.last + 1)] == list(range(len(DENSITY)))
        assert [t for rows in batches for t in rows.transactions] == [
            f"{n}:{i}" for n in range(len(DENSITY)) for i in range(DENSITY[n])]


def test_dense_blocks_after_empty_ones_stay_within_one_block_of_the_budget():
    batches = written(4)
    assert max(len(rows.transactions) for rows in batches) < 1000 + 400
    # The empty blocks still go in whole batches.
    assert batches[0].last - batches[0].first + 1 == 100 // PROBE_FRACTION
    assert any(rows.last - rows.first + 1 == 100 for rows in batches)


def test_on_a_dense_chain_about_two_batches_of_transactions_are_fetched_ahead():
    prefetcher = Prefetcher(fetch_within, in_flight=4, batch_size=100, batch_transactions=1000, stop=threading.Event())
    try:
        assert prefetcher.limit() == 2  # the density is not known yet: the blocks may be dense
        for density, limit in ((0.0, 4), (5.0, 4), (50.0, 2), (400.0, 2), (5000.0, 1)):
            prefetcher.density = density
            assert prefetcher.limit() == limit, density
    finally:
        prefetcher.shutdown()


def test_fetches_at_once_follow_the_density():
    """What a worker holds in memory: on the dense blocks, two batches at a time, not four."""
    lock = threading.Lock()
    # The first dense batch (blocks 300..309) tells the estimate; up to four batches of ten were
    # asked past it before, sized for empty blocks. Every fetch from block 350 on is asked once the
    # estimate knows: those are counted apart, whatever the older ones are still doing (on a
    # loaded machine a thread may linger on a batch asked long before).
    dense_from = DENSITY.index(400) + 5 * 10
    running = {"sparse": 0, "dense": 0}
    most = {"sparse": 0, "dense": 0}
    # Four batches of empty blocks (100..139: the density is known by then, and empty) are held
    # until all four are being fetched at once: that four may be is then seen however slowly the
    # machine schedules the threads.
    first_four = threading.Barrier(4)

    def fetch(first: int, last: int, max_transactions: int) -> Rows:
        key = "dense" if first >= dense_from else "sparse"
        with lock:
            running[key] += 1
            most[key] = max(most[key], running[key])
        if 100 <= first < 140:
            first_four.wait(timeout=30)
        time.sleep(0.01)
        with lock:
            running[key] -= 1
        return fetch_within(first, last, max_transactions)

    prefetcher = Prefetcher(fetch, in_flight=4, batch_size=10, batch_transactions=1000, stop=threading.Event())
    job = Claim(1, JOB_KIND, {"from": 0, "to": len(DENSITY) - 1}, 1, uuid.uuid4(), datetime.now(timezone.utc), None)
    try:
        for _ in prefetcher.rows(prefetcher.batches(job, 0, len(DENSITY) - 1), lambda: None):
            time.sleep(0.005)  # the writer
    finally:
        prefetcher.shutdown()
    assert most["sparse"] == 4 and 1 <= most["dense"] <= 2, most


def every_binary_exponent() -> list[float]:
    """A density at every power of two a float can hold, from the largest down through the
    subnormals to the smallest (5e-324), with zero, and a few in between."""
    densities = [0.0, sys.float_info.max, sys.float_info.min, math.ulp(0.0)]
    d = 2.0 ** 1023
    while d > 0:
        densities += [d, d * 1.5]
        d /= 2
    return sorted(set(densities))


@pytest.mark.parametrize("batch_size, batch_transactions", [(1, 1), (100, 600), (10_000, 1), (10_000, 1_000_000)])
def test_every_density_down_to_the_smallest_float_gives_a_batch_within_its_bounds(batch_size, batch_transactions):
    sizes = [batch_blocks(d, batch_size, batch_transactions) for d in every_binary_exponent()]
    assert all(type(n) is int and 1 <= n <= batch_size for n in sizes)
    assert sizes == sorted(sizes, reverse=True)  # denser never means more blocks
    for d, n in zip(every_binary_exponent(), sizes):
        assert n == 1 or n * d <= batch_transactions, (d, n)  # within budget, unless one block alone is over it
        if d * batch_size <= batch_transactions:
            assert n == batch_size, d  # sparse enough: whole batches


def test_every_density_down_to_the_smallest_float_gives_a_fetch_limit():
    prefetcher = Prefetcher(fetch_within, in_flight=4, batch_size=100, batch_transactions=600, stop=threading.Event())
    try:
        for density in every_binary_exponent():
            prefetcher.density = density
            assert 1 <= prefetcher.limit() <= 4, density
    finally:
        prefetcher.shutdown()


def test_hundreds_of_thousands_of_empty_blocks_after_a_few_transactions():
    """`scripts/backfill-local --to 2000000`: a few blocks with transactions, then empty blocks.
    Each empty batch halves the density estimate, which after a thousand batches is a subnormal
    float; the batches after it are still whole, and every block comes once."""
    blocks = 120_000
    prefetcher = Prefetcher(lambda first, last, _: Rows(first, last, transactions=["t"] if first == 0 else []),
                            in_flight=4, batch_size=100, batch_transactions=600, stop=threading.Event())
    job = Claim(1, JOB_KIND, {"from": 0, "to": blocks - 1}, 1, uuid.uuid4(), datetime.now(timezone.utc), None)
    try:
        batches = list(prefetcher.rows(prefetcher.batches(job, 0, blocks - 1), lambda: None))
    finally:
        prefetcher.shutdown()
    assert 0 <= prefetcher.density < sys.float_info.min  # the estimate did decay that far
    assert [n for rows in batches for n in range(rows.first, rows.last + 1)] == list(range(blocks))
    assert all(rows.last - rows.first + 1 == 100 for rows in batches[-100:-1])  # the last one takes what is left


def test_under_a_rate_limit_the_batches_in_flight_fit_in_half_a_lease():
    """A provider's limit slows every call: a batch must still come back well within the lease
    (heartbeats come between batches), or the job is deferred again and again and never ends.
    The calls of all the batches in flight fit in half a lease at the rate allowed, down to one
    block at a time."""
    rate: list[float | None] = [None]
    prefetcher = Prefetcher(fetch_within, in_flight=4, batch_size=100, batch_transactions=600, stop=threading.Event(),
                            allowed_rate=lambda: rate[0], lease_seconds=60)
    try:
        for density in (None, 0.0, 0.5, 3.0, 400.0):
            prefetcher.density = density
            rate[0] = None
            unlimited = (prefetcher._size(), prefetcher.limit())
            for calls_per_second in (1000.0, 20.0, 5.0, 2.0, 0.5, 0.1):
                rate[0] = calls_per_second
                size, limit = prefetcher._size(), prefetcher.limit()
                calls_a_block = 1 + 2 * min(1.0, 1.0 if density is None else density)
                assert size <= unlimited[0] and limit <= unlimited[1]
                assert size >= 1 and limit >= 1
                if size > 1 or limit > 1:  # one block at a time is the least there is
                    assert limit * size * calls_a_block <= calls_per_second * 60 / 2, (density, calls_per_second)
            rate[0] = 1000.0
            assert (prefetcher._size(), prefetcher.limit()) == unlimited  # a generous limit changes nothing
    finally:
        prefetcher.shutdown()


def test_a_slow_batch_keeps_the_leases_alive_while_it_is_waited_for():
    """A batch the node takes longer than a lease to answer: the worker extends its leases while it
    waits (here the batch comes only once they have been)."""
    kept = threading.Event()

    def slow(first: int, last: int, max_transactions: int) -> Rows:
        kept.wait(30)
        return Rows(first, last)

    prefetcher = Prefetcher(slow, in_flight=1, batch_size=10, batch_transactions=600, stop=threading.Event(),
                            lease_seconds=1.5, keep_alive=kept.set)
    job = Claim(1, JOB_KIND, {"from": 0, "to": 0}, 1, uuid.uuid4(), datetime.now(timezone.utc), None)
    try:
        assert [(r.first, r.last) for r in prefetcher.rows(prefetcher.batches(job, 0, 0), lambda: None)] == [(0, 0)]
    finally:
        prefetcher.shutdown()
    assert kept.is_set()
