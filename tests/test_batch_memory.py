"""A worker's batches on a chain whose density changes: empty blocks, then dense ones. Each batch
is one transaction (`store.write` and its heartbeat), so the rows a batch wrote share their
`xmin`: the batches are read back from the database, as written."""

from __future__ import annotations

from indexer.base.settings import DEFAULT_BATCH_SIZE
from indexer.jobs import planner
from indexer.testing.anvil import Anvil, build_dense
from indexer.testing.node_compare import assert_matches_node

EMPTY, DENSE, TXS, BUDGET = 3 * DEFAULT_BATCH_SIZE, 10, 100, 150

WRITTEN_BATCHES = """
SELECT min(number), max(number), count(*), sum(transaction_count)
FROM blocks GROUP BY xmin::text ORDER BY min(number)
"""


def test_dense_blocks_after_empty_ones_are_written_in_batches_within_the_budget(db_url, conn, work):
    with Anvil("--no-mining") as node:
        node.mine(EMPTY)
        build_dense(node, DENSE, TXS)  # a block deploying the contract, then the dense blocks
        head = node.head()
        planner.plan(conn, 0, head + 1, head + 1)
        w = work(db_url, node.url, "--workers", "1", "--drain", INDEXER_BATCH_TRANSACTIONS=str(BUDGET))
        assert w.wait() == 0, w.output()

        batches = conn.execute(WRITTEN_BATCHES).fetchall()
        # Every block written once, by consecutive batches.
        assert [n for first, last, _, _ in batches for n in range(first, last + 1)] == list(range(head + 1))
        # None over the budget by more than one block's transactions; and not the one batch of the
        # dense blocks that an estimate made on the empty ones asks for.
        assert max(txs for _, _, _, txs in batches) < BUDGET + TXS
        assert sum(txs for _, _, _, txs in batches) == DENSE * TXS + 1
        # The empty blocks still go in whole batches (INDEXER_BATCH_SIZE's default).
        assert max(blocks for _, _, blocks, _ in batches) == DEFAULT_BATCH_SIZE
        assert_matches_node(conn, node.url, 0, head)
