"""Every field of the recorded answers of real chains (tests/fixtures), decoded, written with
`store.write` and read back from PostgreSQL: each stored value equals the answer (numbers, bytes,
bytea[] and jsonb, `extra` included), withdrawals and uncles round-trip, writing again changes
nothing, a replaced block loses its old withdrawals, and a database holding blocks written under
migration 004 migrates to 005 in place, its rows untouched and NULL in the new columns."""

from __future__ import annotations

import copy
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from indexer.base import db
from indexer.chaindata import store
from indexer.chaindata.chain import decode
from indexer.chaindata.columns import BLOCK_COLUMNS, LOG_COLUMNS, TRANSACTION_COLUMNS
from indexer.jobs import partitions
from indexer.operations import verify
from indexer.testing.fixtures import load, names

from .unit.test_every_field import NASTY, walk

NAMES = names()
TABLES = ("blocks", "transactions", "logs", "withdrawals")
ORDER = {"blocks": "number", "transactions": "block_number, transaction_index",
         "logs": "block_number, log_index", "withdrawals": "block_number, position"}


def number_of(recorded: dict[str, Any]) -> int:
    return int(recorded["block"]["number"], 16)


def write(conn: psycopg.Connection, recorded: dict[str, Any], *, partitioned: bool = True) -> None:
    """One block as a batch of its own, in a transaction, as a worker writes it (its partition
    made first, as a plan would have, unless the schema predates partitions)."""
    number = number_of(recorded)
    if partitioned:
        partitions.ensure(conn, number, number)
    rows = decode(number, [recorded["block"]], {number: recorded["receipts"]})
    with conn.transaction():
        store.write(conn, rows)


def read(conn: psycopg.Connection, number: int) -> dict[str, list[dict[str, Any]]]:
    key = {"blocks": "number"}
    with conn.cursor(row_factory=dict_row) as cur:
        return {table: cur.execute(f"SELECT * FROM {table} WHERE {key.get(table, 'block_number')} = %s"
                                   f" ORDER BY {ORDER[table]}", (number,)).fetchall()
                for table in TABLES}


def assert_stored(conn: psycopg.Connection, recorded: dict[str, Any]) -> None:
    stored = read(conn, number_of(recorded))
    assert len(stored["blocks"]) == 1
    walk(recorded["block"], recorded["receipts"], stored["blocks"][0], stored["transactions"],
         stored["logs"], stored["withdrawals"])


def snapshot(conn: psycopg.Connection) -> list[list[tuple]]:
    """Every row of the chain tables with its row version: equal snapshots, nothing rewritten."""
    return [conn.execute(f"SELECT xmin::text, t.* FROM {table} t ORDER BY {ORDER[table]}").fetchall()
            for table in TABLES]


@pytest.fixture
def prepared(conn):
    store.prepare(conn)
    return conn


def test_every_recorded_field_is_stored_as_the_node_said_it(prepared):
    conn = prepared
    for name in NAMES:
        write(conn, load(name))
    for name in NAMES:
        assert_stored(conn, load(name))
    # The eras' own fields, read back as PostgreSQL holds them.
    n = conn.execute("SELECT count(*), sum(amount), min(position), max(position) FROM withdrawals"
                     " WHERE block_number = 18000000").fetchone()
    withdrawals = load("mainnet-18000000")["block"]["withdrawals"]
    assert n == (16, sum(int(w["amount"], 16) for w in withdrawals), 0, 15)
    assert conn.execute("SELECT withdrawal_count FROM blocks WHERE number = 18000000").fetchone()[0] == 16
    assert conn.execute("SELECT count(*) FROM blocks WHERE logs_bloom IS NULL").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM transactions WHERE logs_bloom IS NULL").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM transactions WHERE root IS NOT NULL").fetchone()[0] >= 6
    assert conn.execute("SELECT count(*) FROM transactions WHERE cardinality(blob_versioned_hashes) > 0"
                        ).fetchone()[0] >= 1
    assert conn.execute("SELECT count(*) FROM transactions WHERE jsonb_array_length(authorization_list) > 0"
                        ).fetchone()[0] >= 1
    arbitrum = number_of(load("arbitrum-sepolia-185232421"))
    assert conn.execute("SELECT extra->>'sendRoot' IS NOT NULL FROM blocks WHERE number = %s",
                        (arbitrum,)).fetchone()[0]


def test_uncles_and_keys_nobody_mapped_round_trip(prepared):
    """bytea[] and jsonb with tabs, newlines, backslashes, quotes and non-ASCII, through COPY."""
    conn = prepared
    recorded = copy.deepcopy(load("mainnet-18000000"))
    block, receipts = recorded["block"], recorded["receipts"]
    block["uncles"] = ["0x" + "ab" * 32, "0x" + "CD" * 32]
    block["someNewHeaderField"] = NASTY
    block["transactions"][0]["sourceHash"] = "0x" + "11" * 32
    receipts[0]["l1Fee"] = "0x1234"
    receipts[0]["logs"][0]["brandNew"] = NASTY
    block["withdrawals"][0]["source"] = "consensus\\\t"
    write(conn, recorded)
    assert_stored(conn, recorded)
    assert conn.execute("SELECT uncles, extra FROM blocks").fetchone() == (
        [b"\xab" * 32, b"\xcd" * 32], {"someNewHeaderField": NASTY})
    assert conn.execute("SELECT extra->'brandNew'->>'text' FROM logs WHERE extra IS NOT NULL").fetchone()[0] == \
        NASTY["text"]
    assert conn.execute("SELECT count(*) FROM blocks WHERE uncles = '{}'").fetchone()[0] == 0


def test_writing_the_same_blocks_again_changes_nothing(prepared):
    conn = prepared
    for name in NAMES:
        write(conn, load(name))
    before = snapshot(conn)
    for name in NAMES:
        write(conn, load(name))  # each is stored already: the merge path, ON CONFLICT DO NOTHING
    assert snapshot(conn) == before


def forked(recorded: dict[str, Any]) -> dict[str, Any]:
    """The same height on another fork: another hash, one transaction and three withdrawals fewer,
    one withdrawal's amount changed."""
    fork = copy.deepcopy(recorded)
    block, receipts = fork["block"], fork["receipts"]
    old_hash, new_hash = block["hash"], "0x" + "ee" * 32
    block["hash"] = new_hash
    del block["transactions"][-1], receipts[-1]
    for item in [*block["transactions"], *receipts, *(log for r in receipts for log in r["logs"])]:
        if item.get("blockHash") == old_hash:
            item["blockHash"] = new_hash
    del block["withdrawals"][-3:]
    block["withdrawals"][0]["amount"] = hex(int(block["withdrawals"][0]["amount"], 16) + 1)
    return fork


def test_a_replaced_block_loses_its_old_transactions_logs_and_withdrawals(prepared):
    conn = prepared
    recorded = load("mainnet-18000000")
    write(conn, recorded)
    fork = forked(recorded)
    write(conn, fork)
    assert_stored(conn, fork)
    assert conn.execute("SELECT count(*) FROM withdrawals").fetchone()[0] == 13
    write(conn, recorded)  # and back
    assert_stored(conn, recorded)


def test_repair_deletes_a_suspect_block_s_withdrawals(prepared):
    conn = prepared
    write(conn, load("mainnet-18000000"))
    write(conn, load("mainnet-1755635"))
    verify.repair(conn, verify.Report(wrong_counts=[18000000]), 10_000)
    assert conn.execute("SELECT count(*) FROM withdrawals").fetchone()[0] == 0
    assert conn.execute("SELECT array_agg(number) FROM blocks").fetchone()[0] == [1755635]


# What migration 004 left: the chain tables' columns before 005.
BLOCK_COLUMNS_004 = (
    "number", "hash", "parent_hash", "timestamp", "miner", "gas_used", "gas_limit",
    "base_fee_per_gas", "transaction_count", "log_count", "size", "extra_data",
    "state_root", "transactions_root", "receipts_root",
)
TRANSACTION_COLUMNS_004 = (
    "block_number", "transaction_index", "hash", "from_address", "to_address", "value", "gas",
    "gas_price", "max_fee_per_gas", "max_priority_fee_per_gas", "input", "nonce", "type",
    "status", "gas_used", "cumulative_gas_used", "effective_gas_price", "contract_address",
)
LOG_COLUMNS_004 = (
    "block_number", "log_index", "transaction_index", "transaction_hash", "address",
    "topic0", "topic1", "topic2", "topic3", "data",
)


def copy_as_004(conn: psycopg.Connection, recorded: dict[str, Any]) -> None:
    """The block as the indexer wrote it before 005: the same lines, cut to 004's columns."""
    number = number_of(recorded)
    rows = decode(number, [recorded["block"]], {number: recorded["receipts"]})
    for table, lines, new, old in (("blocks", rows.blocks, BLOCK_COLUMNS, BLOCK_COLUMNS_004),
                                   ("transactions", rows.transactions, TRANSACTION_COLUMNS, TRANSACTION_COLUMNS_004),
                                   ("logs", rows.logs, LOG_COLUMNS, LOG_COLUMNS_004)):
        if lines:
            with conn.cursor().copy(f"COPY {table} ({', '.join(old)}) FROM STDIN") as copy_:
                for line in lines:
                    fields = dict(zip(new, line.split("\t")))
                    copy_.write("\t".join(fields[c] for c in old) + "\n")


def test_a_database_of_migration_004_migrates_in_place_and_keeps_its_rows(blank_db_url, monkeypatch):
    every = db.migration_files()
    assert "005_every_field" in [p.stem for p in every]
    monkeypatch.setattr(db, "migration_files", lambda: [p for p in every if p.stem < "005"])
    before_partitions = [p for p in every if p.stem < "011"]  # 011 makes the tables partitioned: its own test
    old = ["mainnet-47218", "mainnet-1755635", "mainnet-18000000"]
    with db.connect(blank_db_url) as conn:
        db.migrate(conn)
        with conn.transaction():
            for name in old:
                copy_as_004(conn, load(name))
        files = {t: conn.execute("SELECT pg_relation_filenode(%s)", (t,)).fetchone()[0]
                 for t in ("blocks", "transactions", "logs")}
        before = [conn.execute(f"SELECT ctid::text, xmin::text, {', '.join(cols)} FROM {t} ORDER BY {ORDER[t]}").fetchall()
                  for t, cols in (("blocks", BLOCK_COLUMNS_004), ("transactions", TRANSACTION_COLUMNS_004),
                                  ("logs", LOG_COLUMNS_004))]

        monkeypatch.setattr(db, "migration_files", lambda: before_partitions)
        applied = db.migrate(conn)
        assert applied[0] == "005_every_field"

        # In place: the same files, the same row versions at the same places, the same values.
        assert files == {t: conn.execute("SELECT pg_relation_filenode(%s)", (t,)).fetchone()[0] for t in files}
        after = [conn.execute(f"SELECT ctid::text, xmin::text, {', '.join(cols)} FROM {t} ORDER BY {ORDER[t]}").fetchall()
                 for t, cols in (("blocks", BLOCK_COLUMNS_004), ("transactions", TRANSACTION_COLUMNS_004),
                                 ("logs", LOG_COLUMNS_004))]
        assert after == before and len(after[0]) == 3 and len(after[2]) == 291 + 2
        # Every new column is NULL in the old rows; logs_bloom IS NULL tells which blocks they are.
        for table, new, old_columns in (("blocks", BLOCK_COLUMNS, BLOCK_COLUMNS_004),
                                        ("transactions", TRANSACTION_COLUMNS, TRANSACTION_COLUMNS_004),
                                        ("logs", LOG_COLUMNS, LOG_COLUMNS_004)):
            added = [c for c in new if c not in old_columns]
            assert added
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE num_nonnulls({', '.join(added)}) > 0"
                                ).fetchone()[0] == 0, table
        assert conn.execute("SELECT count(*) FROM withdrawals").fetchone()[0] == 0

        # The indexer writes on: a new block with every field; a block stored before 005 is left
        # alone by a re-run (same hash), still marked by its NULL logs_bloom.
        store.prepare(conn)
        write(conn, load("mainnet-0"), partitioned=False)
        write(conn, load("mainnet-18000000"), partitioned=False)
        assert_stored(conn, load("mainnet-0"))
        assert [r[0] for r in conn.execute("SELECT number FROM blocks WHERE logs_bloom IS NULL ORDER BY number")] == \
            [int(load(name)["block"]["number"], 16) for name in old]
