"""rows.py's text COPY lines turned into a binary COPY (`indexer/chaindata/_native_copy.c`, what
`store.write` sends where it was built), against PostgreSQL's own reading of the text: every
recorded block of every chain is stored with the same values either way, each table in binary;
and for hostile fields of every column type (and random ones), the binary form stores exactly
what the text form stores, or is declined (the table then goes as text); never another value,
and never a value the text form would have refused."""

from __future__ import annotations

import random
from typing import Any

import psycopg
import pytest

from indexer.chaindata import columns, store
from indexer.chaindata.chain import decode
from indexer.chaindata.rows import Rows
from indexer.jobs import partitions, planner
from indexer.testing.anvil import free_port
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.fixtures import load, names
from indexer.testing.waiting import wait_for

from .test_observability import scrape
from .test_store_fields import ORDER, TABLES, number_of

native = store._native_copy


def test_the_extension_is_built() -> None:
    """The suite's machines have a C compiler: every COPY in text there is a broken build."""
    assert native is not None, "indexer/chaindata/_native_copy.c is not built: run scripts/setup-venv"
    assert store.NATIVE


def test_the_column_types_are_the_tables_types(conn: psycopg.Connection) -> None:
    """A binary COPY must write each column in its type's own form: columns.py's types are the
    migrated tables' types, for every COPY column."""
    for table, column_names in (("blocks", columns.BLOCK_COLUMNS), ("transactions", columns.TRANSACTION_COLUMNS),
                                ("logs", columns.LOG_COLUMNS), ("withdrawals", columns.WITHDRAWAL_COLUMNS)):
        stored = dict(conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped", (table,)).fetchall())
        assert {column: stored[column] for column in column_names} == columns.COLUMN_TYPES[table]


def stored_text(conn: psycopg.Connection, number: int) -> dict[str, list[tuple[Any, ...]]]:
    """Every stored row of one block, each value as PostgreSQL's text of it."""
    key = {"blocks": "number"}
    return {table: conn.execute(f"SELECT t::text FROM {table} t WHERE {key.get(table, 'block_number')} = %s"
                                f" ORDER BY {ORDER[table]}", (number,)).fetchall()
            for table in TABLES}


def decoded(conn: psycopg.Connection, recorded: dict[str, Any]) -> tuple[int, Rows]:
    """A recorded block's number and rows, its partition made."""
    number = number_of(recorded)
    partitions.ensure(conn, number, number)
    return number, decode(number, [recorded["block"]], {number: recorded["receipts"]})


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The COPY statements sent from here on, in order."""
    statements: list[str] = []
    real_copy = psycopg.Cursor.copy

    def watched(self: psycopg.Cursor, statement: str, *args: Any, **kwargs: Any) -> Any:
        statements.append(statement)
        return real_copy(self, statement, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "copy", watched)
    return statements


@pytest.mark.parametrize("name", names())
def test_every_recorded_block_is_stored_the_same_in_binary_as_in_text(
        name: str, conn: psycopg.Connection, sent: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    number, rows = decoded(conn, load(name))
    with conn.transaction():
        store.write(conn, rows)
    in_binary = stored_text(conn, number)
    assert sent and all(statement.endswith(store.IN_BINARY) for statement in sent), sent
    for table in TABLES:
        conn.execute(f"DELETE FROM {table}")
    monkeypatch.setattr(store, "_native_copy", None)
    sent.clear()
    with conn.transaction():
        store.write(conn, rows)
    assert sent and not any(statement.endswith(store.IN_BINARY) for statement in sent)
    assert stored_text(conn, number) == in_binary
    assert in_binary["blocks"]


# --- every column type, field by field ------------------------------------------------------------

KIND = store._KIND  # each column type's byte in `encode`'s kinds
TYPES = tuple(KIND)

B = "\\\\x"  # a bytea's \x, its backslash escaped for COPY
FIELDS = {
    "bigint": ["0", "7", "007", "9223372036854775807", "9223372036854775808", "00000000000000000001", "-1",
               "+1", " 1", "1 ", "", "1e3", "0x10", "18446744073709551616"],
    "integer": ["0", "2147483647", "2147483648", "4294967295", "-2147483648", "12a"],
    "smallint": ["0", "32767", "32768", "65535", "-1"],
    "numeric(78,0)": ["0", "000", "1", "10000", "100000000", "9999", "12345678901234567890",
                      "9" * 78, "1" + "0" * 77, "1" + "0" * 78, "0" * 100 + "5", "1.0", "-5", "NaN", "1e5", ""],
    "numeric(20,0)": ["18446744073709551615", "9" * 20, "1" + "0" * 20, "0"],
    "bytea": [B, B + "ab", B + "AbCdEf", B + "abc", B + "ab cd", B + "zz", "\\x", "ab", B + "a", "\\\\\\\\x"],
    "bytea[]": ["{}", '{"\\\\\\\\xab"}', '{"\\\\\\\\xab","\\\\\\\\x"}', '{"\\\\\\\\xab",}', "{NULL}",
                '{"\\\\\\\\xabc"}', '{"\\\\\\\\xab""}', '{{"\\\\\\\\xab"}}', "{", '{"\\\\\\\\xab"', '{,}',
                '{"\\\\\\\\xab" ,"\\\\\\\\xcd"}', '{"\\\\\\\\xAB","\\\\\\\\xcd","\\\\\\\\x00"}'],
    "jsonb": ["[]", "{}", '{"a":1}', '"tab\\tnew\\nline\\rcr"', '"back\\\\\\\\slash"', '{"a":"\\\\u0041"}',
              '{"a":', "nonsense", '"\\x41"', '"\\b"', '{"a":1,"a":2}', "12345678901234567890123",
              '"\\\\"', '"\\101"', '"a\\.b"', "\\.", '"\\0"', '"\\f\\v"', '"a\\\tb"'],
    "timestamp with time zone": ["1970-01-01 00:00:00+00", "2023-08-26 12:34:56+00", "2024-02-29 23:59:59+00",
                                 "2023-02-29 00:00:00+00", "2023-13-01 00:00:00+00", "2023-01-01 24:00:00+00",
                                 "2023-01-01 23:59:60+00", "9999-12-31 23:59:59+00", "0001-01-01 00:00:00+00",
                                 "2023-01-01 00:00:00+01", "2023-1-01 00:00:00+00", "10000-01-01 00:00:00+00",
                                 "2000-01-01 00:00:00+00", "1999-12-31 23:59:59+00"],
}


@pytest.fixture
def scratch(conn: psycopg.Connection) -> psycopg.Connection:
    """A table of one column of each type, and a second one like it."""
    columns_sql = ", ".join(f"c{i} {type_}" for i, type_ in enumerate(TYPES))
    conn.execute(f"CREATE TABLE as_text ({columns_sql})")
    conn.execute(f"CREATE TABLE as_binary ({columns_sql})")
    conn.commit()
    return conn


def one_field(type_: str, field: str) -> str:
    """A line with `field` in `type_`'s column and NULL in every other."""
    return "\t".join(field if t == type_ else "\\N" for t in TYPES)


KINDS = "".join(KIND[t] for t in TYPES).encode()


def copied(conn: psycopg.Connection, statement: str, data: str | bytes) -> str | None:
    """The row's text as stored by `statement`, or None where PostgreSQL refused it."""
    table = statement.split()[1]
    try:
        with conn.transaction():
            with conn.cursor().copy(statement) as copy:
                copy.write(data)
            value = conn.execute(f"SELECT t::text FROM {table} t").fetchone()[0]
            conn.execute(f"DELETE FROM {table}")
            return value
    except psycopg.Error:
        return None


def compare(conn: psycopg.Connection, line: str) -> str:
    """'same', 'declined' (binary declined what text stores) or 'refused' (text refused, and
    binary declined it or was refused too); an AssertionError where the two differ."""
    binary = native.encode([line], KINDS)
    text_value = copied(conn, "COPY as_text FROM STDIN", line + "\n")
    binary_value = None if binary is None else copied(conn, "COPY as_binary FROM STDIN (FORMAT binary)", binary)
    assert binary is None or binary_value == text_value, (line, text_value, binary_value)
    return "refused" if text_value is None else "declined" if binary is None else "same"


@pytest.mark.parametrize("type_", TYPES)
def test_each_field_is_stored_as_text_stores_it_or_declined(type_: str, scratch: psycopg.Connection) -> None:
    outcomes = {field: compare(scratch, one_field(type_, field)) for field in [*FIELDS[type_], "\\N"]}
    # The forms rows.py writes are taken in binary, not left to text.
    assert outcomes[FIELDS[type_][0]] == "same"
    assert outcomes["\\N"] == "same"
    assert "same" in outcomes.values() and "refused" in outcomes.values(), outcomes


ALPHABET = {
    "bigint": "0123456789-+ e", "integer": "0123456789-", "smallint": "0123456789",
    "numeric(78,0)": "00123456789.-", "numeric(20,0)": "0123456789",
    "bytea": "\\xabcdefABCDEF0123456789 g", "bytea[]": '{}",\\xab0 N', "jsonb": '{}[]":,\\tnrab1 .0\t',
    "timestamp with time zone": "0123456789-: +",
}


@pytest.mark.parametrize("type_", TYPES)
def test_random_fields_are_stored_as_text_stores_them_or_declined(type_: str, scratch: psycopg.Connection) -> None:
    """Fields made at random from the characters that matter to each type, and from the forms
    above with one character changed: binary never stores another value than text."""
    rng = random.Random(f"binary-copy-{type_}")
    seen = {"same": 0, "declined": 0, "refused": 0}
    for _ in range(150):
        if rng.random() < 0.5:
            field = "".join(rng.choice(ALPHABET[type_]) for _ in range(rng.randint(0, 24)))
        else:
            field = list(rng.choice(FIELDS[type_]))
            if field:
                field[rng.randrange(len(field))] = rng.choice(ALPHABET[type_])
            field = "".join(field)
        seen[compare(scratch, one_field(type_, field))] += 1
    assert seen["same"] > 0, seen


@pytest.mark.parametrize("line", [
    "\t".join(["1"] * (len(TYPES) - 1)),  # a field short
    "\t".join(["\\N"] * (len(TYPES) + 1)),  # a field more
    one_field("jsonb", '"a\nb"'),  # a raw newline: two lines to the text COPY
    one_field("jsonb", '"a\rb"'),
    one_field("jsonb", '"é"'),  # not ASCII: the text COPY's encoding rules
])
def test_a_line_the_text_copy_would_read_otherwise_is_declined(line: str) -> None:
    assert native.encode([line], KINDS) is None
    assert native.encode([one_field("bigint", "1"), line], KINDS) is None


def test_every_line_of_a_table_goes_in_one_form() -> None:
    good = one_field("bigint", "1")
    encoded = native.encode([good, good], KINDS)
    assert encoded.startswith(b"PGCOPY\n\xff\r\n\x00") and encoded.endswith(b"\xff\xff")
    assert native.encode([], KINDS) == b"PGCOPY\n\xff\r\n\x00" + bytes(8) + b"\xff\xff"
    with pytest.raises(TypeError):
        native.encode((good,), KINDS)
    with pytest.raises(ValueError):
        native.encode([good], b"")
    assert native.encode([good], KINDS[:-1]) is None  # a column short


def test_a_batch_with_a_line_binary_declines_is_stored_in_text(conn: psycopg.Connection, sent: list[str]) -> None:
    """An L2's `extra` with a character outside ASCII: its table goes as text, the others in
    binary, and the block reads back whole."""
    recorded = load("optimism-sepolia-4089330")
    recorded["block"]["transactions"][0]["note"] = "naïve"
    number, rows = decoded(conn, recorded)
    with conn.transaction():
        store.write(conn, rows)
    forms = {statement.split()[1]: statement.endswith(store.IN_BINARY) for statement in sent}
    assert forms["transactions"] is False and forms["blocks"] is True, sent
    note = conn.execute("SELECT extra->>'note' FROM transactions WHERE block_number = %s AND transaction_index = 0",
                        (number,)).fetchone()[0]
    assert note == "naïve"


def test_the_widest_forms_fit_the_buffer_sized_for_them() -> None:
    """The output is sized before it is written, from the text and a bound on what a field can
    grow by (`GROWTH`; `encode` ends the process if it wrote past it): the forms that grow the
    most (a bytea[] of one empty item, `{}`, one-digit numbers) over the most columns COPY allows
    come out whole."""
    for kind, field, size in ((b"a", '{"\\\\\\\\x"}', 28), (b"a", "{}", 16), (b"N", "1", 14), (b"8", "0", 12),
                              (b"t", "2000-01-01 00:00:00+00", 12), (b"j", "1", 6)):
        encoded = native.encode(["\t".join([field] * 1600)] * 3, kind * 1600)
        assert len(encoded) == 11 + 8 + 3 * (2 + 1600 * size) + 2, kind


def test_kinds_outside_the_nine_are_refused() -> None:
    with pytest.raises(ValueError):
        native.encode(["\\N"], b"\0")
    with pytest.raises(ValueError):
        native.encode(["1"], b"x")


def test_a_transaction_of_megabytes_of_input_is_stored_whole(conn: psycopg.Connection) -> None:
    recorded = load("mainnet-18000000")
    recorded["block"]["transactions"][0]["input"] = "0x" + bytes(range(256)).hex() * 16_384  # 4 MiB
    number, rows = decoded(conn, recorded)
    with conn.transaction():
        store.write(conn, rows)
    stored = conn.execute("SELECT input FROM transactions WHERE block_number = %s AND transaction_index = 0",
                          (number,)).fetchone()[0]
    assert stored == bytes(range(256)) * 16_384


def test_a_batch_stored_already_goes_through_the_staging_tables_in_binary_and_changes_nothing(
        conn: psycopg.Connection, sent: list[str]) -> None:
    number, rows = decoded(conn, load("mainnet-18000000"))
    store.prepare(conn)
    with conn.transaction():
        store.write(conn, rows)
    before = stored_text(conn, number)
    sent.clear()
    with conn.transaction():
        store.write(conn, rows)
    staged = [statement.split()[1] for statement in sent if statement.startswith("COPY stage_")]
    assert staged == ["stage_blocks", "stage_transactions", "stage_logs", "stage_withdrawals"], sent
    assert all(statement.endswith(store.IN_BINARY) for statement in sent)
    assert stored_text(conn, number) == before



def test_a_worker_counts_the_tables_it_sent_as_text(db_url: str, conn: psycopg.Connection, chain_node: Any,
                                                   work: Any) -> None:
    """A node whose blocks carry a key of its own with a character outside ASCII (stored in
    `extra`, as an L2's fields are): the blocks go as text and are counted, the key stored whole."""
    def noted(call: dict, result: object) -> object:
        if call.get("method", "").startswith("eth_getBlockBy") and isinstance(result, dict):
            return result | {"note": "naïve"}
        return result

    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 10)
    port = free_port()
    with FaultProxy(chain_node.url, rewrite=noted) as proxy:
        w = work(db_url, proxy.url, "--workers", "1", INDEXER_METRICS_PORT=str(port))
        try:
            wait_for(lambda: conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0, "the backfill")
            counted = {key: value for key, value in scrape(port).items()
                       if key.startswith("indexer_copy_text_tables_total")}
        finally:
            w.kill()
    assert set(counted) == {'indexer_copy_text_tables_total{table="blocks"}'}, counted
    assert counted['indexer_copy_text_tables_total{table="blocks"}'] >= 1
    assert conn.execute("SELECT count(*) FROM blocks WHERE extra->>'note' = 'naïve'").fetchone()[0] == head + 1
