"""`indexer verify --roots`: the blocks' roots recomputed from the stored rows alone.

For each stored block, the JSON a node sent for it is rebuilt from its rows (the block, its
transactions with their receipts, its logs and withdrawals, and the unmapped keys kept in
`extra`), and `roots.check_block` recomputes its transactions, receipts and withdrawals roots
as the worker did before writing. A root that differs proves a row missing, extra or altered
since. A block stored before migration 005 lacks the fields the roots need (its `logs_bloom` is
NULL): it is reported as such, not as a mismatch. Blocks are read a window at a time, so memory
stays bounded whatever the range.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator

import psycopg

from . import roots

WINDOW_BLOCKS = 500

# A window's four reads see one snapshot: a block replaced between them would look tampered with.
SNAPSHOT = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"

BLOCKS = """
SELECT number, transactions_root, receipts_root, withdrawals_root, logs_bloom IS NULL
FROM blocks WHERE number >= %(lo)s AND number < %(hi)s ORDER BY number
"""

TRANSACTIONS = """
SELECT block_number, hash, from_address, to_address, type, nonce, gas, value, input, r, s, v, y_parity, chain_id,
       gas_price, max_priority_fee_per_gas, max_fee_per_gas, access_list, max_fee_per_blob_gas,
       blob_versioned_hashes, authorization_list, extra,
       status, root, cumulative_gas_used, logs_bloom, receipt_extra
FROM transactions WHERE block_number >= %(lo)s AND block_number < %(hi)s ORDER BY block_number, transaction_index
"""

LOGS = """
SELECT block_number, transaction_index, address, topic0, topic1, topic2, topic3, data
FROM logs WHERE block_number >= %(lo)s AND block_number < %(hi)s ORDER BY block_number, log_index
"""

WITHDRAWALS = """
SELECT block_number, withdrawal_index, validator_index, address, amount
FROM withdrawals WHERE block_number >= %(lo)s AND block_number < %(hi)s ORDER BY block_number, position
"""


@dataclass
class RootsReport:
    proven: int = 0
    mismatched: dict[int, str] = field(default_factory=dict)  # block -> what differs
    stored_before_columns: list[int] = field(default_factory=list)
    unprovable: Counter[str] = field(default_factory=Counter)  # reason -> blocks

    @property
    def ok(self) -> bool:
        return not (self.mismatched or self.stored_before_columns)


def as_data(value: bytes | None) -> str | None:
    """A stored bytea as a node sends it: 0x and hex digits (None for NULL)."""
    return None if value is None else "0x" + value.hex()


def as_quantity(value: Any) -> str | None:
    """A stored number as a node sends it: a hex quantity (None for NULL)."""
    return None if value is None else hex(int(value))


def _transaction(row: tuple) -> tuple[dict[str, Any], dict[str, Any]]:
    """A transaction and its receipt as a node sends them, from one `transactions` row."""
    (_, tx_hash, sender, to, kind, nonce, gas, value, data, r, s, v, y_parity, chain_id, gas_price, tip, fee_cap,
     access_list, blob_fee_cap, blob_hashes, authorizations, extra, status, root, cumulative, bloom,
     receipt_extra) = row
    tx = {
        **(extra or {}),
        "hash": as_data(tx_hash), "from": as_data(sender), "to": as_data(to), "type": as_quantity(kind),
        "nonce": as_quantity(nonce), "gas": as_quantity(gas), "value": as_quantity(value), "input": as_data(data),
        "r": as_quantity(r), "s": as_quantity(s), "v": as_quantity(v),
        "yParity": as_quantity(y_parity), "chainId": as_quantity(chain_id), "gasPrice": as_quantity(gas_price),
        "maxPriorityFeePerGas": as_quantity(tip), "maxFeePerGas": as_quantity(fee_cap), "accessList": access_list,
        "maxFeePerBlobGas": as_quantity(blob_fee_cap),
        "blobVersionedHashes": None if blob_hashes is None else [as_data(h) for h in blob_hashes],
        "authorizationList": authorizations,
    }
    receipt = {
        **(receipt_extra or {}),
        "transactionHash": as_data(tx_hash), "type": as_quantity(kind), "status": as_quantity(status),
        "root": as_data(root),
        "cumulativeGasUsed": as_quantity(cumulative), "logsBloom": as_data(bloom), "logs": [],
    }
    return {k: v for k, v in tx.items() if v is not None}, {k: v for k, v in receipt.items() if v is not None}


def _log(row: tuple) -> dict[str, Any]:
    _, _, address, *topics, data = row
    return {"address": as_data(address), "topics": [as_data(t) for t in topics if t is not None], "data": as_data(data)}


def _windows(start: int, end: int) -> Iterator[tuple[int, int]]:
    for lo in range(start, end, WINDOW_BLOCKS):
        yield lo, min(lo + WINDOW_BLOCKS, end)


def check(conn: psycopg.Connection, start: int, end: int, *, chain_id: int | None = None) -> RootsReport:
    """Proves the roots of the stored blocks in [start, end); missing blocks are `verify`'s."""
    report = RootsReport()
    for lo, hi in _windows(start, end):
        with conn.transaction():
            conn.execute(SNAPSHOT)
            _check_window(conn, lo, hi, chain_id, report)
    return report


def _check_window(conn: psycopg.Connection, lo: int, hi: int, chain_id: int | None, report: RootsReport) -> None:
    params = {"lo": lo, "hi": hi}
    headers = conn.execute(BLOCKS, params).fetchall()
    if not headers:
        return
    txs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    receipts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in conn.execute(TRANSACTIONS, params):
        tx, receipt = _transaction(row)
        txs[row[0]].append(tx)
        receipts[row[0]].append(receipt)
    for row in conn.execute(LOGS, params):
        block_receipts = receipts[row[0]]
        if row[1] < len(block_receipts):  # a log of a missing transaction shows as a mismatch
            block_receipts[row[1]]["logs"].append(_log(row))
    withdrawals: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for number, index, validator, address, amount in conn.execute(WITHDRAWALS, params):
        withdrawals[number].append({"index": as_quantity(index), "validatorIndex": as_quantity(validator),
                                    "address": as_data(address), "amount": as_quantity(amount)})
    for number, tx_root, receipt_root, withdrawal_root, before_columns in headers:
        if before_columns:
            report.stored_before_columns.append(number)
            continue
        block = {"number": hex(number), "transactions": txs.get(number, []),
                 "transactionsRoot": as_data(tx_root), "receiptsRoot": as_data(receipt_root)}
        if withdrawal_root is not None:
            block["withdrawalsRoot"] = as_data(withdrawal_root)
            block["withdrawals"] = withdrawals.get(number, [])
        try:
            reason = roots.check_block(block, receipts.get(number, []), chain_id=chain_id)
        except roots.RootMismatch as exc:
            report.mismatched[number] = str(exc)
            continue
        except (KeyError, TypeError, ValueError) as exc:  # rows stored unchecked, malformed
            report.mismatched[number] = f"block {number} cannot be rebuilt from its rows ({type(exc).__name__}: {exc})"
            continue
        if reason is None:
            report.proven += 1
        else:
            report.unprovable[reason] += 1
