"""A node's JSON -> text COPY lines for `blocks`, `transactions` (with their receipts), `logs` and
`withdrawals`, checked for consistency before anything is written; `chain.decode` is the entry
point.

Every key a node sends ends up somewhere, so that nothing it says is dropped:
- in a column (`columns.py`'s `*_KEYS`: the key, its column, how it is stored), or
- checked: redundant with a stored value and compared with it (`*_CHECKED`); a disagreement is
  a `ChainDataError`, or
- in the row's `extra` jsonb (`receipt_extra` for a receipt's keys): every other key, verbatim,
  with its JSON value. Chain-specific fields (an L2's L1 fees, deposit transactions, Arbitrum's
  `l1BlockNumber`, Parity's `author`...) land there; `extra` is NULL when there is none, which is
  the common case.

Rows come out already encoded as the fields of PostgreSQL's text COPY format, because on a
sparse chain the indexer is CPU-bound in Python: hex quantities become decimal strings, hashes
and byte strings keep their hex digits behind a `\\x` prefix (bytea's hex input), with no round
trip through `bytes` or `int` objects on the way to the database. Lists of hashes become bytea[]
literals, and JSON values jsonb text, escaped for COPY.

`_native_rows.c` makes the same lines in C where the install could compile it
(scripts/build_native.py), for the strict common form only (exact dicts and str, hex as "0x" and
digits, no key for `extra`, the checked keys spelled as the block spells them): it answers a line
or None, and for None the functions below make the line or word the error, so both give the same
rows on every input (tests/unit/test_native_rows.py). `NATIVE` says whether it is here.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from ..base.errors import ChainDataError
from .columns import (BLOCK_CHECKED, BLOCK_COLUMNS, BLOCK_KEYS, LOG_CHECKED, LOG_COLUMNS, LOG_KEYS, RECEIPT_CHECKED,
                      RECEIPT_KEYS, TRANSACTION_CHECKED, TRANSACTION_COLUMNS, TRANSACTION_KEYS, WITHDRAWAL_CHECKED,
                      WITHDRAWAL_COLUMNS, WITHDRAWAL_KEYS)

try:
    from . import _native_rows
except ImportError:  # installed where no C compiler was found: every line is made in Python
    _native_rows = None

NATIVE = _native_rows is not None


# The tabs in the part of a line `_checked` checks: the columns before those checked on their own.
_BLOCK_TABS = BLOCK_COLUMNS.index("logs_bloom") - 1
_TRANSACTION_TABS = TRANSACTION_COLUMNS.index("logs_bloom") - 1
_LOG_TABS = LOG_COLUMNS.index("data") - 1
_WITHDRAWAL_TABS = WITHDRAWAL_COLUMNS.index("extra") - 1

_BLOCK_KNOWN = frozenset(BLOCK_KEYS) | frozenset(BLOCK_CHECKED)
_TRANSACTION_KNOWN = frozenset(TRANSACTION_KEYS) | frozenset(TRANSACTION_CHECKED)
_RECEIPT_KNOWN = frozenset(RECEIPT_KEYS) | frozenset(RECEIPT_CHECKED)
_LOG_KNOWN = frozenset(LOG_KEYS) | frozenset(LOG_CHECKED)
_WITHDRAWAL_KNOWN = frozenset(WITHDRAWAL_KEYS) | frozenset(WITHDRAWAL_CHECKED)

NULL = "\\N"

# Every short field is decimal, hex, a timestamp, or NULL; anything else (a tab or newline
# smuggled into a "hash", say) would break the COPY framing, so such an answer is refused: that
# part of a line must hold only these characters (what the regex [0-9a-fA-FxN\\\t :+-]* says, at
# twice its speed: deleting them must leave nothing), and exactly one tab between each two
# columns.
_COPY_SAFE = b"0123456789abcdefABCDEFxN\\\t :+-"
_HEX = re.compile(r"0x[0-9a-fA-F]*")
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # an escaped NUL, not an escaped backslash and "u0000"


@dataclass
class Rows:
    """One batch of consecutive blocks, ready for COPY."""

    first: int
    last: int
    blocks: list[str] = field(default_factory=list)  # one text COPY line per row
    transactions: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    withdrawals: list[str] = field(default_factory=list)
    unproven: list[str] = field(default_factory=list)  # why a block's roots could not be checked, one per block

    def up_to(self, last: int) -> Rows:
        """These rows without the blocks above `last` (a split gave them to another job): every
        line starts with its block number."""
        def kept(lines: list[str]) -> list[str]:
            return [line for line in lines if int(line[:line.index("\t")]) <= last]
        return Rows(self.first, last, kept(self.blocks), kept(self.transactions), kept(self.logs),
                    kept(self.withdrawals), self.unproven)


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


def _data(value: str, number: int) -> str:
    """Long hex data as bytea hex input, checked on its own: pairs of hex digits only."""
    digits = value[2:]
    try:  # bytes.fromhex skips whitespace: then it returns fewer bytes than digit pairs
        if value[:2] == "0x" and 2 * len(bytes.fromhex(digits)) == len(digits):
            return "\\\\x" + digits
    except ValueError:
        pass
    raise ChainDataError(f"block {number}: a field is not hex data: {value[:40]!r}")


# The logs bloom of a block or receipt without logs, as a node sends it (roots.py compares with it too).
ZERO_BLOOM = "0x" + "0" * 512
_ZERO_BLOOM_FIELD = "\\\\x" + "0" * 512


def _bloom(value: str | None, number: int) -> str:
    """A logs bloom (256 bytes) as bytea, checked on its own: its 512 digits in a line's head
    cost more to check there than all the other short fields. Required: every header and every
    receipt has one, and NULL in logs_bloom marks a row stored before migration 005."""
    if value == ZERO_BLOOM:  # a block or receipt without logs, compared at once
        return _ZERO_BLOOM_FIELD
    if value is None:
        raise ValueError("logsBloom is null")
    return _data(value, number)


def _timestamp(value: str) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(int(value, 16)))


def _hashes(values: list[str] | None, number: int) -> str:
    """A list of hex data as a bytea[] literal in COPY text: {"\\\\xab..","\\\\xcd.."}."""
    if values is None:
        return NULL
    if not values:
        return "{}"
    for value in values:
        if type(value) is not str or not _HEX.fullmatch(value):
            raise ChainDataError(f"block {number}: not hex data in a list of hashes: {str(value)[:80]!r}")
    return '{"\\\\\\\\x' + '","\\\\\\\\x'.join(value[2:] for value in values) + '"}'


def copy_text(text: str) -> str:
    """Text as a field of the COPY text format: backslash, tab, newline and carriage return
    escaped (every other character stands for itself)."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def jsonb_text(value: Any) -> str:
    """A JSON value as the text jsonb stores; ChainDataError for one it cannot (a NUL character):
    said here, not by the database."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits (msgspec reads them exactly): jsonb holds it
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise ChainDataError(f"a JSON value holds a NUL character, which jsonb cannot store: {text[:80]!r}")
    return text


def _json(value: Any) -> str:
    """Any JSON value as jsonb text in a COPY line (NULL for None)."""
    if value is None:
        return NULL
    if value == []:
        return "[]"
    return copy_text(jsonb_text(value))


def _extra(item: dict[str, Any], known: frozenset[str]) -> str:
    """The keys of `item` that have no column and are not checked, as jsonb; NULL when none."""
    if known.issuperset(item):
        return NULL
    return _json({key: value for key, value in item.items() if key not in known})


def _is_quantity(value: Any, expected: int) -> bool:
    if type(value) is int:  # some nodes send a receipt's blockTimestamp as a JSON number
        return value == expected
    try:
        return int(value, 16) == expected
    except (TypeError, ValueError):
        return False


def _is_data(value: Any, expected: str | None) -> bool:
    if value == expected:
        return True
    return type(value) is str and type(expected) is str and value.lower() == expected.lower()


def _disagree(number: int, what: str, key: str, value: Any, stored: str) -> ChainDataError:
    return ChainDataError(f"block {number}: {what}'s {key} {str(value)[:80]!r} disagrees with {stored}")


def _checked(line: str, tabs: int, number: int) -> str:
    try:
        # Every backslash must be one we wrote: the `\\x` of a bytea or the `\N` of a NULL. A
        # node's "0xab\146" would otherwise reach COPY as an octal escape, another byte.
        if not line.encode("ascii").translate(None, _COPY_SAFE) and line.count("\t") == tabs \
                and line.count("\\") == 2 * line.count("\\\\x") + line.count("\\N"):
            return line
    except UnicodeEncodeError:
        pass
    raise ChainDataError(f"block {number}: a field is not hex data")


def block_line(block: dict[str, Any], number: int, transaction_count: int, log_count: int) -> str:
    """The `blocks` row of a block whose transactions, receipts and logs were checked."""
    get = block.get
    withdrawals = get("withdrawals")
    line = _checked("\t".join((
        str(number), _b(block["hash"]), _b(block["parentHash"]), _timestamp(block["timestamp"]),
        _b(block["miner"]), _q(block["gasUsed"]), _q(block["gasLimit"]),
        _q(get("baseFeePerGas")), str(transaction_count), str(log_count), _q(get("size")),
        _b(block["extraData"]), _b(block["stateRoot"]), _b(block["transactionsRoot"]),
        _b(block["receiptsRoot"]),
        _b(get("nonce")), _b(get("mixHash")), _b(get("sha3Uncles")), _q(get("difficulty")), _q(get("totalDifficulty")),
        _b(get("withdrawalsRoot")), NULL if withdrawals is None else str(len(withdrawals)),
        _q(get("blobGasUsed")), _q(get("excessBlobGas")),
        _b(get("parentBeaconBlockRoot")), _b(get("requestsHash")),
    )), _BLOCK_TABS, number)
    return "\t".join((line, _bloom(block["logsBloom"], number), _hashes(get("uncles"), number),
                      _extra(block, _BLOCK_KNOWN)))


def transaction_line(tx: dict[str, Any], receipt: dict[str, Any], block: dict[str, Any],
                     number: int, index: int) -> str:
    """The `transactions` row of transaction `index` of `block` and its receipt; checks the keys
    of both that repeat what is stored elsewhere (TRANSACTION_CHECKED, RECEIPT_CHECKED)."""
    get, receipt_get = tx.get, receipt.get
    tx_hash, block_hash = tx["hash"], block["hash"]
    number_hex, timestamp, position = block["number"], block["timestamp"], receipt["transactionIndex"]
    if receipt["transactionHash"] != tx_hash or receipt["blockHash"] != block_hash \
            or int(position, 16) != index:
        raise ChainDataError(f"block {number}: receipt {index} does not belong to transaction {tx_hash}")
    sender, to, kind = tx["from"], get("to"), get("type", "0x0")
    # Fast path: the keys as this block and receipt spell them; otherwise compared by value.
    if get("blockHash", block_hash) != block_hash or get("blockNumber", number_hex) != number_hex \
            or get("transactionIndex", position) != position or get("blockTimestamp", timestamp) != timestamp \
            or receipt_get("blockNumber", number_hex) != number_hex \
            or ((stamp := receipt_get("blockTimestamp", timestamp)) != timestamp  # anvil: a number
                and stamp != int(timestamp, 16)) \
            or receipt_get("from", sender) != sender or receipt_get("to", to) != to \
            or receipt_get("type", kind) != kind:
        _check_transaction(tx, receipt, block, number, index)
    line = _checked("\t".join((
        str(number), str(index), _b(tx_hash), _b(sender), _b(to), _q(tx["value"]),
        _q(tx["gas"]), _q(get("gasPrice")), _q(get("maxFeePerGas")),
        _q(get("maxPriorityFeePerGas")), _q(tx["nonce"]),
        _q(kind), _q(receipt_get("status")), _q(receipt["gasUsed"]),
        _q(receipt["cumulativeGasUsed"]), _q(receipt_get("effectiveGasPrice")),
        _b(receipt_get("contractAddress")),
        _q(get("chainId")), _q(get("v")), _q(get("r")), _q(get("s")), _q(get("yParity")),
        _q(get("maxFeePerBlobGas")),
        _b(receipt_get("root")), _q(receipt_get("blobGasUsed")),
        _q(receipt_get("blobGasPrice")),
    )), _TRANSACTION_TABS, number)
    return "\t".join((
        line, _bloom(receipt["logsBloom"], number), _data(tx["input"], number),
        _hashes(get("blobVersionedHashes"), number),
        _json(get("accessList")), _json(get("authorizationList")),
        NULL if _TRANSACTION_KNOWN.issuperset(tx) else _extra(tx, _TRANSACTION_KNOWN),
        NULL if _RECEIPT_KNOWN.issuperset(receipt) else _extra(receipt, _RECEIPT_KNOWN),
    ))


def _check_transaction(tx: dict[str, Any], receipt: dict[str, Any], block: dict[str, Any],
                       number: int, index: int) -> None:
    """The checked keys of a transaction and its receipt, compared by value (hex case, leading
    zeros of quantities and JSON numbers aside); raises on the first that disagrees."""
    timestamp = int(block["timestamp"], 16)
    kind = int(tx.get("type", "0x0"), 16)
    for what, item in ((f"transaction {index}", tx), (f"receipt {index}", receipt)):
        for key, ok, stored in (
                ("blockHash", lambda v: _is_data(v, block["hash"]), "the block's hash"),
                ("blockNumber", lambda v: _is_quantity(v, number), "the block's number"),
                ("transactionIndex", lambda v: _is_quantity(v, index), "its position"),
                ("blockTimestamp", lambda v: _is_quantity(v, timestamp), "the block's timestamp"),
                ("from", lambda v: _is_data(v, tx["from"]), "the transaction's from"),
                ("to", lambda v: _is_data(v, tx.get("to")), "the transaction's to"),
                ("type", lambda v: _is_quantity(v, kind), "the transaction's type")):
            if key in item and not ok(item[key]):
                raise _disagree(number, what, key, item[key], stored)


def log_line(entry: dict[str, Any], receipt: dict[str, Any], block: dict[str, Any], number: int,
             index: int, tx_hash_field: str) -> str:
    """The `logs` row of a log of receipt `index` (whose hash is checked and COPY-encoded as
    `tx_hash_field`)."""
    get = entry.get
    block_hash, tx_hash = block["hash"], receipt["transactionHash"]
    if entry["blockHash"] != block_hash or entry["transactionHash"] != tx_hash:
        raise ChainDataError(f"block {number}: a log of transaction {index} belongs to another block")
    number_hex, timestamp, position = block["number"], block["timestamp"], receipt["transactionIndex"]
    if get("blockNumber", number_hex) != number_hex or get("transactionIndex", position) != position \
            or get("blockTimestamp", timestamp) != timestamp or get("removed", False) is not False:
        _check_log(entry, block, number, index)
    topics = entry["topics"]
    if len(topics) > 4:
        raise ChainDataError(f"block {number}: a log has {len(topics)} topics")
    line = _checked("\t".join((
        str(number), _q(entry["logIndex"]), str(index), tx_hash_field, _b(entry["address"]),
        *(_b(t) for t in topics), *([NULL] * (4 - len(topics))),
    )), _LOG_TABS, number)
    extra = NULL if _LOG_KNOWN.issuperset(entry) else _extra(entry, _LOG_KNOWN)
    return f"{line}\t{_data(entry['data'], number)}\t{extra}"


def _check_log(entry: dict[str, Any], block: dict[str, Any], number: int, index: int) -> None:
    timestamp = int(block["timestamp"], 16)
    what = f"a log of transaction {index}"
    for key, ok, stored in (
            ("blockNumber", lambda v: _is_quantity(v, number), "the block's number"),
            ("transactionIndex", lambda v: _is_quantity(v, index), "its transaction's position"),
            ("blockTimestamp", lambda v: _is_quantity(v, timestamp), "the block's timestamp"),
            ("removed", lambda v: v is False, "false")):
        if key in entry and not ok(entry[key]):
            raise _disagree(number, what, key, entry[key], stored)


def withdrawal_line(withdrawal: dict[str, Any], number: int, position: int) -> str:
    """The `withdrawals` row of the withdrawal at `position` in the block's list."""
    line = _checked("\t".join((
        str(number), str(position), _q(withdrawal["index"]), _q(withdrawal["validatorIndex"]),
        _b(withdrawal["address"]), _q(withdrawal["amount"]),
    )), _WITHDRAWAL_TABS, number)
    return f"{line}\t{_extra(withdrawal, _WITHDRAWAL_KNOWN)}"


if _native_rows is not None:
    _native_rows.configure(_BLOCK_KNOWN, _TRANSACTION_KNOWN, _RECEIPT_KNOWN, _LOG_KNOWN, _WITHDRAWAL_KNOWN, _json)


def decode(first: int, blocks: list[Any], receipts: dict[int, list[Any]], *,
           then: Callable[[int, dict[str, Any]], None] | None = None) -> Rows:
    """Rows for blocks `first..first+len(blocks)-1`; `receipts` maps a block number to the
    receipts of that block (blocks without transactions may be absent). Each line is C's where
    it answers one (`native and native.x_line(...)`), else the Python function's. `then(number,
    block)` runs as each block's lines are made: the root checks, which read the same answers
    while they are still in the processor's caches (BENCHMARKS.md, "Each block's roots checked
    as its rows are made")."""
    native = _native_rows
    rows = Rows(first, first + len(blocks) - 1)
    previous_hash = None
    for offset, block in enumerate(blocks):
        number = first + offset
        if not isinstance(block, dict):
            raise ChainDataError(f"block {number}: the node returned no block")
        if int(block["number"], 16) != number:
            raise ChainDataError(f"block {number}: the node returned block {int(block['number'], 16)}")
        if previous_hash is not None and block["parentHash"] != previous_hash:
            raise ChainDataError(f"block {number}: parent hash does not match block {number - 1} (reorg?)")
        previous_hash = block["hash"]
        txs = block["transactions"]
        block_receipts = receipts.get(number, []) if txs else []
        if block_receipts is None or len(block_receipts) != len(txs):
            got = "none" if block_receipts is None else len(block_receipts)
            raise ChainDataError(f"block {number}: {len(txs)} transactions but {got} receipts")
        log_count = 0
        for index, (tx, receipt) in enumerate(zip(txs, block_receipts)):
            if not isinstance(tx, dict):
                raise ChainDataError(f"block {number}: transactions came as hashes, not objects")
            line = native and native.transaction_line(tx, receipt, block, number, index)
            rows.transactions.append(line or transaction_line(tx, receipt, block, number, index))
            entries = receipt["logs"]
            if entries:
                tx_hash_field = _b(tx["hash"])  # checked in the transaction's line
                for entry in entries:
                    line = native and native.log_line(entry, receipt, block, number, index, tx_hash_field)
                    rows.logs.append(line or log_line(entry, receipt, block, number, index, tx_hash_field))
                log_count += len(entries)
        for position, w in enumerate(block.get("withdrawals") or ()):
            line = native and native.withdrawal_line(w, number, position)
            rows.withdrawals.append(line or withdrawal_line(w, number, position))
        line = native and native.block_line(block, number, len(txs), log_count)
        rows.blocks.append(line or block_line(block, number, len(txs), log_count))
        if then is not None:
            then(number, block)
    return rows
