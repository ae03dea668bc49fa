"""What the indexer wrote, held against what the node says and against itself."""

from __future__ import annotations

import psycopg
from web3 import Web3


def addr(value: str | None) -> bytes | None:
    return None if value is None else bytes.fromhex(value[2:])


def raw(value: bytes | None) -> bytes | None:
    return None if value is None else bytes(value)


def number(value: bytes | int | None) -> int | None:
    """web3.py gives a signature's r and s as bytes."""
    return int.from_bytes(value, "big") if isinstance(value, bytes) else value


def assert_matches_node(conn: psycopg.Connection, url: str, first: int, last: int) -> None:
    """Every block, transaction, receipt field and log in Postgres equals what the node returns
    (read here through web3.py, independently of the indexer's own decoding)."""
    w3 = Web3(Web3.HTTPProvider(url))
    blocks, txs, logs = [], [], []
    for n in range(first, last + 1):
        b = w3.eth.get_block(n, full_transactions=True)
        receipts = w3.eth.get_block_receipts(n)
        blocks.append((
            n, bytes(b.hash), bytes(b.parentHash), b.timestamp, addr(b.miner), b.gasUsed, b.gasLimit,
            b.get("baseFeePerGas"), len(b.transactions), sum(len(r.logs) for r in receipts), b.size,
            bytes(b.extraData), bytes(b.stateRoot), bytes(b.transactionsRoot), bytes(b.receiptsRoot),
            raw(b.get("nonce")), raw(b.get("mixHash")), raw(b.get("sha3Uncles")), raw(b.get("logsBloom")),
            b.get("difficulty"), raw(b.get("withdrawalsRoot")), None if b.get("withdrawals") is None
            else len(b.withdrawals), b.get("blobGasUsed"), b.get("excessBlobGas"), raw(b.get("parentBeaconBlockRoot")),
        ))
        for tx, r in zip(b.transactions, receipts, strict=True):
            txs.append((
                n, tx.transactionIndex, bytes(tx.hash), addr(tx["from"]), addr(tx.get("to")), tx.value, tx.gas,
                tx.get("gasPrice"), tx.get("maxFeePerGas"), tx.get("maxPriorityFeePerGas"), bytes(tx.input),
                tx.nonce, tx.type, r.status, r.gasUsed, r.cumulativeGasUsed, r.effectiveGasPrice,
                addr(r.contractAddress),
                tx.get("chainId"), tx.get("v"), number(tx.get("r")), number(tx.get("s")), tx.get("yParity"),
                raw(r.get("logsBloom")),
            ))
            for lg in r.logs:
                topics = [bytes(t) for t in lg.topics] + [None] * (4 - len(lg.topics))
                logs.append((n, lg.logIndex, lg.transactionIndex, bytes(lg.transactionHash), addr(lg.address),
                             *topics, bytes(lg.data)))
    rng = {"first": first, "last": last}
    got_blocks = conn.execute(
        "SELECT number, hash, parent_hash, extract(epoch FROM timestamp)::bigint, miner, gas_used, gas_limit,"
        " base_fee_per_gas, transaction_count, log_count, size, extra_data, state_root, transactions_root,"
        " receipts_root, nonce, mix_hash, sha3_uncles, logs_bloom, difficulty, withdrawals_root, withdrawal_count,"
        " blob_gas_used, excess_blob_gas, parent_beacon_block_root"
        " FROM blocks WHERE number BETWEEN %(first)s AND %(last)s ORDER BY number", rng).fetchall()
    got_txs = conn.execute(
        "SELECT block_number, transaction_index, hash, from_address, to_address, value, gas, gas_price,"
        " max_fee_per_gas, max_priority_fee_per_gas, input, nonce, type, status, gas_used, cumulative_gas_used,"
        " effective_gas_price, contract_address, chain_id, v, r, s, y_parity, logs_bloom"
        " FROM transactions WHERE block_number BETWEEN %(first)s AND %(last)s"
        " ORDER BY block_number, transaction_index", rng).fetchall()
    got_logs = conn.execute(
        "SELECT block_number, log_index, transaction_index, transaction_hash, address, topic0, topic1, topic2,"
        " topic3, data FROM logs WHERE block_number BETWEEN %(first)s AND %(last)s ORDER BY block_number, log_index",
        rng).fetchall()
    assert len(got_blocks) == len(blocks)
    assert got_blocks == blocks
    assert len(got_txs) == len(txs)
    assert got_txs == txs
    assert len(got_logs) == len(logs)
    assert got_logs == logs


def snapshot(conn: psycopg.Connection) -> list:
    """Every chain row with its row version (xmin): equal snapshots mean nothing was rewritten."""
    return [conn.execute(f"SELECT xmin::text, t.* FROM {table} t ORDER BY 2, 3").fetchall()
            for table in ("blocks", "transactions", "logs", "withdrawals")]


def stored_hashes(conn: psycopg.Connection) -> dict[int, str]:
    return dict(conn.execute("SELECT number, '0x' || encode(hash, 'hex') FROM blocks ORDER BY number").fetchall())


def copy_is_the_node_s(conn: psycopg.Connection, node) -> bool:
    """Every block up to the node's head is stored, with the node's hash, and nothing above it."""
    head = node.head()
    stored = stored_hashes(conn)
    if sorted(stored) != list(range(head + 1)):
        return False
    canonical = node.batch([("eth_getBlockByNumber", [hex(n), False]) for n in range(head + 1)])
    return all(stored[n] == block["hash"] for n, block in enumerate(canonical))
