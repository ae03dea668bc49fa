"""RPC JSON -> rows for the chain tables, checked for consistency before anything is written.

Fetching is here; decoding, the rows and their columns are in `rows.py` (one mapper per entity,
and where every key of a node's JSON goes). `decode` and `Rows` are re-exported here:
`chain.decode` is the entry point.

The node's single values (its chain id, its head, its finalized block) are parsed by the client
as they arrive (`quantity`, `RpcClient.call(parse=...)`): a value that is not a hex number is
asked of the other endpoints, and from none that answers better it is a `rpc_errors.BadAnswer` (a
ChainDataError) naming the endpoint and what it sent.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ..base import metrics
from ..base.errors import ChainDataError
from ..node.rpc import RpcClient
from ..node.rpc_batch import Fallback
from ..node.rpc_errors import ERROR, UNSUPPORTED, RpcError
from . import roots
from .rows import Rows, decode

log = logging.getLogger(__name__)

# Answers that disagree with each other (a reorg under the fetch, a node behind a load balancer
# answering from two heights) are asked again this many times before the job is given back
# (blocks and traces alike).
CHAIN_DATA_ATTEMPTS = 3

_QUANTITY = re.compile(r"0x[0-9a-fA-F]{1,64}")


def fetch(client: RpcClient, first: int, last: int, *, verify_roots: bool = False, chain_id: int | None = None,
          max_transactions: int | None = None) -> Rows:
    """Blocks `first..last` as rows, checked (`fetch_json`, then `decode`), and with
    `verify_roots`, each block's roots recomputed from what was fetched (`roots.check_block`):
    a mismatch is a ChainDataError naming the endpoints; a block that cannot be checked is kept,
    its reason in `rows.unproven`. With `max_transactions`, the rows may end before `last`
    (`rows.last`): see `fetch_json`."""
    try:
        blocks, receipts = fetch_json(client, first, last, max_transactions=max_transactions)
        unproven: list[str] = []

        def check(number: int, block: dict[str, Any]) -> None:
            # The receipts' own blooms go into their encodings: the receipts root commits to
            # them, so a bloom that disagrees with its logs is a mismatch all the same, and no
            # address or topic is hashed (BENCHMARKS.md, "Root checks").
            reason = roots.check_block(block, receipts.get(number, []), chain_id=chain_id, recompute_blooms=False)
            if reason is not None:
                unproven.append(reason)

        rows = decode(first, blocks, receipts, then=check if verify_roots else None)
        rows.unproven += unproven
        return rows
    except roots.RootMismatch as exc:
        raise roots.RootMismatch(f"{exc} from {_endpoints(client)}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ChainDataError(f"blocks {first}..{last}: malformed answer from {_endpoints(client)} "
                             f"({type(exc).__name__}: {exc})") from None


def _endpoints(client: RpcClient) -> str:
    """Which endpoints a batch's answers came from: any of them, as requests go to each in turn."""
    return " or ".join(e.label for e in client.endpoints)


def fetch_json(client: RpcClient, first: int, last: int, *,
               max_transactions: int | None = None) -> tuple[list[Any], dict[int, Any]]:
    """Blocks `first..last` with full transactions, then the receipts of the blocks that have
    any: by block hash (eth_getBlockReceipts), so they cannot come from a different block at
    that height, or, from an endpoint that lacks that method, one by one by transaction hash
    (`_receipts_by_transaction`). The client decides which, endpoint by endpoint.

    With `max_transactions`, the blocks end early, at the first block whose transactions bring
    the total to `max_transactions` or more (`_within`): memory then holds at most that many
    transactions and one block's worth over, however dense the range turns out to be."""
    if max_transactions is None:
        blocks = client.batch([("eth_getBlockByNumber", (hex(n), True)) for n in range(first, last + 1)])
    else:
        blocks = _within(client, first, last, max_transactions)
    with_txs = [b for b in blocks if isinstance(b, dict) and b.get("transactions")]
    answers = client.batch([("eth_getBlockReceipts", (b["hash"],)) for b in with_txs],
                           fallback=_receipts_by_transaction(with_txs))
    for block, receipts in zip(with_txs, answers):
        if isinstance(receipts, list) and None in receipts:
            missing = block["transactions"][receipts.index(None)]
            raise ChainDataError(
                f"block {int(block['number'], 16)}: the node has no receipt for transaction "
                f"{missing['hash'] if isinstance(missing, dict) else missing} (its transaction index may not reach "
                "back this far)")
    return blocks, {int(b["number"], 16): r for b, r in zip(with_txs, answers)}


def _within(client: RpcClient, first: int, last: int, max_transactions: int) -> list[Any]:
    """The blocks from `first` up to the one that brings their transactions to
    `max_transactions` (or up to `last`), with full transactions.

    A block's transaction count is known only once it is fetched, and a block with its full
    transactions weighs a hundred times its hashes: the headers come first, with hashes only,
    `client.max_batch` at a time, and only the blocks kept that have transactions are fetched
    again in full, by hash, so that a block replaced in between (a reorg) is missing rather than
    mixed in. A header without transactions is the same either way, so an empty chain costs no
    more calls than before."""
    kept: list[Any] = []
    total = 0
    n = first
    while n <= last and total < max_transactions:
        end = min(last, n + client.max_batch - 1)
        for header in client.batch([("eth_getBlockByNumber", (hex(b), False)) for b in range(n, end + 1)]):
            kept.append(header)
            total += len(header["transactions"]) if isinstance(header, dict) else 0
            if total >= max_transactions:
                break
        n = end + 1
    dense = [i for i, b in enumerate(kept) if isinstance(b, dict) and b.get("transactions")]
    for i, block in zip(dense, client.batch([("eth_getBlockByHash", (kept[i]["hash"], True)) for i in dense])):
        kept[i] = block
    return kept


def _receipts_by_transaction(blocks: list[dict[str, Any]]) -> Fallback:
    """The `rpc_batch.Fallback` for an endpoint without eth_getBlockReceipts (go-ethereum before 1.13,
    several providers): the receipts of a block asked by eth_getTransactionReceipt of each of its
    transactions, in transaction order. `decode` checks that each belongs to its block and
    transaction, as it does for a block's receipts."""
    hashes = {b["hash"]: [tx["hash"] if isinstance(tx, dict) else tx for tx in b["transactions"]] for b in blocks}

    def by_transaction(call: tuple[str, Any]) -> list[tuple[str, Any]]:
        return [("eth_getTransactionReceipt", (h,)) for h in hashes[call[1][0]]]

    return Fallback("eth_getBlockReceipts", "eth_getTransactionReceipt", by_transaction)


def quantity(value: Any) -> int:
    """A JSON-RPC quantity ("0x1b4") as a number; ValueError for anything else: "0xzz", null, a
    JSON number, "12" (int() alone would take the last, and " 0x1_0 ")."""
    if not isinstance(value, str) or not _QUANTITY.fullmatch(value):
        raise ValueError("not a hex number")
    return int(value, 16)


def _block_number(block: Any) -> int | None:
    """The number of a block answered by eth_getBlockByNumber; None for no block (null)."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValueError("not a block")
    try:
        return quantity(block.get("number"))
    except ValueError:
        raise ValueError("its number is not a hex number") from None


def chain_id(client: RpcClient) -> int:
    return client.call("eth_chainId", parse=quantity)


def head(client: RpcClient) -> int:
    """The number of the node's latest block."""
    return client.call("eth_blockNumber", parse=quantity)


def safe_head(client: RpcClient, *, confirmations: int, tag: str | None) -> int:
    """The highest block that may be indexed: the node's block of `tag` ("finalized" or "safe")
    when asked for and reported, otherwise the head minus `confirmations` (-1 when nothing is safe
    yet)."""
    if tag is not None:
        tagged = client.call("eth_getBlockByNumber", tag, False, parse=_block_number)
        if tagged is not None:
            return tagged
    return head(client) - confirmations


class SafeHead:
    """The highest block that may be indexed, asked of the node only when a job reaches past the
    one known already: a job inside it starts without a round trip to a busy node."""

    def __init__(self, client: RpcClient, *, confirmations: int, tag: str | None) -> None:
        self.client = client
        self.confirmations = confirmations
        self.tag = tag  # the node's tag read ("finalized", "safe"), or None: head - confirmations
        self.known: int | None = None  # it only grows

    def at_least(self, wanted: int) -> int:
        """The safe head; asks the node unless the one known is at `wanted` or above."""
        if self.known is not None and self.known >= wanted:
            return self.known
        try:
            safe = safe_head(self.client, confirmations=self.confirmations, tag=self.tag)
        except RpcError as exc:
            # Only a node that answers the question with an error ("finalized block not found"
            # before the merge, an unknown tag) cannot report one; a node that is down, rate
            # limited or talking nonsense is no reason to stop using it for good.
            if self.tag is None or exc.kind not in (ERROR, UNSUPPORTED):
                raise
            log.warning("the node cannot report a %s block; using head - %d", self.tag, self.confirmations)
            self.tag = None
            safe = safe_head(self.client, confirmations=self.confirmations, tag=None)
        metrics.counted.safe_head.set(safe)
        self.known = safe
        return safe
