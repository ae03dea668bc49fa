"""Reading an ABI for `indexer abi add`: its events, their parameters in canonical types, and the
bounds an ABI must keep (`abi_bounds.py`), checked before eth-abi parses any type and before the
database is touched (`abi.py` says what becomes of the events).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from eth_abi import grammar
from eth_abi.registry import registry as abi_registry
from eth_utils import is_checksum_address, keccak

from ..base.errors import IndexerError
from .abi_bounds import MAX_DEPTH, MAX_DIMENSIONS, MAX_EVENTS, MAX_PARAMS, MAX_STATIC_WORDS, MAX_TYPE_CHARS
from .abi_names import short

class AbiError(IndexerError):
    exit_code = 2  # bad input: the name, the file or an address


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
    shapes = [event_of(entry, i, bounded=True) for i, entry in found]
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


def event_of(entry: dict[str, Any], position: int, *, bounded: bool = False) -> Event:
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
