"""Names for the tables and columns of a registered ABI's events, derived from text the ABI's
author chose: made of [a-z0-9_] only, unique, and within PostgreSQL's 63-byte limit, so that no
ABI can name anything it should not. (A parameter named as a reserved word keeps its name:
`SELECT "from", "to", value FROM abi_erc20_transfer`.)

The rules, all deterministic (the same ABI in the same database gets the same names):
- an identifier is lower-cased snake case (`TransferSingle` -> `transfer_single`, `tokenId` ->
  `token_id`), every other character replaced by `_`;
- an event's table is `abi_<abi name>_<event>`; events that would share a table name (overloads
  such as `Deposit(uint256)` and `Deposit(address,uint256)`, or names that differ only in case or
  punctuation) all get the suffix `_<8 hex digits of the keccak-256 of the event's signature>`,
  and so does a name some other relation of the database already has;
- a parameter's column is its name (after `_` if it starts with a digit), or `arg<position>`
  when it has none; a name that is one of the fixed columns or another parameter's gets the
  suffix `_<position>`;
- a name longer than 63 bytes keeps its first part and ends with `_` and 8 hex digits of the
  keccak-256 of the whole name, so two long names that share their first 54 bytes stay apart.

The text an ABI's author chose can be of any length: messages show it `short`.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from ..chaindata.rlp_codec import keccak

# PostgreSQL's NAMEDATALEN - 1: longer identifiers are cut silently, which could make two differ
# in our eyes but not in the database's.
MAX_IDENTIFIER = 63
_HASH_DIGITS = 8

# The columns every event table has, ahead of the event's parameters.
FIXED_COLUMNS = ("block_number", "log_index", "transaction_hash", "address")

ABI_NAME = re.compile(r"[a-z][a-z0-9_]{0,30}", re.ASCII)
ABI_NAME_RULE = "a lower-case letter, then up to 30 lower-case letters, digits or underscores"

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_ALLOWED = re.compile(r"[^a-z0-9_]+", re.ASCII)
_UNDERSCORES = re.compile(r"__+")


def check_abi_name(name: str) -> str:
    """`name`, if it may name an ABI; ValueError otherwise."""
    if not ABI_NAME.fullmatch(name):
        raise ValueError(f"not an ABI name: {short(repr(name))} (the name must be {ABI_NAME_RULE})")
    return name


# What a message shows of a name or a type an ABI's author chose, which may be of any length:
# enough to recognise it, within a terminal's line.
SHOWN_CHARS = 80


def short(text: str) -> str:
    """`text` as a message shows it: whole up to SHOWN_CHARS characters, else its beginning and
    how long it is."""
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS - 1]}… ({len(text):,} characters)"


def snake(text: str) -> str:
    """`text` as a lower-case snake-case identifier of [a-z0-9_]; '' if nothing of it is left."""
    text = _CAMEL_BOUNDARY.sub("_", text).lower()
    return _UNDERSCORES.sub("_", _NOT_ALLOWED.sub("_", text)).strip("_")


def fit(name: str) -> str:
    """`name` cut to the identifier limit, ending with a hash of the whole name when cut."""
    if len(name) <= MAX_IDENTIFIER:
        return name
    return name[:MAX_IDENTIFIER - _HASH_DIGITS - 1] + "_" + _hash(name)


def _hash(text: str) -> str:
    return keccak(text.encode()).hex()[:_HASH_DIGITS]


def table_names(abi_name: str, events: Sequence[tuple[str, str]], taken: Iterable[str] = ()) -> list[str]:
    """The table of each event, given as (name, signature); `taken`: names in use already.

    `signature` identifies the event among the ABI's: the caller passes distinct ones (for two
    events of the same canonical signature that index different parameters, it adds what tells
    them apart)."""
    check_abi_name(abi_name)
    taken = set(taken)
    bases = [f"abi_{abi_name}_{snake(name) or 'event'}" for name, _ in events]
    shared = {base for base in bases if bases.count(base) > 1}
    names = []
    for base, (_, signature) in zip(bases, events):
        name = fit(base)
        if base in shared or name in taken:
            name = _suffixed(base, _hash(signature))
        if name in taken or name in names:
            raise ValueError(f"cannot name a table for event {short(signature)}: {name} is taken")
        names.append(name)
    return names


def column_names(parameters: Sequence[str]) -> list[str]:
    """The column of each parameter, given by its name in the ABI ('' when it has none)."""
    bases = [_column_base(name, i) for i, name in enumerate(parameters)]
    names = []
    for i, base in enumerate(bases):
        name = fit(base)
        if name in FIXED_COLUMNS or bases.count(base) > 1:
            name = _suffixed(base, str(i))
        names.append(name)
    # A suffixed name can still meet another parameter's own name (`a_1` beside `a`, `a`).
    clashes = {n for n in names if names.count(n) > 1 or n in FIXED_COLUMNS}
    if clashes:
        names = [_suffixed(n, f"arg{i}") if n in clashes else n for i, n in enumerate(names)]
    if len(set(names)) < len(names):
        raise ValueError(f"cannot name distinct columns for parameters {short(repr(list(parameters)))}")
    return names


def _column_base(name: str, position: int) -> str:
    base = snake(name)
    if not base:
        return f"arg{position}"
    return "_" + base if base[0].isdigit() else base


def _suffixed(base: str, suffix: str) -> str:
    return base[:MAX_IDENTIFIER - len(suffix) - 1] + "_" + suffix
