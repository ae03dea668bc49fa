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


def _hex(value: bytes | None) -> str | None:
    return None if value is None else "0x" + value.hex()


def _q(value: Any) -> str | None:
    return None if value is None else hex(int(value))


def _transaction(row: tuple) -> tuple[dict[str, Any], dict[str, Any]]:
    """A transaction and its receipt as a node sends them, from one `transactions` row."""
    (_, tx_hash, sender, to, kind, nonce, gas, value, data, r, s, v, y_parity, chain_id, gas_price, tip, fee_cap,
     access_list, blob_fee_cap, blob_hashes, authorizations, extra, status, root, cumulative, bloom,
     receipt_extra) = row
    tx = {
        **(extra or {}),
        "hash": _hex(tx_hash), "from": _hex(sender), "to": _hex(to), "type": _q(kind), "nonce": _q(nonce),
        "gas": _q(gas), "value": _q(value), "input": _hex(data), "r": _q(r), "s": _q(s), "v": _q(v),
        "yParity": _q(y_parity), "chainId": _q(chain_id), "gasPrice": _q(gas_price),
        "maxPriorityFeePerGas": _q(tip), "maxFeePerGas": _q(fee_cap), "accessList": access_list,
        "maxFeePerBlobGas": _q(blob_fee_cap),
        "blobVersionedHashes": None if blob_hashes is None else [_hex(h) for h in blob_hashes],
        "authorizationList": authorizations,
    }
    receipt = {
        **(receipt_extra or {}),
        "transactionHash": _hex(tx_hash), "type": _q(kind), "status": _q(status), "root": _hex(root),
        "cumulativeGasUsed": _q(cumulative), "logsBloom": _hex(bloom), "logs": [],
    }
    return {k: v for k, v in tx.items() if v is not None}, {k: v for k, v in receipt.items() if v is not None}


def _log(row: tuple) -> dict[str, Any]:
    _, _, address, *topics, data = row
    return {"address": _hex(address), "topics": [_hex(t) for t in topics if t is not None], "data": _hex(data)}


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
        withdrawals[number].append({"index": _q(index), "validatorIndex": _q(validator),
                                    "address": _hex(address), "amount": _q(amount)})
    for number, tx_root, receipt_root, withdrawal_root, before_columns in headers:
        if before_columns:
            report.stored_before_columns.append(number)
            continue
        block = {"number": hex(number), "transactions": txs.get(number, []),
                 "transactionsRoot": _hex(tx_root), "receiptsRoot": _hex(receipt_root)}
        if withdrawal_root is not None:
            block["withdrawalsRoot"] = _hex(withdrawal_root)
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
