"""RPC JSON -> rows for the chain tables, checked for consistency before anything is written.

Rows come out already encoded as the fields of PostgreSQL's text COPY format, because on a
sparse chain the indexer is CPU-bound in Python: hex quantities become decimal strings, hashes
and byte strings keep their hex digits behind a `\\x` prefix (bytea's hex input), with no
round trip through `bytes` or `int` objects on the way to the database.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from .errors import IndexerError
from .rpc import RpcClient

BLOCK_COLUMNS = (
    "number", "hash", "parent_hash", "timestamp", "miner", "gas_used", "gas_limit",
    "base_fee_per_gas", "transaction_count", "log_count", "size", "extra_data",
    "state_root", "transactions_root", "receipts_root",
)
TRANSACTION_COLUMNS = (
    "block_number", "transaction_index", "hash", "from_address", "to_address", "value", "gas",
    "gas_price", "max_fee_per_gas", "max_priority_fee_per_gas", "input", "nonce", "type",
    "status", "gas_used", "cumulative_gas_used", "effective_gas_price", "contract_address",
)
LOG_COLUMNS = (
    "block_number", "log_index", "transaction_index", "transaction_hash", "address",
    "topic0", "topic1", "topic2", "topic3", "data",
)

NULL = "\\N"

# Every field is decimal, hex, a timestamp, or NULL; anything else in a line (a tab or newline
# smuggled into a "hash", say) would break the COPY framing, so such an answer is refused: a
# line must hold only these characters, and exactly one tab between each two columns.
_COPY_SAFE = re.compile(r"[0-9a-fA-FxN\\\t :+-]*")


class ChainDataError(IndexerError):
    """The node's answers disagree with each other (or a block is missing): refetch, then fail."""


@dataclass
class Rows:
    """One batch of consecutive blocks, ready for COPY."""

    first: int
    last: int
    blocks: list[str] = field(default_factory=list)  # one text COPY line per row
    transactions: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)


def _q(value: str | None) -> str:
    """A hex quantity as a decimal string."""
    return NULL if value is None else str(int(value, 16))


def _b(value: str | None) -> str:
    """Hex data as bytea hex input, its backslash escaped for the COPY text format."""
    if value is None:
        return NULL
    if value[:2] != "0x":
        raise ValueError(f"hex data without 0x: {value[:20]!r}")
    return "\\\\x" + value[2:]


def _timestamp(value: str) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(int(value, 16)))


def decode(first: int, blocks: list[Any], receipts: dict[int, list[Any]]) -> Rows:
    """Rows for blocks `first..first+len(blocks)-1`; `receipts` maps a block number to the
    receipts of that block (blocks without transactions may be absent)."""
    rows = Rows(first, first + len(blocks) - 1)
    previous_hash = None
    for offset, block in enumerate(blocks):
        number = first + offset
        if not isinstance(block, dict):
            raise ChainDataError(f"block {number}: the node returned no block")
        if int(block["number"], 16) != number:
            raise ChainDataError(f"block {number}: the node returned block {int(block['number'], 16)}")
        block_hash = block["hash"]
        if previous_hash is not None and block["parentHash"] != previous_hash:
            raise ChainDataError(f"block {number}: parent hash does not match block {number - 1} (reorg?)")
        previous_hash = block_hash
        txs = block["transactions"]
        block_receipts = receipts.get(number, []) if txs else []
        if block_receipts is None or len(block_receipts) != len(txs):
            got = "none" if block_receipts is None else len(block_receipts)
            raise ChainDataError(f"block {number}: {len(txs)} transactions but {got} receipts")
        log_count = 0
        n = str(number)
        for index, (tx, receipt) in enumerate(zip(txs, block_receipts)):
            if not isinstance(tx, dict):
                raise ChainDataError(f"block {number}: transactions came as hashes, not objects")
            tx_hash = tx["hash"]
            if receipt["transactionHash"] != tx_hash or receipt["blockHash"] != block_hash \
                    or int(receipt["transactionIndex"], 16) != index:
                raise ChainDataError(f"block {number}: receipt {index} does not belong to transaction {tx_hash}")
            status = receipt.get("status")
            rows.transactions.append("\t".join((
                n, str(index), _b(tx_hash), _b(tx["from"]), _b(tx.get("to")), _q(tx["value"]),
                _q(tx["gas"]), _q(tx.get("gasPrice")), _q(tx.get("maxFeePerGas")),
                _q(tx.get("maxPriorityFeePerGas")), _b(tx["input"]), _q(tx["nonce"]),
                _q(tx.get("type", "0x0")), _q(status), _q(receipt["gasUsed"]),
                _q(receipt["cumulativeGasUsed"]), _q(receipt.get("effectiveGasPrice")),
                _b(receipt.get("contractAddress")),
            )))
            for entry in receipt["logs"]:
                if entry["blockHash"] != block_hash or entry["transactionHash"] != tx_hash:
                    raise ChainDataError(f"block {number}: a log of transaction {index} belongs to another block")
                topics = entry["topics"]
                if len(topics) > 4:
                    raise ChainDataError(f"block {number}: a log has {len(topics)} topics")
                rows.logs.append("\t".join((
                    n, _q(entry["logIndex"]), str(index), _b(tx_hash), _b(entry["address"]),
                    *(_b(t) for t in topics), *([NULL] * (4 - len(topics))), _b(entry["data"]),
                )))
                log_count += 1
        rows.blocks.append("\t".join((
            n, _b(block_hash), _b(block["parentHash"]), _timestamp(block["timestamp"]),
            _b(block["miner"]), _q(block["gasUsed"]), _q(block["gasLimit"]),
            _q(block.get("baseFeePerGas")), str(len(txs)), str(log_count), _q(block.get("size")),
            _b(block["extraData"]), _b(block["stateRoot"]), _b(block["transactionsRoot"]),
            _b(block["receiptsRoot"]),
        )))
    for lines, columns in ((rows.blocks, BLOCK_COLUMNS), (rows.transactions, TRANSACTION_COLUMNS),
                           (rows.logs, LOG_COLUMNS)):
        for line in lines:
            if not _COPY_SAFE.fullmatch(line) or line.count("\t") != len(columns) - 1:
                raise ChainDataError(f"blocks {rows.first}..{rows.last}: a field is not hex data")
    return rows


def fetch(client: RpcClient, first: int, last: int) -> Rows:
    """Blocks `first..last` as rows, checked (`fetch_json`, then `decode`)."""
    try:
        return decode(first, *fetch_json(client, first, last))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ChainDataError(f"blocks {first}..{last}: malformed answer from the node ({type(exc).__name__}: {exc})") from None


def fetch_json(client: RpcClient, first: int, last: int) -> tuple[list[Any], dict[int, Any]]:
    """Blocks `first..last` with full transactions, then the receipts of the blocks that have
    any (asked for by block hash, so they cannot come from a different block at that height)."""
    blocks = client.batch([("eth_getBlockByNumber", (hex(n), True)) for n in range(first, last + 1)])
    with_txs = [b for b in blocks if isinstance(b, dict) and b.get("transactions")]
    answers = client.batch([("eth_getBlockReceipts", (b["hash"],)) for b in with_txs])
    return blocks, {int(b["number"], 16): r for b, r in zip(with_txs, answers)}


def chain_id(client: RpcClient) -> int:
    answer = client.call("eth_chainId")
    try:
        return int(answer, 16)
    except (TypeError, ValueError):
        raise ChainDataError(f"eth_chainId answered {str(answer)[:40]!r}, not a hex number") from None


def safe_head(client: RpcClient, *, confirmations: int, use_finalized: bool) -> int:
    """The highest block that may be indexed: the node's finalized block when asked for and
    reported, otherwise the head minus `confirmations` (-1 when nothing is safe yet)."""
    if use_finalized:
        finalized = client.call("eth_getBlockByNumber", "finalized", False)
        if isinstance(finalized, dict):
            return int(finalized["number"], 16)
    return int(client.call("eth_blockNumber"), 16) - confirmations
