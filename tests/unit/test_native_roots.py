"""The root checks in C (`indexer/chaindata/_native_roots.c`) against the Python ones they stand in
front of: the same keccak, the same trie, the same encodings byte for byte on every recorded
block, and the same verdict from `check_block` on every hostile value a node could send, where
the C path must either prove the block exactly as Python would or leave it to Python. The
mutations of tests/unit/test_roots.py (each field changed, each item dropped or swapped) run on
both paths there."""

from __future__ import annotations

import copy
import os
import random
from typing import Any, Callable

import pytest

from indexer.chaindata import json_encodings, ordered_trie, rlp_codec, roots
from indexer.testing import fixtures

native = roots._native_roots
NAMES = fixtures.names()


def test_the_extension_is_built() -> None:
    """The suite's machines have a C compiler: a check that fell back to Python there is a broken
    build, not a slow one."""
    assert native is not None, "indexer/chaindata/_native_roots.c is not built: run scripts/setup-venv"
    assert roots.NATIVE


@pytest.mark.parametrize("portable", [False, True])
def test_keccak_equals_the_reference_at_every_block_boundary(portable: bool) -> None:
    """Both permutations: the one picked for this processor (BMI2 on the suite's machines) and
    the one any processor runs, which the root checks use where BMI2 is missing."""
    rng = random.Random(1)
    for n in [*range(0, 300), 1_000, 4_096, 100_000]:  # the rate is 136 bytes: 135, 136, 137, 271, 272...
        data = rng.randbytes(n)
        assert native.keccak(data, portable) == rlp_codec.keccak(data), n
    assert native.keccak(memoryview(b"abc"), portable=portable) == rlp_codec.keccak(b"abc")


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))


def test_the_permutation_for_this_processor_is_picked() -> None:
    assert native.KECCAK_PERMUTATION == ("bmi2" if {"bmi1", "bmi2"} <= cpu_flags() else "any")


def test_the_way_many_messages_are_hashed_for_this_processor_is_picked() -> None:
    flags = cpu_flags()
    assert native.KECCAK_MANY == ("avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "one by one")


WAYS = {"avx512": "avx512f", "avx2": "avx2", "one by one": None}


@pytest.mark.parametrize("way", list(WAYS))
def test_many_messages_hash_as_each_alone(way: str) -> None:
    """Eight side by side (KECCAK_MANY "avx512" on the suite's machines), four (a processor
    with AVX2 alone) and one by one: every count around the slots and the tails finished in a
    narrower way, every length around the rate, the longest message far longer than the rest
    together, lengths all equal. A way this processor lacks is refused, not run."""
    if WAYS[way] is not None and WAYS[way] not in cpu_flags():
        with pytest.raises(ValueError, match="on this processor"):
            native.keccak_many([b"a"], way)
        pytest.skip(f"this processor has no {WAYS[way]}")
    rng = random.Random(2)
    lengths = [0, 1, 20, 31, 32, 33, 135, 136, 137, 271, 272, 273, 1_000]
    for count in [*range(0, 20), 63, 64, 65, 200]:
        for mix in ("any", "one long", "two long", "equal"):
            sizes = ([rng.choice(lengths) for _ in range(count)] if mix == "any"
                     else [136] * count if mix == "equal"
                     else [(100_000 if mix == "one long" else rng.choice((50_000, 60_000))) if i in (count // 2, count // 3)
                           else rng.choice(lengths) for i in range(count)])
            messages = [rng.randbytes(n) for n in sizes]
            assert native.keccak_many(messages, way) == [rlp_codec.keccak(m) for m in messages], (count, mix)
    with pytest.raises(TypeError):
        native.keccak_many([b"a", "b", b"c"], way)
    with pytest.raises(TypeError):
        native.keccak_many((b"a",), way)
    with pytest.raises(ValueError):
        native.keccak_many([b"a"], way="sse")


@pytest.mark.parametrize("sizes", [(20, 32, 32, 32), (0, 0), (20, 33), (20, 64, 1), (32,) * 70])
def test_a_bloom_made_from_items_of_any_length_is_pythons(sizes: tuple[int, ...]) -> None:
    """The bloom made from a receipt's logs, its items hashed 64 at a time: an address or topic
    of a length no node sends (none, over 32 bytes: hashed at once) sets the bits the Python
    encoder sets, and more than 64 items fill more than one batch."""
    rng = random.Random(sum(sizes))
    receipt = copy.deepcopy(fixtures.load("mainnet-18000000")["receipts"][1])
    receipt.pop("logsBloom")
    receipt["logs"] = [{"address": "0x" + rng.randbytes(sizes[0]).hex(),
                        "topics": ["0x" + rng.randbytes(n).hex() for n in sizes[1:]],
                        "data": "0x" + rng.randbytes(40).hex()} for _ in range(3)]
    python, _ = json_encodings.encode_receipt_json(receipt, 2, {}, recompute_bloom=True)
    assert native.encode_receipt(receipt, 2, True) == python


@pytest.mark.parametrize("count", [0, 1, 2, 3, 16, 17, 127, 128, 129, 255, 256, 257, 1_000, 20_000])
def test_the_trie_equals_the_python_one(count: int) -> None:
    rng = random.Random(count)
    # Values of every size that changes the shape: one byte under 0x80 (its own encoding), leaves
    # held inline (under 32 bytes) and hashed, values with a long length prefix.
    values = [rng.randbytes(rng.choice((1, 1, 2, 5, 25, 31, 40, 56, 300, 70_000 if i == 0 else 60)))
              for i in range(count)]
    assert native.ordered_trie_root(values) == ordered_trie.ordered_trie_root(values)


def test_a_trie_of_empty_values_equals_the_python_one() -> None:
    for count in (1, 2, 3, 17, 200):
        assert native.ordered_trie_root([b""] * count) == ordered_trie.ordered_trie_root([b""] * count)


def test_the_trie_refuses_what_is_not_a_list_of_bytes() -> None:
    for bad in ((b"a",), [b"a", "b"], None):
        with pytest.raises(TypeError):
            native.ordered_trie_root(bad)


@pytest.mark.parametrize("name", NAMES)
def test_every_recorded_block_is_proven_in_c_with_the_same_encodings(name: str) -> None:
    recorded = fixtures.load(name)
    block, receipts = recorded["block"], recorded["receipts"]
    types = []
    for tx in block["transactions"]:
        python = json_encodings.encode_transaction_json(tx)
        assert native.encode_transaction(tx) == python
        types.append(python[0] if python[0] < 0x80 else 0)
    for i, receipt in enumerate(receipts):
        for recompute in (True, False):
            python, _ = json_encodings.encode_receipt_json(receipt, types[i], {}, recompute_bloom=recompute)
            assert native.encode_receipt(receipt, types[i], recompute) == python, (i, recompute)
    assert native.roots_match(block, receipts, True) and native.roots_match(block, receipts, False)


def verdict(block: dict[str, Any], receipts: Any, recompute_blooms: bool) -> tuple[str, str]:
    try:
        reason = roots.check_block(block, receipts, recompute_blooms=recompute_blooms)
    except Exception as exc:  # whatever the Python check raises, the C path must raise the same
        return type(exc).__name__, str(exc)
    return "proven" if reason is None else "reason", reason or ""


# Each kind of value a field could hold instead of its hex: none, another JSON type, empty, not
# hex, hex with leading zeros (a valid quantity, bad data), odd length, not ASCII.
HOSTILE_VALUES: list[Any] = [None, 5, [], "", "0x", "0X1", "0xzz", "0x" + "0" * 1_000 + "1", "0x" + "a" * 2_001,
                             "0xü1"]
# Between them: every signed type, an OP-stack deposit, Arbitrum's internal transaction,
# withdrawals, and a block from before typed transactions.
HOSTILE_BLOCKS = ["execution-apis-45", "optimism-sepolia-4089330", "arbitrum-sepolia-185232421", "mainnet-47218"]
# The keys the encodings read; the others (hashes, indices, L2 fees) no root commits to.
READ = frozenset((
    "type", "nonce", "gas", "gasPrice", "maxFeePerGas", "maxPriorityFeePerGas", "maxFeePerBlobGas", "to", "value",
    "input", "data", "v", "r", "s", "yParity", "chainId", "accessList", "blobVersionedHashes", "authorizationList",
    "sourceHash", "from", "mint", "isSystemTx", "address", "storageKeys",
    "root", "status", "cumulativeGasUsed", "logs", "logsBloom", "topics", "depositNonce", "depositReceiptVersion",
    "index", "validatorIndex", "amount",
))

Change = Callable[[dict[str, Any], list[Any]], None]


def set_value(path: tuple[Any, ...], value: Any) -> Change:
    """A change that puts `value` at `path` ("block" or "receipts", then keys), or with KeyError
    leaves the key (or list item) out."""
    def change(block: dict[str, Any], receipts: list[Any]) -> None:
        where: Any = {"block": block, "receipts": receipts}
        for key in path[:-1]:
            where = where[key]
        if value is KeyError:
            del where[path[-1]]
        else:
            where[path[-1]] = value
    return change


def hostile_changes(name: str) -> list[tuple[str, Change]]:
    """(description, change) for every hostile value in place of each field the roots read, each
    key and item left out, and valid values in other spellings."""
    recorded = fixtures.load(name)
    block, receipts = recorded["block"], recorded["receipts"]
    paths: list[tuple[Any, ...]] = [("block", key) for key in ("transactionsRoot", "receiptsRoot", "withdrawalsRoot",
                                                              "withdrawals", "transactions", "number") if key in block]
    seen_types: set[str] = set()
    for i, tx in enumerate(block["transactions"]):
        if str(tx.get("type")) in seen_types:
            continue
        seen_types.add(str(tx.get("type")))
        paths.append(("block", "transactions", i))
        paths += [("block", "transactions", i, key) for key in tx if key in READ]
        for j, entry in enumerate((tx.get("accessList") or [])[:1]):
            paths += [("block", "transactions", i, "accessList", j, key) for key in entry]
    for i, receipt in enumerate(receipts[:2]):
        paths.append(("receipts", i))
        paths += [("receipts", i, key) for key in receipt if key in READ]
        for j, entry in enumerate(receipt["logs"][:1]):
            paths += [("receipts", i, "logs", j, key) for key in entry]
            paths.append(("receipts", i, "logs", j, "topics", 0))
    for j, w in enumerate((block.get("withdrawals") or [])[:1]):
        paths += [("block", "withdrawals", j, key) for key in w]
    out = []
    for path in paths:
        out.append((f"{path} left out", set_value(path, KeyError)))
        out += [(f"{path} = {str(value)[:20]!r}", set_value(path, value)) for value in HOSTILE_VALUES]
    txs: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda b: b["transactions"]
    out += [
        ("roots in upper case", lambda b, r: b.update(transactionsRoot="0x" + b["transactionsRoot"][2:].upper(),
                                                      receiptsRoot="0x" + b["receiptsRoot"][2:].upper())),
        ("blooms in upper case", lambda b, r: [x.update(logsBloom="0x" + x["logsBloom"][2:].upper()) for x in r]),
        ("quantities with leading zeros", lambda b, r: [tx.update(nonce="0x000" + tx["nonce"][2:]) for tx in txs(b)]),
        ("types with a leading zero", lambda b, r: [tx.update(type="0x0" + tx["type"][2:]) for tx in txs(b) if "type" in tx]),
        ("v instead of yParity", lambda b, r: [tx.pop("yParity", None) for tx in txs(b)]),
        ("v 27/28 instead of yParity", lambda b, r: [tx.update(v="0x1b" if tx.pop("yParity") == "0x0" else "0x1c")
                                                     for tx in txs(b) if "yParity" in tx]),
        ("types the fields imply, not sent", lambda b, r: [tx.pop("type", None) for tx in txs(b)]),
        ("receipt types not sent", lambda b, r: [x.pop("type", None) for x in r]),
        ("no bloom sent", lambda b, r: [x.pop("logsBloom", None) for x in r]),
        ("a bloom unlike its logs", lambda b, r: [x.update(logsBloom="0x" + "ff" * 256) for x in r[:1]]),
        ("a receipt added", lambda b, r: r.append(copy.deepcopy(r[0]))),
        ("receipts as a tuple", lambda b, r: None),
        ("every receipt a type 0x7e", lambda b, r: [x.update(type="0x7e") for x in r]),
        ("every transaction a deposit", lambda b, r: [tx.update(type="0x7e") for tx in txs(b)]),
        ("every transaction Arbitrum's", lambda b, r: [tx.update(type="0x6a") for tx in txs(b)]),
        ("a receipt type past a byte", lambda b, r: [x.update(type="0x100") for x in r]),
        ("unsigned transactions", lambda b, r: [tx.update(r="0x0", s="0x0") for tx in txs(b)]),
    ]
    return out


def verdicts(name: str, change: Change, tuple_receipts: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """check_block's verdict with the C path in front and without it, with each kind of bloom."""
    out = []
    for backend in (native, None):
        monkeypatch.setattr(roots, "_native_roots", backend)
        for recompute in (True, False):
            recorded = fixtures.load(name)
            block, receipts = recorded["block"], recorded["receipts"]
            change(block, receipts)
            out.append(verdict(block, tuple(receipts) if tuple_receipts else receipts, recompute))
    return out


@pytest.mark.parametrize("name", HOSTILE_BLOCKS)
def test_a_hostile_value_gets_the_verdict_of_the_python_check(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    differ = []
    outcomes = set()
    for description, change in hostile_changes(name):
        c_true, c_false, python_true, python_false = verdicts(name, change, description == "receipts as a tuple",
                                                              monkeypatch)
        outcomes.update((c_true[0], c_false[0]))
        if (c_true, c_false) != (python_true, python_false):
            differ.append(f"{description}: C {c_true[0]}/{c_false[0]}, Python {python_true[0]}/{python_false[0]}")
    assert not differ, "\n".join(differ)
    # Not all refused alike: some stay proven, some are reasons or mismatches, some malformed.
    assert {"proven", "RootMismatch", "ValueError"} <= outcomes, outcomes


def test_an_answer_too_large_for_memory_is_not_a_crash() -> None:
    """An input of 8 MB in one transaction: encoded, hashed, refused by its root, no crash."""
    recorded = fixtures.load("mainnet-18000000")
    block, receipts = recorded["block"], recorded["receipts"]
    block["transactions"][0]["input"] = "0x" + os.urandom(8 * 1024 * 1024).hex()
    assert native.roots_match(block, receipts, False) is False


def test_a_callers_object_that_changes_the_block_mid_check_is_not_a_crash() -> None:
    """A dict lookup can run a key's own __eq__: a caller's object that empties the transactions,
    or takes a receipt's logs away, while the C check reads them leaves it holding references of
    its own, not freed memory (a crash before; JSON from a node never holds such keys)."""
    recorded = fixtures.load("mainnet-18000000")
    block, receipts = recorded["block"], recorded["receipts"]

    class EmptiesTheTransactions:
        def __hash__(self) -> int:
            return hash("type")

        def __eq__(self, other: object) -> bool:
            block["transactions"].clear()
            return False

    del block["transactions"][0]["type"]
    block["transactions"][0][EmptiesTheTransactions()] = 1
    assert native.roots_match(block, receipts, True) is False

    recorded = fixtures.load("mainnet-18000000")
    block, receipts = recorded["block"], recorded["receipts"]
    with_logs = next(r for r in receipts if r["logs"])

    class TakesTheLogs:
        def __hash__(self) -> int:
            return hash("address")

        def __eq__(self, other: object) -> bool:
            with_logs["logs"] = None
            return False

    with_logs["logs"][0][TakesTheLogs()] = 1
    assert native.roots_match(block, receipts, True) is False


def test_a_block_without_a_readable_number_is_left_to_python() -> None:
    for number in (KeyError, None, "0x", "0xzz", 18_000_000):
        recorded = fixtures.load("mainnet-18000000")
        block, receipts = recorded["block"], recorded["receipts"]
        if number is KeyError:
            del block["number"]
        else:
            block["number"] = number
        assert native.roots_match(block, receipts, False) is False, number
