"""How many blocks a batch holds: by the density of the chain seen so far, and, whatever came
before, never much more than the transaction budget."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timezone

from indexer.block_range import JOB_KIND
from indexer.chain import Rows
from indexer.prefetch import PROBE_FRACTION, Prefetcher, batch_blocks
from indexer.queue import Claim


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
    running = {"now": 0, "most_dense": 0, "most_sparse": 0}

    def fetch(first: int, last: int, max_transactions: int) -> Rows:
        with lock:
            running["now"] += 1
            # Once the estimate has caught up with the dense blocks (it lags by a batch or two).
            key = "most_dense" if first >= DENSITY.index(400) + 20 else "most_sparse"
            running[key] = max(running[key], running["now"])
        time.sleep(0.01)
        with lock:
            running["now"] -= 1
        return fetch_within(first, last, max_transactions)

    prefetcher = Prefetcher(fetch, in_flight=4, batch_size=10, batch_transactions=1000, stop=threading.Event())
    job = Claim(1, JOB_KIND, {"from": 0, "to": len(DENSITY) - 1}, 1, uuid.uuid4(), datetime.now(timezone.utc), None)
    try:
        for _ in prefetcher.rows(prefetcher.batches(job, 0, len(DENSITY) - 1), lambda: None):
            time.sleep(0.005)  # the writer
    finally:
        prefetcher.shutdown()
    assert running["most_sparse"] == 4 and running["most_dense"] <= 2, running
