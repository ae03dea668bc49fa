"""Every key a node sends is kept: in a column, checked against a stored value, or in the row's
`extra`; walked generically over the recorded answers of real chains (tests/fixtures) against the
mapping `indexer/chaindata/rows.py` declares, so that a key a node sends that the mapping does not know
fails here unless it lands in `extra`. No database: the COPY lines are parsed back here.

`walk` and `stored_value` are shared with tests/test_store_fields.py, which does the same walk on
the rows read back from PostgreSQL.
"""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from typing import Any

import pytest

from indexer.base.errors import ChainDataError
from indexer.chaindata import columns as C, rows as R
from indexer.chaindata.chain import decode
from indexer.chaindata.columns import BLOCK_COLUMNS, LOG_COLUMNS, TRANSACTION_COLUMNS, WITHDRAWAL_COLUMNS
from indexer.testing.fixtures import load, names

NAMES = names()


pytestmark = pytest.mark.usefixtures("rows_backend")

# Columns whose value no single key gives; the kind says how to read them back from COPY text.
DERIVED = {
    "blocks": {"transaction_count": C.QUANTITY, "log_count": C.QUANTITY, "withdrawal_count": C.QUANTITY,
               "extra": C.JSON},
    "transactions": {"block_number": C.QUANTITY, "transaction_index": C.QUANTITY, "extra": C.JSON,
                     "receipt_extra": C.JSON},
    "logs": {"block_number": C.QUANTITY, "transaction_index": C.QUANTITY, "transaction_hash": C.DATA,
             "topic0": C.DATA, "topic1": C.DATA, "topic2": C.DATA, "topic3": C.DATA, "extra": C.JSON},
    "withdrawals": {"block_number": C.QUANTITY, "position": C.QUANTITY, "extra": C.JSON},
}
KEYS = {"blocks": (C.BLOCK_KEYS,), "transactions": (C.TRANSACTION_KEYS, C.RECEIPT_KEYS),
        "logs": (C.LOG_KEYS,), "withdrawals": (C.WITHDRAWAL_KEYS,)}
COLUMNS = {"blocks": BLOCK_COLUMNS, "transactions": TRANSACTION_COLUMNS, "logs": LOG_COLUMNS,
           "withdrawals": WITHDRAWAL_COLUMNS}


def kinds(table: str) -> dict[str, str]:
    """Column -> how its value is stored, from the declared mapping."""
    out = dict(DERIVED[table])
    for keys in KEYS[table]:
        out.update({column: how for column, how in keys.values() if how != C.ROWS and column in COLUMNS[table]})
    return out


def stored_value(value: Any, how: str) -> Any:
    """A JSON value as the Python value psycopg reads back from its column (None for NULL)."""
    if value is None:
        return None
    if how == C.QUANTITY:
        return value if type(value) is int else int(value, 16)
    if how == C.DATA:
        return bytes.fromhex(value[2:])
    if how == C.TIMESTAMP:
        return datetime.fromtimestamp(int(value, 16), timezone.utc)
    if how == C.HASHES:
        return [bytes.fromhex(v[2:]) for v in value]
    assert how == C.JSON
    return value


# Reading COPY text back.

def unescape(field: str) -> str:
    out, chars = [], iter(field)
    for c in chars:
        if c == "\\":
            c = next(chars)
            c = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}[c]
        out.append(c)
    return "".join(out)


def parse_array(text: str) -> list[str]:
    """A bytea[] literal as PostgreSQL's array_in reads it (quoted elements, backslash escapes)."""
    assert text[0] == "{" and text[-1] == "}", text
    if text == "{}":
        return []
    items = []
    for element in text[1:-1].split(","):  # hex elements hold no comma
        assert element[0] == element[-1] == '"', element
        items.append(element[1:-1].replace("\\\\", "\\"))
    return items


def parse_field(field: str, how: str) -> Any:
    if field == "\\N":
        return None
    text = unescape(field)
    if how == C.QUANTITY:
        return int(text)
    if how == C.DATA:
        assert text.startswith("\\x"), text[:40]
        return bytes.fromhex(text[2:])
    if how == C.TIMESTAMP:
        return datetime.fromisoformat(text)
    if how == C.HASHES:
        return [bytes.fromhex(item[2:]) for item in parse_array(text) if item.startswith("\\x")]
    return json.loads(text)


def parse_line(table: str, line: str) -> dict[str, Any]:
    fields = line.split("\t")
    assert len(fields) == len(COLUMNS[table]), line[:200]
    how = kinds(table)
    assert set(how) == set(COLUMNS[table]), set(COLUMNS[table]) ^ set(how)  # every column has a kind
    return {column: parse_field(field, how[column]) for column, field in zip(COLUMNS[table], fields)}


# The walk.

def walk_item(item: dict[str, Any], keys: dict[str, tuple[str, str]], checked: dict[str, str],
              row: dict[str, Any], extra_column: str, where: str) -> None:
    """Every key of `item` has its column (holding its value), is checked, or is in
    row[extra_column] (with its value, verbatim), and extra holds nothing else; every column of a
    key the item lacks is NULL."""
    unmapped = {}
    for key, value in item.items():
        if key in keys:
            column, how = keys[key]
            if how == C.ROWS:
                continue  # the child rows, walked by the caller
            if column == "topic0..topic3":
                topics = [row[f"topic{i}"] for i in range(4)]
                assert topics == stored_value(value, C.HASHES) + [None] * (4 - len(value)), where
            else:
                assert row[column] == stored_value(value, how), (where, key, row[column], value)
        elif key not in checked:
            unmapped[key] = value
    assert row[extra_column] == (unmapped or None), (where, row[extra_column], unmapped)
    for key, (column, how) in keys.items():
        if key not in item and how != C.ROWS and column in row:
            assert row[column] == (0 if key == "type" else None), (where, key, row[column])


def walk(block: dict[str, Any], receipts: list[dict[str, Any]], block_row: dict[str, Any],
         transaction_rows: list[dict[str, Any]], log_rows: list[dict[str, Any]],
         withdrawal_rows: list[dict[str, Any]]) -> None:
    """The whole answer for one block against its rows (from COPY lines or from PostgreSQL)."""
    number = int(block["number"], 16)
    walk_item(block, C.BLOCK_KEYS, C.BLOCK_CHECKED, block_row, "extra", f"block {number}")
    txs = block["transactions"]
    assert block_row["transaction_count"] == len(txs) == len(transaction_rows) == len(receipts)
    logs = [(index, log) for index, receipt in enumerate(receipts) for log in receipt["logs"]]
    assert block_row["log_count"] == len(logs) == len(log_rows)
    withdrawals = block.get("withdrawals")
    assert block_row["withdrawal_count"] == (None if withdrawals is None else len(withdrawals))
    assert len(withdrawal_rows) == len(withdrawals or [])
    for index, (tx, receipt, row) in enumerate(zip(txs, receipts, transaction_rows)):
        assert (row["block_number"], row["transaction_index"]) == (number, index)
        walk_item(tx, C.TRANSACTION_KEYS, C.TRANSACTION_CHECKED, row, "extra", f"transaction {index}")
        walk_item(receipt, C.RECEIPT_KEYS, C.RECEIPT_CHECKED, row, "receipt_extra", f"receipt {index}")
    for (index, log), row in zip(logs, log_rows):
        assert (row["block_number"], row["transaction_index"]) == (number, index)
        assert row["transaction_hash"] == stored_value(receipts[index]["transactionHash"], C.DATA)
        walk_item(log, C.LOG_KEYS, C.LOG_CHECKED, row, "extra", f"log {log['logIndex']}")
    for position, (withdrawal, row) in enumerate(zip(withdrawals or [], withdrawal_rows)):
        assert (row["block_number"], row["position"]) == (number, position)
        walk_item(withdrawal, C.WITHDRAWAL_KEYS, C.WITHDRAWAL_CHECKED, row, "extra", f"withdrawal {position}")


def decode_one(block: dict[str, Any], receipts: list[dict[str, Any]]) -> R.Rows:
    number = int(block["number"], 16)
    return decode(number, [block], {number: receipts})


def walk_lines(block: dict[str, Any], receipts: list[dict[str, Any]]) -> None:
    rows = decode_one(block, receipts)
    assert len(rows.blocks) == 1
    walk(block, receipts, parse_line("blocks", rows.blocks[0]),
         [parse_line("transactions", line) for line in rows.transactions],
         [parse_line("logs", line) for line in rows.logs],
         [parse_line("withdrawals", line) for line in rows.withdrawals])


def test_the_mapping_names_each_column_once_and_only_columns_that_exist():
    for table, columns in COLUMNS.items():
        assert len(set(columns)) == len(columns), table
        mapped = [column for keys in KEYS[table] for column, how in keys.values()
                  if how != C.ROWS and column != "topic0..topic3"]
        assert len(set(mapped)) == len(mapped), table
        assert set(mapped) <= set(columns), set(mapped) - set(columns)
    # A transaction row holds the transaction's keys and its receipt's: no column from both.
    tx_columns = {column for column, _ in C.TRANSACTION_KEYS.values()}
    receipt_columns = {column for column, how in C.RECEIPT_KEYS.values() if how != C.ROWS}
    assert not tx_columns & receipt_columns
    for keys, checked in ((C.BLOCK_KEYS, C.BLOCK_CHECKED), (C.TRANSACTION_KEYS, C.TRANSACTION_CHECKED),
                          (C.RECEIPT_KEYS, C.RECEIPT_CHECKED), (C.LOG_KEYS, C.LOG_CHECKED),
                          (C.WITHDRAWAL_KEYS, C.WITHDRAWAL_CHECKED)):
        assert not set(keys) & set(checked)


@pytest.mark.parametrize("name", NAMES)
def test_every_key_of_the_answer_is_in_a_column_in_extra_or_checked(name):
    recorded = load(name)
    walk_lines(recorded["block"], recorded["receipts"])


def test_the_recorded_answers_reach_every_column():
    """Across the fixtures, each mapped column holds a value somewhere (so the walk above is not
    vacuous for it), and the eras' own fields show up: withdrawals, blobs, authorizations,
    pre-Byzantium roots, chain-specific keys in extra."""
    seen: dict[str, set[str]] = {table: set() for table in COLUMNS}
    for name in NAMES:
        recorded = load(name)
        rows = decode_one(recorded["block"], recorded["receipts"])
        for table, lines in (("blocks", rows.blocks), ("transactions", rows.transactions),
                             ("logs", rows.logs), ("withdrawals", rows.withdrawals)):
            for line in lines:
                seen[table] |= {column for column, value in parse_line(table, line).items()
                                if value not in (None, [], {})}
    # What no recorded answer has yet: uncles (none of the blocks has one), an unmapped key in a
    # log or a withdrawal, a blob transaction's blobGasUsed in a block without blobs... The
    # tests below inject them.
    expected_missing = {"blocks": {"uncles"}, "transactions": set(), "logs": {"extra"},
                        "withdrawals": {"extra"}}
    for table in COLUMNS:
        assert set(COLUMNS[table]) - seen[table] == expected_missing[table], table


def mutate(value: Any) -> Any:
    """Another value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value is None:
        return "0x" + "ab" * 20
    return value[:-1] + ("1" if value[-1] != "1" else "2")


def checked_places(recorded: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """(where, item, key) of each checked key in the first and the last transaction, receipt and
    log that have it."""
    found: dict[tuple[str, str], list[tuple[str, dict[str, Any], str]]] = {}
    items = [("transaction", f"transaction {i}", tx, C.TRANSACTION_CHECKED)
             for i, tx in enumerate(recorded["block"]["transactions"])]
    for i, receipt in enumerate(recorded["receipts"]):
        items.append(("receipt", f"receipt {i}", receipt, C.RECEIPT_CHECKED))
        items += [("log", f"log {n} of receipt {i}", log, C.LOG_CHECKED) for n, log in enumerate(receipt["logs"])]
    for kind, where, item, checked in items:
        for key in checked:
            if key in item:
                found.setdefault((kind, key), []).append((where, item, key))
    return [place for places in found.values() for place in {id(p[1]): p for p in (places[0], places[-1])}.values()]


@pytest.mark.parametrize("name", NAMES)
def test_a_checked_key_that_disagrees_is_refused(name):
    recorded = load(name)  # a fresh copy: changed in place, and put back
    number = int(recorded["block"]["number"], 16)
    places = checked_places(recorded)
    assert places or not recorded["block"]["transactions"]
    for where, item, key in places:
        value = item[key]
        item[key] = mutate(value)
        with pytest.raises(ChainDataError, match=f"block {number}"):
            decode_one(recorded["block"], recorded["receipts"])
            pytest.fail(f"{where}: {key} changed to {item[key]!r} was not refused")
        item[key] = value
    decode_one(recorded["block"], recorded["receipts"])  # all put back: accepted again


def test_checked_keys_are_compared_by_value_not_by_spelling():
    """Upper-case hex, leading zeros in a quantity, a timestamp as a JSON number: the same values."""
    recorded = load("mainnet-18000000")
    block = recorded["block"]
    timestamp = int(block["timestamp"], 16)
    changed = copy.deepcopy(recorded)
    index = next(i for i, receipt in enumerate(recorded["receipts"]) if receipt["logs"])
    tx = changed["block"]["transactions"][index]
    tx["blockHash"] = "0x" + tx["blockHash"][2:].upper()
    tx["blockNumber"] = "0x00" + tx["blockNumber"][2:]
    receipt = changed["receipts"][index]
    receipt["blockTimestamp"] = timestamp
    receipt["from"] = "0x" + receipt["from"][2:].upper()
    receipt["type"] = "0x02" if receipt["type"] == "0x2" else receipt["type"]
    log = receipt["logs"][0]
    log["transactionIndex"] = "0x0" + log["transactionIndex"][2:]
    log["blockTimestamp"] = hex(timestamp)
    assert decode_one(changed["block"], changed["receipts"]).transactions == \
        decode_one(block, recorded["receipts"]).transactions


NASTY = {"text": 'a\tb\nc\rd\\e"f\u00e9\u2028', "nested": [{"k": None}, 1, 2.5, True], "empty": {}}


def test_a_key_nobody_mapped_lands_in_extra_escaped_for_copy():
    """New keys anywhere (as a node upgrade or another chain would send) are kept verbatim in the
    row's extra, with tabs, newlines, backslashes and quotes escaped for COPY."""
    recorded = copy.deepcopy(load("mainnet-18000000"))
    block, receipts = recorded["block"], recorded["receipts"]
    block["someNewHeaderField"] = NASTY
    block["uncles"] = ["0x" + "ab" * 32, "0x" + "CD" * 32]
    block["transactions"][0]["sourceHash"] = "0x" + "11" * 32
    receipts[0]["l1Fee"] = "0x1234"
    receipts[0]["logs"][0]["brandNew"] = NASTY
    block["withdrawals"][0]["source"] = "consensus"
    walk_lines(block, receipts)

    rows = decode_one(block, receipts)
    line = rows.blocks[0]
    assert "\n" not in line and line.count("\t") == len(BLOCK_COLUMNS) - 1
    row = parse_line("blocks", line)
    assert row["extra"] == {"someNewHeaderField": NASTY}
    assert row["uncles"] == [b"\xab" * 32, b"\xcd" * 32]
    assert parse_line("transactions", rows.transactions[0])["extra"] == {"sourceHash": "0x" + "11" * 32}
    assert parse_line("transactions", rows.transactions[0])["receipt_extra"] == {"l1Fee": "0x1234"}
    assert parse_line("transactions", rows.transactions[1])["extra"] is None
    assert parse_line("logs", rows.logs[0])["extra"] == {"brandNew": NASTY}
    assert parse_line("withdrawals", rows.withdrawals[0])["extra"] == {"source": "consensus"}


@pytest.mark.parametrize("field, value", [
    ("uncles", ["0x12\t34"]), ("uncles", ['0xab","0xcd']), ("uncles", ["abcd"]),
    ("logsBloom", "0x12\n34"), ("nonce", "0x{}"),
])
def test_a_block_field_that_is_not_hex_is_refused(field, value):
    recorded = load("mainnet-18000000")
    block = dict(recorded["block"], **{field: value})
    with pytest.raises((ChainDataError, ValueError)):
        decode_one(block, recorded["receipts"])


@pytest.mark.parametrize("value", ["0x12\t34", "0x12 34", "0x123", "0xzz", "1234"])
def test_input_and_log_data_that_are_not_hex_are_refused(value):
    recorded = copy.deepcopy(load("mainnet-18000000"))
    recorded["block"]["transactions"][2]["input"] = value
    with pytest.raises(ChainDataError, match="block 18000000"):
        decode_one(recorded["block"], recorded["receipts"])
    recorded = copy.deepcopy(load("mainnet-18000000"))
    recorded["receipts"][0]["logs"][0]["data"] = value
    with pytest.raises(ChainDataError, match="block 18000000"):
        decode_one(recorded["block"], recorded["receipts"])


def test_a_block_without_a_logs_bloom_is_refused():
    """blocks.logs_bloom IS NULL must keep meaning 'stored before migration 005'."""
    recorded = load("mainnet-18000000")
    block = {k: v for k, v in recorded["block"].items() if k != "logsBloom"}
    with pytest.raises(KeyError):
        decode_one(block, recorded["receipts"])
    receipts = [{k: v for k, v in r.items() if k != "logsBloom"} for r in recorded["receipts"]]
    with pytest.raises(KeyError):
        decode_one(recorded["block"], receipts)


def test_a_nul_character_jsonb_cannot_hold_is_refused_before_copy():
    recorded = copy.deepcopy(load("mainnet-18000000"))
    recorded["block"]["newField"] = "a\x00b"
    with pytest.raises(ChainDataError, match="NUL"):
        decode_one(recorded["block"], recorded["receipts"])
    recorded["block"]["newField"] = "a\\u0000b"  # a backslash, then "u0000": text jsonb can hold
    assert parse_line("blocks", decode_one(recorded["block"], recorded["receipts"]).blocks[0])["extra"] == \
        {"newField": "a\\u0000b"}
