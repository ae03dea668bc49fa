"""The mainnet-shaped node's blocks: pre-built templates of an era, serialised once to JSON with
markers where a block's own values go (`Template`), and block n filled in from one of them.
"""

from __future__ import annotations

import random
import re
from typing import Any

import orjson

from ..chaindata import json_encodings, ordered_trie, rlp_codec
from .mainnet_eras import (CHAIN_ID, EMPTY_UNCLES, MERGE, SPURIOUS_DRAGON, TRANSFER_TOPIC, WITHDRAWALS_PER_BLOCK, Era,
                           Shape, calldata, draw_count, draw_tx_type, mixed_shape, weighted)
from .mainnet_traces import CallShape, call_tree, recorded_trees


_MARKER = re.compile(rb"\{\{(\w+)\}\}")


TX_MARKERS = [b"t%d" % i for i in range(2048)]
WITHDRAWAL_MARKERS = [b"w%d" % k for k in range(WITHDRAWALS_PER_BLOCK)]


def pick_template(templates: list[Template], number: int) -> Template:
    # A multiplicative hash of the height: neighbouring blocks get unrelated templates.
    return templates[((number * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) % len(templates)]


def block_hashes(template: Template, number: int) -> tuple[bytes, bytes, bytes]:
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


def _split(value: Any) -> tuple[list[bytes], list[bytes]]:
    """The JSON of `value` cut at its markers: (the text between them, the markers' names)."""
    parts = _MARKER.split(orjson.dumps(value))
    return parts[0::2], parts[1::2]


def render(split: tuple[list[bytes], list[bytes]], values: dict[bytes, bytes]) -> list[bytes]:
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
        self.calls: list[CallShape] = []
        self._frames: list[bytes] | None = None  # each transaction's callTracer frame, as JSON (`trace_frames`)
        self._era, self._index = era.name, index
        self.splices: list[tuple[bytes, bytes]] = []  # each encoding around the 8 bytes of r that vary
        cumulative = 0
        base_fee = rng.randrange(5, 60) * 10**9 if post_london else None
        blobs = draw_count(rng, era.blob_transactions)
        set_codes = draw_count(rng, era.set_code_transactions)
        for i in range(count):
            shape = rng.choice(shapes) if era.recorded else mixed_shape(rng, weighted(rng, era.kinds))
            kind, creation, size, logs, failed = shape
            tx_type = draw_tx_type(rng, era, kind)
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
                "input": "0x" + calldata(rng, size).hex(), "nonce": hex(rng.randrange(0, 200_000)), "to": to,
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
            self.calls.append(CallShape(sender, to, receipt["contractAddress"], tx["value"], tx["input"], failed,
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
        """Each transaction's call tree as `callTracer` gives it (`call_tree`), as JSON: built the
        first time, then kept (the caller holds the node's lock)."""
        if self._frames is None:
            rng = random.Random(f"{self._era}/{self._index}/traces")
            trees = recorded_trees()
            self._frames = [orjson.dumps(call_tree(rng, call, trees)) for call in self.calls]
        return self._frames

    @staticmethod
    def _log(rng: random.Random, topics: int, data: int, index: int, to: str | None) -> dict[str, Any]:
        if topics == 3 and data == 32:  # an ERC-20 Transfer, as most such logs are
            topic_list = [TRANSFER_TOPIC] + ["0x" + "00" * 12 + rng.randbytes(20).hex() for _ in range(2)]
        else:
            topic_list = ["0x" + rng.randbytes(32).hex() for _ in range(topics)]
        address = to if to is not None and rng.random() < 0.3 else "0x" + rng.randbytes(20).hex()
        return {"address": address, "blockHash": "{{bh}}", "blockNumber": "{{bn}}", "blockTimestamp": "{{ts}}",
                "data": "0x" + calldata(rng, data).hex(), "logIndex": "", "removed": False, "topics": topic_list,
                "transactionHash": f"{{{{t{index}}}}}", "transactionIndex": hex(index)}
