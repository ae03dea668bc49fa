"""`Rows.up_to`: a batch cut at a block, as the writer cuts one that reaches into the blocks a
split gave to another job."""

from __future__ import annotations

import pytest

from indexer.chaindata.rows import decode
from indexer.testing import fixtures


pytestmark = pytest.mark.usefixtures("rows_backend")


def test_a_batch_cut_at_a_block_keeps_exactly_the_rows_of_the_blocks_up_to_it():
    first, second = fixtures.load("mainnet-1755634"), fixtures.load("mainnet-1755635")
    rows = decode(1755634, [first["block"], second["block"]],
                  {1755634: first["receipts"], 1755635: second["receipts"]})
    alone = decode(1755634, [first["block"]], {1755634: first["receipts"]})
    assert rows.transactions and rows.logs and len(rows.transactions) > len(alone.transactions)
    cut = rows.up_to(1755634)
    assert (cut.first, cut.last) == (1755634, 1755634)
    assert (cut.blocks, cut.transactions, cut.logs, cut.withdrawals) == \
        (alone.blocks, alone.transactions, alone.logs, alone.withdrawals)
    assert rows.up_to(1755635) == rows
