"""The names `indexer abi add` gives an ABI's tables and columns (indexer/decoding/abi_names.py), and what
it accepts as an ABI (indexer/decoding/abi.py's parsing and column types)."""

from __future__ import annotations

import random
import re

import eth_abi
import pytest
from eth_abi.grammar import parse
from eth_utils import keccak

from indexer.decoding import abi_decode, abi_parse
from indexer.decoding.abi_names import check_abi_name, column_names, table_names

IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def test_tables_are_snake_case_under_the_abi_name():
    assert table_names("erc1155", [("TransferSingle", "TransferSingle(address,address,address,uint256,uint256)"),
                                   ("URI", "URI(string,uint256)")]) == [
        "abi_erc1155_transfer_single", "abi_erc1155_uri"]


def test_overloaded_events_each_get_their_signature_hash():
    events = [("Deposit", "Deposit(uint256)"), ("Deposit", "Deposit(address,uint256)")]
    names = table_names("vault", events)
    assert names == [f"abi_vault_deposit_{keccak(text=sig).hex()[:8]}" for _, sig in events]
    assert table_names("vault", list(reversed(events))) == list(reversed(names))  # not by order


def test_names_that_differ_only_in_case_or_punctuation_are_told_apart():
    names = table_names("x", [("Ping", "Ping(uint256)"), ("PING", "PING(uint256)"), ("ping_", "ping_(uint256)")])
    assert len(set(names)) == 3
    assert all(name.startswith("abi_x_ping_") for name in names)


def test_a_name_another_relation_has_gets_the_signature_hash():
    assert table_names("erc20", [("Transfer", "Transfer(address,address,uint256)")], taken={"abi_erc20_transfer"}) == [
        "abi_erc20_transfer_ddf252ad"]  # the first 8 hex digits of ERC-20 Transfer's topic0


def test_long_names_are_cut_to_63_bytes_and_stay_distinct():
    long_a, long_b = "A" * 70 + "One", "A" * 70 + "Two"
    names = table_names("a" * 31, [(long_a, f"{long_a}()"), (long_b, f"{long_b}()")])
    assert all(len(name) == 63 and IDENTIFIER.fullmatch(name) for name in names)
    assert names[0] != names[1]
    overloaded = table_names("a" * 31, [(long_a, f"{long_a}()"), (long_a, f"{long_a}(uint256)")])
    assert len(set(overloaded)) == 2 and all(len(n) == 63 for n in overloaded)
    columns = column_names(["x" * 80 + "1", "x" * 80 + "2"])
    assert len(set(columns)) == 2 and all(len(c) == 63 for c in columns)


def test_hostile_text_becomes_a_plain_identifier():
    hostile = '"; DROP TABLE logs; --'
    assert table_names("x", [(hostile, f"{hostile}()")]) == ["abi_x_drop_table_logs"]
    assert column_names([hostile, "ü🙂", "1st", 'a"b']) == ["drop_table_logs", "arg1", "_1st", "a_b"]
    for bad in (hostile, "", "A", "1abc", "a-b", "a" * 32, "ab\u0131", "abc\n"):
        with pytest.raises(ValueError, match="not an ABI name"):
            check_abi_name(bad)


def test_columns_clash_with_nothing():
    assert column_names(["from", "to", "", "value"]) == ["from", "to", "arg2", "value"]
    assert column_names(["block_number", "log_index", "address", "transaction_hash"]) == [
        "block_number_0", "log_index_1", "address_2", "transaction_hash_3"]
    assert column_names(["tokenId", "token_id", "TokenID"]) == ["token_id_0", "token_id_1", "token_id_2"]
    assert column_names(["a", "a", "a_1"]) == ["a_0", "a_1_arg1", "a_1_arg2"]


def test_an_abi_may_be_an_artifact_and_anonymous_events_are_set_aside():
    transfer = {"type": "event", "name": "Transfer", "anonymous": False, "inputs": [
        {"name": "from", "type": "address", "indexed": True}, {"name": "to", "type": "address", "indexed": True},
        {"name": "value", "type": "uint", "indexed": False}]}
    anon = {"type": "event", "name": "Log", "anonymous": True, "inputs": []}
    parsed = abi_parse.parse_abi({"abi": [transfer, transfer, anon, {"type": "function", "name": "f"}]})
    assert [e.signature for e in parsed.events] == ["Transfer(address,address,uint256)"]
    assert parsed.events[0].topic0.hex().startswith("ddf252ad")
    assert [e.name for e in parsed.anonymous] == ["Log"]


@pytest.mark.parametrize("document, message", [
    ({"contracts": {}}, "not an ABI"),
    ("[]", "not an ABI"),
    ([], "no event"),
    ([{"type": "event", "name": "Log", "anonymous": True, "inputs": []}], "anonymous events have no topic0"),
    ([{"type": "event", "name": "E", "inputs": [{"name": "x", "type": "uint257"}]}], "not a type"),
    ([{"type": "event", "name": "E", "inputs": [{"name": "x", "type": "tuple"}]}], "without components"),
    ([{"type": "event", "name": "E", "inputs": [{"type": "uint8", "indexed": True}] * 4}], "more than 3 indexed"),
    ([{"type": "event", "inputs": []}], "has no name"),
    ([7], "entry 0 of the ABI is not an object"),
])
def test_what_is_not_an_abi_is_refused(document, message):
    with pytest.raises(abi_parse.AbiError, match=message):
        abi_parse.parse_abi(document)


def test_column_types():
    inputs = [("a", "address", False), ("b", "uint56", False), ("c", "uint64", False), ("d", "int64", False),
              ("e", "int72", False), ("f", "bytes32", True), ("g", "string", True), ("h", "uint8[2]", True),
              ("i", "bool", False), ("j", "string", False), ("k", "uint256[]", False), ("l", "bytes", False)]
    event = abi_parse.parse_abi([{"type": "event", "name": "E", "inputs": [
        {"name": n, "type": t, "indexed": i} for n, t, i in inputs]}]).events[0]
    assert [abi_decode.column_type(p) for p in event.params] == [
        "bytea", "bigint", "numeric(78,0)", "bigint", "numeric(78,0)", "bytea", "bytea", "bytea",
        "boolean", "text", "jsonb", "bytea"]
    assert [p.hashed for p in event.params][5:8] == [False, True, True]  # even a static array is hashed


@pytest.mark.parametrize("text, ok", [
    ("0x" + "ab" * 20, True), ("0x" + "AB" * 20, True), ("0x52908400098527886E0F7030069857D2E4169EE7", True),
    ("0x52908400098527886e0F7030069857D2E4169EE7", False), ("0x" + "ab" * 19, False), ("ab" * 20, False),
    ("0x" + "gg" * 20, False)])
def test_addresses(text, ok):
    if ok:
        assert len(abi_parse.parse_address(text)) == 20
    else:
        with pytest.raises(abi_parse.AbiError):
            abi_parse.parse_address(text)


@pytest.mark.parametrize("type_str", ["address", "bool", "uint8", "uint64", "uint256", "int8", "int64", "int256",
                                      "bytes1", "bytes4", "bytes32"])
def test_one_word_values_are_read_as_eth_abi_reads_them(type_str):
    """The word-by-word reading of simple events refuses what eth-abi's strict decoding refuses
    and reads the rest alike (its COPY field: 0x-hex as bytea, numbers, t/f)."""
    read = abi_decode._word_field(parse(type_str))
    rng = random.Random(type_str)
    edges = [bytes(32), bytes(31) + b"\x01", bytes(31) + b"\x02", b"\xff" * 32, b"\x80" + bytes(31),
             bytes(12) + b"\xff" * 20, b"\x01" + bytes(31), bytes(24) + b"\x80" + bytes(7), b"\xff" * 31 + b"\x80",
             b"\xff" * 24 + b"\x80" + bytes(7), b"\x12\x34\x56\x78" + bytes(28), bytes(31) + b"\x80"]
    for word in edges + [rng.randbytes(32) for _ in range(200)]:
        try:
            (value,) = eth_abi.decode([type_str], word)
        except Exception:
            with pytest.raises(abi_decode._Skip):
                read(word)
            continue
        if type_str == "address":
            expected = "\\\\x" + value[2:].lower()
        elif type_str.startswith("bytes"):
            expected = "\\\\x" + value.hex()
        elif type_str == "bool":
            expected = "t" if value else "f"
        else:
            expected = str(value)
        assert read(word) == expected, word.hex()
