"""`indexer.chaindata.roots` on real answers of real chains (tests/fixtures, provenance in its README.md):
every root recomputed equals the header's, every encoding equals what the `rlp` package makes of
the same fields, and one hex digit changed anywhere that a root commits to is a RootMismatch
naming that root. No database, no node, no network.

The reference encodings and the reference trie here are independent of the project's own (roots.py
and the modules under it): `rlp.encode` of the fields read from the JSON, and a naive
Merkle-Patricia trie over nibble lists.
"""

from __future__ import annotations

import copy
import os
import random
from typing import Any, Callable

import pytest
import rlp

from indexer.base.errors import ChainDataError
from indexer.chaindata import encodings, json_encodings, ordered_trie, rlp_codec, roots
from indexer.chaindata.roots import RootMismatch, check_block
from indexer.testing import fixtures

NAMES = fixtures.names()


@pytest.fixture(autouse=True, params=["native", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: with the C check in front (what a worker runs) and with the Python check
    alone (an install without a compiler); tests/unit/test_native_roots.py checks the C one was
    built."""
    if request.param == "python":
        monkeypatch.setattr(roots, "_native_roots", None)
    elif roots._native_roots is None:
        pytest.fail("indexer/chaindata/_native_roots.c is not built: run scripts/setup-venv (it needs a C compiler)")
    return request.param
# Blocks proven whole; every mainnet block must be. Any other recorded block must be proven or
# given a reason, never raise.
PROVEN_OTHERS = {"arbitrum-sepolia-185232421", "execution-apis-20", "execution-apis-45",
                 "optimism-goerli-5003318", "base-goerli-1041847", "optimism-sepolia-4089330"}


def expected_proven(name: str) -> bool:
    return name.startswith("mainnet-") or name in PROVEN_OTHERS


def load(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    recorded = fixtures.load(name)  # a fresh copy every time: tests may change it
    return recorded["block"], recorded["receipts"]


def number(block: dict[str, Any]) -> int:
    return int(block["number"], 16)


# --- independent references ------------------------------------------------------------------------

keccak = rlp_codec.keccak


def hb(x: str | None) -> bytes:
    return bytes.fromhex(x[2:]) if x and x != "0x" else b""


def q(x: str) -> int:
    return int(x, 16)


def ref_tx(t: dict[str, Any]) -> bytes:
    typ = q(t["type"]) if "type" in t else 0
    to = hb(t["to"]) if t.get("to") else b""
    al = [[hb(a["address"]), [hb(s) for s in a["storageKeys"]]] for a in t.get("accessList") or []]
    data = hb(t["input"])
    y = q(t["yParity"]) if "yParity" in t else q(t["v"]) if t.get("v") else None  # older nodes: v, no yParity
    if typ == 0:
        return rlp.encode([q(t["nonce"]), q(t["gasPrice"]), q(t["gas"]), to, q(t["value"]), data, q(t["v"]),
                           q(t["r"]), q(t["s"])])
    if typ == 1:
        return b"\x01" + rlp.encode([q(t["chainId"]), q(t["nonce"]), q(t["gasPrice"]), q(t["gas"]), to,
                                     q(t["value"]), data, al, y, q(t["r"]), q(t["s"])])
    if typ == 0x6A:
        return b"\x6a" + rlp.encode([q(t["chainId"]), data])
    if typ == 0x7E:  # op-geth's DepositTx: no signature; isSystemTx false (or absent) is 0
        return b"\x7e" + rlp.encode([hb(t["sourceHash"]), hb(t["from"]), to, q(t.get("mint") or "0x0"),
                                     q(t["value"]), q(t["gas"]), 1 if t.get("isSystemTx") else 0, data])
    fees = [q(t["chainId"]), q(t["nonce"]), q(t["maxPriorityFeePerGas"]), q(t["maxFeePerGas"]), q(t["gas"]), to,
            q(t["value"]), data, al]
    if typ == 2:
        return b"\x02" + rlp.encode(fees + [y, q(t["r"]), q(t["s"])])
    if typ == 3:
        return b"\x03" + rlp.encode(fees + [q(t["maxFeePerBlobGas"]), [hb(h) for h in t["blobVersionedHashes"]],
                                            y, q(t["r"]), q(t["s"])])
    if typ == 4:
        auths = [[q(a["chainId"]), hb(a["address"]), q(a["nonce"]), q(a["yParity"]), q(a["r"]), q(a["s"])]
                 for a in t["authorizationList"]]
        return b"\x04" + rlp.encode(fees + [auths, y, q(t["r"]), q(t["s"])])
    raise AssertionError(f"no reference encoding of type {typ}")


def ref_bloom(logs: list[dict[str, Any]]) -> bytes:
    bloom = bytearray(256)
    for entry in logs:
        for item in [hb(entry["address"])] + [hb(t) for t in entry["topics"]]:
            h = keccak(item)
            for i in (0, 2, 4):
                bit = ((h[i] << 8) | h[i + 1]) & 2047
                bloom[255 - bit // 8] |= 1 << (bit % 8)
    return bytes(bloom)


def ref_receipt(r: dict[str, Any], tx_type: int) -> bytes:
    logs = [[hb(e["address"]), [hb(t) for t in e["topics"]], hb(e["data"])] for e in r["logs"]]
    first = q(r["status"]) if r.get("status") is not None else hb(r["root"])
    fields = [first, q(r["cumulativeGasUsed"]), ref_bloom(r["logs"]), logs]
    typ = q(r["type"]) if "type" in r else tx_type
    if typ == 0x7E and r.get("depositReceiptVersion") is not None:  # OP stack since Canyon
        fields += [q(r["depositNonce"]), q(r["depositReceiptVersion"])]
    body = rlp.encode(fields)
    return body if typ == 0 else bytes([typ]) + body


def ref_withdrawal(w: dict[str, Any]) -> bytes:
    return rlp.encode([q(w["index"]), q(w["validatorIndex"]), hb(w["address"]), q(w["amount"])])


def ref_trie_root(values: list[bytes]) -> bytes:
    """A naive Merkle-Patricia trie of rlp(i) -> values[i], over lists of nibbles."""

    def nibbles(b: bytes) -> list[int]:
        return [n for x in b for n in (x >> 4, x & 15)]

    def hex_prefix(ns: list[int], leaf: bool) -> bytes:
        flag = (2 if leaf else 0) + len(ns) % 2
        ns = ([flag] if len(ns) % 2 else [flag, 0]) + ns
        return bytes(ns[i] * 16 + ns[i + 1] for i in range(0, len(ns), 2))

    def ref(node: Any) -> Any:
        encoded = rlp.encode(node)
        return rlp.decode(encoded) if len(encoded) < 32 else keccak(encoded)

    def build(items: list[tuple[list[int], bytes]], depth: int) -> Any:
        if len(items) == 1:
            key, value = items[0]
            return [hex_prefix(key[depth:], True), value]
        shared = 0
        while all(len(k) > depth + shared for k, _ in items) and len({k[depth + shared] for k, _ in items}) == 1:
            shared += 1
        if shared:
            return [hex_prefix(items[0][0][depth:depth + shared], False), ref(build(items, depth + shared))]
        branch: list[Any] = [b""] * 17
        for n in range(16):
            group = [(k, v) for k, v in items if len(k) > depth and k[depth] == n]
            if group:
                branch[n] = ref(build(group, depth + 1))
        return branch

    if not values:
        return keccak(rlp.encode(b""))
    return keccak(rlp.encode(build([(nibbles(rlp.encode(i)), v) for i, v in enumerate(values)], 0)))


def tx_types(block: dict[str, Any]) -> list[int]:
    return [encodings.transaction_type(t) for t in block["transactions"]]


def receipt_type(types: list[int], i: int) -> int:
    return types[i] if i < len(types) else 0


# --- every recorded block -------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("recompute_blooms", [True, False])
def test_recorded_blocks_are_proven_or_given_a_reason(name: str, recompute_blooms: bool) -> None:
    block, receipts = load(name)
    result = check_block(block, receipts, recompute_blooms=recompute_blooms)
    if expected_proven(name):
        assert result is None, f"{name}: {result}"
    else:
        assert result is None or (isinstance(result, str) and result), name


def test_the_recorded_blocks_cover_the_eras() -> None:
    """What the proofs above cover: every transaction type 0-4, pre-Byzantium receipts,
    withdrawals, a contract creation, pre-EIP-155 signatures, an L2."""
    seen_types: set[int] = set()
    pre_byzantium = withdrawals = creation = pre_eip155 = 0
    for name in NAMES:
        block, receipts = load(name)
        if not expected_proven(name):
            continue
        seen_types.update(tx_types(block))
        pre_byzantium += sum(1 for r in receipts if r.get("root"))
        withdrawals += len(block.get("withdrawals") or ())
        creation += sum(1 for t in block["transactions"] if t.get("to") is None)
        pre_eip155 += sum(1 for t in block["transactions"] if encodings.transaction_type(t) == 0 and q(t["v"]) in (27, 28))
    assert {0, 1, 2, 3, 4, 0x6A, 0x7E} <= seen_types
    assert pre_byzantium and withdrawals and creation and pre_eip155
    assert "mainnet-18000000" in NAMES and "arbitrum-sepolia-185232421" in NAMES
    # OP-stack deposit receipts before Regolith (no nonce) and since Canyon (nonce and version).
    deposits = [r for name in NAMES if expected_proven(name) for r in load(name)[1] if r.get("type") == "0x7e"]
    assert any("depositNonce" not in r for r in deposits) and any("depositReceiptVersion" in r for r in deposits)


@pytest.mark.parametrize("name", NAMES)
def test_roots_recomputed_equal_the_headers(name: str) -> None:
    """Through the hot path, the plain-value path (what `verify --roots` will use from stored
    rows) and the references: the same encodings, byte for byte, and the header's roots."""
    block, receipts = load(name)
    if not expected_proven(name):
        pytest.skip(f"{name} is not proven")
    types = tx_types(block)
    fast = [json_encodings.encode_transaction_json(t) for t in block["transactions"]]
    plain = [encodings.encode_transaction(encodings.transaction_from_json(t)) for t in block["transactions"]]
    reference = [ref_tx(t) for t in block["transactions"]]
    assert fast == plain == reference
    for t, enc in zip(block["transactions"], fast):
        assert "0x" + keccak(enc).hex() == t["hash"]
    header = {k: bytes.fromhex(block[k][2:])
              for k in ("transactionsRoot", "receiptsRoot", "withdrawalsRoot") if k in block}
    assert ordered_trie.ordered_trie_root(fast) == ref_trie_root(reference) == header["transactionsRoot"]

    fast_r = [json_encodings.encode_receipt_json(r, receipt_type(types, i))[0] for i, r in enumerate(receipts)]
    sent_r = [json_encodings.encode_receipt_json(r, receipt_type(types, i), recompute_bloom=False)[0]
              for i, r in enumerate(receipts)]
    plain_r = [encodings.encode_receipt(encodings.receipt_from_json(r, receipt_type(types, i))) for i, r in enumerate(receipts)]
    reference_r = [ref_receipt(r, receipt_type(types, i)) for i, r in enumerate(receipts)]
    assert fast_r == sent_r == plain_r == reference_r
    assert ordered_trie.ordered_trie_root(fast_r) == ref_trie_root(reference_r) == header["receiptsRoot"]

    if "withdrawalsRoot" in header:
        withdrawals = block.get("withdrawals") or []
        fast_w = [json_encodings.encode_withdrawal_json(w) for w in withdrawals]
        assert fast_w == [encodings.encode_withdrawal(encodings.withdrawal_from_json(w)) for w in withdrawals] \
            == [ref_withdrawal(w) for w in withdrawals]
        assert ordered_trie.ordered_trie_root(fast_w) == header["withdrawalsRoot"]


@pytest.mark.parametrize("name", NAMES)
def test_blooms_recomputed_equal_each_receipts_logs_bloom(name: str) -> None:
    block, receipts = load(name)
    for r in receipts:
        logs = encodings.receipt_from_json(r).logs if r.get("status") is not None or r.get("root") else None
        if logs is not None:
            assert encodings.logs_bloom(logs).hex() == r["logsBloom"][2:]
        assert ref_bloom(r["logs"]).hex() == r["logsBloom"][2:]
        _, bloom = json_encodings.encode_receipt_json(r, 0, {})
        assert bloom.hex() == r["logsBloom"][2:]


def test_a_block_with_many_logs_has_its_bloom_ored_per_receipt() -> None:
    block, receipts = load("mainnet-18000000")
    assert sum(len(r["logs"]) for r in receipts) == 291
    header_bloom = 0
    for r in receipts:
        header_bloom |= int(r["logsBloom"], 16)
    assert header_bloom == int(block["logsBloom"], 16)


# --- one hex digit changed ------------------------------------------------------------------------


def flip(value: str) -> str:
    """The same hex string with its last digit changed."""
    last = value[-1]
    return value[:-1] + ("0" if last != "0" else "1")


Mutation = tuple[str, Callable[[dict[str, Any], list[dict[str, Any]]], None], str]

TX_FIELDS = {
    0: ("nonce", "gasPrice", "gas", "to", "value", "input", "v", "r", "s"),
    1: ("chainId", "nonce", "gasPrice", "gas", "to", "value", "input", "yParity", "r", "s"),
    2: ("chainId", "nonce", "maxPriorityFeePerGas", "maxFeePerGas", "gas", "to", "value", "input", "yParity", "r",
        "s"),
    3: ("chainId", "nonce", "maxPriorityFeePerGas", "maxFeePerGas", "gas", "to", "value", "input",
        "maxFeePerBlobGas", "yParity", "r", "s"),
    4: ("chainId", "nonce", "maxPriorityFeePerGas", "maxFeePerGas", "gas", "to", "value", "input", "yParity", "r",
        "s"),
    0x6A: ("chainId", "input"),
    0x7E: ("sourceHash", "from", "to", "mint", "value", "gas", "input"),
}


def mutations(name: str) -> list[Mutation]:
    """Every change to try on a recorded block, and the root it must break."""
    block, receipts = load(name)
    out: list[Mutation] = []
    done_types: set[int] = set()
    for i, tx in enumerate(block["transactions"]):
        kind = encodings.transaction_type(tx)
        if kind in done_types:
            continue
        done_types.add(kind)
        for field in TX_FIELDS[kind]:
            if tx.get(field) in (None, "0x"):
                continue

            def change(b: dict, r: list, i: int = i, field: str = field) -> None:
                b["transactions"][i][field] = flip(b["transactions"][i][field])

            out.append((f"tx {i} (type {kind}) {field}", change, "transactions"))
        for entry in tx.get("accessList") or []:
            def change(b: dict, r: list, i: int = i) -> None:
                e = b["transactions"][i]["accessList"][0]
                e["address"] = flip(e["address"])

            out.append((f"tx {i} access list address", change, "transactions"))
            if entry["storageKeys"]:
                def change(b: dict, r: list, i: int = i) -> None:
                    keys = b["transactions"][i]["accessList"][0]["storageKeys"]
                    keys[0] = flip(keys[0])

                out.append((f"tx {i} access list storage key", change, "transactions"))
            break
        for h in tx.get("blobVersionedHashes") or []:
            def change(b: dict, r: list, i: int = i) -> None:
                hashes = b["transactions"][i]["blobVersionedHashes"]
                hashes[0] = flip(hashes[0])

            out.append((f"tx {i} blob versioned hash", change, "transactions"))
            break
        for auth in tx.get("authorizationList") or []:
            for field in ("chainId", "address", "nonce", "yParity", "r", "s"):
                def change(b: dict, r: list, i: int = i, field: str = field) -> None:
                    a = b["transactions"][i]["authorizationList"][0]
                    a[field] = flip(a[field])

                out.append((f"tx {i} authorization {field}", change, "transactions"))
            break
    if block["transactions"]:
        out.append(("a transaction dropped", lambda b, r: b["transactions"].pop(), "transactions"))
    if len(block["transactions"]) > 1:
        def swap_txs(b: dict, r: list) -> None:
            t = b["transactions"]
            t[0], t[1] = t[1], t[0]

        out.append(("two transactions swapped", swap_txs, "transactions"))

    for i, receipt in enumerate(receipts):
        # A deposit receipt's nonce and version are in the root since Canyon, when it has both.
        committed = ("depositNonce", "depositReceiptVersion") if receipt.get("depositReceiptVersion") else ()
        for field in ("status", "cumulativeGasUsed", "root", "type", *committed):
            if receipt.get(field) is None:
                continue

            def change(b: dict, r: list, i: int = i, field: str = field) -> None:
                r[i][field] = "0x1" if field == "type" and r[i][field] == "0x2" else flip(r[i][field])

            out.append((f"receipt {i} {field}", change, "receipts"))
        break
    with_logs = [i for i, r in enumerate(receipts) if r["logs"]]
    if with_logs:
        i = with_logs[0]
        entry = receipts[i]["logs"][0]

        def change_address(b: dict, r: list, i: int = i) -> None:
            r[i]["logs"][0]["address"] = flip(r[i]["logs"][0]["address"])

        out.append((f"receipt {i} log address", change_address, "receipts"))
        if entry["topics"]:
            def change_topic(b: dict, r: list, i: int = i) -> None:
                topics = r[i]["logs"][0]["topics"]
                topics[-1] = flip(topics[-1])

            out.append((f"receipt {i} log topic", change_topic, "receipts"))

            def drop_topic(b: dict, r: list, i: int = i) -> None:
                r[i]["logs"][0]["topics"].pop()

            out.append((f"receipt {i} log topic dropped", drop_topic, "receipts"))
        if entry["data"] != "0x":
            def change_data(b: dict, r: list, i: int = i) -> None:
                r[i]["logs"][0]["data"] = flip(r[i]["logs"][0]["data"])

            out.append((f"receipt {i} log data", change_data, "receipts"))

        def drop_log(b: dict, r: list, i: int = i) -> None:
            r[i]["logs"].pop()

        out.append((f"receipt {i} a log dropped", drop_log, "receipts"))

        def duplicate_log(b: dict, r: list, i: int = i) -> None:
            r[i]["logs"].append(copy.deepcopy(r[i]["logs"][-1]))

        out.append((f"receipt {i} a log repeated", duplicate_log, "receipts"))

        def change_bloom(b: dict, r: list, i: int = i) -> None:
            r[i]["logsBloom"] = flip(r[i]["logsBloom"])

        out.append((f"receipt {i} logsBloom", change_bloom, "logs bloom"))
    if receipts:
        out.append(("a receipt dropped", lambda b, r: r.pop(), "receipts"))
    if len(receipts) > 1:
        def swap_receipts(b: dict, r: list) -> None:
            r[0], r[1] = r[1], r[0]

        out.append(("two receipts swapped", swap_receipts, "receipts"))

    for i, _ in enumerate(block.get("withdrawals") or []):
        for field in ("index", "validatorIndex", "address", "amount"):
            def change(b: dict, r: list, i: int = i, field: str = field) -> None:
                b["withdrawals"][i][field] = flip(b["withdrawals"][i][field])

            out.append((f"withdrawal {i} {field}", change, "withdrawals"))
        out.append(("a withdrawal dropped", lambda b, r: b["withdrawals"].pop(), "withdrawals"))
        break
    return out


CASES = [(name, description, change, root)
         for name in NAMES if expected_proven(name)
         for description, change, root in mutations(name)]


@pytest.mark.parametrize("name, description, change, root", CASES,
                         ids=[f"{name}: {description}" for name, description, _, _ in CASES])
def test_one_change_is_a_mismatch_of_the_right_root(name: str, description: str, change: Callable, root: str) -> None:
    block, receipts = load(name)
    change(block, receipts)
    with pytest.raises(RootMismatch, match=f"^{root} (root )?mismatch at block {number(block)}\\b"):
        check_block(block, receipts)
    if root == "logs bloom":
        # With the receipts' own blooms in the encoding, a bad bloom breaks the receipts root.
        with pytest.raises(RootMismatch, match=f"^receipts root mismatch at block {number(block)}$"):
            check_block(block, receipts, recompute_blooms=False)
    elif root == "receipts":
        with pytest.raises(RootMismatch, match=f"^receipts root mismatch at block {number(block)}$"):
            check_block(block, receipts, recompute_blooms=False)


def test_every_kind_of_change_is_tried() -> None:
    descriptions = " | ".join(d for _, d, _, _ in CASES)
    for what in ("(type 0) v", "(type 0) to", "(type 1)", "(type 2) maxPriorityFeePerGas", "(type 3) maxFeePerBlobGas",
                 "blob versioned hash", "(type 4)", "authorization address", "access list storage key",
                 "(type 106) input", "receipt 0 root", "receipt 0 status", "log address", "log topic", "log data",
                 "a log dropped", "a receipt dropped", "two receipts swapped", "withdrawal 0 amount",
                 "a withdrawal dropped", "a transaction dropped"):
        assert what in descriptions, what


def test_a_root_mismatch_is_chain_data_error() -> None:
    assert issubclass(RootMismatch, ChainDataError)


# --- what real nodes send -------------------------------------------------------------------------


def test_nodes_without_type_or_y_parity() -> None:
    """Nodes that send no `type` (before typed transactions were known to them), or only `v` for
    a typed transaction's parity (0/1, or 27/28), or `data` instead of `input`."""
    block, receipts = load("mainnet-18000000")
    for i, t in enumerate(block["transactions"]):
        del t["type"]
        if "yParity" in t:
            y = t.pop("yParity")
            t["v"] = hex(27 + int(y, 16)) if i % 2 else y
        if i % 3 == 0:
            t["data"] = t.pop("input")
    for r in receipts:
        del r["type"]
    assert check_block(block, receipts) is None


def test_receipts_with_both_root_and_status() -> None:
    """Nethermind sends a pre-Byzantium receipt's root beside a status; cdk-erigon a zero root
    beside a post-Byzantium status."""
    block, receipts = load("mainnet-47218")
    for r in receipts:
        r["status"] = "0x1"
    assert check_block(block, receipts) is None
    block, receipts = load("mainnet-18000000")
    for r in receipts:
        r["root"] = "0x" + "00" * 32
    assert check_block(block, receipts) is None


def test_pre_byzantium_receipts_without_their_root_are_uncheckable() -> None:
    """Erigon and reth send pre-Byzantium receipts with a made-up status and no root: no one can
    check those, which is a reason, not a mismatch."""
    for name in ("mainnet-47218", "mainnet-1755635"):
        block, receipts = load(name)
        for r in receipts:
            r.pop("root")
            r["status"] = "0x1"
        assert check_block(block, receipts) == "pre-Byzantium receipts without their state root"
        assert check_block(block, receipts, chain_id=1) == "pre-Byzantium receipts without their state root"
        # A chain known to start after Byzantium has no such excuse.
        with pytest.raises(RootMismatch, match="^receipts root mismatch"):
            check_block(block, receipts, chain_id=11155111)


def test_a_receipt_without_status_or_root() -> None:
    block, receipts = load("mainnet-1755635")
    receipts[0].pop("root")
    assert check_block(block, receipts) == "receipt without status or state root"


def test_transaction_types_not_encoded_here_are_reasons() -> None:
    block, receipts = load("arbitrum-sepolia-185232421")
    block["transactions"][0]["type"] = "0x64"
    assert check_block(block, receipts) == "transaction type 0x64"
    block, receipts = load("mainnet-18000000")
    block["transactions"][5]["type"] = "0x7e"  # no sourceHash: not an OP-stack deposit (Scroll's L1 messages)
    assert check_block(block, receipts) == "transaction type 0x7e"


def test_unsigned_system_transactions_are_reasons() -> None:
    """Polygon PoS lists its state-sync transactions (type 0, r = s = 0) in a block without
    them being in its transactions root."""
    block, receipts = load("mainnet-18000000")
    sync = copy.deepcopy(block["transactions"][-1])
    sync.update(type="0x0", r="0x0", s="0x0", v="0x0", gasPrice="0x0", gas="0x0", input="0x")
    block["transactions"].append(sync)
    receipts.append(copy.deepcopy(receipts[-1]))
    assert check_block(block, receipts, chain_id=137) == "unsigned transaction of type 0x0 (a system transaction)"


def test_an_unsigned_transaction_where_the_chain_has_none_is_a_mismatch() -> None:
    """On mainnet (or a chain not known to list system transactions), an unsigned transaction
    added to a block is one the block never held, not a reason to skip the check."""
    block, receipts = load("mainnet-18000000")
    sync = copy.deepcopy(block["transactions"][-1])
    sync.update(type="0x0", r="0x0", s="0x0", v="0x0", gasPrice="0x0", gas="0x0", input="0x")
    block["transactions"].append(sync)
    receipts.append(copy.deepcopy(receipts[-1]))
    for chain_id in (None, 1, 100):
        with pytest.raises(RootMismatch, match="transactions root mismatch at block 18000000"):
            check_block(block, receipts, chain_id=chain_id)


def test_fields_of_other_chains_make_a_mismatch_a_reason() -> None:
    """A chain's own transaction fields (Celo's feeCurrency) that its encoding includes and this
    module does not: the root differs, and the block is uncheckable rather than wrong. The same
    fields where the root still matches are ignored."""
    block, receipts = load("mainnet-18000000")
    block["transactions"][3]["feeCurrency"] = "0x765de816845861e75a25fca122bb6898b8b1282a"
    assert check_block(block, receipts) is None
    block["transactions"][3]["gas"] = flip(block["transactions"][3]["gas"])  # as if feeCurrency were encoded
    assert check_block(block, receipts) == "transactions carry fields this check does not encode (feeCurrency)"
    block, receipts = load("mainnet-18000000")
    receipts[3]["feeCurrencyDebit"] = "0x1"
    receipts[3]["cumulativeGasUsed"] = flip(receipts[3]["cumulativeGasUsed"])
    assert check_block(block, receipts) == "receipts carry fields this check does not encode (feeCurrencyDebit)"


def test_zero_roots_are_reasons() -> None:
    """zkSync Era's headers carry zeros where the roots would be."""
    block, receipts = load("mainnet-18000000")
    block["transactionsRoot"] = block["receiptsRoot"] = "0x" + "00" * 32
    assert check_block(block, receipts) == "the header's transactions or receipts root is zero"


def test_empty_blocks_and_the_empty_root() -> None:
    assert ordered_trie.EMPTY_ROOT == keccak(rlp.encode(b""))
    assert "0x" + ordered_trie.EMPTY_ROOT.hex() == "0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421"
    block, receipts = load("mainnet-0")
    assert block["transactions"] == [] and check_block(block, []) is None
    block["transactionsRoot"] = block["stateRoot"]
    with pytest.raises(RootMismatch, match="^transactions root mismatch at block 0$"):
        check_block(block, [])
    block, receipts = load("mainnet-18000000")
    block["withdrawals"] = []
    with pytest.raises(RootMismatch, match="^withdrawals root mismatch at block 18000000$"):
        check_block(block, receipts)
    del block["withdrawals"]
    with pytest.raises(RootMismatch, match="^withdrawals root mismatch at block 18000000$"):
        check_block(block, receipts)


def test_an_extra_receipt_is_a_mismatch() -> None:
    block, receipts = load("mainnet-1755635")
    receipts.append(copy.deepcopy(receipts[-1]))
    with pytest.raises(RootMismatch, match="^receipts root mismatch at block 1755635$"):
        check_block(block, receipts)


def test_malformed_hex_is_refused_not_proven() -> None:
    block, receipts = load("mainnet-18000000")
    block["transactions"][0]["input"] += "0"  # odd length
    with pytest.raises(ValueError):
        check_block(block, receipts)


# --- RLP and the trie -----------------------------------------------------------------------------


def test_rlp_primitives_equal_the_rlp_package() -> None:
    rng = random.Random(7)
    ints = [0, 1, 0x7F, 0x80, 0xFF, 0x100, 2**64 - 1, 2**255, 2**256 - 1, 2**448, 2**600]
    ints += [rng.getrandbits(rng.randint(1, 300)) for _ in range(300)]
    for n in ints:
        assert rlp_codec.rlp_int(n) == rlp.encode(n), n
        assert json_encodings._quantity_hex(hex(n)) == rlp.encode(n).hex(), n
    # quantities with leading zeros, as some nodes send r and s
    for value, n in (("0x00", 0), ("0x0001", 1), ("0x00ff", 255), ("0x" + "00" + "ab" * 31, int("ab" * 31, 16))):
        assert json_encodings._quantity_hex(value) == rlp.encode(n).hex()
    for size in (0, 1, 2, 31, 32, 55, 56, 57, 255, 256, 1000, 70000):
        for value in (os.urandom(size), bytes(size), b"\x7f" * size):
            assert rlp_codec.rlp_string(value) == rlp.encode(value)
            assert json_encodings._data_hex("0x" + value.hex()) == rlp.encode(value).hex()
    for items in ([], [b""], [b"a" * 60], [b"x"] * 100, [b"y" * 100] * 700):
        encoded = b"".join(rlp.encode(x) for x in items)
        assert rlp_codec.rlp_list(encoded) == rlp.encode(items)


# The trie tests take both tries, Python's and C's, in one run.
@pytest.mark.parametrize("backend", ["native"], indirect=True)
@pytest.mark.parametrize("sizes", [(1, 3), (1, 40), (20, 200), (0, 2)])
def test_the_trie_equals_a_naive_one(sizes: tuple[int, int], backend: str) -> None:
    """Every count up to past 256 (keys of one, two and three bytes), with values short enough
    for nodes to be held inline and long enough to be hashed."""
    rng = random.Random(sum(sizes))
    counts = list(range(0, 140)) + [255, 256, 257, 300, 1100]
    for n in counts:
        values = [os.urandom(rng.randint(*sizes)) for _ in range(n)]
        expected = ref_trie_root(values)
        assert ordered_trie.ordered_trie_root(values) == expected, (n, sizes)
        assert roots._native_roots.ordered_trie_root(values) == expected, (n, sizes)


@pytest.mark.parametrize("backend", ["native"], indirect=True)
def test_the_trie_equals_py_trie_where_installed(backend: str) -> None:
    trie = pytest.importorskip("trie")
    rng = random.Random(3)
    for n in (1, 2, 17, 128, 129, 300):
        values = [os.urandom(rng.randint(1, 120)) for _ in range(n)]
        t = trie.HexaryTrie({})
        for i, v in enumerate(values):
            t[rlp.encode(i)] = v
        assert ordered_trie.ordered_trie_root(values) == t.root_hash
        assert roots._native_roots.ordered_trie_root(values) == t.root_hash


def test_deposit_and_arbitrum_encodings() -> None:
    """Type 0x7e (OP-stack deposits, as op-geth's DepositTx) and 0x6a (Arbitrum's internal
    transactions, as nitro's ArbitrumInternalTx), plain values against the rlp package."""
    src, sender, to = bytes(range(32)), b"\x11" * 20, b"\x22" * 20
    assert encodings.deposit_transaction(src, sender, to, 5, 6, 7, True, b"\x01\x02") == \
        b"\x7e" + rlp.encode([src, sender, to, 5, 6, 7, 1, b"\x01\x02"])
    assert encodings.deposit_transaction(src, sender, None, 0, 0, 1_000_000, False, b"") == \
        b"\x7e" + rlp.encode([src, sender, b"", 0, 0, 1_000_000, 0, b""])
    tx = {"type": "0x7e", "sourceHash": "0x" + src.hex(), "from": "0x" + sender.hex(), "to": "0x" + to.hex(),
          "mint": "0x5", "value": "0x6", "gas": "0x7", "isSystemTx": True, "input": "0x0102", "nonce": "0x9"}
    assert json_encodings.encode_transaction_json(tx) == encodings.encode_transaction(encodings.transaction_from_json(tx)) \
        == encodings.deposit_transaction(src, sender, to, 5, 6, 7, True, b"\x01\x02")
    receipt = {"type": "0x7e", "status": "0x1", "cumulativeGasUsed": "0x10", "logs": [], "depositNonce": "0x9",
               "depositReceiptVersion": "0x1"}
    assert json_encodings.encode_receipt_json(receipt)[0] == encodings.encode_receipt(encodings.receipt_from_json(receipt)) \
        == b"\x7e" + rlp.encode([1, 16, bytes(256), [], 9, 1])
    # From Regolith to Canyon nodes sent the nonce, but the receipts root did not hold it.
    del receipt["depositReceiptVersion"]
    assert json_encodings.encode_receipt_json(receipt)[0] == encodings.encode_receipt(encodings.receipt_from_json(receipt)) \
        == b"\x7e" + rlp.encode([1, 16, bytes(256), []])
    assert encodings.arbitrum_internal_transaction(421614, b"\xab") == b"\x6a" + rlp.encode([421614, b"\xab"])


def test_real_l2_system_transactions_hash_to_their_hashes() -> None:
    """Transactions of other chains as their nodes serve them: an OP-stack deposit (Base,
    block 0x31bde9f, transaction 0: the L1-attributes deposit, no isSystemTx key, mint 0) and
    an Arbitrum Orbit chain's ArbOS internal transaction (block 0x4c204bb of chain 0x1237).
    Their encodings hash to the hashes the chains gave them."""
    deposit = {
        "blockNumber": "0x31bde9f", "depositReceiptVersion": "0x1",
        "from": "0xdeaddeaddeaddeaddeaddeaddeaddeaddead0001", "gas": "0xf4240", "gasPrice": "0x0",
        "hash": "0x233ace96f255608781596edfe1520000bd25b69b122cc101be3abb6689a85322",
        "input": "0x3db6be2b000008dd00101c120000000000000005000000006ac2196700000000018e87920000000000000000000000000"
                 "00000000000000000000000000000000be3256b0000000000000000000000000000000000000000000000000000000000"
                 "8b9262ae74035a834ae8863310574c2213838e9de36478c4f8c048cf3ea5d3ffcec4010000000000000000000000005050f6"
                 "9a9786f081509234f1a7f4684b5e5b76c90000000000000000000000000094",
        "mint": "0x0", "nonce": "0x31bdea2", "r": "0x0", "s": "0x0",
        "sourceHash": "0x391329aebfee79dbb200b510b04d8795c891055a887433c20a7392b77b0f2fec",
        "to": "0x4200000000000000000000000000000000000015", "transactionIndex": "0x0", "type": "0x7e", "v": "0x0",
        "value": "0x0", "yParity": "0x0",
    }
    internal = {
        "blockNumber": "0x4c204bb", "from": "0x00000000000000000000000000000000000a4b05", "gas": "0x0",
        "gasPrice": "0x0", "hash": "0xfc214c19fee15e5d244c4ecefc4f979974f4177bd85d311e2dceba121733d4f8",
        "input": "0x6bf6a42d00000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                 "0000000000000000000000000000000000018e87a10000000000000000000000000000000000000000000000000000000004"
                 "c204bb0000000000000000000000000000000000000000000000000000000000000000",
        "nonce": "0x0", "to": "0x00000000000000000000000000000000000a4b05", "transactionIndex": "0x0",
        "value": "0x0", "type": "0x6a", "chainId": "0x1237", "v": "0x0", "r": "0x0", "s": "0x0",
    }
    for tx in (deposit, internal):
        encoded = json_encodings.encode_transaction_json(tx)
        assert encoded == encodings.encode_transaction(encodings.transaction_from_json(tx))
        assert "0x" + keccak(encoded).hex() == tx["hash"]


def test_op_stack_withdrawals_root_is_not_a_list_root() -> None:
    """Since Isthmus an OP-stack header's withdrawalsRoot is the L2-to-L1 message passer's
    storage root, its withdrawals list always empty: not a mismatch where the block has a
    deposit (every OP-stack block starts with one). Transactions and receipts are still
    proven; the roots here come from the reference trie."""
    block, receipts = load("execution-apis-20")
    deposit = {"type": "0x7e", "sourceHash": "0x" + "11" * 32, "from": "0xdeaddeaddeaddeaddeaddeaddeaddeaddead0001",
               "to": "0x4200000000000000000000000000000000000015", "mint": "0x0", "value": "0x0", "gas": "0xf4240",
               "input": "0x3db6be2b", "r": "0x0", "s": "0x0", "v": "0x0"}
    deposit_receipt = {"type": "0x7e", "status": "0x1", "cumulativeGasUsed": "0xb48a", "logs": [],
                       "logsBloom": "0x" + "00" * 256, "depositNonce": "0x5", "depositReceiptVersion": "0x1"}
    types = [0x7E] + tx_types(block)
    block["transactions"].insert(0, deposit)
    receipts.insert(0, deposit_receipt)
    encoded = [b"\x7e" + rlp.encode([b"\x11" * 32, hb(deposit["from"]), hb(deposit["to"]), 0, 0, 0xF4240, 0,
                                     hb(deposit["input"])])] + [ref_tx(t) for t in block["transactions"][1:]]
    block["transactionsRoot"] = "0x" + ref_trie_root(encoded).hex()
    receipt_encodings = [b"\x7e" + rlp.encode([1, 0xB48A, bytes(256), [], 5, 1])] + [
        ref_receipt(r, types[i]) for i, r in enumerate(receipts) if i > 0]
    block["receiptsRoot"] = "0x" + ref_trie_root(receipt_encodings).hex()
    block["withdrawalsRoot"] = "0x" + "ab" * 32
    assert block["withdrawals"] == []
    assert check_block(block, receipts) is None
    receipts[0]["cumulativeGasUsed"] = "0xb48b"  # a deposit receipt is proven like any other
    with pytest.raises(RootMismatch, match="receipts root mismatch at block 20"):
        check_block(block, receipts)
    block, receipts = load("execution-apis-20")  # no deposit: the same withdrawalsRoot is a mismatch
    block["withdrawalsRoot"] = "0x" + "ab" * 32
    with pytest.raises(RootMismatch, match="^withdrawals root mismatch at block 20$"):
        check_block(block, receipts)


def test_only_chains_known_to_predate_byzantium_excuse_receipts_without_a_root() -> None:
    """Erigon and reth send pre-Byzantium receipts without their state root: on mainnet that
    block cannot be checked. On a chain not known to have such blocks, a receipts root that does
    not match is a mismatch (a log or receipt left out), however low the block."""
    block, receipts = load("mainnet-1755635")
    for receipt in receipts:
        receipt.pop("root", None)
        receipt["status"] = "0x1"
    assert check_block(block, receipts, chain_id=1) == "pre-Byzantium receipts without their state root"
    with pytest.raises(RootMismatch, match="receipts root mismatch at block 1755635"):
        check_block(block, receipts, chain_id=100)
