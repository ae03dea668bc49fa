"""How many blocks a batch holds, by the density of the chain seen so far."""

from __future__ import annotations

from indexer.prefetch import PROBE_FRACTION, batch_blocks


def test_an_unknown_density_probes_with_small_batches():
    assert batch_blocks(None, 100, 1000) == 100 // PROBE_FRACTION
    assert batch_blocks(None, 5, 1000) == 1  # never zero


def test_empty_blocks_get_whole_batches():
    assert batch_blocks(0.0, 100, 1000) == 100


def test_dense_blocks_keep_a_batch_near_its_transaction_budget():
    assert batch_blocks(50.0, 100, 1000) == 20  # 20 blocks x 50 transactions = 1000
    assert batch_blocks(5.0, 100, 1000) == 100  # the block cap binds first
    assert batch_blocks(5000.0, 100, 1000) == 1  # one block even if it alone is over budget
