"""`indexer.chaindata.chain.decode` on real answers of real chains, recorded by others
(tests/fixtures, provenance in its README.md): the rows must say what the JSON says, and an
answer tampered with must be refused. No database, no node, no network.

Every expectation is computed here from the JSON itself; the rows are read back by splitting the
text COPY lines on tabs, where a bytea is `\\\\x` + hex digits and NULL is `\\N`. (That every key
of the JSON is kept somewhere is tests/unit/test_every_field.py's walk; here each column is named.)
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from functools import cache
from typing import Any

import pytest

from indexer.base.errors import ChainDataError
from indexer.chaindata.chain import decode
from indexer.chaindata.columns import BLOCK_COLUMNS, LOG_COLUMNS, TRANSACTION_COLUMNS, WITHDRAWAL_COLUMNS
from indexer.testing.fixtures import FIXTURES

RECORDED = FIXTURES
NAMES = sorted(path.stem for path in RECORDED.glob("*.json"))
COPY_NULL = "\\N"


pytestmark = pytest.mark.usefixtures("rows_backend")


@cache
def recorded(name: str) -> dict[str, Any]:
    """{"block": eth_getBlockByNumber(n, true), "receipts": [...]}; shared between tests, so
    tampering goes through copies of the parts it changes, never in place."""
    return json.loads((RECORDED / f"{name}.json").read_text())


def number_of(name: str) -> int:
    return int(recorded(name)["block"]["number"], 16)


def decode_recorded(*names: str):
    """Decode recorded consecutive blocks as one batch, the way the indexer would."""
    first = number_of(names[0])
    return decode(first, [recorded(n)["block"] for n in names],
                  {number_of(n): recorded(n)["receipts"] for n in names})


def fields(line: str, columns: tuple[str, ...]) -> dict[str, str]:
    values = line.split("\t")
    assert len(values) == len(columns), line[:200]
    return dict(zip(columns, values))


def bytea(field: str) -> bytes:
    """The bytes a bytea field of a text COPY line stands for."""
    assert field.startswith("\\\\x"), field[:40]
    return bytes.fromhex(field[3:])


def data(value: str) -> bytes:
    assert value.startswith("0x"), value[:40]
    return bytes.fromhex(value[2:])


def quantity(value: str) -> int:
    return int(value, 16)


def optional_bytea(field: str, value: str | None) -> None:
    if value is None:
        assert field == COPY_NULL
    else:
        assert bytea(field) == data(value)


def optional_quantity(field: str, value: str | None) -> None:
    if value is None:
        assert field == COPY_NULL
    else:
        assert int(field) == quantity(value)


def optional_data(field: str, value: str | None) -> None:
    optional_bytea(field, value)


def hashes(field: str) -> list[bytes] | None:
    """A bytea[] field of a COPY line: {"\\\\\\\\xab..",...}."""
    if field == COPY_NULL:
        return None
    assert field[0] == "{" and field[-1] == "}", field[:40]
    return [bytea(item.strip('"').replace("\\\\\\\\", "\\\\")) for item in field[1:-1].split(",") if item]


def jsonb(field: str) -> Any:
    return None if field == COPY_NULL else json.loads(field.replace("\\\\", "\\"))


def test_the_recorded_eras_are_all_there():
    assert {"mainnet-0", "mainnet-47218", "mainnet-47219", "mainnet-1755634", "mainnet-1755635",
            "mainnet-18000000", "arbitrum-sepolia-185232421"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_one_block_row_that_matches_the_json(name):
    block, receipts = recorded(name)["block"], recorded(name)["receipts"]
    number = quantity(block["number"])
    rows = decode_recorded(name)

    assert (rows.first, rows.last) == (number, number)
    assert len(rows.blocks) == 1
    row = fields(rows.blocks[0], BLOCK_COLUMNS)
    assert int(row["number"]) == number
    assert bytea(row["hash"]) == data(block["hash"])
    assert bytea(row["parent_hash"]) == data(block["parentHash"])
    assert bytea(row["miner"]) == data(block["miner"])
    assert int(row["gas_used"]) == quantity(block["gasUsed"])
    assert int(row["gas_limit"]) == quantity(block["gasLimit"])
    assert datetime.fromisoformat(row["timestamp"]) == \
        datetime.fromtimestamp(quantity(block["timestamp"]), timezone.utc)
    optional_quantity(row["base_fee_per_gas"], block.get("baseFeePerGas"))
    optional_quantity(row["size"], block.get("size"))
    assert int(row["transaction_count"]) == len(block["transactions"])
    assert int(row["log_count"]) == sum(len(receipt["logs"]) for receipt in receipts)
    assert bytea(row["extra_data"]) == data(block["extraData"])
    assert bytea(row["state_root"]) == data(block["stateRoot"])
    assert bytea(row["transactions_root"]) == data(block["transactionsRoot"])
    assert bytea(row["receipts_root"]) == data(block["receiptsRoot"])
    # Since schema/005_every_field.sql.
    assert bytea(row["logs_bloom"]) == data(block["logsBloom"])  # never NULL: NULL marks rows from before 005
    for column, key in (("nonce", "nonce"), ("mix_hash", "mixHash"), ("sha3_uncles", "sha3Uncles"),
                        ("withdrawals_root", "withdrawalsRoot"),
                        ("parent_beacon_block_root", "parentBeaconBlockRoot"), ("requests_hash", "requestsHash")):
        optional_data(row[column], block.get(key))
    for column, key in (("difficulty", "difficulty"), ("total_difficulty", "totalDifficulty"),
                        ("blob_gas_used", "blobGasUsed"), ("excess_blob_gas", "excessBlobGas")):
        optional_quantity(row[column], block.get(key))
    withdrawals = block.get("withdrawals")
    assert row["withdrawal_count"] == (COPY_NULL if withdrawals is None else str(len(withdrawals)))
    assert len(rows.withdrawals) == len(withdrawals or [])
    assert hashes(row["uncles"]) == [data(h) for h in block["uncles"]]


@pytest.mark.parametrize("name", NAMES)
def test_one_transaction_row_per_transaction_in_order(name):
    block, receipts = recorded(name)["block"], recorded(name)["receipts"]
    number = quantity(block["number"])
    rows = decode_recorded(name)

    assert len(rows.transactions) == len(block["transactions"]) == len(receipts)
    for index, (line, tx, receipt) in enumerate(zip(rows.transactions, block["transactions"], receipts)):
        row = fields(line, TRANSACTION_COLUMNS)
        assert int(row["block_number"]) == number
        assert int(row["transaction_index"]) == index == quantity(tx["transactionIndex"])
        assert bytea(row["hash"]) == data(tx["hash"]) == data(receipt["transactionHash"])
        assert bytea(row["from_address"]) == data(tx["from"])
        optional_bytea(row["to_address"], tx.get("to"))  # NULL for a contract creation
        assert int(row["value"]) == quantity(tx["value"])
        assert int(row["gas"]) == quantity(tx["gas"])
        assert int(row["nonce"]) == quantity(tx["nonce"])
        assert bytea(row["input"]) == data(tx["input"])
        assert int(row["type"]) == quantity(tx.get("type", "0x0"))
        optional_quantity(row["gas_price"], tx.get("gasPrice"))
        optional_quantity(row["max_fee_per_gas"], tx.get("maxFeePerGas"))
        optional_quantity(row["max_priority_fee_per_gas"], tx.get("maxPriorityFeePerGas"))
        optional_quantity(row["status"], receipt.get("status"))  # NULL before Byzantium
        assert int(row["gas_used"]) == quantity(receipt["gasUsed"])
        assert int(row["cumulative_gas_used"]) == quantity(receipt["cumulativeGasUsed"])
        optional_quantity(row["effective_gas_price"], receipt.get("effectiveGasPrice"))
        optional_bytea(row["contract_address"], receipt.get("contractAddress"))
        # Since schema/005_every_field.sql.
        for column, key in (("chain_id", "chainId"), ("v", "v"), ("r", "r"), ("s", "s"),
                            ("y_parity", "yParity"), ("max_fee_per_blob_gas", "maxFeePerBlobGas")):
            optional_quantity(row[column], tx.get(key))
        assert hashes(row["blob_versioned_hashes"]) == (
            None if "blobVersionedHashes" not in tx else [data(h) for h in tx["blobVersionedHashes"]])
        assert jsonb(row["access_list"]) == tx.get("accessList")
        assert jsonb(row["authorization_list"]) == tx.get("authorizationList")
        optional_bytea(row["root"], receipt.get("root"))
        assert bytea(row["logs_bloom"]) == data(receipt["logsBloom"])
        optional_quantity(row["blob_gas_used"], receipt.get("blobGasUsed"))
        optional_quantity(row["blob_gas_price"], receipt.get("blobGasPrice"))
    # What the block says it used is what its transactions used.
    assert sum(int(fields(line, TRANSACTION_COLUMNS)["gas_used"]) for line in rows.transactions) == \
        quantity(block["gasUsed"])


@pytest.mark.parametrize("name", NAMES)
def test_one_log_row_per_log_with_its_address_and_topics(name):
    block, receipts = recorded(name)["block"], recorded(name)["receipts"]
    number = quantity(block["number"])
    rows = decode_recorded(name)

    expected = [(index, receipt, log) for index, receipt in enumerate(receipts) for log in receipt["logs"]]
    assert len(rows.logs) == len(expected)
    for line, (index, receipt, log) in zip(rows.logs, expected):
        row = fields(line, LOG_COLUMNS)
        assert int(row["block_number"]) == number
        assert int(row["log_index"]) == quantity(log["logIndex"])
        assert int(row["transaction_index"]) == index
        assert bytea(row["transaction_hash"]) == data(receipt["transactionHash"])
        assert bytea(row["address"]) == data(log["address"])
        topics = [row[f"topic{i}"] for i in range(4)]
        assert [bytea(t) for t in topics[:len(log["topics"])]] == [data(t) for t in log["topics"]]
        assert topics[len(log["topics"]):] == [COPY_NULL] * (4 - len(log["topics"]))
        assert bytea(row["data"]) == data(log["data"])
        assert row["extra"] == COPY_NULL  # no recorded log has a key without a column


def test_one_withdrawal_row_per_withdrawal_in_order():
    block = recorded("mainnet-18000000")["block"]
    rows = decode_recorded("mainnet-18000000")
    assert len(rows.withdrawals) == len(block["withdrawals"]) == 16
    for position, (line, withdrawal) in enumerate(zip(rows.withdrawals, block["withdrawals"])):
        row = fields(line, WITHDRAWAL_COLUMNS)
        assert (int(row["block_number"]), int(row["position"])) == (18000000, position)
        assert int(row["withdrawal_index"]) == quantity(withdrawal["index"])
        assert int(row["validator_index"]) == quantity(withdrawal["validatorIndex"])
        assert bytea(row["address"]) == data(withdrawal["address"])
        assert int(row["amount"]) == quantity(withdrawal["amount"])
        assert row["extra"] == COPY_NULL


def column(rows: list[str], columns: tuple[str, ...], name: str) -> list[str]:
    return [fields(line, columns)[name] for line in rows]


def test_the_eras_show_in_the_rows():
    """The recorded blocks are kept because of what they exercise; make sure they still do."""
    for name in ("mainnet-47218", "mainnet-47219", "mainnet-1755635"):
        receipts = recorded(name)["receipts"]
        assert all("root" in receipt and receipt.get("status") is None for receipt in receipts)
        assert all("type" not in tx for tx in recorded(name)["block"]["transactions"])
        rows = decode_recorded(name)
        assert set(column(rows.transactions, TRANSACTION_COLUMNS, "status")) == {COPY_NULL}
        assert set(column(rows.transactions, TRANSACTION_COLUMNS, "type")) == {"0"}
        assert COPY_NULL not in column(rows.transactions, TRANSACTION_COLUMNS, "root")
        assert column(rows.blocks, BLOCK_COLUMNS, "base_fee_per_gas") == [COPY_NULL]

    rows = decode_recorded("mainnet-18000000")
    txs = [fields(line, TRANSACTION_COLUMNS) for line in rows.transactions]
    assert {tx["type"] for tx in txs} == {"0", "2"}
    assert {tx["status"] for tx in txs} == {"0", "1"}
    creations = [tx for tx in txs if tx["to_address"] == COPY_NULL]
    assert creations and all(tx["contract_address"] != COPY_NULL for tx in creations)
    assert column(rows.blocks, BLOCK_COLUMNS, "base_fee_per_gas") != [COPY_NULL]
    assert len(rows.logs) > 200

    assert set(column(rows.transactions, TRANSACTION_COLUMNS, "root")) == {COPY_NULL}
    assert column(rows.blocks, BLOCK_COLUMNS, "withdrawal_count") == ["16"]

    rows = decode_recorded("arbitrum-sepolia-185232421")
    assert "106" in column(rows.transactions, TRANSACTION_COLUMNS, "type")  # Arbitrum internal, 0x6a
    # Arbitrum's own fields are kept in extra.
    assert set(jsonb(column(rows.blocks, BLOCK_COLUMNS, "extra")[0])) == {"l1BlockNumber", "sendCount", "sendRoot"}
    assert all({"gasUsedForL1", "l1BlockNumber"} <= set(jsonb(extra))
               for extra in column(rows.transactions, TRANSACTION_COLUMNS, "receipt_extra"))

    # Parity's own keys, in 2015 blocks: the block's author and seal fields, a transaction's raw
    # encoding and public key.
    rows = decode_recorded("mainnet-47218")
    assert {"author", "sealFields"} <= set(jsonb(column(rows.blocks, BLOCK_COLUMNS, "extra")[0]))
    assert all({"raw", "publicKey", "standardV"} <= set(jsonb(extra))
               for extra in column(rows.transactions, TRANSACTION_COLUMNS, "extra"))


def test_consecutive_recorded_blocks_decode_as_one_batch():
    rows = decode_recorded("mainnet-47218", "mainnet-47219")
    assert (rows.first, rows.last) == (47218, 47219)
    assert [int(n) for n in column(rows.blocks, BLOCK_COLUMNS, "number")] == [47218, 47219]
    assert [int(n) for n in column(rows.transactions, TRANSACTION_COLUMNS, "block_number")] == \
        [47218, 47218, 47219, 47219]

    # An empty block needs no receipts at all.
    empty, busy = recorded("mainnet-1755634")["block"], recorded("mainnet-1755635")
    rows = decode(1755634, [empty, busy["block"]], {1755635: busy["receipts"]})
    assert column(rows.blocks, BLOCK_COLUMNS, "transaction_count") == ["0", "2"]
    assert column(rows.blocks, BLOCK_COLUMNS, "log_count") == ["0", "2"]


def test_blocks_that_do_not_chain_are_refused():
    first, second = recorded("mainnet-47218"), recorded("mainnet-47219")
    receipts = {47218: first["receipts"], 47219: second["receipts"]}
    other_parent = dict(second["block"], parentHash=recorded("mainnet-1755635")["block"]["hash"])
    with pytest.raises(ChainDataError, match="block 47219"):
        decode(47218, [first["block"], other_parent], receipts)
    with pytest.raises(ChainDataError, match="block 47218"):  # the node answered another height
        decode(47218, [second["block"], first["block"]], receipts)


# Each tampering takes a block's receipts and returns them changed the way a confused node or a
# proxy mixing up answers could; all must be refused before any row is written.

def receipt_of_another_block(block, receipts):
    changed = list(receipts)
    changed[-1] = dict(changed[-1], blockHash=block["parentHash"])
    return changed


def receipts_out_of_order(block, receipts):
    return [receipts[1], receipts[0], *receipts[2:]]


def log_of_another_transaction(block, receipts):
    index = next(i for i, receipt in enumerate(receipts) if receipt["logs"])
    other = receipts[index - 1 if index else index + 1]["transactionHash"]
    log, *rest = receipts[index]["logs"]
    changed = list(receipts)
    changed[index] = dict(receipts[index], logs=[dict(log, transactionHash=other), *rest])
    return changed


def log_of_another_block(block, receipts):
    index = next(i for i, receipt in enumerate(receipts) if receipt["logs"])
    *rest, log = receipts[index]["logs"]
    changed = list(receipts)
    changed[index] = dict(receipts[index], logs=[*rest, dict(log, blockHash=block["parentHash"])])
    return changed


def missing_receipt(block, receipts):
    return receipts[:-1]


def missing_first_receipt(block, receipts):
    return receipts[1:]


def duplicated_receipt(block, receipts):
    return [*receipts, receipts[-1]]


def receipt_for_another_transaction(block, receipts):
    changed = list(receipts)
    changed[0] = dict(changed[0], transactionHash=receipts[1]["transactionHash"])
    return changed


TAMPERINGS = [receipt_of_another_block, receipts_out_of_order, log_of_another_transaction,
              log_of_another_block, missing_receipt, missing_first_receipt, duplicated_receipt,
              receipt_for_another_transaction]
WITH_LOGS = ["mainnet-1755635", "mainnet-18000000", "arbitrum-sepolia-185232421"]


@pytest.mark.parametrize("name", WITH_LOGS)
@pytest.mark.parametrize("tamper", TAMPERINGS, ids=lambda f: f.__name__)
def test_a_tampered_answer_is_refused(name, tamper):
    block, receipts = recorded(name)["block"], recorded(name)["receipts"]
    number = quantity(block["number"])
    assert decode(number, [block], {number: receipts}).blocks  # the answer as recorded passes
    with pytest.raises(ChainDataError, match=f"block {number}"):
        decode(number, [block], {number: tamper(block, receipts)})


def test_receipts_of_another_block_are_refused():
    block = recorded("mainnet-47219")["block"]
    with pytest.raises(ChainDataError, match="block 47219"):  # same count, other block's receipts
        decode(47219, [block], {47219: recorded("mainnet-47218")["receipts"]})
    with pytest.raises(ChainDataError, match="block 47219"):  # no receipts at all
        decode(47219, [block], {})
