"""Rows -> the chain tables: COPY, straight into the tables or through staging tables and a merge.

A batch is first copied straight into `blocks`, `transactions`, `logs` and `withdrawals`, inside
a savepoint: on a first backfill, none of its blocks is stored yet and this is all it takes. If any block is
already there, the primary key refuses the COPY; the savepoint is rolled back and the batch goes
through session-local staging tables and `INSERT ... ON CONFLICT` instead. (Blocks and their
contents are written in one transaction, so a block that is not stored has no stored
transactions, logs or withdrawals either.)

Indexing a range again yields the same rows (the queue is at-least-once):
- a block already stored with the same hash is left alone, and so are its transactions, logs
  and withdrawals (`ON CONFLICT DO NOTHING`), so a re-run writes no new row versions; this holds
  for a block stored before schema/005_every_field.sql too, which keeps NULL in the columns that
  migration added until `indexer verify` has it deleted and indexed again;
- a block stored with a different hash (the chain reorganised below the safe head, or a node
  served a fork) is replaced, and its old transactions, logs and withdrawals are deleted first.
The caller owns the transaction: the worker puts its heartbeat in the same one, so a worker
whose claim is gone cannot write anything.

Each table's lines go in PostgreSQL's binary COPY form where the install compiled
`_native_copy.c`, which turns rows.py's text lines into it: the database then takes in bytes
and integers instead of parsing each block's hex digits and decimal numbers, at about half its
CPU a mainnet block (BENCHMARKS.md, "Binary COPY, taken"). A table with a line it declines (a
form rows.py does not write, a value the column cannot hold) goes as text, as every table does
without the module, and is stored or refused as before.
"""

from __future__ import annotations

import psycopg

from .columns import (BIGINT, BLOCK_COLUMNS, BYTEA, BYTEA_ARRAY, COLUMN_TYPES, COPY_COLUMNS, INTEGER, JSONB,
                      LOG_COLUMNS, SMALLINT, TIMESTAMPTZ, TRANSACTION_COLUMNS, UINT64, UINT256, WITHDRAWAL_COLUMNS)
from .rows import Rows

try:
    from . import _native_copy
except ImportError:  # installed where no C compiler was found: every COPY is text
    _native_copy = None

NATIVE = _native_copy is not None

_B, _T, _L, _W = (", ".join(cols) for cols in (BLOCK_COLUMNS, TRANSACTION_COLUMNS, LOG_COLUMNS,
                                               WITHDRAWAL_COLUMNS))

# Run once per connection. ON COMMIT DELETE ROWS empties them at every commit.
CREATE_STAGING_TABLES = """
CREATE TEMP TABLE IF NOT EXISTS stage_blocks (LIKE blocks) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_transactions (LIKE transactions) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_logs (LIKE logs) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_withdrawals (LIKE withdrawals) ON COMMIT DELETE ROWS;
"""

COPY_NEW_BLOCKS = f"COPY blocks ({_B}) FROM STDIN"
COPY_NEW_TRANSACTIONS = f"COPY transactions ({_T}) FROM STDIN"
COPY_NEW_LOGS = f"COPY logs ({_L}) FROM STDIN"
COPY_NEW_WITHDRAWALS = f"COPY withdrawals ({_W}) FROM STDIN"

COPY_STAGE_BLOCKS = f"COPY stage_blocks ({_B}) FROM STDIN"
COPY_STAGE_TRANSACTIONS = f"COPY stage_transactions ({_T}) FROM STDIN"
COPY_STAGE_LOGS = f"COPY stage_logs ({_L}) FROM STDIN"
COPY_STAGE_WITHDRAWALS = f"COPY stage_withdrawals ({_W}) FROM STDIN"

COPY_NEW = {"blocks": COPY_NEW_BLOCKS, "transactions": COPY_NEW_TRANSACTIONS, "logs": COPY_NEW_LOGS,
            "withdrawals": COPY_NEW_WITHDRAWALS}
COPY_STAGE = {"blocks": COPY_STAGE_BLOCKS, "transactions": COPY_STAGE_TRANSACTIONS, "logs": COPY_STAGE_LOGS,
              "withdrawals": COPY_STAGE_WITHDRAWALS}

# Appended to any of the statements above for data `_native_copy.encode` made binary.
IN_BINARY = " (FORMAT binary)"

# Each type's byte in `_native_copy.encode`'s kinds, and each table's kinds in line order.
_KIND = {BIGINT: "8", INTEGER: "4", SMALLINT: "2", UINT256: "N", UINT64: "n", BYTEA: "b", BYTEA_ARRAY: "a",
         JSONB: "j", TIMESTAMPTZ: "t"}
COPY_KINDS = {table: "".join(_KIND[COLUMN_TYPES[table][column]] for column in columns).encode()
              for table, columns in COPY_COLUMNS.items()}

# Its own statement, before the merge: within one statement the inserts below would still see
# the rows this deletes and skip the new versions as conflicts.
DELETE_REPLACED_BLOCK_CONTENTS = """
WITH replaced AS (
    SELECT s.number FROM stage_blocks s JOIN blocks b ON b.number = s.number AND b.hash <> s.hash
), gone_transactions AS (
    DELETE FROM transactions WHERE block_number IN (SELECT number FROM replaced)
), gone_withdrawals AS (
    DELETE FROM withdrawals WHERE block_number IN (SELECT number FROM replaced)
)
DELETE FROM logs WHERE block_number IN (SELECT number FROM replaced)
"""

MERGE = f"""
WITH merged_blocks AS (
    INSERT INTO blocks ({_B}) SELECT {_B} FROM stage_blocks
    ON CONFLICT (number) DO UPDATE SET ({_B}) = ROW({", ".join(f"excluded.{c}" for c in BLOCK_COLUMNS)})
    WHERE blocks.hash IS DISTINCT FROM excluded.hash
), merged_transactions AS (
    INSERT INTO transactions ({_T}) SELECT {_T} FROM stage_transactions
    ON CONFLICT (block_number, transaction_index) DO NOTHING
), merged_withdrawals AS (
    INSERT INTO withdrawals ({_W}) SELECT {_W} FROM stage_withdrawals
    ON CONFLICT (block_number, position) DO NOTHING
)
INSERT INTO logs ({_L}) SELECT {_L} FROM stage_logs
ON CONFLICT (block_number, log_index) DO NOTHING
"""


def prepare(conn: psycopg.Connection) -> None:
    """Creates this session's staging tables; the worker calls it on every new connection."""
    conn.execute(CREATE_STAGING_TABLES)
    if not conn.autocommit:
        conn.commit()


def table_lines(rows: Rows) -> list[tuple[str, list[str]]]:
    """Each chain table with its lines in `rows`, in the order they are written; none left empty."""
    return [(table, lines) for table, lines in (("blocks", rows.blocks), ("transactions", rows.transactions),
                                                ("logs", rows.logs), ("withdrawals", rows.withdrawals)) if lines]


def encoded(table: str, lines: list[str]) -> bytes | str:
    """One table's lines as COPY data: binary (bytes) where `_native_copy` takes every line, text
    (str) otherwise."""
    binary = _native_copy.encode(lines, COPY_KINDS[table]) if _native_copy is not None else None
    return "\n".join(lines) + "\n" if binary is None else binary


def copy(conn: psycopg.Connection, statement: str, data: bytes | str) -> None:
    """COPYs what `encoded` made with `statement`, told the format."""
    with conn.cursor().copy(statement + IN_BINARY if isinstance(data, bytes) else statement) as into:
        into.write(data)


def write(conn: psycopg.Connection, rows: Rows) -> tuple[str, ...]:
    """Writes one batch; call inside the caller's transaction. Returns the tables that went as
    text though binary COPY was built: a line of theirs it declined."""
    # Encoded once: the staging tables take the same data when the savepoint is rolled back.
    tables = [(table, encoded(table, lines)) for table, lines in table_lines(rows)]
    in_text = tuple(table for table, data in tables if NATIVE and isinstance(data, str))
    try:
        with conn.transaction():  # a savepoint
            for table, data in tables:
                copy(conn, COPY_NEW[table], data)
        return in_text
    except psycopg.errors.UniqueViolation:
        pass  # some of these blocks are stored already
    for table, data in tables:
        copy(conn, COPY_STAGE[table], data)
    conn.execute(DELETE_REPLACED_BLOCK_CONTENTS)
    conn.execute(MERGE)
    return in_text


RECORD_CHAIN_ID = """
INSERT INTO chain (chain_id) VALUES (%(chain_id)s) ON CONFLICT (singleton) DO NOTHING
"""
SELECT_CHAIN_ID = "SELECT chain_id FROM chain"


def recorded_chain_id(conn: psycopg.Connection) -> int | None:
    row = conn.execute(SELECT_CHAIN_ID).fetchone()
    return row[0] if row else None


def record_chain_id(conn: psycopg.Connection, chain_id: int) -> int:
    """Records the chain on first use; returns the chain id the database holds."""
    conn.execute(RECORD_CHAIN_ID, {"chain_id": chain_id})
    return conn.execute(SELECT_CHAIN_ID).fetchone()[0]
