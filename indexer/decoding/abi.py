"""Any contract's events, decoded from the stored logs into a table per event (`indexer abi`).

`indexer abi add NAME FILE` registers an ABI (schema/009_abi_registry.sql: `abis`, and
`abi_events`, one row per event with its table), creates each event's table and plans
`decode_logs` jobs for every range already indexed, all in one transaction. A decode job calls
`abi_decode.decode_range`, which reads the stored logs of its blocks, never the node.

An event's table has `block_number`, `log_index` (its key), `transaction_hash` and `address`
(the contract that emitted the log), then one column per parameter, named as
`indexer.decoding.abi_names` says and typed by `abi_decode.column_type`:
- `address`, `bytes1`..`bytes32`, `bytes`, `function`: bytea;
- `uint8`..`uint56` and `int8`..`int64`: bigint; wider integers (`uint64` is one): numeric(78,0);
- `bool`: boolean; `string`: text; `fixedMxN`/`ufixedMxN`: numeric;
- arrays and tuples: jsonb, in which integers are JSON numbers (jsonb keeps them exact, e.g.
  `(amounts->>0)::numeric`), addresses and byte strings lower-case 0x-hex strings, fixed-point
  numbers strings, and a tuple an object keyed by its components' names (an array when one has
  none);
- an indexed `string`, `bytes`, array or tuple: the log holds only the keccak-256 of its
  encoding, so the column is that 32-byte hash (bytea).

Only logs whose topic0 is a registered event's, from the ABI's addresses (if it names any) and
at or above its first block, are read. A log that such an event cannot decode is skipped and
counted by reason (`SKIP_*`); it never fails the job. Anonymous events have no topic0 to
find their logs by, and are skipped at registration with a message.

An ABI is refused before anything is written, and before eth-abi parses its types, when it is
beyond a bound (`abi_parse.py`) (`MAX_EVENTS`, `MAX_PARAMS`, `MAX_DEPTH`, `MAX_DIMENSIONS`, `MAX_STATIC_WORDS`,
`MAX_TYPE_CHARS`, `MAX_FILE_BYTES`): each far above what deployed contracts use, and below what
costs the server's lock table or the CPU dearly.

`indexer abi drop` first marks the ABI `dropping`, in a transaction that waits for the decode
windows in flight (`DECODING`), after which no window uses it; it then drops its tables
`DROP_BATCH` a transaction. Run again, it finishes a drop that was interrupted.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ..base import chains
from ..base.block_range import DECODE_LOGS, cut
from ..jobqueue import queue
from . import abi_names
from .abi_decode import DECODING, SQL_TYPES, STOP_DECODING, column_type
from .abi_bounds import MAX_FILE_BYTES
from .abi_parse import AbiError, Event, ParsedAbi, parse_abi, parse_address

# Event tables an `abi drop` transaction drops: some 700 locks of the server's lock table.
DROP_BATCH = 100

# Serialises `abi add` and `abi drop` of one chain: the table names one derives depend on the tables the
# other creates or drops.
ABI_LOCK = f"SELECT pg_advisory_xact_lock(hashtext({chains.own('skiplock-indexer:abi')}))"

# NULL: no ABI of that name; true: one whose drop began (and may have been interrupted).
ABI_DROPPING = "SELECT dropping FROM abis WHERE name = %(name)s"

RELATION_NAMES = "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace"

INSERT_ABI = """
INSERT INTO abis (name, abi, addresses, from_block)
VALUES (%(name)s, %(abi)s, %(addresses)s, %(from_block)s)
"""

INSERT_EVENT = """
INSERT INTO abi_events (abi_name, table_name, signature, topic0, event, columns)
VALUES (%(abi_name)s, %(table_name)s, %(signature)s, %(topic0)s, %(event)s, %(columns)s)
"""

# {columns}: each parameter's EVENT_COLUMN, none for an event without parameters.
CREATE_EVENT_TABLE = sql.SQL("""
CREATE TABLE {table} (
    block_number     bigint  NOT NULL,
    log_index        integer NOT NULL,
    transaction_hash bytea   NOT NULL,
    address          bytea   NOT NULL,
    {columns}PRIMARY KEY (block_number, log_index)
)""")
EVENT_COLUMN = sql.SQL("{name} {type} NOT NULL,\n    ")
COMMENT_ON_TABLE = sql.SQL("COMMENT ON TABLE {table} IS {text}")
COMMENT_ON_COLUMN = sql.SQL("COMMENT ON COLUMN {table}.{column} IS {text}")

# The blocks indexed so far (index_blocks jobs done) at or above `from_block`, as [lo, hi).
INDEXED_RANGES = """
SELECT lower(r), upper(r)
FROM unnest((SELECT range_agg(int8range(first_block, last_block, '[]'))
             FROM block_ranges
             WHERE status = 'done' AND first_block IS NOT NULL)
            * int8multirange(int8range(%(from_block)s, NULL))) AS r
ORDER BY 1
"""

COUNT_ROWS = sql.SQL("SELECT count(*) FROM {table}")

SELECT_LISTING = """
SELECT a.name, a.addresses, a.from_block, a.dropping, e.signature, e.table_name
FROM abis a LEFT JOIN abi_events e ON e.abi_name = a.name
ORDER BY a.name, e.signature, e.table_name
"""

MARK_DROPPING = "UPDATE abis SET dropping = true WHERE name = %(name)s RETURNING name"
# The next tables of a dropping ABI, taken out of its registry.
DELETE_EVENTS = """
DELETE FROM abi_events
WHERE abi_name = %(name)s
  AND table_name IN (SELECT table_name FROM abi_events WHERE abi_name = %(name)s
                     ORDER BY table_name LIMIT %(limit)s)
RETURNING table_name
"""
DELETE_ABI = "DELETE FROM abis WHERE name = %(name)s AND dropping"
DROP_TABLE = sql.SQL("DROP TABLE IF EXISTS {table}")


# ---------------------------------------------------------------------------------------------
# abi add, list, drop


@dataclass(frozen=True)
class Registration:
    """What `abi add` registers, checked before the database is touched."""

    name: str
    parsed: ParsedAbi
    addresses: list[bytes] | None  # None: any contract's logs
    from_block: int


def registration(name: str, path: str, *, addresses: Iterable[str] = (), from_block: int = 0) -> Registration:
    """Reads and checks an `abi add`: AbiError for a bad name, file, ABI or address."""
    try:
        abi_names.check_abi_name(name)
    except ValueError as exc:
        raise AbiError(str(exc)) from None
    try:
        with open(path, "rb") as file:
            text = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise AbiError(f"cannot read the ABI file {path}: {exc.strerror or exc}") from None
    if len(text) > MAX_FILE_BYTES:
        raise AbiError(f"the ABI file {path} is larger than {MAX_FILE_BYTES >> 20} MiB")
    try:
        parsed = _read_abi(path, text)
    except RecursionError:
        raise AbiError(f"the ABI file {path} is nested too deeply") from None
    return Registration(name, parsed, sorted({parse_address(a) for a in addresses}) or None,
                        from_block)


def _read_abi(path: str, text: bytes) -> ParsedAbi:
    try:
        document = json.loads(text)
    except ValueError as exc:  # UnicodeDecodeError too
        raise AbiError(f"the ABI file {path} is not JSON: {str(exc).splitlines()[0]}") from None
    try:
        # Stored as jsonb, which holds neither U+0000 nor a lone surrogate (not UTF-8).
        stored = json.dumps(document, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise AbiError(f"the ABI file {path} holds a string that is not UTF-8") from None
    if b"\\u0000" in stored:
        raise AbiError(f"the ABI file {path} holds a NUL character (\\u0000), which PostgreSQL cannot store")
    return parse_abi(document)


@dataclass(frozen=True)
class Added:
    tables: list[tuple[Event, str]]
    anonymous: list[Event]
    jobs: int
    blocks: int


def add(conn: psycopg.Connection, new: Registration, *, chunk: int) -> Added:
    """Registers an ABI, creates its events' tables and plans decode jobs for the blocks indexed
    so far (at or above its first block), in one transaction. AbiError, and nothing written, if
    the name is registered already."""
    events = new.parsed.events
    signatures = Counter(e.signature for e in events)
    same_signature = {signature for signature, count in signatures.items() if count > 1}
    with conn.transaction():
        conn.execute(ABI_LOCK)
        state = conn.execute(ABI_DROPPING, {"name": new.name}).fetchone()
        if state is not None and state[0]:
            raise AbiError(f"the ABI named {new.name} is being dropped (`indexer abi drop {new.name}` finishes"
                           " a drop that was interrupted)")
        if state is not None:
            raise AbiError(f"an ABI named {new.name} is registered already (`indexer abi drop {new.name}` first)")
        taken = {row[0] for row in conn.execute(RELATION_NAMES)}
        try:
            tables = abi_names.table_names(
                new.name, [(e.name, e.indexed_form if e.signature in same_signature else e.signature) for e in events],
                taken)
            columns = [abi_names.column_names([p.name for p in e.params]) for e in events]
        except ValueError as exc:
            raise AbiError(str(exc)) from None
        conn.execute(INSERT_ABI, {"name": new.name, "abi": Jsonb(new.parsed.entries), "addresses": new.addresses,
                                  "from_block": new.from_block})
        for event, table, event_columns in zip(events, tables, columns):
            _create_table(conn, table, event, event_columns)
            conn.execute(INSERT_EVENT, {"abi_name": new.name, "table_name": table, "signature": event.signature,
                                        "topic0": event.topic0, "event": Jsonb(event.entry), "columns": event_columns})
        ranges = [r for lo, hi in conn.execute(INDEXED_RANGES, {"from_block": new.from_block})
                  for r in cut(lo, hi, chunk)]
        queue.enqueue(conn, DECODE_LOGS, [r.payload() for r in ranges])
    return Added(list(zip(events, tables)), new.parsed.anonymous, len(ranges), sum(r.blocks for r in ranges))


def _create_table(conn: psycopg.Connection, table: str, event: Event, columns: list[str]) -> None:
    ident = sql.Identifier(table)
    conn.execute(CREATE_EVENT_TABLE.format(table=ident, columns=sql.SQL("").join(
        EVENT_COLUMN.format(name=sql.Identifier(c), type=SQL_TYPES[column_type(p)])
        for c, p in zip(columns, event.params))))
    conn.execute(COMMENT_ON_TABLE.format(table=ident, text=sql.Literal(f"decoded {event.describe()}")))
    for column, param in zip(columns, event.params):
        if param.hashed:
            conn.execute(COMMENT_ON_COLUMN.format(table=ident, column=sql.Identifier(column), text=sql.Literal(
                f"keccak-256 of the indexed {param.type} {param.name}: the log holds only the hash")))


@dataclass(frozen=True)
class Listed:
    name: str
    addresses: list[bytes] | None
    from_block: int
    dropping: bool  # its drop began: its tables left are not counted
    tables: list[tuple[str, str, int | None]]  # (signature, table, rows)


def listing(conn: psycopg.Connection) -> list[Listed]:
    """The registered ABIs and the rows of their tables, counted one table a statement (a
    transaction over them all would lock every table until it ended)."""
    abis: dict[str, Listed] = {}
    for name, addresses, from_block, dropping, signature, table in conn.execute(SELECT_LISTING).fetchall():
        listed = abis.setdefault(name, Listed(name, addresses, from_block, dropping, []))
        if table is not None:
            listed.tables.append((signature, table, None if dropping else _count(conn, table)))
    for name, listed in abis.items():
        if not listed.dropping and any(rows is None for _, _, rows in listed.tables):
            abis[name] = Listed(name, listed.addresses, listed.from_block, True,
                                [(signature, table, None) for signature, table, _ in listed.tables])
    return list(abis.values())


def _count(conn: psycopg.Connection, table: str) -> int | None:
    """The table's rows; None if it was dropped since the registry was read (its ABI's drop
    began)."""
    try:
        with conn.transaction():
            return conn.execute(COUNT_ROWS.format(table=sql.Identifier(table))).fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return None


def drop(conn: psycopg.Connection, name: str) -> list[str]:
    """Drops an ABI: marks it dropping (from then on no decode window uses it), then drops its
    tables, `DROP_BATCH` a transaction, with their registry rows, and its own row with the last.
    Each transaction holds a bounded share of the server's lock table, and `abi add` waits for
    one at most. A drop interrupted half-way leaves the ABI marked, and finishes when run again.
    Returns the tables this call dropped; AbiError if no ABI of that name is registered."""
    try:
        abi_names.check_abi_name(name)
    except ValueError as exc:
        raise AbiError(str(exc)) from None
    with conn.transaction():
        conn.execute(ABI_LOCK)
        if conn.execute(MARK_DROPPING, {"name": name}).fetchone() is None:
            raise AbiError(f"no ABI named {name!r} is registered (see `indexer abi list`)")
        conn.execute(STOP_DECODING)  # waits for the decode windows that may be using its tables
    dropped: list[str] = []
    while True:
        with conn.transaction():
            conn.execute(ABI_LOCK)
            tables = [row[0] for row in conn.execute(DELETE_EVENTS, {"name": name, "limit": DROP_BATCH})]
            for table in tables:
                conn.execute(DROP_TABLE.format(table=sql.Identifier(table)))
            if len(tables) < DROP_BATCH:
                conn.execute(DELETE_ABI, {"name": name})
        dropped += tables
        if len(tables) < DROP_BATCH:
            return dropped


# ---------------------------------------------------------------------------------------------
# Blocks deleted (`indexer verify --repair`)

# The tables of the ABIs not being dropped, read under DECODING as a decode window reads them: a
# drop that begins meanwhile waits for the caller's transaction before it marks its ABI, so no
# table read here is dropped before the deletes from it commit. An ABI being dropped is left
# out: its tables go whole.
SELECT_EVENT_TABLES = """
SELECT e.table_name FROM abis a JOIN abi_events e ON e.abi_name = a.name WHERE NOT a.dropping ORDER BY e.table_name
"""
DELETE_BLOCKS_EVENTS = sql.SQL("DELETE FROM {table} WHERE block_number = ANY(%(numbers)s)")


def delete_blocks_events(conn: psycopg.Connection, numbers: list[int]) -> list[str]:
    """Deletes the decoded events of the given blocks from every registered event's table, in
    the caller's transaction, which deletes the blocks themselves: a block no longer stored keeps
    no row decoded from its logs. Returns the tables."""
    conn.execute(DECODING)
    tables = [row[0] for row in conn.execute(SELECT_EVENT_TABLES)]
    for table in tables:
        conn.execute(DELETE_BLOCKS_EVENTS.format(table=sql.Identifier(table)), {"numbers": numbers})
    return tables
