"""Token transfers decoded from the stored logs of a range of blocks into `token_transfers`.

Which standard a log follows is told by its first topic and its shape (schema/008_decoded_events.sql
says what each shape means). The shapes whose fields sit at fixed places (ERC-20 and ERC-721
Transfer, ERC-1155 TransferSingle, the unindexed Transfer of early tokens) are decoded in C: the
transfer logs leave the database as one value (TRANSFER_LOGS, a record a log),
`_native_copy.transfers` tells their shapes apart and makes the rows, and they go back in as a
binary COPY. The database then spends 0.68x the CPU it spent decoding them itself, in
`DECODE_FIXED`'s `INSERT ... SELECT` with `abi_uint256()` (BENCHMARKS.md, "Token transfers
decoded in C"). DECODE_FIXED is the definition: it decodes where the C part is not built or
declines (a topic other than 32 bytes, an address or transaction hash over 32, a record missing
from the value), and the tests hold the two to the same rows and counts. Only TransferBatch
carries dynamic arrays; its logs are read here, decoded by eth-abi, and copied back.

A log of these events that does not fit its shape (a different event with the same signature,
a token that broke the standard, a truncated array) is skipped and counted by reason; it never
fails the job. Decoding a range deletes its rows first, so it can be redone at will.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import psycopg
from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_utils import keccak

from ..base import db

try:
    from ..chaindata import _native_copy
except ImportError:  # installed without a C compiler: DECODE_FIXED decodes them all
    _native_copy = None

TRANSFER = keccak(text="Transfer(address,address,uint256)")
TRANSFER_SINGLE = keccak(text="TransferSingle(address,address,address,uint256,uint256)")
TRANSFER_BATCH = keccak(text="TransferBatch(address,address,address,uint256[],uint256[])")

# Shapes decoded by DECODE_FIXED; every other shape it reports is a reason for skipping.
_ERC20, _ERC721, _UNINDEXED, _ERC1155 = "erc20", "erc721", "unindexed", "erc1155"
_BATCH = "batch"  # decoded here
FIXED_SHAPES = (_ERC20, _ERC721, _UNINDEXED, _ERC1155)

# A 32-byte word holds an address when its first 12 bytes are zero, as the ABI pads it.
_PADDED = "substring({} FROM 1 FOR 12) = '\\x000000000000000000000000'::bytea"
_ADDRESS = "substring({} FROM 13 FOR 20)"


def _padded(*words: str) -> str:
    return " AND ".join(_PADDED.format(w) for w in words)


_D1, _D2 = "substring(data FROM 1 FOR 32)", "substring(data FROM 33 FOR 32)"

# Every log of the three events in the range, told apart by shape; those of a fixed shape are
# inserted, and every shape is counted (the caller reports the others as skipped). Topics are
# filled in order, so `topic1 IS NULL` is a log with one topic, `topic3 IS NULL` one with three
# at most. The CTE is read twice, so it is computed once.
DECODE_FIXED = f"""
WITH shaped AS (
    SELECT block_number, log_index, transaction_hash, address, topic1, topic2, topic3, data,
           CASE
           WHEN topic0 = %(transfer)s THEN CASE
               WHEN topic3 IS NOT NULL AND length(data) = 0 THEN
                   CASE WHEN {_padded("topic1", "topic2")} THEN '{_ERC721}'
                        ELSE 'transfer: address with non-zero padding' END
               WHEN topic2 IS NOT NULL AND topic3 IS NULL AND length(data) = 32 THEN
                   CASE WHEN {_padded("topic1", "topic2")} THEN '{_ERC20}'
                        ELSE 'transfer: address with non-zero padding' END
               WHEN topic1 IS NULL AND length(data) = 96 THEN
                   CASE WHEN {_padded(_D1, _D2)} THEN '{_UNINDEXED}'
                        ELSE 'transfer: address with non-zero padding' END
               ELSE 'transfer: unexpected topics/data length' END
           WHEN topic0 = %(single)s THEN CASE
               WHEN topic3 IS NOT NULL AND length(data) = 64 THEN
                   CASE WHEN {_padded("topic1", "topic2", "topic3")} THEN '{_ERC1155}'
                        ELSE 'transfer single: address with non-zero padding' END
               ELSE 'transfer single: unexpected topics/data length' END
           ELSE CASE
               WHEN topic3 IS NOT NULL THEN '{_BATCH}'
               ELSE 'transfer batch: unexpected topics' END
           END AS shape
    FROM logs
    WHERE block_number BETWEEN %(first)s AND %(last)s AND topic0 IN (%(transfer)s, %(single)s, %(batch)s)
), inserted AS (
    INSERT INTO token_transfers (block_number, log_index, position, standard, token_address, from_address,
                                 to_address, token_id, amount, transaction_hash)
    SELECT block_number, log_index, 0,
           CASE shape WHEN '{_UNINDEXED}' THEN NULL WHEN '{_ERC1155}' THEN 'erc1155' ELSE shape END,
           address,
           CASE shape WHEN '{_UNINDEXED}' THEN {_ADDRESS.format(_D1)}
                      WHEN '{_ERC1155}' THEN {_ADDRESS.format("topic2")}
                      ELSE {_ADDRESS.format("topic1")} END,
           CASE shape WHEN '{_UNINDEXED}' THEN {_ADDRESS.format(_D2)}
                      WHEN '{_ERC1155}' THEN {_ADDRESS.format("topic3")}
                      ELSE {_ADDRESS.format("topic2")} END,
           CASE shape WHEN '{_ERC721}' THEN abi_uint256(topic3)
                      WHEN '{_ERC1155}' THEN abi_uint256({_D1}) END,
           CASE shape WHEN '{_ERC20}' THEN abi_uint256(data)
                      WHEN '{_ERC721}' THEN 1
                      WHEN '{_UNINDEXED}' THEN abi_uint256(substring(data FROM 65 FOR 32))
                      ELSE abi_uint256({_D2}) END,
           transaction_hash
    FROM shaped
    WHERE shape IN ('{_ERC20}', '{_ERC721}', '{_UNINDEXED}', '{_ERC1155}')
)
SELECT shape, count(*) FROM shaped GROUP BY shape
"""

# The logs DECODE_FIXED reads, with what it reads of them, as one value: each log's record for
# `_native_copy.transfers` (native_copy/transfers.h says its layout). One value, because reading
# them row by row (a COPY out) cost the client 2 µs a row, more than the database saved. Each
# record holds at most 32 bytes of a field, and data only of the lengths a shape reads: at most
# 293 bytes, so bytea's 1 GB holds 3.6 million transfer logs, and a decode window holds about
# 10,000 logs (decode_logs.WINDOW_LOGS; one block's, where a block has more). The value is NULL
# for a range without them; the count is there so that a log string_agg passed over (a NULL
# record) is seen, and the C decoder's answer declined.
TRANSFER_LOGS = """
SELECT count(*), string_agg(
    int8send(block_number) || int4send(log_index)
    || CASE topic0 WHEN %(transfer)s THEN '\\x01'::bytea WHEN %(single)s THEN '\\x02'::bytea ELSE '\\x03'::bytea END
    || int4send(length(transaction_hash)) || substring(transaction_hash FOR 32)
    || int4send(length(address)) || substring(address FOR 32)
    || int4send(coalesce(length(topic1), -1)) || coalesce(substring(topic1 FOR 32), ''::bytea)
    || int4send(coalesce(length(topic2), -1)) || coalesce(substring(topic2 FOR 32), ''::bytea)
    || int4send(coalesce(length(topic3), -1)) || coalesce(substring(topic3 FOR 32), ''::bytea)
    || int4send(length(data)) || CASE WHEN length(data) IN (0, 32, 64, 96) THEN data ELSE ''::bytea END,
    ''::bytea)
FROM logs
WHERE block_number BETWEEN %(first)s AND %(last)s AND topic0 IN (%(transfer)s, %(single)s, %(batch)s)
"""

# The TransferBatch logs DECODE_FIXED counted as `batch`, for eth-abi.
SELECT_BATCHES = """
SELECT block_number, log_index, transaction_hash, address, topic2, topic3, data
FROM logs
WHERE block_number BETWEEN %(first)s AND %(last)s AND topic0 = %(batch)s AND topic3 IS NOT NULL
ORDER BY block_number, log_index
"""

COPY_TRANSFERS = """
COPY token_transfers (block_number, log_index, position, standard, token_address, from_address, to_address,
                      token_id, amount, transaction_hash) FROM STDIN
"""
COPY_TRANSFERS_BINARY = COPY_TRANSFERS.rstrip() + " (FORMAT binary)"

DELETE_RANGE = "DELETE FROM token_transfers WHERE block_number BETWEEN %(first)s AND %(last)s"

_WORD_PADDING = bytes(12)


@dataclass
class Decoded:
    logs: int = 0  # logs of the three events decoded into rows
    transfers: int = 0  # rows written (a TransferBatch log writes one per pair)
    skipped: Counter[str] = field(default_factory=Counter)  # logs of the three events not decoded, by reason


def decode_range(conn: psycopg.Connection, first: int, last: int) -> Decoded:
    """Replaces the token transfers of blocks first..last with those decoded from their stored
    logs, in the caller's transaction (one of its own on an idle autocommit connection, so that a
    failure leaves the range as it was). The C decoder holds the range's transfer logs and rows in
    memory at once: callers keep a range to a window (decode_logs.WINDOW_LOGS)."""
    with db.own_transaction_if_idle(conn):
        return _decode_range(conn, first, last)


def _decode_range(conn: psycopg.Connection, first: int, last: int) -> Decoded:
    params = {"first": first, "last": last, "transfer": TRANSFER, "single": TRANSFER_SINGLE,
              "batch": TRANSFER_BATCH}
    conn.execute(DELETE_RANGE, params)
    result = Decoded()
    shapes = _decode_fixed_in_c(conn, params)
    if shapes is None:
        shapes = conn.execute(DECODE_FIXED, params).fetchall()
    for shape, count in shapes:
        if shape in FIXED_SHAPES:
            result.logs += count
            result.transfers += count
        elif shape != _BATCH:
            result.skipped[shape] += count
    batches = conn.execute(SELECT_BATCHES, params).fetchall()
    if batches:
        with conn.cursor().copy(COPY_TRANSFERS) as copy:
            for block_number, log_index, tx_hash, token, sender, receiver, data in batches:
                pairs = _batch_pairs(sender, receiver, data, result.skipped)
                if pairs is None:
                    continue
                result.logs += 1
                result.transfers += len(pairs)
                for position, (token_id, amount) in enumerate(pairs):
                    copy.write_row((block_number, log_index, position, "erc1155", token, sender[12:], receiver[12:],
                                    token_id, amount, tx_hash))
    return result


def _decode_fixed_in_c(conn: psycopg.Connection, params: dict) -> list[tuple[str, int]] | None:
    """What DECODE_FIXED does, its rows made by `_native_copy.transfers`: the count of each shape,
    or None (nothing written) where the C part is not built or declines the logs."""
    if _native_copy is None:
        return None
    with conn.cursor(binary=True) as cursor:
        logs, records = cursor.execute(TRANSFER_LOGS, params).fetchone()
    decoded = _native_copy.transfers(records or b"")
    del records  # the window's records, freed before its rows go out: a lower peak for the worker
    if decoded is None or sum(decoded[1].values()) != logs:
        return None
    rows, shapes = decoded
    if any(count for shape, count in shapes.items() if shape in FIXED_SHAPES):
        with conn.cursor().copy(COPY_TRANSFERS_BINARY) as copy:
            copy.write(rows)
    return list(shapes.items())


def _batch_pairs(sender: bytes | None, receiver: bytes | None, data: bytes,
                 skipped: Counter[str]) -> list[tuple[int, int]] | None:
    """A TransferBatch's (id, value) pairs, or None (counted in `skipped`) if it is malformed."""
    if sender is None or receiver is None:  # its topics were not stored in order: rows.py never does that
        skipped["transfer batch: unexpected topics"] += 1
        return None
    if sender[:12] != _WORD_PADDING or receiver[:12] != _WORD_PADDING:
        skipped["transfer batch: address with non-zero padding"] += 1
        return None
    try:
        ids, values = abi_decode(["uint256[]", "uint256[]"], data)
    except (DecodingError, OverflowError, ValueError):
        skipped["transfer batch: malformed arrays"] += 1
        return None
    if len(ids) != len(values):
        skipped["transfer batch: ids and values differ in length"] += 1
        return None
    return list(zip(ids, values))
