"""The COPY lines made in C (`indexer/chaindata/_native_rows.c`) against rows.py's, which they
stand in front of: byte for byte the same rows on every recorded block, C answering every line
that has no `extra` itself; and with any hostile value in place of each field a line reads, or
the key left out, C answers exactly Python's line or None (Python then makes the line, or raises
in its own words), never another line and never an error of its own. The row tests of
test_decode_recorded.py, test_decode_refusals.py, test_every_field.py and test_rows_up_to.py run
on both paths."""

from __future__ import annotations

import gc
import os
import random
import sys
import time
import tracemalloc
from typing import Any, Callable, Iterable, Iterator

import pytest

from indexer.chaindata import columns as C, rows
from indexer.testing import fixtures

native = rows._native_rows
NAMES = fixtures.names()


def test_the_extension_is_built() -> None:
    """The suite's machines have a C compiler: rows made in Python alone there is a broken build,
    not a slow one."""
    assert native is not None, "indexer/chaindata/_native_rows.c is not built: run scripts/setup-venv"
    assert rows.NATIVE


# --- every recorded block -------------------------------------------------------------------------

Call = tuple[str, tuple[Any, ...]]  # a line function's name and its arguments


def line_calls(block: dict[str, Any], receipts: list[dict[str, Any]]) -> Iterator[Call]:
    """Each line function's call for one block, with the arguments `rows.decode` gives it."""
    number, logs = int(block["number"], 16), 0
    for index, (tx, receipt) in enumerate(zip(block["transactions"], receipts)):
        yield "transaction_line", (tx, receipt, block, number, index)
        for entry in receipt["logs"]:
            yield "log_line", (entry, receipt, block, number, index, rows._b(tx["hash"]))
        logs += len(receipt["logs"])
    for position, withdrawal in enumerate(block.get("withdrawals") or ()):
        yield "withdrawal_line", (withdrawal, number, position)
    yield "block_line", (block, number, len(block["transactions"]), logs)


def has_extra(function: str, line: str) -> bool:
    """Whether Python's line stores keys in `extra` (a transaction's: or in `receipt_extra`),
    its last fields."""
    fields = line.split("\t")[-2:] if function == "transaction_line" else line.split("\t")[-1:]
    return fields != ["\\N"] * len(fields)


@pytest.mark.parametrize("name", NAMES)
def test_every_recorded_block_gives_the_same_rows_with_c_answering_each_line_without_extra(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    recorded = fixtures.load(name)
    block, receipts = recorded["block"], recorded["receipts"]
    number = int(block["number"], 16)
    with_c = rows.decode(number, [block], {number: receipts})
    monkeypatch.setattr(rows, "_native_rows", None)
    assert rows.decode(number, [block], {number: receipts}) == with_c
    answered = 0
    for function, args in line_calls(block, receipts):
        python, c = getattr(rows, function)(*args), getattr(native, function)(*args)
        assert c in (None, python), (function, args[-1])
        assert (c is None) == has_extra(function, python), (function, python[:120])
        answered += c is not None
    if name == "mainnet-18000000":  # 94 transactions, 291 logs, 16 withdrawals, the block
        assert answered == 402


# --- hostile values ---------------------------------------------------------------------------------


class Str(str):
    pass


class Dict(dict):  # type: ignore[type-arg]
    pass


# Long enough to pass every limit (a quantity's 64 digits, int's 4,300 decimal digits), short
# enough for Python's error messages: ChainDataError's redaction is quadratic in a long word.
HUGE = "0x" + "ab" * 4_000
HOSTILE: list[Any] = [None, 0, 5, -1, 1.5, True, False, 2**70, [], {}, (), "", "0x", "0X12", "0x" + "f" * 64,
                      "0x" + "1" * 65, "0xzz", " 0x1", "0x1 ", "0x1_0", "+0x1", "0x1\t", "0x1\n", "0x1\\", "0x1\x00",
                      "0x1\u00e9", "0x\u0663", "\\N", "\\\\x12", HUGE, ["0x12"], ["0x12", None], [5], {"a": 1}]


def variants(value: Any) -> list[Any]:
    """Other spellings of a real value: each valid to some reader and not to another."""
    if isinstance(value, str) and value[:2] == "0x":
        out = ["0x" + value[2:].upper(), "0x" + value[2:].lower(), Str(value), value + "0", value[:-1],
               "0x000" + value[2:], "0x" + value[2:] + "\t"]
        if 0 < len(value) - 2 <= 64:
            out.append(int(value, 16))  # a JSON number, as anvil sends a receipt's blockTimestamp
        return out
    if isinstance(value, list):
        return [[Str(v) if isinstance(v, str) else v for v in value], value[:1], value * 3, tuple(value),
                value + ["0x"], (value + ["0x"] * 5)[:5]]  # five: one topic more than a log has
    if isinstance(value, dict):
        return [Dict(value)]
    return []


def changed(item: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of `item` with `key` set to `value`, or left out for KeyError."""
    out = dict(item)
    if value is KeyError:
        out.pop(key, None)
    else:
        out[key] = value
    return out


def outcome(function: Callable[..., Any], args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        return "line", function(*args)
    except Exception as exc:  # whatever Python raises, C must have declined
        return "raises", type(exc).__name__


Hostile = Iterator[tuple[str, str, tuple[Any, ...]]]  # (description, function, arguments)


def each_field(function: str, args: tuple[Any, ...], position: int, keys: Iterable[str],
               expected: dict[str, Any]) -> Hostile:
    """`function`'s arguments with one key of the dict at `position` left out or given each
    hostile value and each other spelling of its own (or, for a checked key it lacks, of the
    value it must equal)."""
    for key in sorted(keys):
        real = args[position].get(key, expected.get(key))
        for value in [KeyError, *HOSTILE, *variants(real), *([real] if real is not None else [])]:
            out = list(args)
            out[position] = changed(args[position], key, value)
            yield f"{function} {position}.{key} = {str(value)[:30]!r}", function, tuple(out)


def hostile_calls(name: str) -> Hostile:
    """Each field each line function reads changed, on the recorded block `name`: its
    transaction with the most keys, the first log, the first withdrawal, the block."""
    recorded = fixtures.load(name)
    block, receipts = recorded["block"], recorded["receipts"]
    number, txs = int(block["number"], 16), block["transactions"]
    looked_up = {"hash", "number", "timestamp"}  # of the block, by a transaction's and a log's line
    index = max(range(len(txs)), key=lambda i: len(txs[i]))
    expected = {"blockHash": block["hash"], "blockNumber": block["number"], "blockTimestamp": block["timestamp"],
                "transactionIndex": receipts[index]["transactionIndex"], "transactionHash": txs[index]["hash"],
                "from": txs[index]["from"], "to": txs[index].get("to"), "type": txs[index].get("type", "0x0"),
                "removed": False}  # what each checked key must equal: sent so, it passes the fast path
    tx_args = (txs[index], receipts[index], block, number, index)
    yield from each_field("transaction_line", tx_args, 0, {*C.TRANSACTION_KEYS, *C.TRANSACTION_CHECKED}, expected)
    yield from each_field("transaction_line", tx_args, 1, {*C.RECEIPT_KEYS, *C.RECEIPT_CHECKED} - {"logs"}, expected)
    yield from each_field("transaction_line", tx_args, 2, looked_up, expected)
    for at, receipt in [(i, r) for i, r in enumerate(receipts) if r["logs"]][:1]:
        entry = receipt["logs"][0]
        log_args = (entry, receipt, block, number, at, rows._b(txs[at]["hash"]))
        log_expected = dict(expected, transactionIndex=receipt["transactionIndex"], transactionHash=txs[at]["hash"])
        yield from each_field("log_line", log_args, 0, {*C.LOG_KEYS, *C.LOG_CHECKED}, log_expected)
        yield from each_field("log_line", log_args, 1, {"transactionHash", "transactionIndex"}, log_expected)
        yield from each_field("log_line", log_args, 2, looked_up, log_expected)
        for value in [*HOSTILE, *variants(entry["topics"][0])] if entry["topics"] else []:
            yield f"topic 0 = {str(value)[:30]!r}", "log_line", (changed(entry, "topics", [value, *entry["topics"][1:]]),
                                                                 *log_args[1:])
        for value in HOSTILE:
            yield f"tx_hash_field = {str(value)[:30]!r}", "log_line", (*log_args[:5], value)
    for withdrawal in (block.get("withdrawals") or [])[:1]:
        yield from each_field("withdrawal_line", (withdrawal, number, 0), 0, C.WITHDRAWAL_KEYS, expected)
    block_args = (block, number, len(txs), 7)
    yield from each_field("block_line", block_args, 0, C.BLOCK_KEYS, expected)
    for position in (1, 2, 3):  # the caller's own numbers
        for value in [None, -1, True, 2**63, 2**64, "5", 5.0, Str("5")]:
            yield f"block_line {position} = {value!r}", "block_line", (*block_args[:position], value,
                                                                      *block_args[position + 1:])
    for function, args in (("transaction_line", tx_args), ("block_line", block_args)):
        for value in (Dict(args[0]), None, [args[0]], {**args[0], "someNewKey": 1}, {**args[0], 5: 1}):
            yield f"{function} of {str(value)[:30]!r}", function, (value, *args[1:])


# Between them: an old block (no type, a state root in each receipt), the mainnet block of
# 18,000,000 (type 2, withdrawals), go-ethereum's blob transaction with an access list, and its
# Prague block with an authorization list and a log.
HOSTILE_BLOCKS = ["mainnet-1755635", "mainnet-18000000", "execution-apis-20", "execution-apis-45"]


@pytest.mark.parametrize("name", HOSTILE_BLOCKS)
def test_a_hostile_value_gets_python_s_line_or_is_left_to_python(name: str) -> None:
    differ, outcomes = [], set()
    for description, function, args in hostile_calls(name):
        python = outcome(getattr(rows, function), args)
        c = getattr(native, function)(*args)  # never raises: an exception fails the test here
        if c is None:
            outcomes.add(f"declined, Python {python[0]}")
        elif python == ("line", c):
            outcomes.add("the same line")
        else:
            differ.append(f"{description}: C {c[:60]!r}, Python {python[0]} {str(python[1])[:60]!r}")
    assert not differ, "\n".join(differ[:20])
    # Not all alike: some lines C makes as Python does, some it leaves to Python (a spelling only
    # Python reads), and some Python refuses.
    assert outcomes == {"the same line", "declined, Python line", "declined, Python raises"}, outcomes


def test_quantities_are_the_decimals_python_writes() -> None:
    rng = random.Random(7)
    for bits in range(0, 257):
        for _ in range(4):
            value = rng.getrandbits(bits) if bits else 0
            digits = f"{value:x}".rjust(rng.choice((1, 1, 2, 64)), "0")[-64:]
            spelled = "0x" + (digits.upper() if rng.random() < 0.3 else digits)
            w = {"index": spelled, "validatorIndex": "0x0", "address": "0x12", "amount": spelled}
            assert native.withdrawal_line(w, 1, 0) == rows.withdrawal_line(w, 1, 0), spelled
    top = {"index": "0x" + "f" * 64, "validatorIndex": "0x" + "0" * 64, "address": "0x", "amount": "0x1" + "0" * 63}
    assert native.withdrawal_line(top, 0, 0) == rows.withdrawal_line(top, 0, 0)


def test_timestamps_are_written_as_time_strftime_writes_them() -> None:
    block = fixtures.load("mainnet-1755634")["block"]
    rng = random.Random(3)
    moments = [0, 59, 86_399, 86_400, 951_782_400, 951_868_799, 4_107_542_400, 253_402_300_799,
               *(rng.randrange(253_402_300_800) for _ in range(2_000))]
    for moment in moments:
        line = native.block_line(dict(block, timestamp=hex(moment)), 1755634, 0, 0)
        assert line.split("\t")[3] == time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(moment)), moment
    for late in (253_402_300_800, 2**63, 2**64 - 1):  # the years past 9999 are left to Python
        assert native.block_line(dict(block, timestamp=hex(late)), 1755634, 0, 0) is None


# --- callers' own objects ---------------------------------------------------------------------------


def mainnet_transaction() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], int]:
    """A fresh copy of the mainnet block's first transaction with logs, its receipt, the block,
    and the transaction's index."""
    recorded = fixtures.load("mainnet-18000000")
    index = next(i for i, r in enumerate(recorded["receipts"]) if r["logs"])
    return recorded["block"]["transactions"][index], recorded["receipts"][index], recorded["block"], index


class Collides:
    """A caller's key with the hash of `name` (a key C looks up), which compares equal to nothing;
    once armed, comparing it runs `action`."""

    def __init__(self, name: str, action: Callable[[], None]) -> None:
        self.name, self.action, self.met, self.armed = name, action, 0, False

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        if self.armed:
            self.met += 1
            self.action()
        return False


def collide(item: dict[Any, Any], name: str, action: Callable[[], None]) -> Collides:
    """A Collides put where a lookup of `name` meets it before `name` itself."""
    key, value = Collides(name, action), item.pop(name)
    item[key] = 1
    item[name] = value
    return key


def made_hashes(count: int) -> list[str]:
    """Hashes made at run time, which the list alone holds (a literal would be a constant of the
    code too, never freed with the list)."""
    return ["0x" + bytes([i]).hex() * 32 for i in range(1, count + 1)]


def test_a_callers_key_that_changes_the_dicts_mid_call_is_not_a_crash() -> None:
    """A dict lookup can run a key's own __eq__ (JSON from a node never holds such keys): one
    that empties the lists, replaces the fields C is about to read and asks C for a line
    meanwhile leaves C with references of its own, not freed memory, and C's line is the one
    Python makes of the dicts as they are then."""
    tx, receipt, block, index = mainnet_transaction()
    entry = receipt["logs"][0]
    tx["blobVersionedHashes"] = made_hashes(3)
    field = rows._b(tx["hash"])

    def meddle() -> None:
        tx["blobVersionedHashes"].clear()
        entry["topics"].clear()
        tx["input"], receipt["logsBloom"], entry["data"] = "0x" + "cd" * 4, rows.ZERO_BLOOM, "0x"
        assert native.transaction_line(tx, receipt, block, 18_000_000, index) is None  # one line at a time

    def made(function: str, *args: Any) -> tuple[str, str]:
        """C's line, with the keys armed, and Python's, after."""
        for key in keys:
            key.armed = True
        line = getattr(native, function)(*args)
        for key in keys:
            key.armed = False
        return line, getattr(rows, function)(*args)

    keys = [collide(block, "number", meddle)]
    c, python = made("transaction_line", tx, receipt, block, 18_000_000, index)
    assert c == python and "\t\\\\xcdcdcdcd\t{}\t" in c
    keys.append(collide(receipt, "transactionIndex", meddle))  # a receipt C reads whole would be declined
    c, python = made("log_line", entry, receipt, block, 18_000_000, index, field)
    assert c == python and c.endswith("\\N\t\\N\t\\N\t\\N\t\\\\x\t\\N")
    assert all(key.met for key in keys)


@pytest.mark.parametrize("error", [RuntimeError("a caller's own error"), MemoryError()])
def test_a_callers_error_in_a_lookup_is_python_s_to_raise_unless_memory_ran_out(error: Exception) -> None:
    tx, receipt, block, index = mainnet_transaction()

    def fail() -> None:
        raise error

    collide(block, "timestamp", fail).armed = True
    if isinstance(error, MemoryError):  # not the data's doing: not hidden
        with pytest.raises(MemoryError):
            native.transaction_line(tx, receipt, block, 18_000_000, index)
        return
    assert native.transaction_line(tx, receipt, block, 18_000_000, index) is None
    with pytest.raises(RuntimeError, match="a caller's own error"):
        rows.transaction_line(tx, receipt, block, 18_000_000, index)


def test_a_jsonb_text_that_runs_a_callers_code_is_not_a_crash() -> None:
    """An access list with items is written by rows._json, called from C: a caller's dict in it
    whose items() (json's fallback past orjson, for an integer beyond 64 bits) frees what C has
    already put in the line, asks C for another line and configures it anew."""
    tx, receipt, block, index = mainnet_transaction()
    tx["blobVersionedHashes"] = made_hashes(2)

    class Meddles(dict):  # type: ignore[type-arg]
        def items(self):  # type: ignore[no-untyped-def]
            tx["blobVersionedHashes"].clear()
            for item, key in ((tx, "input"), (tx, "authorizationList"), (receipt, "logsBloom")):
                item.pop(key, None)
            assert native.transaction_line(tx, receipt, block, 18_000_000, index) is None  # one line at a time
            native.configure(rows._BLOCK_KNOWN, rows._TRANSACTION_KNOWN, rows._RECEIPT_KNOWN, rows._LOG_KNOWN,
                             rows._WITHDRAWAL_KNOWN, rows._json)
            return super().items()

    tx["accessList"] = [Meddles(address="0x12", storageKeys=[]), 2**70]
    tx["authorizationList"] = [{"chainId": "0x1"}]
    line = native.transaction_line(tx, receipt, block, 18_000_000, index)
    assert line is not None and '\\\\x' + "01" * 32 in line and '[{"address":"0x12","storageKeys":[]},' in line
    fresh = mainnet_transaction()  # and C, configured anew, still answers
    assert native.transaction_line(*fresh[:3], 18_000_000, fresh[3]) == rows.transaction_line(*fresh[:3], 18_000_000,
                                                                                             fresh[3])


def test_eight_megabytes_of_input_and_of_log_data_are_the_same_line() -> None:
    tx, receipt, block, index = mainnet_transaction()
    tx["input"] = "0x" + os.urandom(8 * 1024 * 1024).hex()
    assert native.transaction_line(tx, receipt, block, 18_000_000, index) == \
        rows.transaction_line(tx, receipt, block, 18_000_000, index)
    entry = dict(receipt["logs"][0], data="0x" + os.urandom(8 * 1024 * 1024).hex().upper())
    field = rows._b(tx["hash"])
    assert native.log_line(entry, receipt, block, 18_000_000, index, field) == \
        rows.log_line(entry, receipt, block, 18_000_000, index, field)


def test_no_reference_or_memory_is_kept() -> None:
    """Every value read, every line declined and every jsonb text: the references C took are
    given back, and 20,000 more calls of each leave no memory behind."""
    recorded = fixtures.load("execution-apis-20")  # an access list: the call back into rows._json
    calls = list(line_calls(recorded["block"], recorded["receipts"]))
    tx, receipt, block, index = mainnet_transaction()
    calls += [("transaction_line", (dict(tx, input="0xzz"), receipt, block, 18_000_000, index)),
              ("log_line", (receipt["logs"][0], receipt, block, 18_000_000, index, "\\N")),
              ("transaction_line", (dict(tx, accessList=[{"k": "\x00"}]), receipt, block, 18_000_000, index))]
    # The values only these calls hold (None, False and small ints are everybody's).
    values = [v for _, args in calls for a in args if isinstance(a, dict) for v in a.values()
              if isinstance(v, (str, list, dict)) and len(v) > 3]

    def run(times: int) -> None:
        for _ in range(times):
            for function, args in calls:
                getattr(native, function)(*args)

    run(100)
    counts = [sys.getrefcount(v) for v in values]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run(20_000 // len(calls) + 1)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert [sys.getrefcount(v) for v in values] == counts
    assert grown < 64 * 1024, grown


def test_the_known_keys_must_be_str() -> None:
    with pytest.raises(TypeError):
        native.configure(frozenset({5}), rows._TRANSACTION_KNOWN, rows._RECEIPT_KNOWN, rows._LOG_KNOWN,
                         rows._WITHDRAWAL_KNOWN, rows._json)
    block = fixtures.load("mainnet-1755634")["block"]
    assert native.block_line(block, 1755634, 0, 0) == rows.block_line(block, 1755634, 0, 0)  # as configured before
