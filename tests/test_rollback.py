"""`forks.plan_rollback`, the guard of every deletion a repair makes, against stored blocks in
PostgreSQL and a small stand-in node whose answers each test writes (tests/test_reorg.py runs the
same guard through `indexer verify` against anvil)."""

from __future__ import annotations

from typing import Any

from indexer import forks, store

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
        "the node's hashes changed since they were compared (a reorg under way?): compare again")
    assert forks.plan_rollback(conn, Node(fork=12, head=25, lacks=14), [(12, 20)], 20, max_depth=64) == \
        forks.Refusal("the node has no block 14, below its head")
