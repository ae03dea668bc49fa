"""Whether the node's blocks belong to the same chain as the blocks stored around them, and what
may be deleted when they do not.

A batch is written only if its first block's parent is the stored block below it, and the stored
block above its last names it as parent (each check only when that neighbour is stored). After a
reorg below stored blocks, the node's blocks link to a fork the database does not hold: writing
them would store a second fork beside the first, each half looking consistent on its own. The
worker checks in the transaction that writes the batch, and on a mismatch defers the job with no
attempt spent (`worker.py`): no retry can link while the orphans are stored, and once
`indexer verify --against-node --repair` has removed them, the same job links and completes.

`plan_rollback` decides what such a repair may delete, before anything is: the stored blocks
whose hash is not the node's (the orphans) go only if the node serves the chain the database
records, its answers link to each other from the stored block below the orphans up to the top of
the blocks compared, it agrees with that stored block (the fork point is real), and the orphans
reach at most `max_depth` blocks above it. A node of another chain, one answering wrong hashes or
from two forks at once, or a reorg deeper than anyone expects, is a refusal with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import psycopg

from ..base.errors import ChainDataError
from ..node.rpc import RpcClient
from . import chain, store
from .rows import Rows

Run = tuple[int, int]  # first, last: inclusive

# The node's headers asked, and stored hashes read, this many at a time.
WINDOW = 1_000

# The stored neighbours of a batch: the block below its first and the block above its last.
STORED_NEIGHBOURS = """
SELECT number, hash, parent_hash FROM blocks WHERE number = %(below)s OR number = %(above)s
"""

# The highest stored block below the orphans: where the stored chain and the node's must meet.
STORED_BELOW = "SELECT number, hash FROM blocks WHERE number < %(number)s ORDER BY number DESC LIMIT 1"

STORED_HASHES_BETWEEN = "SELECT number, hash FROM blocks WHERE number BETWEEN %(first)s AND %(last)s"


class ForkMismatch(ChainDataError):
    """The batch and the stored blocks next to it are on different forks."""

    def __init__(self, message: str, stored: int) -> None:
        super().__init__(message)
        self.stored = stored  # the stored block the batch does not link to

    def repair_command(self, max_depth: int) -> str:
        """The `indexer verify` that finds and removes the orphans around the stored block, as
        deep as a repair goes by default on either side of it."""
        return (f"indexer verify --from {max(0, self.stored - max_depth)} --to {self.stored + max_depth + 1}"
                " --against-node --repair")


def _hashes(line: str) -> tuple[str, str]:
    """(hash, parent_hash) of a block's COPY line: its columns start with number, hash and
    parent_hash, as bytea hex input with the backslash escaped (`\\\\x...`)."""
    _, block_hash, parent_hash = line.split("\t", 3)[:3]
    # Lower case, as bytes.hex() gives the stored ones: a node may answer in either.
    return ("0x" + block_hash.removeprefix("\\\\x")).lower(), ("0x" + parent_hash.removeprefix("\\\\x")).lower()


def check_links(conn: psycopg.Connection, rows: Rows) -> None:
    """Raises ForkMismatch unless `rows` link to the stored blocks on either side of them."""
    if not rows.blocks:
        return
    first_hash, first_parent = _hashes(rows.blocks[0])
    last_hash, _ = _hashes(rows.blocks[-1]) if len(rows.blocks) > 1 else (first_hash, first_parent)
    stored = {number: ("0x" + bytes(h).hex(), "0x" + bytes(p).hex())
              for number, h, p in conn.execute(STORED_NEIGHBOURS, {"below": rows.first - 1, "above": rows.last + 1})}
    below = stored.get(rows.first - 1)
    if below is not None and below[0] != first_parent:
        raise ForkMismatch(
            f"block {rows.first} from the node does not link to stored block {rows.first - 1}: its parent is"
            f" {first_parent}, the stored block's hash is {below[0]} (a reorg below the stored blocks?)",
            rows.first - 1)
    above = stored.get(rows.last + 1)
    if above is not None and above[1] != last_hash:
        raise ForkMismatch(
            f"stored block {rows.last + 1} does not link to block {rows.last} from the node: its parent is"
            f" {above[1]}, the node's block hash is {last_hash} (a reorg below the stored blocks?)",
            rows.last + 1)


# -- what a repair may delete ----------------------------------------------------------------------


@dataclass(frozen=True)
class Rollback:
    """Stored blocks that may be deleted: checked against the node by `plan_rollback`."""

    anchor: int  # the highest stored block below the orphans; the node has it too
    orphans: list[Run]  # the stored blocks above it whose hash is not the node's
    depth: int  # from the anchor up to the highest orphan
    canonical: dict[int, bytes]  # the node's hash of each orphan's height: a block stored since with it is no orphan


@dataclass(frozen=True)
class Refusal:
    """Why nothing may be deleted."""

    reason: str
    depth: int | None = None  # set when the orphans are the only trouble: they reach this deep
    again: bool = False  # the node's answers changed since the comparison (a reorg under way): compare again


def other_chain(conn: psycopg.Connection, client: RpcClient) -> str | None:
    """Why the node cannot speak for the stored chain: it serves another chain than the one the
    database records (as `indexer work` refuses it). None when it serves that chain, or when the
    database records none yet."""
    recorded = store.recorded_chain_id(conn)
    served = chain.chain_id(client)
    if recorded is not None and served != recorded:
        return f"this database indexes chain {recorded}, but the node serves chain {served}"
    return None


def _header(n: int, block: object) -> tuple[bytes, bytes] | str:
    """(hash, parent hash) of the node's block `n`, or what is wrong with its answer."""
    if not isinstance(block, dict):
        return f"the node has no block {n}, below its head"
    try:
        if int(block["number"], 16) != n:
            return f"the node answered block {int(block['number'], 16)} when asked for block {n}"
        return bytes.fromhex(block["hash"].removeprefix("0x")), bytes.fromhex(block["parentHash"].removeprefix("0x"))
    except (KeyError, TypeError, ValueError, AttributeError):
        return f"the node's block {n} has no hex number, hash or parentHash: {str(block)[:80]}"


def plan_rollback(conn: psycopg.Connection, client: RpcClient, orphans: Sequence[Run], top: int, *,
                  max_depth: int, window: int = WINDOW, compared_from: int | None = None) -> Rollback | Refusal:
    """Whether the stored blocks of `orphans` (sorted runs, found to differ from the node's) may
    be deleted, asking the node again: reads only, outside any transaction. `top` is the highest
    stored block compared with the node (at or above the last orphan): its answers must link up
    to it, so that a node answering from two forks cannot pass for a reorg. The orphans found
    again must be the ones given; a node whose answers changed meanwhile is refused too, `again`
    (as is one that no longer agrees with the stored block below the orphans when the comparison,
    from block `compared_from` up, found it the node's)."""
    if store.recorded_chain_id(conn) is None:
        return Refusal("the database records no chain yet (`indexer work` records it): nothing shows that the node"
                       " serves the stored blocks' chain")
    if (reason := other_chain(conn, client)) is not None:
        return Refusal(reason)
    fork, highest = orphans[0][0], orphans[-1][1]
    below = conn.execute(STORED_BELOW, {"number": fork}).fetchone()
    if below is None:
        return Refusal(f"no block below {fork:,} is stored, so none shows that the node's chain and the stored one"
                       " share a block (a node of another chain, or one answering wrong hashes?)")
    anchor, anchor_hash = below[0], bytes(below[1])
    depth = highest - anchor
    if depth > max_depth:
        return Refusal(f"the orphans reach {depth:,} blocks above stored block {anchor:,}, the highest below them:"
                       f" deeper than the maximum of {max_depth:,}", depth)
    found: list[Run] = []
    canonical: dict[int, bytes] = {}
    above: bytes | None = None  # the node's hash of the block below the one looked at
    for first in range(anchor, top + 1, window):
        last = min(top, first + window - 1)
        answers = client.batch([("eth_getBlockByNumber", (hex(n), False)) for n in range(first, last + 1)])
        stored = {n: bytes(h) for n, h in conn.execute(STORED_HASHES_BETWEEN, {"first": first, "last": last})}
        for n, block in zip(range(first, last + 1), answers):
            header = _header(n, block)
            if isinstance(header, str):
                return Refusal(header)
            block_hash, parent = header
            if n == anchor:
                if block_hash != anchor_hash:
                    if compared_from is not None and anchor >= compared_from:
                        return Refusal(f"the node's block {anchor:,} changed since it was compared (a deeper reorg"
                                       " under way?): compare again", again=True)
                    return Refusal(
                        f"the node's block {anchor:,} is not the stored one either, so the stored chain and the node's"
                        f" share no block below the orphans from {fork:,} (a node of another chain, one answering"
                        " wrong hashes, or a fork below the blocks compared?)")
            elif parent != above:
                return Refusal(f"the node's block {n:,} does not name its block {n - 1:,} as parent: its answers do not"
                               " form one chain (a node answering wrong hashes, or from two forks?)")
            elif n in stored and stored[n] != block_hash:
                canonical[n] = block_hash
                if found and found[-1][1] == n - 1:
                    found[-1] = (found[-1][0], n)
                else:
                    found.append((n, n))
            above = block_hash
    if found != list(orphans):
        return Refusal("the node's hashes changed since they were compared (a reorg under way?): compare again",
                       again=True)
    return Rollback(anchor, found, depth, canonical)
