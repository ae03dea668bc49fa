"""Whether a batch from the node belongs to the same chain as the blocks stored around it.

A batch is written only if its first block's parent is the stored block below it, and the stored
block above its last names it as parent (each check only when that neighbour is stored). After a
reorg below stored blocks, the node's blocks link to a fork the database does not hold: writing
them would store a second fork beside the first, each half looking consistent on its own. The
worker checks in the transaction that writes the batch, and gives the job back on a mismatch;
`indexer verify --against-node --repair` removes the stored orphans, after which the batch links.
"""

from __future__ import annotations

import psycopg

from .rows import ChainDataError, Rows

# The stored neighbours of a batch: the block below its first and the block above its last.
STORED_NEIGHBOURS = """
SELECT number, hash, parent_hash FROM blocks WHERE number = %(below)s OR number = %(above)s
"""


class ForkMismatch(ChainDataError):
    """The batch and the stored blocks next to it are on different forks."""


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
            f" {first_parent}, the stored block's hash is {below[0]} (a reorg below the stored blocks?"
            " `indexer verify --against-node` finds the orphans)")
    above = stored.get(rows.last + 1)
    if above is not None and above[1] != last_hash:
        raise ForkMismatch(
            f"stored block {rows.last + 1} does not link to block {rows.last} from the node: its parent is"
            f" {above[1]}, the node's block hash is {last_hash} (a reorg below the stored blocks?"
            " `indexer verify --against-node` finds the orphans)")
