"""`forks.plan_rollback`, the guard of every deletion a repair makes, against stored blocks in
PostgreSQL and a small stand-in node whose answers each test writes (tests/test_reorg.py runs the
same guard through `indexer verify` against anvil)."""

from __future__ import annotations

from typing import Any

import pytest

from indexer.base.settings import Settings
from indexer.chaindata import forks, store
from indexer.operations import follow, follow_state, rollback

from .test_verify import insert_linked_blocks

CHAIN = 31337


def stored_hash(n: int) -> str:
    return "0x" + n.to_bytes(8, "big", signed=True).hex()  # what insert_linked_blocks stores: int8send(n)


class Node:
    """Headers of a chain that is the stored one below `fork` and another from it up."""

    def __init__(self, fork: int, head: int, lacks: int | None = None) -> None:
        self.fork, self.head, self.lacks = fork, head, lacks
        self.calls: list[str] = []

    def hash(self, n: int) -> str:
        return stored_hash(n) if n < self.fork else stored_hash(n + 1_000_000)

    def call(self, method: str, *params: Any, parse: Any = None) -> Any:
        return self.batch([(method, params)], parse=parse)[0]

    def batch(self, calls: list[tuple[str, Any]], parse: Any = None) -> list[Any]:
        self.calls += [method for method, _ in calls]
        answers = []
        for method, params in calls:
            if method == "eth_chainId":
                answers.append(hex(CHAIN))
                continue
            n = int(params[0], 16)
            answers.append(None if n == self.lacks or n > self.head else
                           {"number": hex(n), "hash": self.hash(n), "parentHash": self.hash(n - 1)})
        return [parse(a) for a in answers] if parse else answers


def test_the_orphans_are_planned_from_the_highest_stored_block_below_them_across_a_gap(conn):
    insert_linked_blocks(conn, [*range(0, 10), *range(12, 21)])
    store.record_chain_id(conn, CHAIN)
    node = Node(fork=12, head=25)
    plan = forks.plan_rollback(conn, node, [(12, 20)], 20, max_depth=11, window=4)
    assert isinstance(plan, forks.Rollback)
    assert (plan.anchor, plan.orphans, plan.depth) == (9, [(12, 20)], 11)
    assert plan.canonical == {n: bytes.fromhex(node.hash(n).removeprefix("0x")) for n in range(12, 21)}
    # Blocks 10 and 11, not stored, were asked too: the node's answers link across them.
    assert node.calls.count("eth_getBlockByNumber") == 12


def test_what_a_repair_may_not_delete_is_refused_with_its_reason(conn):
    insert_linked_blocks(conn, [*range(0, 10), *range(12, 21)])
    node = Node(fork=12, head=25)
    assert forks.plan_rollback(conn, node, [(12, 20)], 20, max_depth=64) == forks.Refusal(
        "the database records no chain yet (`indexer work` records it): nothing shows that the node serves the"
        " stored blocks' chain")
    store.record_chain_id(conn, CHAIN)

    # Too deep: refused before any block is asked of the node.
    assert forks.plan_rollback(conn, node, [(12, 20)], 20, max_depth=10) == forks.Refusal(
        "the orphans reach 11 blocks above stored block 9, the highest below them: deeper than the maximum of 10", 11)
    assert node.calls == ["eth_chainId"]

    # The node's fork moved since the comparison found the orphans: a reorg under way.
    assert forks.plan_rollback(conn, Node(fork=15, head=25), [(12, 20)], 20, max_depth=64) == forks.Refusal(
        "the node's hashes changed since they were compared (a reorg under way?): compare again", again=True)
    assert forks.plan_rollback(conn, Node(fork=12, head=25, lacks=14), [(12, 20)], 20, max_depth=64) == \
        forks.Refusal("the node has no block 14, below its head")


class MovingNode(Node):
    """A node whose fork moves after its first batch of headers (a second reorg lands while a
    worker compares the stored blocks with the node's, before the rollback asks again), and with
    `restless`, moves back and forth after every batch (reorgs keep landing)."""

    def __init__(self, fork: int, moved_to: int, head: int, restless: bool = False) -> None:
        super().__init__(fork, head)
        self.moves = (moved_to, fork) if restless else (moved_to, moved_to)

    def batch(self, calls: list[tuple[str, Any]], parse: Any = None) -> list[Any]:
        if calls[0][0] == "eth_blockNumber":
            return [parse(hex(self.head)) if parse else hex(self.head)]
        answers = super().batch(calls, parse)
        if calls[0][0] == "eth_getBlockByNumber":
            self.fork = self.moves[0] if self.fork != self.moves[0] else self.moves[1]
        return answers


@pytest.mark.parametrize("fork, moved_to", [(15, 12), (12, 15)], ids=["deeper", "shallower"])
def test_a_reorg_that_moves_during_a_rollback_is_compared_again_and_rolled_back_as_it_stands(conn, fork, moved_to):
    # Seen in the chaos run's follow phase (reorgs every 1 to 3 s): the node's answers changed
    # between the comparison and the rollback's second look, and the following halted for it.
    insert_linked_blocks(conn, list(range(0, 21)))
    store.record_chain_id(conn, CHAIN)
    follow.prepare(conn, 0)
    node = MovingNode(fork=fork, moved_to=moved_to, head=21)
    mismatch = forks.ForkMismatch("block 21 from the node does not link to stored block 20", 20)
    rolled = rollback.roll_back(conn, node, mismatch, Settings(database_url="postgresql://unused", rpc_url="http://unused"))
    assert rolled.done and f"depth {21 - moved_to}" in rolled.detail, rolled
    assert follow_state.state(conn).halted_at is None
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == moved_to


def test_reorgs_that_keep_landing_during_a_rollback_leave_the_job_waiting_and_do_not_halt_the_following(conn):
    insert_linked_blocks(conn, list(range(0, 21)))
    store.record_chain_id(conn, CHAIN)
    follow.prepare(conn, 0)
    node = MovingNode(fork=15, moved_to=12, head=21, restless=True)
    mismatch = forks.ForkMismatch("block 21 from the node does not link to stored block 20", 20)
    rolled = rollback.roll_back(conn, node, mismatch, Settings(database_url="postgresql://unused", rpc_url="http://unused"))
    # Nothing deleted, nothing recorded: the job waits and compares again, as when the node cannot be asked.
    assert not rolled.done and "compare again" in rolled.detail, rolled
    assert follow_state.state(conn).halted_at is None
    assert follow_state.last_reorg(conn) is None
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 21
