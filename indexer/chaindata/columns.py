"""Where every key of a node's JSON goes, table by table: into a column (`*_KEYS`: the key, its
column, how it is stored), checked against a stored value (`*_CHECKED`), or else into the row's
`extra` jsonb; and the COPY columns of each table, in line order (`*_COLUMNS`). `rows.py` makes
the lines.
"""

from __future__ import annotations

# How a key's value is stored (the column types of schema/002_chain.sql and 005_every_field.sql).
QUANTITY = "quantity"    # hex quantity -> numeric(78,0), bigint, integer or smallint
DATA = "data"            # hex data -> bytea
TIMESTAMP = "timestamp"  # hex seconds -> timestamptz
HASHES = "hashes"        # list of hex data -> bytea[]
JSON = "json"            # any JSON value -> jsonb, verbatim
ROWS = "rows"            # a list whose items become rows of another table (the column names it)

# JSON key -> (column, how). The columns a block row has beyond these: transaction_count,
# log_count, withdrawal_count (the lengths of its lists; NULL for a block without `withdrawals`)
# and extra.
BLOCK_KEYS: dict[str, tuple[str, str]] = {
    "number": ("number", QUANTITY),
    "hash": ("hash", DATA),
    "parentHash": ("parent_hash", DATA),
    "timestamp": ("timestamp", TIMESTAMP),
    "miner": ("miner", DATA),
    "gasUsed": ("gas_used", QUANTITY),
    "gasLimit": ("gas_limit", QUANTITY),
    "baseFeePerGas": ("base_fee_per_gas", QUANTITY),
    "size": ("size", QUANTITY),
    "extraData": ("extra_data", DATA),
    "stateRoot": ("state_root", DATA),
    "transactionsRoot": ("transactions_root", DATA),
    "receiptsRoot": ("receipts_root", DATA),
    "nonce": ("nonce", DATA),
    "mixHash": ("mix_hash", DATA),
    "sha3Uncles": ("sha3_uncles", DATA),
    "logsBloom": ("logs_bloom", DATA),
    "difficulty": ("difficulty", QUANTITY),
    "totalDifficulty": ("total_difficulty", QUANTITY),
    "withdrawalsRoot": ("withdrawals_root", DATA),
    "blobGasUsed": ("blob_gas_used", QUANTITY),
    "excessBlobGas": ("excess_blob_gas", QUANTITY),
    "parentBeaconBlockRoot": ("parent_beacon_block_root", DATA),
    "requestsHash": ("requests_hash", DATA),
    "uncles": ("uncles", HASHES),
    "transactions": ("transactions", ROWS),
    "withdrawals": ("withdrawals", ROWS),
}
BLOCK_CHECKED: dict[str, str] = {}

# A transaction row's columns beyond these: block_number and transaction_index (its place, which
# its own keys below are checked against), extra, and the receipt's (RECEIPT_KEYS, receipt_extra).
TRANSACTION_KEYS: dict[str, tuple[str, str]] = {
    "hash": ("hash", DATA),
    "from": ("from_address", DATA),
    "to": ("to_address", DATA),
    "value": ("value", QUANTITY),
    "gas": ("gas", QUANTITY),
    "gasPrice": ("gas_price", QUANTITY),
    "maxFeePerGas": ("max_fee_per_gas", QUANTITY),
    "maxPriorityFeePerGas": ("max_priority_fee_per_gas", QUANTITY),
    "input": ("input", DATA),
    "nonce": ("nonce", QUANTITY),
    "type": ("type", QUANTITY),  # 0 when absent (transactions before EIP-2718)
    "chainId": ("chain_id", QUANTITY),
    "v": ("v", QUANTITY),
    "r": ("r", QUANTITY),
    "s": ("s", QUANTITY),
    "yParity": ("y_parity", QUANTITY),
    "accessList": ("access_list", JSON),
    "maxFeePerBlobGas": ("max_fee_per_blob_gas", QUANTITY),
    "blobVersionedHashes": ("blob_versioned_hashes", HASHES),
    "authorizationList": ("authorization_list", JSON),
}
TRANSACTION_CHECKED: dict[str, str] = {
    "blockHash": "blocks.hash",
    "blockNumber": "block_number",
    "transactionIndex": "transaction_index",
    "blockTimestamp": "blocks.timestamp",
}

RECEIPT_KEYS: dict[str, tuple[str, str]] = {
    "status": ("status", QUANTITY),  # NULL before Byzantium, which has `root` instead
    "gasUsed": ("gas_used", QUANTITY),
    "cumulativeGasUsed": ("cumulative_gas_used", QUANTITY),
    "effectiveGasPrice": ("effective_gas_price", QUANTITY),
    "contractAddress": ("contract_address", DATA),
    "root": ("root", DATA),
    "logsBloom": ("logs_bloom", DATA),
    "blobGasUsed": ("blob_gas_used", QUANTITY),
    "blobGasPrice": ("blob_gas_price", QUANTITY),
    "logs": ("logs", ROWS),
}
RECEIPT_CHECKED: dict[str, str] = {
    "transactionHash": "hash",
    "transactionIndex": "transaction_index",
    "blockHash": "blocks.hash",
    "blockNumber": "block_number",
    "blockTimestamp": "blocks.timestamp",
    "from": "from_address",
    "to": "to_address",
    "type": "type",
}

# A log row's columns beyond these: block_number, transaction_index and transaction_hash (its
# receipt's, which its own keys are checked against), topic0..topic3 (`topics`), extra.
LOG_KEYS: dict[str, tuple[str, str]] = {
    "logIndex": ("log_index", QUANTITY),
    "address": ("address", DATA),
    "topics": ("topic0..topic3", HASHES),
    "data": ("data", DATA),
}
LOG_CHECKED: dict[str, str] = {
    "blockHash": "blocks.hash",
    "blockNumber": "block_number",
    "transactionHash": "transaction_hash",
    "transactionIndex": "transaction_index",
    "blockTimestamp": "blocks.timestamp",
    "removed": "false (a log of a block's receipts is never removed)",
}

# A withdrawal row's columns beyond these: block_number, position (its place in the block's
# list), extra.
WITHDRAWAL_KEYS: dict[str, tuple[str, str]] = {
    "index": ("withdrawal_index", QUANTITY),
    "validatorIndex": ("validator_index", QUANTITY),
    "address": ("address", DATA),
    "amount": ("amount", QUANTITY),  # gwei
}
WITHDRAWAL_CHECKED: dict[str, str] = {}

# The COPY columns, in line order (the tables' own order differs: COPY names its columns). Each
# line is checked in two parts: first the short fields (hex, decimal, timestamps, NULL) all at
# once (`_checked`), then, each on its own, the long byte strings (a transaction's input, a log's
# data: `_data`, which also refuses an odd number of digits; the logs blooms: `_bloom`), the
# lists of hashes (`_hashes`) and the jsonb (escaped for COPY by `_json`).
BLOCK_COLUMNS = (
    "number", "hash", "parent_hash", "timestamp", "miner", "gas_used", "gas_limit",
    "base_fee_per_gas", "transaction_count", "log_count", "size", "extra_data",
    "state_root", "transactions_root", "receipts_root",
    "nonce", "mix_hash", "sha3_uncles", "difficulty", "total_difficulty",
    "withdrawals_root", "withdrawal_count", "blob_gas_used", "excess_blob_gas",
    "parent_beacon_block_root", "requests_hash",
    "logs_bloom", "uncles", "extra",
)
TRANSACTION_COLUMNS = (
    "block_number", "transaction_index", "hash", "from_address", "to_address", "value", "gas",
    "gas_price", "max_fee_per_gas", "max_priority_fee_per_gas", "nonce", "type",
    "status", "gas_used", "cumulative_gas_used", "effective_gas_price", "contract_address",
    "chain_id", "v", "r", "s", "y_parity", "max_fee_per_blob_gas",
    "root", "blob_gas_used", "blob_gas_price",
    "logs_bloom", "input", "blob_versioned_hashes", "access_list", "authorization_list", "extra", "receipt_extra",
)
LOG_COLUMNS = (
    "block_number", "log_index", "transaction_index", "transaction_hash", "address",
    "topic0", "topic1", "topic2", "topic3",
    "data", "extra",
)
WITHDRAWAL_COLUMNS = (
    "block_number", "position", "withdrawal_index", "validator_index", "address", "amount",
    "extra",
)

# Each chain table's COPY columns, in the order a batch's tables are written.
COPY_COLUMNS = {"blocks": BLOCK_COLUMNS, "transactions": TRANSACTION_COLUMNS, "logs": LOG_COLUMNS,
                "withdrawals": WITHDRAWAL_COLUMNS}

# Each COPY column's type in the tables (schema/), which a binary COPY must write exactly
# (`store.py`; tests/test_binary_copy.py compares them with the migrated database's).
BIGINT, INTEGER, SMALLINT = "bigint", "integer", "smallint"
UINT256, UINT64 = "numeric(78,0)", "numeric(20,0)"
BYTEA, BYTEA_ARRAY, JSONB, TIMESTAMPTZ = "bytea", "bytea[]", "jsonb", "timestamp with time zone"
COLUMN_TYPES: dict[str, dict[str, str]] = {
    "blocks": {
        "number": BIGINT, "hash": BYTEA, "parent_hash": BYTEA, "timestamp": TIMESTAMPTZ, "miner": BYTEA,
        "gas_used": BIGINT, "gas_limit": BIGINT, "base_fee_per_gas": UINT256, "transaction_count": INTEGER,
        "log_count": INTEGER, "size": BIGINT, "extra_data": BYTEA, "state_root": BYTEA,
        "transactions_root": BYTEA, "receipts_root": BYTEA, "nonce": BYTEA, "mix_hash": BYTEA,
        "sha3_uncles": BYTEA, "difficulty": UINT256, "total_difficulty": UINT256, "withdrawals_root": BYTEA,
        "withdrawal_count": INTEGER, "blob_gas_used": BIGINT, "excess_blob_gas": BIGINT,
        "parent_beacon_block_root": BYTEA, "requests_hash": BYTEA, "logs_bloom": BYTEA, "uncles": BYTEA_ARRAY,
        "extra": JSONB,
    },
    "transactions": {
        "block_number": BIGINT, "transaction_index": INTEGER, "hash": BYTEA, "from_address": BYTEA,
        "to_address": BYTEA, "value": UINT256, "gas": BIGINT, "gas_price": UINT256, "max_fee_per_gas": UINT256,
        "max_priority_fee_per_gas": UINT256, "nonce": UINT64, "type": SMALLINT, "status": SMALLINT,
        "gas_used": BIGINT, "cumulative_gas_used": BIGINT, "effective_gas_price": UINT256,
        "contract_address": BYTEA, "chain_id": UINT256, "v": UINT256, "r": UINT256, "s": UINT256,
        "y_parity": SMALLINT, "max_fee_per_blob_gas": UINT256, "root": BYTEA, "blob_gas_used": BIGINT,
        "blob_gas_price": UINT256, "logs_bloom": BYTEA, "input": BYTEA, "blob_versioned_hashes": BYTEA_ARRAY,
        "access_list": JSONB, "authorization_list": JSONB, "extra": JSONB, "receipt_extra": JSONB,
    },
    "logs": {
        "block_number": BIGINT, "log_index": INTEGER, "transaction_index": INTEGER, "transaction_hash": BYTEA,
        "address": BYTEA, "topic0": BYTEA, "topic1": BYTEA, "topic2": BYTEA, "topic3": BYTEA, "data": BYTEA,
        "extra": JSONB,
    },
    "withdrawals": {
        "block_number": BIGINT, "position": INTEGER, "withdrawal_index": BIGINT, "validator_index": BIGINT,
        "address": BYTEA, "amount": UINT64, "extra": JSONB,
    },
}
