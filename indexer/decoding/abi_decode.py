"""Decoding the stored logs of a block range into the registered events' tables (`decode_range`,
called by a `decode_logs` job): each event's column types (`column_type`), its values converted
for COPY, and the logs an event cannot decode skipped and counted by reason (`SKIP_*`). The
registry it reads is `abi.py`'s.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import psycopg
from eth_abi import grammar
from eth_abi.registry import registry as abi_registry
from eth_abi.decoding import ContextFramesBytesIO
from psycopg import sql

from ..base import chains, db
from ..chaindata.rows import copy_text
from . import abi_names
from .abi_parse import AbiError, Event, Param, event_of

# Why a log that matched an event (its topic0, its address) was not decoded into its table.
SKIP_TOPIC_COUNT = "abi event: wrong topic count"  # not one topic per indexed parameter
SKIP_UNDECODABLE = "abi event: does not decode"  # topics or data that are not the event's encoding
SKIP_NUL_IN_TEXT = "abi event: NUL in a string"  # U+0000, which text and jsonb cannot store

# Rows of `logs` read and decoded at a time, between the COPYs that write them.
FETCH_ROWS = 20_000

# Every transaction that reads the registered events to use their tables (a decode window) takes
# DECODING shared, before it reads them; `abi drop` takes it exclusive, in the transaction that
# marks the ABI dropping. PostgreSQL queues a lock's requests in order, so a drop waits for the
# windows in flight only, and the windows that start after it wait for its mark (one UPDATE),
# then see it. (A row lock would not do: FOR KEY SHARE is granted beside the ones held, ahead of
# a DELETE waiting for them, so the DELETE waited for a moment when no window held one: as long
# as a backfill decoded.)
DECODING = f"SELECT pg_advisory_xact_lock_shared(hashtext({chains.own('skiplock-indexer:abi-decode')}))"
STOP_DECODING = f"SELECT pg_advisory_xact_lock(hashtext({chains.own('skiplock-indexer:abi-decode')}))"

# Read under DECODING: an ABI being dropped is not returned, and its drop does not start while
# the tables returned are in use.
SELECT_REGISTERED = """
SELECT a.addresses, a.from_block, e.table_name, e.event, e.columns
FROM abis a JOIN abi_events e ON e.abi_name = a.name
WHERE NOT a.dropping
ORDER BY a.name, e.table_name
"""

SELECT_LOGS = """
SELECT block_number, log_index, transaction_hash, address, topic0, topic1, topic2, topic3, data
FROM logs
WHERE block_number BETWEEN %(first)s AND %(last)s
  AND (topic0 = ANY(%(any_address)s::bytea[])
       OR (topic0 = ANY(%(by_address)s::bytea[]) AND address = ANY(%(addresses)s::bytea[])))
"""

DELETE_RANGE = sql.SQL("DELETE FROM {table} WHERE block_number BETWEEN %(first)s AND %(last)s")
COPY_ROWS = sql.SQL("COPY {table} ({columns}) FROM STDIN")


# ---------------------------------------------------------------------------------------------
# Column types and the conversion of decoded values

BYTEA, BIGINT, NUMERIC, WIDE_NUMERIC, BOOLEAN, TEXT, JSONB = (
    "bytea", "bigint", "numeric(78,0)", "numeric", "boolean", "text", "jsonb")
SQL_TYPES = {t: sql.SQL(t) for t in (BYTEA, BIGINT, NUMERIC, WIDE_NUMERIC, BOOLEAN, TEXT, JSONB)}


def column_type(param: Param) -> str:
    parsed = grammar.parse(param.type)
    if param.hashed:
        return BYTEA
    if parsed.is_array or isinstance(parsed, grammar.TupleType):
        return JSONB
    base, bits = parsed.base, parsed.sub
    if base in ("address", "bytes", "function"):
        return BYTEA
    if base == "bool":
        return BOOLEAN
    if base == "string":
        return TEXT
    if base == "uint":
        return BIGINT if bits <= 56 else NUMERIC  # uint64 reaches 2^64 - 1, past bigint's 2^63 - 1
    if base == "int":
        return BIGINT if bits <= 64 else NUMERIC
    if base in ("fixed", "ufixed"):
        return WIDE_NUMERIC
    raise AbiError(f"no column type for {param.type}")


class _Skip(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _text(value: str) -> str:
    if "\x00" in value:
        raise _Skip(SKIP_NUL_IN_TEXT)
    return value


def _copy_field(parsed: grammar.ABIType, components: list[dict[str, Any]] | None) -> Callable[[Any], str]:
    """Turns a decoded value of this type into its field of a COPY text line."""
    if parsed.is_array or isinstance(parsed, grammar.TupleType):
        to_json = _json_value(parsed, components)
        return lambda v: copy_text(json.dumps(to_json(v), ensure_ascii=False, separators=(",", ":")))
    base = parsed.base
    if base == "address":
        return lambda v: "\\\\x" + v[2:]  # eth-abi gives lower-case 0x-hex
    if base in ("bytes", "function"):
        return lambda v: "\\\\x" + v.hex()
    if base == "bool":
        return lambda v: "t" if v else "f"
    if base == "string":
        return lambda v: copy_text(_text(v))
    return str  # integers; Decimal for fixed-point


def _json_value(parsed: grammar.ABIType, components: list[dict[str, Any]] | None) -> Callable[[Any], Any]:
    if parsed.is_array:
        item = _json_value(parsed.item_type, components)
        return lambda v: [item(x) for x in v]
    if isinstance(parsed, grammar.TupleType):
        assert components is not None
        parts = [_json_value(p, c.get("components")) for p, c in zip(parsed.components, components)]
        names = [c.get("name") or "" for c in components]
        if all(names) and len(set(names)) == len(names):
            return lambda v: {n: f(x) for n, f, x in zip(names, parts, v)}
        return lambda v: [f(x) for f, x in zip(parts, v)]
    base = parsed.base
    if base == "address":
        return lambda v: v
    if base in ("bytes", "function"):
        return lambda v: "0x" + v.hex()
    if base == "string":
        return _text
    if base in ("fixed", "ufixed"):
        return str  # JSON numbers are read as floats by most clients; a string keeps every digit
    return lambda v: v  # integers (exact in jsonb) and booleans


# ---------------------------------------------------------------------------------------------
# Decoding


class _Target:
    """One registered event, ready to decode logs into its table.

    An event whose values are all one word each (address, bool, intN, uintN, bytesN, and the
    hashes of indexed reference types) is read word by word, with eth-abi's strict checks of the
    padding made here: most events are such (transfers, approvals, swaps), and this is several
    times faster than eth-abi's decoders, which read every other event."""

    def __init__(self, table: str, event: Event, columns: Sequence[str], addresses: frozenset[bytes] | None,
                 from_block: int) -> None:
        self.table = table
        self.addresses = addresses
        self.from_block = from_block
        self.topic_count = sum(p.indexed for p in event.params)
        self.columns = columns
        words = [None if p.hashed else _word_field(grammar.parse(p.type)) for p in event.params]
        # Where each value comes from: (True, its topic) or (False, its place in the data).
        self._sources: list[tuple[bool, int]] = []
        topic_at = data_at = 0
        for p in event.params:
            self._sources.append((p.indexed, topic_at if p.indexed else data_at))
            topic_at += p.indexed
            data_at += not p.indexed
        self._data_words = data_at
        self._hashed = [p.hashed for p in event.params]
        # The event's fields of one log as COPY text (the caller puts the key columns first,
        # then `tab`, which an event without parameters has none of); _Skip when the log is not
        # this event's encoding.
        self.tab = "\t" if event.params else ""
        self.line: Callable[[list[bytes], bytes], str]
        if all(w is not None for p, w in zip(event.params, words) if not p.hashed):
            self._words = [_to_bytea if p.hashed else w for p, w in zip(event.params, words)]
            self.line = self._line_by_words
            return
        self.line = self._line_by_decoders
        decoded_topics = [p for p in event.params if p.indexed and not p.hashed]
        self._topics_decoder = abi_registry.get_tuple_decoder(*(p.type for p in decoded_topics))
        self._data_decoder = abi_registry.get_tuple_decoder(*(p.type for p in event.params if not p.indexed))
        self._decoded_topic_places = [i for i, p in enumerate(p for p in event.params if p.indexed) if not p.hashed]
        self._fields = [_to_bytea if p.hashed else _copy_field(grammar.parse(p.type), p.entry.get("components"))
                        for p in event.params]

    def _line_by_decoders(self, topics: list[bytes], data: bytes) -> str:
        if len(topics) != self.topic_count:
            raise _Skip(SKIP_TOPIC_COUNT)
        try:
            decoded = iter(self._topics_decoder(ContextFramesBytesIO(
                b"".join(topics[i] for i in self._decoded_topic_places))))
            values = self._data_decoder(ContextFramesBytesIO(data))
        except Exception:  # eth-abi's errors, and UnicodeDecodeError for a string that is not UTF-8
            raise _Skip(SKIP_UNDECODABLE) from None
        return "\t".join(field(topics[at]) if hashed else field(next(decoded)) if indexed else field(values[at])
                         for (indexed, at), hashed, field in zip(self._sources, self._hashed, self._fields))

    def _line_by_words(self, topics: list[bytes], data: bytes) -> str:
        if len(topics) != self.topic_count:
            raise _Skip(SKIP_TOPIC_COUNT)
        if len(data) < 32 * self._data_words:  # more is allowed, as eth-abi allows it
            raise _Skip(SKIP_UNDECODABLE)
        return "\t".join(word(topics[at]) if indexed else word(data[32 * at:32 * at + 32])
                         for (indexed, at), word in zip(self._sources, self._words))


_ZEROS = bytes(32)
_ONE = bytes(31) + b"\x01"


def _word_field(parsed: grammar.ABIType) -> Callable[[bytes], str] | None:
    """Reads a value of one word into its COPY field, refusing what eth-abi's strict decoding
    refuses (non-zero padding, a number out of its type's range); None for other types."""
    if parsed.is_array or isinstance(parsed, grammar.TupleType):
        return None
    base, sub = parsed.base, parsed.sub
    if base == "address":
        def address(word: bytes) -> str:
            if word[:12] != _ZEROS[:12]:
                raise _Skip(SKIP_UNDECODABLE)
            return "\\\\x" + word[12:].hex()
        return address
    if base == "bool":
        def boolean(word: bytes) -> str:
            if word == _ZEROS:
                return "f"
            if word == _ONE:
                return "t"
            raise _Skip(SKIP_UNDECODABLE)
        return boolean
    if base == "uint":
        def uint(word: bytes, limit: int = 1 << sub) -> str:
            value = int.from_bytes(word, "big")
            if value >= limit:
                raise _Skip(SKIP_UNDECODABLE)
            return str(value)
        return uint
    if base == "int":
        def signed(word: bytes, limit: int = 1 << (sub - 1)) -> str:
            value = int.from_bytes(word, "big", signed=True)
            if not -limit <= value < limit:
                raise _Skip(SKIP_UNDECODABLE)
            return str(value)
        return signed
    if base == "bytes" and sub is not None:
        def fixed_bytes(word: bytes, size: int = sub) -> str:
            if word[size:] != _ZEROS[size:]:
                raise _Skip(SKIP_UNDECODABLE)
            return "\\\\x" + word[:size].hex()
        return fixed_bytes
    return None


def _to_bytea(value: bytes) -> str:
    return "\\\\x" + value.hex()


@dataclass(frozen=True)
class Registered:
    table: str
    event: Event
    columns: list[str]
    addresses: list[bytes] | None
    from_block: int


def registered(conn: psycopg.Connection) -> list[Registered]:
    """Every registered event of an ABI not being dropped; a drop that begins after this read
    waits for the caller's transaction to end before it marks its ABI (`DECODING`)."""
    conn.execute(DECODING)
    found = []
    for addresses, from_block, table, entry, columns in conn.execute(SELECT_REGISTERED):
        found.append(Registered(table, event_of(entry, 0), columns, addresses, from_block))
    return found


def decode_range(conn: psycopg.Connection, first: int, last: int) -> Counter[str]:
    """Decodes the stored logs of blocks first..last into every registered event's table, in the
    caller's transaction (one of its own on an idle autocommit connection): that range's rows are
    deleted, then written again, so a re-run or a repaired range comes out exactly the same.
    Returns the logs skipped, by reason; never raises for a malformed log."""
    skipped: Counter[str] = Counter()
    with db.own_transaction_if_idle(conn):
        events = registered(conn)
        if not events:
            return skipped
        for r in events:
            conn.execute(DELETE_RANGE.format(table=sql.Identifier(r.table)), {"first": first, "last": last})
        targets: dict[bytes, list[_Target]] = {}
        any_address: set[bytes] = set()
        by_address: set[bytes] = set()
        addresses: set[bytes] = set()
        for r in events:
            target = _Target(r.table, r.event, r.columns, frozenset(r.addresses) if r.addresses is not None else None,
                             r.from_block)
            targets.setdefault(r.event.topic0, []).append(target)
            if r.addresses is None:
                any_address.add(r.event.topic0)
            else:
                by_address.add(r.event.topic0)
                addresses.update(r.addresses)
        first = max(first, min(r.from_block for r in events))
        if first > last:
            return skipped
        params = {"first": first, "last": last, "any_address": list(any_address), "by_address": list(by_address),
                  "addresses": list(addresses)}
        with conn.cursor("abi_decode_logs", binary=True) as logs:
            logs.execute(SELECT_LOGS, params)
            while rows := logs.fetchmany(FETCH_ROWS):
                lines: dict[_Target, list[str]] = {}
                for block, index, tx_hash, address, topic0, t1, t2, t3, data in rows:
                    topics = [t for t in (t1, t2, t3) if t is not None]
                    for target in targets[topic0]:
                        if block < target.from_block or (target.addresses is not None
                                                         and address not in target.addresses):
                            continue
                        try:
                            fields = target.line(topics, data)
                        except _Skip as skip:
                            skipped[skip.reason] += 1
                            continue
                        lines.setdefault(target, []).append(
                            f"{block}\t{index}\t\\\\x{tx_hash.hex()}\t\\\\x{address.hex()}{target.tab}{fields}")
                for target, table_lines in lines.items():
                    _copy(conn, target, table_lines)
    return skipped


def _copy(conn: psycopg.Connection, target: _Target, lines: list[str]) -> None:
    statement = COPY_ROWS.format(table=sql.Identifier(target.table),
                                 columns=sql.SQL(", ").join(map(sql.Identifier, (*abi_names.FIXED_COLUMNS,
                                                                                 *target.columns))))
    with conn.cursor().copy(statement) as copy:
        copy.write("\n".join(lines) + "\n")
