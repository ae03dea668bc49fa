"""Hex digits read 16 and 32 at a time (native_shared/hex.h: `unhex`, and `all_hex` of the rows'
lines): a character that is not a hex digit, at every position of a long value, in the part
read 32 at a time and in the rest, is found by each of the three C parts, and every valid value
reads as bytes.fromhex reads it. Shorter values, which the table alone reads, are in the other
tests of the three."""

from __future__ import annotations

import copy

import pytest

from indexer.chaindata import json_encodings, roots, rows, store
from indexer.testing import fixtures

# Each side of every range a hex digit is told apart by ('0'-'9', 'A'-'F', 'a'-'f'), the bytes
# whose low bits or | 0x20 make a digit of them, and the top of ASCII.
NOT_HEX = "/:@G`g \x00\x10\x7f"
DIGITS = "0123456789abcdefABCDEF"
LENGTH = 100  # three rounds of 32 digits and a rest of 4


def digits(seed: int, n: int = LENGTH) -> str:
    return "".join(DIGITS[(i * 7 + seed) % len(DIGITS)] for i in range(n))


def spoiled() -> list[tuple[int, str, str]]:
    return [(at, bad, digits(at)[:at] + bad + digits(at)[at + 1:]) for at in range(LENGTH) for bad in NOT_HEX]


def test_the_binary_copy_reads_long_bytea_as_bytes_fromhex_and_declines_a_non_digit_anywhere() -> None:
    native = store._native_copy
    assert native is not None, "indexer/chaindata/_native_copy.c is not built: run scripts/setup-venv"
    for n in range(0, LENGTH + 1, 2):
        good = digits(n, n)
        data = native.encode(["\\\\x" + good], b"b")
        # The header (19 bytes), the row's field count (2), the field's length and bytes, the trailer (2).
        assert data is not None and data[21:-2] == (len(good) // 2).to_bytes(4, "big") + bytes.fromhex(good)
    for at, bad, value in spoiled():
        assert native.encode(["\\\\x" + value], b"b") is None, (at, bad)


def test_the_root_checks_read_a_long_input_as_bytes_fromhex_and_decline_a_non_digit_anywhere() -> None:
    native = roots._native_roots
    assert native is not None, "indexer/chaindata/_native_roots.c is not built: run scripts/setup-venv"
    tx = copy.deepcopy(fixtures.load("mainnet-18000000")["block"]["transactions"][0])
    for n in range(0, LENGTH + 1, 2):
        tx["input"] = "0x" + digits(n, n)
        assert native.encode_transaction(tx) == json_encodings.encode_transaction_json(tx), n
    for at, bad, value in spoiled():
        tx["input"] = "0x" + value
        assert native.encode_transaction(tx) is None, (at, bad)


@pytest.fixture(scope="module")
def transaction_args() -> tuple:
    recorded = fixtures.load("mainnet-18000000")
    block, receipts = recorded["block"], recorded["receipts"]
    return block["transactions"][0], receipts[0], block, int(block["number"], 16), 0


def test_the_rows_check_a_long_input_and_leave_a_non_digit_anywhere_to_rows_py(transaction_args) -> None:
    native = rows._native_rows
    assert native is not None, "indexer/chaindata/_native_rows.c is not built: run scripts/setup-venv"
    tx, *rest = transaction_args
    for n in range(0, LENGTH + 1, 2):
        changed = dict(tx, input="0x" + digits(n, n))
        line = native.transaction_line(changed, *rest)
        assert line is not None and line == rows.transaction_line(changed, *rest), n
    for at, bad, value in spoiled():
        assert native.transaction_line(dict(tx, input="0x" + value), *rest) is None, (at, bad)
