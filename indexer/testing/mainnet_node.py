"""A JSON-RPC node for benchmarks that serves deterministic blocks with Ethereum mainnet's shape,
at almost no cost, so that a backfill benchmark measures the indexer rather than the node (on a
dense anvil chain anvil itself takes most of the machine).

Blocks `first..last`, each of the era its height falls in (`ERAS`): transaction types, calldata
sizes, logs per transaction (topics, data sizes), receipts (a state root before Byzantium, a
status since), base fee, withdrawals (16 a block since Shanghai), blob and EIP-7702 fields as
mainnet had them at that height. Every block passes the indexer's own checks: it links to the
one below by `parentHash`, its transactions, receipts and logs name its hash and number, each
transaction hash is the keccak of its signed encoding, and transactionsRoot, receiptsRoot,
withdrawalsRoot and every logs bloom are computed with `indexer.roots` (so
INDEXER_VERIFY_ROOTS=true proves every block). Not real: signatures (r and s are random, `from`
is not what they recover), stateRoot, and the block hash, which is keccak of the height rather
than of the header (so that any block can be served without its ancestors; the height is in
its last 8 bytes, which lets eth_getBlockByHash find it).

How it stays cheap: each era has `templates` pre-built blocks (64 by default), each serialised
once to JSON with markers where a block's own values go. Block n takes one of them (a hash of
n picks which) and fills in its number, timestamp, hash, parent hash, state root, and the last
8 bytes of every transaction's `r` (its height): so every transaction of every block is
distinct, and its hash is the keccak of an encoding spliced from the template's. That keccak
per transaction and the transactions trie are the expensive part (about 4.5 ms of CPU for a
block of the Shanghai era: keccak is eth-hash's, through pycryptodome); `precompute()`
(`--precompute`) does it for every block before serving, in a forked process per core, after
which serving costs about
0.7 ms of CPU a block (its three answers: header, full block, receipts) in the node itself
and 1.3 to 1.6 ms with its HTTP server (BENCHMARKS.md). Without it, the hashes of the last `cache_blocks` blocks
served are kept. Receipts do not depend on transaction hashes, so the receipts root and
blooms are the template's; withdrawal indices grow by 16 a block and their root is
recomputed.

The figures (ERAS), and which are estimates:
- Transactions per block: Etherscan's "Ethereum Daily Transactions" chart
  (etherscan.io/chart/tx) read at each era's sample date, divided by blocks per day
  (etherscan.io/chart/blocks: about 5,800 a day before the Merge in 2017-2021, 7,150 after it
  with 12-second slots). Approximate readings, rounded: ESTIMATES.
- Shanghai and later: the shape of each transaction (type, contract creation or not, calldata
  size, its logs' topic counts and data sizes, failed or not) is sampled from the 94
  transactions of the recorded mainnet block 18,000,000 (tests/fixtures/mainnet-18000000.json:
  83 EIP-1559 and 11 legacy transactions, 291 logs, 16 withdrawals, about 940 KB of JSON with
  its receipts). Measured, not estimated; only the count per block is an estimate.
- Earlier eras: a mix of plain transfers (no calldata, no logs), ERC-20 transfers (68 bytes of
  calldata, one Transfer log: 3 topics, 32 bytes of data), contract calls, DEX swaps (4 to 8
  logs) and contract creations, weighted by era: ESTIMATES, guided by the recorded blocks
  47218/47219 and 1755635 (two legacy transfers each, the latter's with an ERC-20 Transfer log).
- Transaction types: legacy only before Berlin (EIP-155 signatures from Spurious Dragon,
  2,675,000), a few EIP-2930 after Berlin, about half EIP-1559 just after London and 88% in
  block 18,000,000 (recorded), blob transactions (EIP-4844) after Cancun and set-code
  transactions (EIP-7702) after Prague at the per-block rates in ERAS: ESTIMATES.
- Fork heights (Homestead 1,150,000, Byzantium 4,370,000, Berlin 12,244,000, London
  12,965,000, the Merge 15,537,394, Shanghai 17,034,870, Cancun 19,426,587, Prague 22,431,084)
  are mainnet's; timestamps are 14.5 s a block before the Merge (an average, estimate) and 12 s
  after it.

Traces (issue 26): `debug_traceBlockByHash` and `debug_traceBlockByNumber` with
`{"tracer": "callTracer"}` (a list of `{"txHash", "result": frame}`, frames nested in `calls`) and
`debug_traceTransaction` (the frame alone), consistent with the blocks so that
`indexer.traces.check_against_block` passes: the top frame is the transaction's from, to (for a
creation a CREATE to the receipt's contractAddress, none when it failed), value and input, with
the receipt's gasUsed, and `error` exactly when the receipt's status is 0x0; each log's address
is the account a CALL that was not undone ran in. The shape is measured from the recorded mainnet
block 24,298,763 (tests/fixtures/traces/erigon-rpc-tests-debug_traceBlockByNumber-callTracer-
24298763.json: Erigon's callTracer answer, 361 transactions, 1,758 frames): a transaction without
calldata gets its top frame alone (all 89 such there are one frame); one with calldata (272
there, 6.1 frames on average, 169 of them one frame, up to 199 frames and 14 deep; 962 CALL, 455
STATICCALL, 338 DELEGATECALL, 2 CREATE, 1 CREATE2 in the block, 18 frames failed) gets the tree of
one of them at random: its types, nesting, errors and revert reasons, gas figures and which keys
it has, and the sizes of every input and output (inner frames: 145 bytes of input, 27 of output
on average), with fresh addresses and data. The accounts its CALLs ran in take the addresses of
the transaction's logs; a log address left over (the blocks' logs come from more accounts than
mainnet's: 70% from a fresh address, an estimate) gets a CALL frame of its own below the top one.
So a tree has about 6.7 frames a transaction on the Shanghai-era blocks (against 4.9 in the
recorded block) and its JSON about 8.6 KB a transaction, most of it the top frames' input: the
transaction's calldata, 2.9 KB on average in block 18,000,000 (rollup batches before blobs)
against 243 bytes in 24,298,763. Earlier eras use the same trees: an ESTIMATE. Each template's
trees are built the first time one of its blocks is traced (about 0.5 s for an era's 64; before
serving with `--traces`) and kept as JSON: serving a block's traces costs splicing in its
transaction hashes; `debug_traceTransaction` finds its transaction by scanning, as
eth_getTransactionReceipt does. No `trace_block`.

    scripts/mainnet_node --first 18000000 --blocks 2000 --port 8545 [--precompute] [--traces]

(or `python -m indexer.testing.mainnet_node ...`); it prints its URL once it serves, and stops on
SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, NoReturn

import orjson

from .. import json_encodings, ordered_trie, rlp_codec
from . import fixtures
from .loopback import LoopbackServer

CHAIN_ID = 1
MERGE = 15_537_394
MERGE_TIMESTAMP = 1_663_224_179  # block 15,537,394
GENESIS_TIMESTAMP = 1_438_269_973  # block 0
SPURIOUS_DRAGON = 2_675_000  # EIP-155 signatures from here
WITHDRAWALS_PER_BLOCK = 16
TRANSFER_TOPIC = "0x" + rlp_codec.keccak(b"Transfer(address,address,uint256)").hex()
EMPTY_UNCLES = "0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347"

# A transaction's shape: (kind, to is None, calldata bytes, [(topics, data bytes) per log], failed).
Shape = tuple[str, bool, int, list[tuple[int, int]], bool]


@dataclass(frozen=True)
class Era:
    name: str
    start: int
    transactions: int  # mean per block that has any (estimate: see the module's docstring)
    empty: float = 0.0  # share of blocks without transactions
    kinds: dict[str, float] = field(default_factory=dict)  # the mix of shapes, when not recorded
    type1: float = 0.0  # share of EIP-2930 transactions
    type2: float = 0.0  # share of EIP-1559 transactions (recorded eras: as recorded)
    blob_transactions: float = 0.0  # per block
    set_code_transactions: float = 0.0  # per block
    gas_limit: int = 30_000_000
    recorded: bool = False  # shapes sampled from mainnet block 18,000,000


ERAS = (
    # 2015-2016: 5-20 thousand transactions a day at ~5,500 blocks a day; most blocks empty.
    Era("frontier", 0, 2, empty=0.6, kinds={"transfer": 0.85, "call": 0.1, "create": 0.05}, gas_limit=3_141_592),
    # 2016-2017: 40-300 thousand a day.
    Era("homestead", 1_150_000, 12, empty=0.05,
        kinds={"transfer": 0.7, "erc20": 0.1, "call": 0.15, "create": 0.05}, gas_limit=4_700_000),
    # December 2017: about 900 thousand a day at ~5,800 blocks a day.
    Era("byzantium", 4_370_000, 150, empty=0.02,
        kinds={"transfer": 0.55, "erc20": 0.3, "call": 0.12, "create": 0.03}, gas_limit=8_000_000),
    # April 2021: about 1.2 million a day at ~6,450 blocks a day.
    Era("berlin", 12_244_000, 185, empty=0.01,
        kinds={"transfer": 0.35, "erc20": 0.3, "call": 0.15, "swap": 0.18, "create": 0.02}, type1=0.01,
        gas_limit=15_000_000),
    # August 2021: about 1.2 million a day; EIP-1559 adopted by about half at first.
    Era("london", 12_965_000, 180, empty=0.01,
        kinds={"transfer": 0.35, "erc20": 0.3, "call": 0.15, "swap": 0.18, "create": 0.02}, type1=0.01, type2=0.5),
    # April-August 2023: about 1.05 million a day at 7,150 blocks a day.
    Era("shanghai", 17_034_870, 150, recorded=True),
    # March 2024: about 1.2 million a day; a blob transaction or two a block (estimate).
    Era("cancun", 19_426_587, 170, recorded=True, blob_transactions=1.5),
    # May 2025: about 1.4 million a day; more blobs, and a few set-code transactions.
    Era("prague", 22_431_084, 195, recorded=True, blob_transactions=3, set_code_transactions=1, gas_limit=36_000_000),
)


def era_of(number: int) -> Era:
    era = ERAS[0]
    for candidate in ERAS:
        if candidate.start <= number:
            era = candidate
    return era


def timestamp_of(number: int) -> int:
    if number >= MERGE:
        return MERGE_TIMESTAMP + 12 * (number - MERGE)
    return GENESIS_TIMESTAMP + (number * (MERGE_TIMESTAMP - GENESIS_TIMESTAMP)) // MERGE


def block_hash(number: int) -> str:
    """Not the header's hash: keccak of the height, the height in its last 8 bytes."""
    if number < 0:
        return "0x" + "00" * 32
    return "0x" + (rlp_codec.keccak(b"mainnet-node block" + number.to_bytes(8, "big"))[:24]
                   + number.to_bytes(8, "big")).hex()


def _recorded_shapes() -> list[Shape]:
    recorded = fixtures.load("mainnet-18000000")
    shapes = []
    for tx, receipt in zip(recorded["block"]["transactions"], recorded["receipts"]):
        logs = [(len(entry["topics"]), (len(entry["data"]) - 2) // 2) for entry in receipt["logs"]]
        kind = "legacy" if tx["type"] == "0x0" else "dynamic"
        shapes.append((kind, tx["to"] is None, (len(tx["input"]) - 2) // 2, logs, receipt["status"] == "0x0"))
    return shapes


def _mixed_shape(rng: random.Random, kind: str) -> Shape:
    failed = rng.random() < 0.02
    if kind == "transfer":
        return kind, False, 0, [], False
    if kind == "erc20":
        return kind, False, 68, [] if failed else [(3, 32)], failed
    if kind == "swap":
        return kind, False, rng.randrange(200, 1200), [] if failed else [
            (rng.choice((1, 2, 3, 3, 3, 4)), rng.choice((32, 64, 128, 160)))
            for _ in range(rng.randrange(4, 9))], failed
    if kind == "create":
        return kind, True, rng.randrange(1000, 12_000), [(3, 32)] if rng.random() < 0.3 else [], False
    return kind, False, rng.randrange(36, 600), [] if failed else [
        (rng.choice((1, 2, 3, 4)), rng.choice((0, 32, 64, 96))) for _ in range(rng.choice((0, 1, 1, 2, 3)))], failed


@dataclass(frozen=True)
class _Call:
    """A transaction as its call tree must show it (`traces.check_against_block`)."""

    sender: str
    to: str | None
    created: str | None  # the receipt's contractAddress
    value: str
    input: str
    failed: bool
    gas: int
    gas_used: int
    emitters: tuple[str, ...]  # its logs' addresses, each once, in order


@dataclass(frozen=True)
class _Tree:
    """A recorded transaction's call tree (`callTracer`), and the accounts its CALLs that were
    not undone ran in, below the top frame (each once, in order): where logs can come from."""

    frame: dict[str, Any]
    emitters: tuple[str, ...]


TRACES_FIXTURE = "traces/erigon-rpc-tests-debug_traceBlockByNumber-callTracer-24298763"
_TREES: list[_Tree] = []


def _recorded_trees() -> list[_Tree]:
    """The call trees of the transactions with calldata of recorded mainnet block 24,298,763."""
    if not _TREES:
        answer = fixtures.load(TRACES_FIXTURE)[0]["response"]["result"]
        trees = []
        for item in answer:
            top = item["result"]
            if top["input"] == "0x":
                continue
            found: dict[str, None] = {}
            outside = {top["from"], top.get("to")}

            def walk(frame: dict[str, Any], undone: bool) -> None:
                for call in frame.get("calls", ()):
                    gone = undone or "error" in call
                    if call["type"] == "CALL" and not gone and call["to"] not in outside:
                        found[call["to"]] = None
                    walk(call, gone)

            walk(top, False)  # the top frame's own error is the transaction's (`_call_tree` sets it)
            trees.append(_Tree(top, tuple(found)))
        _TREES[:] = trees
    return _TREES


def _hex_size(data: str | None) -> int:
    return 0 if not data else (len(data) - 2) // 2


def _call_tree(rng: random.Random, call: _Call, trees: list[_Tree]) -> dict[str, Any]:
    """A callTracer frame for `call`: a plain transfer's is its top frame alone; a contract call's
    or creation's has the shape of a recorded tree (`_recorded_trees`: its types, depths, errors,
    gas, value keys, input and output sizes; fresh addresses and data), picked at random. The
    accounts its CALLs ran in are given the addresses of the transaction's logs, in order; a log's
    address left over is given a CALL frame of its own, below the top one."""
    context = call.to if call.to is not None else call.created
    needed = [a for a in call.emitters if a != context]
    recorded = rng.choice(trees) if call.to is None or call.input != "0x" else None
    mapping: dict[str | None, str] = {}
    if recorded is not None:
        mapping[recorded.frame["from"]] = call.sender
        if context is not None:
            mapping[recorded.frame["to"]] = context
        mapping |= dict(zip(recorded.emitters, needed))

    def address(recorded_address: str) -> str:
        if recorded_address not in mapping:
            mapping[recorded_address] = "0x" + rng.randbytes(20).hex()
        return mapping[recorded_address]

    def rewrite(frame: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"from": address(frame["from"]), "gas": frame["gas"], "gasUsed": frame["gasUsed"]}
        if "to" in frame:
            out["to"] = address(frame["to"])
        out["input"] = "0x" + _calldata(rng, _hex_size(frame.get("input"))).hex()
        if "output" in frame:
            out["output"] = "0x" + _calldata(rng, _hex_size(frame["output"])).hex()
        for key in ("error", "revertReason"):
            if key in frame:
                out[key] = frame[key]
        if frame.get("calls"):
            out["calls"] = [rewrite(c) for c in frame["calls"]]
        if "value" in frame:
            out["value"] = frame["value"]
        out["type"] = frame["type"]
        return out

    top = rewrite(recorded.frame) if recorded is not None else {}
    size = _hex_size(call.input)
    intrinsic = 21_000 + 16 * size + (32_000 if call.to is None else 0)
    calls = top.pop("calls", [])
    for key in ("to", "output", "error", "revertReason", "value", "type"):
        top.pop(key, None)
    top |= {"from": call.sender, "gas": hex(max(call.gas - intrinsic, 0)), "gasUsed": hex(call.gas_used)}
    if context is not None:
        top["to"] = context
    top["input"] = call.input
    if call.failed:
        top["error"] = "execution reverted"
    elif call.to is None:
        top["output"] = "0x" + _calldata(rng, size // 3).hex()  # the deployed code
    elif recorded is not None and "output" in recorded.frame:
        top["output"] = "0x" + _calldata(rng, _hex_size(recorded.frame["output"])).hex()
    for emitter in needed[len(recorded.emitters) if recorded is not None else 0:]:
        used = rng.randrange(3_000, 40_000)
        calls.append({"from": context, "gas": hex(used + rng.randrange(0, 100_000)), "gasUsed": hex(used),
                      "to": emitter, "input": "0x" + _calldata(rng, 68).hex(),
                      "output": "0x" + _calldata(rng, 32).hex(), "value": "0x0", "type": "CALL"})
    if calls:
        top["calls"] = calls
    top["value"] = call.value
    top["type"] = "CREATE" if call.to is None else "CALL"
    return top


# Markers in a template's JSON, each replaced by a block's own value: {{bh}} its hash, {{ph}} its
# parent's, {{bn}} its number, {{ts}} its timestamp, {{sr}} its state root, {{tr}} its
# transactions root, {{wr}} its withdrawals root, {{r8}} the last 16 hex digits of every
# transaction's r, {{tN}} transaction N's hash, {{wN}} withdrawal N's index.
_MARKER = re.compile(rb"\{\{(\w+)\}\}")


_TX_MARKERS = [b"t%d" % i for i in range(2048)]
_WITHDRAWAL_MARKERS = [b"w%d" % k for k in range(WITHDRAWALS_PER_BLOCK)]


def _pick(templates: list[Template], number: int) -> Template:
    # A multiplicative hash of the height: neighbouring blocks get unrelated templates.
    return templates[((number * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) % len(templates)]


def _block_hashes(template: Template, number: int) -> tuple[bytes, bytes, bytes]:
    """Block `number`'s transactions root, withdrawals root (or b"") and its transactions'
    hashes, each as 0x-prefixed hex, the hashes joined (66 bytes each)."""
    r8 = number.to_bytes(8, "big")
    encodings = [before + r8 + after for before, after in template.splices]
    hashes = b"".join([b"0x" + rlp_codec.keccak(e).hex().encode() for e in encodings])
    withdrawals_root = b""
    if template.withdrawals:
        first_index = WITHDRAWALS_PER_BLOCK * (number - 17_034_870)
        withdrawals_root = b"0x" + ordered_trie.ordered_trie_root([
            rlp_codec.rlp_list(rlp_codec.rlp_int(first_index + k) + rest)
            for k, rest in enumerate(template.withdrawals)]).hex().encode()
    return b"0x" + ordered_trie.ordered_trie_root(encodings).hex().encode(), withdrawals_root, hashes


# Blocks a forked process computes at a time (`precompute`).
PRECOMPUTE_CHUNK = 1_000
_NODE: MainnetNode | None = None  # in a process forked by `precompute`, the node it computes for


def _forked(node: MainnetNode) -> None:
    global _NODE
    _NODE = node


def _compute_forked(numbers: range) -> list[tuple[bytes, bytes, bytes]]:
    assert _NODE is not None
    return _NODE._compute(numbers)


def _split(value: Any) -> tuple[list[bytes], list[bytes]]:
    """The JSON of `value` cut at its markers: (the text between them, the markers' names)."""
    parts = _MARKER.split(orjson.dumps(value))
    return parts[0::2], parts[1::2]


def _render(split: tuple[list[bytes], list[bytes]], values: dict[bytes, bytes]) -> list[bytes]:
    """The pieces of the JSON with the markers filled in (joined once, by the caller: a block's
    JSON is up to 2 MB, and each copy of it costs more than the filling in)."""
    texts, names = split
    out = [b""] * (2 * len(texts) - 1)
    out[0::2] = texts
    out[1::2] = [values[name] for name in names]
    return out


class Template:
    """One pre-built block of an era: its JSON cut at the markers (full, hashes-only, receipts),
    and what a block's transactions root and withdrawals root are recomputed from."""

    def __init__(self, era: Era, index: int, shapes: list[Shape]) -> None:
        rng = random.Random(f"{era.name}/{index}")
        count = 0 if rng.random() < era.empty else max(1, round(rng.gauss(era.transactions, era.transactions * 0.3)))
        post_london = era.start >= 12_965_000
        byzantium = era.start >= 4_370_000
        txs, receipts = [], []
        self.calls: list[_Call] = []
        self._frames: list[bytes] | None = None  # each transaction's callTracer frame, as JSON (`trace_frames`)
        self._era, self._index = era.name, index
        self.splices: list[tuple[bytes, bytes]] = []  # each encoding around the 8 bytes of r that vary
        cumulative = 0
        base_fee = rng.randrange(5, 60) * 10**9 if post_london else None
        blobs = _count(rng, era.blob_transactions)
        set_codes = _count(rng, era.set_code_transactions)
        for i in range(count):
            shape = rng.choice(shapes) if era.recorded else _mixed_shape(rng, _weighted(rng, era.kinds))
            kind, creation, size, logs, failed = shape
            tx_type = _tx_type(rng, era, kind)
            if tx_type == 2 and not creation and blobs:
                tx_type, blobs = 3, blobs - 1
            elif tx_type == 2 and not creation and set_codes:
                tx_type, set_codes = 4, set_codes - 1
            sender = "0x" + rng.randbytes(20).hex()
            to = None if creation else "0x" + rng.randbytes(20).hex()
            gas_used = 21_000 + 16 * size + 20_000 * len(logs) + (32_000 if creation else 0)
            cumulative += gas_used
            sentinel = rng.randbytes(8)
            r_prefix = bytes([rng.randrange(0x10, 0x100)]) + rng.randbytes(23)
            tx: dict[str, Any] = {
                "blockHash": "{{bh}}", "blockNumber": "{{bn}}", "blockTimestamp": "{{ts}}", "from": sender,
                "gas": hex(gas_used + rng.randrange(0, 50_000)), "hash": f"{{{{t{i}}}}}",
                "input": "0x" + _calldata(rng, size).hex(), "nonce": hex(rng.randrange(0, 200_000)), "to": to,
                "transactionIndex": hex(i), "value": hex(rng.choice((0, 0, rng.randrange(10**15, 10**19)))),
                "type": hex(tx_type),
                "r": "0x" + (r_prefix + sentinel).hex(), "s": hex(rng.randrange(1, 2**255)),
            }
            price = (base_fee or 0) + rng.randrange(1, 3 * 10**9) if post_london else rng.randrange(1, 100) * 10**9
            if tx_type == 0:
                tx["gasPrice"] = hex(price)
                if era.start >= SPURIOUS_DRAGON:
                    tx["chainId"] = hex(CHAIN_ID)
                    tx["v"] = hex(CHAIN_ID * 2 + 35 + rng.randrange(2))
                else:
                    tx["v"] = hex(27 + rng.randrange(2))
            else:
                parity = rng.randrange(2)
                tx |= {"chainId": hex(CHAIN_ID), "v": hex(parity), "yParity": hex(parity), "accessList": (
                    [{"address": "0x" + rng.randbytes(20).hex(),
                      "storageKeys": ["0x" + rng.randbytes(32).hex() for _ in range(rng.randrange(3))]}]
                    if rng.random() < 0.1 or tx_type == 1 else [])}
                if tx_type == 1:
                    tx["gasPrice"] = hex(price)
                else:
                    tx |= {"gasPrice": hex(price), "maxFeePerGas": hex(price + 10**10),
                           "maxPriorityFeePerGas": hex(price - (base_fee or 0))}
                if tx_type == 3:
                    tx |= {"maxFeePerBlobGas": hex(rng.randrange(1, 10**10)), "blobVersionedHashes": [
                        "0x01" + rng.randbytes(31).hex() for _ in range(rng.randrange(1, 7))]}
                if tx_type == 4:
                    tx["authorizationList"] = [{
                        "chainId": hex(CHAIN_ID), "address": "0x" + rng.randbytes(20).hex(),
                        "nonce": hex(rng.randrange(100)), "yParity": hex(rng.randrange(2)),
                        "r": hex(rng.randrange(1, 2**255)), "s": hex(rng.randrange(1, 2**255))}]
            encoded = json_encodings.encode_transaction_json(tx)
            at = encoded.index(sentinel)
            assert encoded.count(sentinel) == 1
            self.splices.append((encoded[:at], encoded[at + 8:]))
            tx["r"] = "0x" + r_prefix.hex() + "{{r8}}"
            txs.append(tx)

            receipt: dict[str, Any] = {
                "blockHash": "{{bh}}", "blockNumber": "{{bn}}",
                "contractAddress": "0x" + rng.randbytes(20).hex() if creation and not failed else None,
                "cumulativeGasUsed": hex(cumulative), "effectiveGasPrice": hex(price), "from": sender,
                "gasUsed": hex(gas_used), "logs": [], "logsBloom": "", "to": to,
                "transactionHash": f"{{{{t{i}}}}}", "transactionIndex": hex(i), "type": hex(tx_type),
            }
            if byzantium:
                receipt["status"] = "0x0" if failed else "0x1"
            else:
                receipt["root"] = "0x" + rng.randbytes(32).hex()
            if tx_type == 3:
                receipt |= {"blobGasUsed": hex(131_072 * len(tx["blobVersionedHashes"])),
                            "blobGasPrice": hex(rng.randrange(1, 10**9))}
            for topics, data in logs:
                receipt["logs"].append(self._log(rng, topics, data, i, to))
            receipts.append(receipt)
            # What the transaction's call tree is made to agree with (`Template.trace_frames`).
            self.calls.append(_Call(sender, to, receipt["contractAddress"], tx["value"], tx["input"], failed,
                                    int(tx["gas"], 16), gas_used,
                                    tuple(dict.fromkeys(entry["address"] for entry in receipt["logs"]))))
        log_index = 0
        for receipt in receipts:
            for entry in receipt["logs"]:
                entry["logIndex"] = hex(log_index)
                log_index += 1
        bloom = 0
        self.receipt_encodings = []
        for tx, receipt in zip(txs, receipts):
            encoded, receipt_bloom = json_encodings.encode_receipt_json(receipt, int(tx["type"], 16))
            self.receipt_encodings.append(encoded)
            receipt["logsBloom"] = "0x" + receipt_bloom.hex()
            bloom |= int.from_bytes(receipt_bloom, "big")
        self.transactions = count
        self.logs = log_index

        header: dict[str, Any] = {
            "baseFeePerGas": hex(base_fee) if base_fee is not None else None,
            "difficulty": "0x0" if era.start >= MERGE else hex(rng.randrange(10**12, 10**16)),
            "extraData": "0x" + rng.randbytes(rng.randrange(0, 33)).hex(),
            "gasLimit": hex(max(era.gas_limit, cumulative)),
            "gasUsed": hex(cumulative), "hash": "{{bh}}", "logsBloom": "0x" + bloom.to_bytes(256, "big").hex(),
            "miner": "0x" + rng.randbytes(20).hex(), "mixHash": "0x" + rng.randbytes(32).hex(),
            "nonce": "0x0000000000000000" if era.start >= MERGE else "0x" + rng.randbytes(8).hex(),
            "number": "{{bn}}", "parentHash": "{{ph}}",
            "receiptsRoot": "0x" + ordered_trie.ordered_trie_root(self.receipt_encodings).hex(),
            "sha3Uncles": EMPTY_UNCLES, "size": hex(0), "stateRoot": "{{sr}}", "timestamp": "{{ts}}",
            "transactionsRoot": "{{tr}}", "uncles": [],
        }
        if base_fee is None:
            del header["baseFeePerGas"]
        self.withdrawals: list[bytes] = []  # each withdrawal's encoding after its index
        if era.start >= 17_034_870:
            withdrawals = []
            for k in range(WITHDRAWALS_PER_BLOCK):
                w = {"address": "0x" + rng.randbytes(20).hex(), "amount": hex(rng.randrange(10**6, 10**8)),
                     "index": f"{{{{w{k}}}}}", "validatorIndex": hex(rng.randrange(1, 1_500_000))}
                withdrawals.append(w)
                self.withdrawals.append(rlp_codec.rlp_int(int(w["validatorIndex"], 16)) + rlp_codec.rlp_string(
                    bytes.fromhex(w["address"][2:])) + rlp_codec.rlp_int(int(w["amount"], 16)))
            header |= {"withdrawals": withdrawals, "withdrawalsRoot": "{{wr}}"}
        if era.start >= 19_426_587:
            blob_gas = sum(int(r.get("blobGasUsed", "0x0"), 16) for r in receipts)
            header |= {"blobGasUsed": hex(blob_gas), "excessBlobGas": hex(rng.randrange(0, 10**7)),
                       "parentBeaconBlockRoot": "0x" + rng.randbytes(32).hex()}
        if era.start >= 22_431_084:
            header["requestsHash"] = "0x" + rlp_codec.keccak(b"").hex()
        # The size field: the JSON's, a stand-in for the RLP's (about the same order).
        header["size"] = hex(len(orjson.dumps(header | {"transactions": txs})) // 2)
        self.full = _split(header | {"transactions": txs})
        self.hashes = _split(header | {"transactions": [f"{{{{t{i}}}}}" for i in range(count)]})
        self.receipts = _split(receipts)

    def trace_frames(self) -> list[bytes]:
        """Each transaction's call tree as `callTracer` gives it (`_call_tree`), as JSON: built the
        first time, then kept (the caller holds the node's lock)."""
        if self._frames is None:
            rng = random.Random(f"{self._era}/{self._index}/traces")
            trees = _recorded_trees()
            self._frames = [orjson.dumps(_call_tree(rng, call, trees)) for call in self.calls]
        return self._frames

    @staticmethod
    def _log(rng: random.Random, topics: int, data: int, index: int, to: str | None) -> dict[str, Any]:
        if topics == 3 and data == 32:  # an ERC-20 Transfer, as most such logs are
            topic_list = [TRANSFER_TOPIC] + ["0x" + "00" * 12 + rng.randbytes(20).hex() for _ in range(2)]
        else:
            topic_list = ["0x" + rng.randbytes(32).hex() for _ in range(topics)]
        address = to if to is not None and rng.random() < 0.3 else "0x" + rng.randbytes(20).hex()
        return {"address": address, "blockHash": "{{bh}}", "blockNumber": "{{bn}}", "blockTimestamp": "{{ts}}",
                "data": "0x" + _calldata(rng, data).hex(), "logIndex": "", "removed": False, "topics": topic_list,
                "transactionHash": f"{{{{t{index}}}}}", "transactionIndex": hex(index)}


def _count(rng: random.Random, mean: float) -> int:
    """A whole count of mean `mean`: its floor, plus one with the fraction's chance."""
    whole = int(mean)
    return whole + (rng.random() < mean - whole)


def _weighted(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), list(weights.values()))[0]


def _tx_type(rng: random.Random, era: Era, kind: str) -> int:
    if era.recorded:
        return 0 if kind == "legacy" else 2
    roll = rng.random()
    if roll < era.type1:
        return 1
    return 2 if roll < era.type1 + era.type2 else 0


def _calldata(rng: random.Random, size: int) -> bytes:
    """Calldata as contracts get it: 32-byte words, half of them mostly zero padding."""
    out = bytearray(rng.randbytes(size))
    for word in range(4, size - 32, 64):
        out[word:word + 24] = bytes(24)
    return bytes(out)


class MainnetNode:
    """Blocks `first..last` (eth_blockNumber is `last`, and so are "latest", "finalized" and
    "safe"), served on loopback at `port` (0: a free one) from a thread of its own. Methods:
    eth_chainId, net_version, eth_blockNumber, eth_getBlockByNumber and eth_getBlockByHash (full
    or hashes only), eth_getBlockReceipts (by hash, number, tag or EIP-1898 object),
    eth_getTransactionReceipt (of a block served recently), debug_traceBlockByHash,
    debug_traceBlockByNumber and debug_traceTransaction (callTracer only). A block outside the
    range is null (its traces an error); another method is go-ethereum's -32601."""

    def __init__(self, first: int, last: int, *, templates: int = 64, port: int = 0, cache_blocks: int = 4096) -> None:
        if first < 0 or last < first:
            raise ValueError(f"blocks {first}..{last}: the range is empty or negative")
        if templates < 1:
            raise ValueError(f"templates must be at least 1, not {templates}")
        self.first, self.last, self.templates = first, last, templates
        self._templates: dict[str, list[Template]] = {}
        self._shapes: list[Shape] | None = None
        self._computed: OrderedDict[int, tuple[bytes, bytes, bytes]] = OrderedDict()  # block -> `_hashes`
        self.cache_blocks: int | None = cache_blocks  # None: every block kept (`precompute`)
        self.lock = threading.Lock()
        self.loopback = LoopbackServer(self._serve, port=port)
        self.url = self.loopback.url

    def _serve(self, request: BaseHTTPRequestHandler, body: bytes) -> None:
        answers = self.answers(body)
        try:
            request.send_response(200)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(sum(len(p) for answer in answers for p in answer)))
            request.end_headers()
            for answer in answers:  # an answer at a time: no copy of the whole batch
                request.wfile.write(b"".join(answer))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout)

    def close(self) -> None:
        self.loopback.close()

    def __enter__(self) -> "MainnetNode":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- blocks -----------------------------------------------------------------------------------

    def template(self, number: int) -> Template:
        era = era_of(number)
        with self.lock:
            built = self._templates.get(era.name)
            if built is None:
                if era.recorded and self._shapes is None:
                    self._shapes = _recorded_shapes()
                built = [Template(era, i, self._shapes or []) for i in range(self.templates)]
                self._templates[era.name] = built
        return _pick(built, number)

    def precompute(self, processes: int | None = None) -> None:
        """Computes every block's hashes and roots now (about 4 ms of CPU a block of 150
        transactions), in `processes` forked processes (one a core by default), so that serving
        them costs only the filling in of the markers; kept for the node's life (about 10 KB a
        block). The templates are built here first: a forked process only computes, taking no
        lock (one a request thread held at the fork would never be released there) and keeping
        nothing."""
        with self.lock:
            self.cache_blocks = None  # before computing: a bounded cache would keep only the last blocks
        for era in ERAS:
            if self.first <= max(era.start, self.first) <= self.last:
                self.template(max(era.start, self.first))
        numbers = range(self.first, self.last + 1)
        processes = min(processes or os.cpu_count() or 1, max(1, len(numbers) // PRECOMPUTE_CHUNK))
        chunks = [numbers[i:i + PRECOMPUTE_CHUNK] for i in range(0, len(numbers), PRECOMPUTE_CHUNK)]
        if processes == 1:
            computed = map(self._compute, chunks)
        else:
            pool = multiprocessing.get_context("fork").Pool(processes, initializer=_forked, initargs=(self,))
            computed = pool.imap(_compute_forked, chunks)
        try:
            for chunk, hashes in zip(chunks, computed):
                with self.lock:
                    self._computed.update(zip(chunk, hashes))
        finally:
            if processes > 1:
                pool.terminate()

    def _compute(self, numbers: range) -> list[tuple[bytes, bytes, bytes]]:
        """`_block_hashes` of each block, the templates built already (`precompute`)."""
        built = self._templates
        return [_block_hashes(_pick(built[era_of(n).name], n), n) for n in numbers]

    def _hashes(self, number: int) -> tuple[bytes, bytes, bytes]:
        """`_block_hashes` of block `number`, kept for the next time."""
        with self.lock:
            cached = self._computed.get(number)
            if cached is not None:
                if self.cache_blocks is not None:
                    self._computed.move_to_end(number)
                return cached
        computed = _block_hashes(self.template(number), number)
        with self.lock:
            self._computed[number] = computed
            while self.cache_blocks is not None and len(self._computed) > self.cache_blocks:
                self._computed.popitem(last=False)
        return computed

    def values(self, number: int) -> dict[bytes, bytes]:
        """What block `number`'s markers stand for."""
        transactions_root, withdrawals_root, hashes = self._hashes(number)
        r8 = number.to_bytes(8, "big")
        values = {
            b"bh": block_hash(number).encode(), b"ph": block_hash(number - 1).encode(), b"bn": hex(number).encode(),
            b"ts": hex(timestamp_of(number)).encode(),
            b"sr": ("0x" + rlp_codec.keccak(b"mainnet-node state" + r8).hex()).encode(),
            b"tr": transactions_root, b"r8": r8.hex().encode(), b"wr": withdrawals_root,
        }
        for i in range(len(hashes) // 66):
            values[_TX_MARKERS[i] if i < len(_TX_MARKERS) else b"t%d" % i] = hashes[66 * i:66 * i + 66]
        if withdrawals_root:
            first_index = WITHDRAWALS_PER_BLOCK * (number - 17_034_870)
            for k in range(WITHDRAWALS_PER_BLOCK):
                values[_WITHDRAWAL_MARKERS[k]] = hex(first_index + k).encode()
        return values

    def block(self, number: int, full: bool) -> bytes:
        return b"".join(self._block(number, full))

    def receipts(self, number: int) -> bytes:
        return b"".join(self._receipts(number))

    def _block(self, number: int, full: bool) -> list[bytes]:
        if not self.first <= number <= self.last:
            return [b"null"]
        template = self.template(number)
        return _render(template.full if full else template.hashes, self.values(number))

    def _receipts(self, number: int) -> list[bytes]:
        if not self.first <= number <= self.last:
            return [b"null"]
        return _render(self.template(number).receipts, self.values(number))

    def _find(self, tx_hash: str) -> tuple[int, int] | None:
        """The block and position of a transaction of a block computed so far: found by
        scanning, which is slow but rare (the indexer asks by transaction only as a fallback)."""
        wanted = tx_hash.lower().encode()
        with self.lock:
            computed = list(self._computed.items())
        for number, (_, _, hashes) in computed:
            at = hashes.find(wanted)
            if at >= 0 and at % 66 == 0:
                return number, at // 66
        return None

    def receipt(self, tx_hash: str) -> bytes:
        """The receipt of a transaction of a block computed so far (a fallback the indexer uses
        only where eth_getBlockReceipts is missing)."""
        found = self._find(tx_hash)
        if found is None:
            return b"null"
        return orjson.dumps(orjson.loads(self.receipts(found[0]))[found[1]])

    # --- traces -----------------------------------------------------------------------------------

    def trace_frames(self, number: int) -> list[bytes]:
        """The callTracer frame of each transaction of block `number`, as JSON."""
        template = self.template(number)
        with self.lock:
            return template.trace_frames()

    def prepare_traces(self) -> None:
        """Builds the call trees of every template built so far (`Template.trace_frames`), so that
        the first blocks traced do not pay for them."""
        with self.lock:
            for built in self._templates.values():
                for template in built:
                    template.trace_frames()

    def _block_traces(self, number: int) -> list[bytes]:
        """`debug_traceBlockByHash` with `callTracer`: `[{"txHash", "result": frame}, ...]`."""
        if not self.first <= number <= self.last:
            raise ValueError(f"block {number} not found")
        frames = self.trace_frames(number)
        hashes = self._hashes(number)[2]
        out = [b"["]
        for i, frame in enumerate(frames):
            out += [b'{"txHash":"', hashes[66 * i:66 * i + 66], b'","result":', frame, b"},"]
        if frames:
            out[-1] = b"}"
        out.append(b"]")
        return out

    def _transaction_trace(self, tx_hash: str) -> list[bytes]:
        found = self._find(tx_hash)
        if found is None:
            raise ValueError(f"transaction {tx_hash} not found")
        return [self.trace_frames(found[0])[found[1]]]

    # --- JSON-RPC ---------------------------------------------------------------------------------

    def handle(self, body: bytes) -> bytes:
        """The answer to one POSTed body."""
        return b"".join(p for answer in self.answers(body) for p in answer)

    def answers(self, body: bytes) -> list[list[bytes]]:
        """The answer to one POSTed body, as the pieces of each call's answer (with the batch's
        brackets and commas)."""
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return [[b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}']]
        if not isinstance(request, list):
            return [self._answer(request)]
        answers = [self._answer(call) for call in request]
        for answer in answers[:-1]:
            answer.append(b",")
        return [[b"["], *answers, [b"]"]]

    def _answer(self, call: Any) -> list[bytes]:
        id_ = orjson.dumps(call.get("id") if isinstance(call, dict) else None)
        try:
            result = self._result(call["method"], call.get("params") or [])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            error = {"code": -32602, "message": f"invalid argument: {exc}"}
            return [b'{"jsonrpc":"2.0","id":' + id_ + b',"error":' + orjson.dumps(error) + b"}"]
        if result is None:
            error = {"code": -32601, "message": f"the method {call['method']} does not exist/is not available"}
            return [b'{"jsonrpc":"2.0","id":' + id_ + b',"error":' + orjson.dumps(error) + b"}"]
        return [b'{"jsonrpc":"2.0","id":' + id_ + b',"result":', *result, b"}"]

    def _result(self, method: str, params: list[Any]) -> list[bytes] | None:
        if method == "eth_getBlockByNumber":
            return self._block(self._number(params[0]), bool(params[1]))
        if method == "eth_getBlockByHash":
            return self._block(self._by_hash(params[0]), bool(params[1]))
        if method == "eth_getBlockReceipts":
            which = params[0]
            if isinstance(which, dict):
                which = which.get("blockHash") or which["blockNumber"]
            return self._receipts(self._by_hash(which) if len(which) == 66 else self._number(which))
        if method == "eth_getTransactionReceipt":
            return [self.receipt(params[0])]
        if method in ("debug_traceBlockByHash", "debug_traceBlockByNumber", "debug_traceTransaction"):
            options = params[1] if len(params) > 1 else {}
            if not isinstance(options, dict) or options.get("tracer") != "callTracer":
                raise ValueError("only the callTracer is served here ({\"tracer\": \"callTracer\"})")
            if method == "debug_traceTransaction":
                return self._transaction_trace(params[0])
            return self._block_traces(self._by_hash(params[0]) if method == "debug_traceBlockByHash"
                                      else self._number(params[0]))
        if method == "eth_blockNumber":
            return [b'"%s"' % hex(self.last).encode()]
        if method == "eth_chainId":
            return [b'"%s"' % hex(CHAIN_ID).encode()]
        if method == "net_version":
            return [b'"%d"' % CHAIN_ID]
        return None

    def _number(self, value: str) -> int:
        if value in ("latest", "finalized", "safe", "pending"):
            return self.last
        if value == "earliest":
            return self.first
        return int(value, 16)

    def _by_hash(self, value: str) -> int:
        """The height a hash of `block_hash` carries, or -1 if it is none of them."""
        number = int(value[-16:], 16)
        return number if block_hash(number) == value.lower() else -1


class NodeProcess:
    """`scripts/mainnet_node` run in a process of its own (so that its CPU time is its own), with
    every block precomputed before it answers (with `traces`, every call tree built too):
    `url`, `proc`, `first`, `last`."""

    def __init__(self, first: int, blocks: int, *, templates: int = 64, precompute: bool = True,
                 traces: bool = False) -> None:
        self.first, self.last = first, first + blocks - 1
        args = ["--first", str(first), "--blocks", str(blocks), "--port", "0", "--templates", str(templates)]
        self.proc = subprocess.Popen([sys.executable, "-m", "indexer.testing.mainnet_node", *args,
                                      *(["--precompute"] if precompute else []), *(["--traces"] if traces else [])],
                                     stdout=subprocess.PIPE, text=True)
        self.url = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not self.url:
            self.close()
            raise RuntimeError(f"the mainnet-shaped node exited with {self.proc.returncode} before serving")

    def head(self) -> int:
        return self.last

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> "NodeProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Arguments(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> None:
    ap = _Arguments(prog="mainnet_node", description=__doc__.split("\n\n")[0])
    ap.add_argument("--first", type=int, default=18_000_000, help="height of the first block (default 18000000)")
    ap.add_argument("--blocks", type=int, default=10_000, help="how many blocks (default 10000)")
    ap.add_argument("--port", type=int, default=8545, help="port on 127.0.0.1 (0: a free one; default 8545)")
    ap.add_argument("--templates", type=int, default=64, help="distinct pre-built blocks per era (default 64)")
    ap.add_argument("--precompute", action="store_true",
                    help="compute every block's hashes before serving (about 4 ms a dense block), so that serving costs"
                         " only filling them in")
    ap.add_argument("--traces", action="store_true",
                    help="build every template's call trees before serving (else the first block traced of each era"
                    " builds them)")
    args = ap.parse_args(argv)
    if args.first < 0:
        ap.error(f"--first must be 0 or more, not {args.first}")
    if args.blocks < 1:
        ap.error(f"--blocks must be at least 1, not {args.blocks}")
    if not 0 <= args.port <= 65535:
        ap.error(f"--port must be 0..65535, not {args.port}")
    if args.templates < 1:
        ap.error(f"--templates must be at least 1, not {args.templates}")
    try:
        node = MainnetNode(args.first, args.first + args.blocks - 1, templates=args.templates, port=args.port)
    except OSError as exc:
        ap.exit(1, f"mainnet_node: error: cannot listen on port {args.port}: {exc.strerror}\n")
    # Built before the URL is printed, so that nothing measured afterwards pays for it.
    node.template(args.first)
    node.template(args.first + args.blocks - 1)
    if args.precompute:
        node.precompute()
    if args.traces:
        node.prepare_traces()
    print(node.url, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    node.close()


if __name__ == "__main__":
    main(sys.argv[1:])
