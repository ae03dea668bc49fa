"""Any contract's events, decoded from the stored logs into a table per event (`indexer abi`).

`indexer abi add NAME FILE` registers an ABI (schema/009_abi_registry.sql: `abis`, and
`abi_events`, one row per event with its table), creates each event's table and plans
`decode_logs` jobs for every range already indexed, all in one transaction. A decode job calls
`decode_range`, which reads the stored logs of its blocks, never the node.

An event's table has `block_number`, `log_index` (its key), `transaction_hash` and `address`
(the contract that emitted the log), then one column per parameter, named as
`indexer.abi_names` says and typed by `column_type`:
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
beyond a bound (`MAX_EVENTS`, `MAX_PARAMS`, `MAX_DEPTH`, `MAX_DIMENSIONS`, `MAX_STATIC_WORDS`,
`MAX_TYPE_CHARS`, `MAX_FILE_BYTES`): each far above what deployed contracts use, and below what
costs the server's lock table or the CPU dearly.

`indexer abi drop` first marks the ABI `dropping`, in a transaction that waits for the decode
windows in flight (`DECODING`), after which no window uses it; it then drops its tables
`DROP_BATCH` a transaction. Run again, it finishes a drop that was interrupted.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import psycopg
from eth_abi import grammar
from eth_abi.registry import registry as abi_registry
from eth_abi.decoding import ContextFramesBytesIO
from eth_utils import is_checksum_address, keccak
from psycopg import sql
from psycopg.types.json import Jsonb

from . import abi_names, queue
from .abi_names import short
from .block_range import DECODE_LOGS, cut
from .errors import IndexerError
from .rows import copy_text

# Why a log that matched an event (its topic0, its address) was not decoded into its table.
SKIP_TOPIC_COUNT = "abi event: wrong topic count"  # not one topic per indexed parameter
SKIP_UNDECODABLE = "abi event: does not decode"  # topics or data that are not the event's encoding
SKIP_NUL_IN_TEXT = "abi event: NUL in a string"  # U+0000, which text and jsonb cannot store

# Rows of `logs` read and decoded at a time, between the COPYs that write them.
FETCH_ROWS = 20_000


class AbiError(IndexerError):
    exit_code = 2  # bad input: the name, the file or an address


# The bounds of what `abi add` accepts, checked as the file is read: before eth-abi parses any
# of its types, before the database is touched.
#
# Events, the file's entries of type "event" (anonymous ones and repeats included): each is a
# table, and PostgreSQL's lock table is the whole server's, sized for max_locks_per_transaction
# (64) times its connections and processes (122 by default): 7,808 locks, and what its shared
# memory has to spare. `abi add` creates every table in one transaction, at 6 locks a table (the
# table, its key's index and constraint, its TOAST table and index, its row type): 3,000 at the
# bound, which leaves a default server room for its other sessions. (`abi drop` takes 7 a table,
# DROP_BATCH tables a transaction; a decode window 2 for every registered table.) The largest
# ABIs of deployed contracts (diamonds, explorers' merged proxy ABIs) have a few hundred events;
# most have under fifty.
MAX_EVENTS = 500
# Parameters of an event, and components of a tuple: Solidity's stack limits an event to about
# sixteen without via-IR, and at 64 columns a row stays well within a page, however wide its
# values (each value moved to TOAST still takes its 18-byte pointer).
MAX_PARAMS = 64
# Tuples within tuples, and the dimensions of one array: real events nest structs two or three
# deep and arrays two. eth-abi parses a type recursively; 5,000 dimensions took it 23 s of CPU.
MAX_DEPTH = 8
MAX_DIMENSIONS = 8
# The 32-byte words of a parameter's fixed-size arrays, their sizes multiplied out through every
# dimension and tuple: 65,536 words are 2 MiB of log data, 17 million gas at 8 gas a byte, half a
# mainnet block. Real events' fixed-size arrays hold a handful of values.
MAX_STATIC_WORDS = 65_536
# The characters of an event's parameter types, as its signature writes them: Seaport's
# OrderFulfilled, with two arrays of structs, has 109. It bounds eth-abi's parsing of a whole ABI:
# 500 events of 2,048 characters of distinct types took it 0.6 s of CPU.
MAX_TYPE_CHARS = 2_048
# The file: compilers' artifacts, which hold the ABI with the bytecode and the sources' syntax
# trees, reach a few MB.
MAX_FILE_BYTES = 64 << 20

# Event tables an `abi drop` transaction drops: some 700 locks of the server's lock table.
DROP_BATCH = 100

# Serialises `abi add` and `abi drop`: the table names one derives depend on the tables the
# other creates or drops.
ABI_LOCK = "SELECT pg_advisory_xact_lock(hashtext('skiplock-indexer:abi'))"

# Every transaction that reads the registered events to use their tables (a decode window) takes
# DECODING shared, before it reads them; `abi drop` takes it exclusive, in the transaction that
# marks the ABI dropping. PostgreSQL queues a lock's requests in order, so a drop waits for the
# windows in flight only, and the windows that start after it wait for its mark (one UPDATE),
# then see it. (A row lock would not do: FOR KEY SHARE is granted beside the ones held, ahead of
# a DELETE waiting for them, so the DELETE waited for a moment when no window held one: as long
# as a backfill decoded.)
DECODING = "SELECT pg_advisory_xact_lock_shared(hashtext('skiplock-indexer:abi-decode'))"
STOP_DECODING = "SELECT pg_advisory_xact_lock(hashtext('skiplock-indexer:abi-decode'))"

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
# Reading an ABI


@dataclass(frozen=True)
class Param:
    name: str  # as the ABI gives it ('' when unnamed)
    type: str  # canonical, tuples written out: "(uint256,string)[]"
    indexed: bool
    entry: dict[str, Any]  # the ABI's input entry (its components, for a tuple)

    @property
    def hashed(self) -> bool:
        """An indexed value whose topic is the keccak-256 of its encoding: every reference type
        (string, bytes, arrays and tuples, even of a static size), as Solidity emits them."""
        parsed = grammar.parse(self.type)
        return self.indexed and (parsed.is_array or isinstance(parsed, grammar.TupleType)
                                 or parsed.base in ("string", "bytes") and parsed.sub is None)


@dataclass(frozen=True)
class Event:
    name: str
    signature: str  # canonical: "Transfer(address,address,uint256)"
    params: tuple[Param, ...]
    entry: dict[str, Any]  # the ABI's event entry

    @property
    def topic0(self) -> bytes:
        return keccak(text=self.signature)

    @property
    def indexed_form(self) -> str:
        """The signature with `indexed` marked: what tells apart events whose canonical signature
        is the same (ERC-20's and ERC-721's Transfer)."""
        return f"{self.name}({','.join(p.type + (' indexed' if p.indexed else '') for p in self.params)})"

    def describe(self) -> str:
        args = ", ".join(" ".join(filter(None, (p.type, "indexed" if p.indexed else "", p.name)))
                         for p in self.params)
        return f"event {self.name}({args})"


@dataclass(frozen=True)
class ParsedAbi:
    entries: list[dict[str, Any]]  # every entry of the file, as given
    events: list[Event]  # its non-anonymous events, each once
    anonymous: list[Event]


def parse_abi(document: Any) -> ParsedAbi:
    """The events of an ABI as compilers and explorers give it: a list of entries, or an object
    whose "abi" (solc, Hardhat and Foundry artifacts) or "result" (Etherscan's API, as a JSON
    string) is that list. AbiError if it is none of these, has no event to decode, or is beyond
    a bound (`MAX_EVENTS`...): every event's shape is checked against the bounds before eth-abi
    reads any of its types."""
    entries = _entries(document)
    found = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise AbiError(f"entry {i} of the ABI is not an object")
        if entry.get("type") == "event":
            found.append((i, entry))
    if len(found) > MAX_EVENTS:
        raise AbiError(f"the ABI has {len(found):,} events; at most {MAX_EVENTS} are allowed (each is a table)")
    shapes = [_event(entry, i, bounded=True) for i, entry in found]
    events: list[Event] = []
    anonymous: list[Event] = []
    seen: set[str] = set()
    for event in shapes:
        _check_types(event)
        if event.entry.get("anonymous") is True:
            anonymous.append(event)
        elif sum(p.indexed for p in event.params) > 3:
            raise AbiError(f"{short(event.describe())} has more than 3 indexed parameters, which no log can hold")
        # Explorers' ABIs repeat an event a contract inherits twice; the first is kept.
        elif event.indexed_form not in seen:
            seen.add(event.indexed_form)
            events.append(event)
    if not events:
        raise AbiError("the ABI has no event to decode" + (" (anonymous events have no topic0 to find their"
                                                           " logs by)" if anonymous else ""))
    return ParsedAbi(entries, events, anonymous)


def _entries(document: Any) -> list[Any]:
    if isinstance(document, dict):
        if isinstance(document.get("abi"), list):
            document = document["abi"]
        elif isinstance(document.get("result"), str):
            try:
                document = json.loads(document["result"])
            except ValueError:
                raise AbiError("the \"result\" of the file is not a JSON ABI") from None
    if not isinstance(document, list):
        raise AbiError("not an ABI: expected a JSON list of entries, or an object with an \"abi\" list")
    return document


def _event(entry: dict[str, Any], position: int, *, bounded: bool = False) -> Event:
    """The event of an ABI entry, its types written out but not checked by eth-abi
    (`_check_types`); `bounded`: AbiError for a shape beyond the bounds. (The events registered
    were checked when they were added, and are read again by every decode window.)"""
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise AbiError(f"event entry {position} of the ABI has no name")
    shown = f"event {short(name)!r}"
    inputs = entry.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(i, dict) for i in inputs):
        raise AbiError(f"{shown}: \"inputs\" is not a list of objects")
    if bounded and len(inputs) > MAX_PARAMS:
        raise AbiError(f"{shown} has {len(inputs):,} parameters; at most {MAX_PARAMS} are allowed")
    params = []
    chars = 0
    for j, item in enumerate(inputs):
        param_name = item.get("name") or ""
        if not isinstance(param_name, str):
            raise AbiError(f"{shown}: parameter {j} has a name that is not a string")
        kind, _ = _type_text(item, f"{shown} parameter {j}", 0, bounded)
        chars += len(kind) + (j > 0)  # and its comma
        if bounded and chars > MAX_TYPE_CHARS:
            raise AbiError(f"{shown}: its parameters' types are longer than {MAX_TYPE_CHARS:,} characters")
        params.append(Param(param_name, kind, item.get("indexed") is True, item))
    signature = f"{name}({','.join(p.type for p in params)})"
    return Event(name, signature, tuple(params), entry)


def _type_text(item: dict[str, Any], where: str, depth: int, bounded: bool) -> tuple[str, int]:
    """The type as it appears in a signature (tuples written out, `uint` as `uint256`), and, if
    `bounded`, the 32-byte words of its fixed-size arrays multiplied out (AbiError beyond a
    bound). Plain string work: eth-abi reads the type later (`_check_types`)."""
    kind = item.get("type")
    if not isinstance(kind, str):
        raise AbiError(f"{where} has no type")
    base, sizes = _dimensions(kind, where, bounded)
    words = 1
    if base == "tuple":
        components = item.get("components")
        if not isinstance(components, list) or not components or not all(isinstance(c, dict) for c in components):
            raise AbiError(f"{where}: a tuple without components")
        if bounded and depth >= MAX_DEPTH:
            raise AbiError(f"{where}: tuples nested more than {MAX_DEPTH} deep")
        if bounded and len(components) > MAX_PARAMS:
            raise AbiError(f"{where}: a tuple of {len(components):,} components; at most {MAX_PARAMS} are allowed")
        parts = [_type_text(c, where, depth + 1, bounded) for c in components]
        base = f"({','.join(text for text, _ in parts)})"
        words = sum(w for _, w in parts)
    elif base.startswith("("):  # eth-abi reads it, but the decoding needs the members' names
        raise AbiError(f"{where}: a tuple is of type \"tuple\", its members in \"components\": {short(kind)!r}")
    elif _ENUM.fullmatch(base):  # old compilers' ABIs name enums; they are uint8
        base = "uint8"
    else:
        base = grammar.normalize(base)
    if bounded:
        for size in filter(None, sizes):
            words *= int(size)
            if words > MAX_STATIC_WORDS:
                raise _too_many_words(where, kind)
    text = base + "".join(f"[{size}]" for size in sizes)
    if bounded and len(text) > MAX_TYPE_CHARS:
        raise AbiError(f"{where}: a type longer than {MAX_TYPE_CHARS:,} characters")
    return text, words


_ENUM = re.compile(r"enum [A-Za-z0-9_.]+")


def _dimensions(kind: str, where: str, bounded: bool) -> tuple[str, list[str]]:
    """`kind` as its base and its array sizes, outermost last ('' for a dynamic one): "uint8[2][]"
    is ("uint8", ["2", ""]). Read from the end, at most one dimension past the bound."""
    sizes: list[str] = []
    base = kind
    while base.endswith("]") and (start := base.rfind("[")) >= 0:
        if bounded and len(sizes) == MAX_DIMENSIONS:
            raise AbiError(f"{where}: {short(kind)!r} has more than {MAX_DIMENSIONS} array dimensions")
        size = base[start + 1:-1]
        if size and not (size.isascii() and size.isdigit()):
            raise AbiError(f"{where}: not an array size: {short(size)!r}")
        if bounded and len(size) > len(str(MAX_STATIC_WORDS)):
            raise _too_many_words(where, kind)
        sizes.append(size)
        base = base[:start]
    sizes.reverse()
    return base, sizes


def _too_many_words(where: str, kind: str) -> AbiError:
    return AbiError(f"{where}: {short(kind)!r} has fixed-size arrays of more than {MAX_STATIC_WORDS:,} words in all")


def _check_types(event: Event) -> None:
    """AbiError for a parameter whose type eth-abi cannot decode."""
    for j, param in enumerate(event.params):
        try:
            grammar.parse(param.type).validate()
            abi_registry.get_decoder(param.type)
        except Exception as exc:  # the grammar's ParseError and ABITypeError, the registry's NoEntriesFound...
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise AbiError(f"event {short(event.name)!r} parameter {j}: not a type eth-abi can decode:"
                           f" {short(param.type)!r} ({short(reason)})") from None


def parse_address(text: str) -> bytes:
    """An --address: 0x and 40 hex digits, whose mixed case, if any, must be its EIP-55 checksum."""
    if not re.fullmatch(r"0x[0-9a-fA-F]{40}", text, re.ASCII):
        raise AbiError(f"not an address (0x and 40 hex digits): {text!r}")
    if text[2:] != text[2:].lower() and text[2:] != text[2:].upper() and not is_checksum_address(text):
        raise AbiError(f"the address {text} is mixed-case but not its EIP-55 checksum: a typo?")
    return bytes.fromhex(text[2:])


# ---------------------------------------------------------------------------------------------
# Column types and the conversion of decoded values

BYTEA, BIGINT, NUMERIC, WIDE_NUMERIC, BOOLEAN, TEXT, JSONB = (
    "bytea", "bigint", "numeric(78,0)", "numeric", "boolean", "text", "jsonb")
_SQL_TYPES = {t: sql.SQL(t) for t in (BYTEA, BIGINT, NUMERIC, WIDE_NUMERIC, BOOLEAN, TEXT, JSONB)}


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
        found.append(Registered(table, _event(entry, 0), columns, addresses, from_block))
    return found


def decode_range(conn: psycopg.Connection, first: int, last: int) -> Counter[str]:
    """Decodes the stored logs of blocks first..last into every registered event's table, in the
    caller's transaction (one of its own on an idle autocommit connection): that range's rows are
    deleted, then written again, so a re-run or a repaired range comes out exactly the same.
    Returns the logs skipped, by reason; never raises for a malformed log."""
    skipped: Counter[str] = Counter()
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with conn.transaction() if idle and conn.autocommit else nullcontext():
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
        EVENT_COLUMN.format(name=sql.Identifier(c), type=_SQL_TYPES[column_type(p)])
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
