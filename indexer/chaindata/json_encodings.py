"""The encodings of transactions, receipts and withdrawals made straight from the JSON's hex
digits, the hot path of `roots.check_block`: one `bytes.fromhex` per transaction or receipt
instead of an int or bytes object per field (1.3x as fast for transactions, 1.8x for receipts
with logs than `encodings.py`). The tests hold both paths, byte for byte, against each other and
against the `rlp` package, on every recorded block.
"""

from __future__ import annotations

from typing import Any

from .encodings import (EMPTY_BLOOM, SIGNED_TYPES, Uncheckable, bloom_bits, hex_bytes, outcome_json, transaction_type,
                        y_parity)
from .rlp_codec import BYTE, EMPTY_LIST, LIST_PREFIX, STRING_PREFIX, long_prefix, rlp_int

_STRING_HEX = [prefix.hex() for prefix in STRING_PREFIX]  # for n < 256 bytes
_LIST_HEX = [prefix.hex() for prefix in LIST_PREFIX]
_TYPE_HEX = ["%02x" % i for i in range(256)]


def _long_hex(length: int, offset: int) -> str:
    digits = "%x" % length
    if len(digits) & 1:
        digits = "0" + digits
    return "%02x" % (offset + 55 + (len(digits) >> 1)) + digits


def _quantity_hex(value: str) -> str:
    """rlp(quantity) as hex digits, from a JSON quantity ("0x0", "0x1a2b")."""
    d = value[2:]
    n = len(d)
    if n > 2:
        if n & 1:
            d = "0" + d
            n += 1
        if d[0] == "0" and d[1] == "0":  # leading zero bytes, which RLP does not have
            return rlp_int(int(value, 16)).hex()
        n >>= 1
        return (_STRING_HEX[n] if n < 256 else _long_hex(n, 0x80)) + d
    if n == 2:
        if d < "80":
            return "80" if d == "00" else d
        return "81" + d
    if n == 1:
        return "80" if d == "0" else "0" + d
    raise ValueError(f"not a hex quantity: {value!r}")


def _data_hex(value: str) -> str:
    """rlp(data) as hex digits, from JSON hex data ("0x", "0xa9059cbb...")."""
    d = value[2:]
    n = len(d)
    if n & 1:
        raise ValueError(f"hex data of odd length: {value[:20]!r}")
    n >>= 1
    if n < 256:
        if n == 1 and d < "80":
            return d
        return _STRING_HEX[n] + d
    return _long_hex(n, 0x80) + d


def _list_hex(payload: str) -> str:
    n = len(payload) >> 1
    return (_LIST_HEX[n] if n < 256 else _long_hex(n, 0xC0)) + payload


def _address_hex(value: str | None) -> str:
    if value is None or value == "0x":
        return "80"
    return "94" + value[2:] if len(value) == 42 else _data_hex(value)


def _hash_hex(value: str) -> str:
    return "a0" + value[2:] if len(value) == 66 else _data_hex(value)


def _access_list_hex(access_list: list[dict[str, Any]] | None) -> str:
    if not access_list:
        return "c0"
    return _list_hex("".join([
        _list_hex(_address_hex(e["address"]) + _list_hex("".join([_hash_hex(k) for k in e["storageKeys"]])))
        for e in access_list
    ]))


def _y_parity_hex(tx: dict[str, Any]) -> str:
    y = tx.get("yParity")
    return _quantity_hex(y) if y is not None else rlp_int(y_parity(tx)).hex()


def encode_transaction_json(tx: dict[str, Any]) -> bytes:
    """`encode_transaction(transaction_from_json(tx))`, made from the hex digits directly."""
    kind = transaction_type(tx)
    if kind in SIGNED_TYPES:
        r, s = _quantity_hex(tx["r"]), _quantity_hex(tx["s"])
        if r == "80" and s == "80":
            raise Uncheckable(f"unsigned transaction of type 0x{kind:x} (a system transaction)")
        data = tx.get("input")
        if data is None:
            data = tx["data"]
        if kind == 2:
            return bytes.fromhex("02" + _list_hex("".join((
                _quantity_hex(tx["chainId"]), _quantity_hex(tx["nonce"]), _quantity_hex(tx["maxPriorityFeePerGas"]),
                _quantity_hex(tx["maxFeePerGas"]), _quantity_hex(tx["gas"]), _address_hex(tx.get("to")),
                _quantity_hex(tx["value"]), _data_hex(data), _access_list_hex(tx.get("accessList")),
                _y_parity_hex(tx), r, s))))
        if kind == 0:
            return bytes.fromhex(_list_hex("".join((
                _quantity_hex(tx["nonce"]), _quantity_hex(tx["gasPrice"]), _quantity_hex(tx["gas"]),
                _address_hex(tx.get("to")), _quantity_hex(tx["value"]), _data_hex(data), _quantity_hex(tx["v"]),
                r, s))))
        if kind == 1:
            return bytes.fromhex("01" + _list_hex("".join((
                _quantity_hex(tx["chainId"]), _quantity_hex(tx["nonce"]), _quantity_hex(tx["gasPrice"]),
                _quantity_hex(tx["gas"]), _address_hex(tx.get("to")), _quantity_hex(tx["value"]), _data_hex(data),
                _access_list_hex(tx.get("accessList")), _y_parity_hex(tx), r, s))))
        if kind == 3:
            return bytes.fromhex("03" + _list_hex("".join((
                _quantity_hex(tx["chainId"]), _quantity_hex(tx["nonce"]), _quantity_hex(tx["maxPriorityFeePerGas"]),
                _quantity_hex(tx["maxFeePerGas"]), _quantity_hex(tx["gas"]), _address_hex(tx.get("to")),
                _quantity_hex(tx["value"]), _data_hex(data), _access_list_hex(tx.get("accessList")),
                _quantity_hex(tx["maxFeePerBlobGas"]),
                _list_hex("".join([_hash_hex(h) for h in tx["blobVersionedHashes"]])), _y_parity_hex(tx), r, s))))
        return bytes.fromhex("04" + _list_hex("".join((
            _quantity_hex(tx["chainId"]), _quantity_hex(tx["nonce"]), _quantity_hex(tx["maxPriorityFeePerGas"]),
            _quantity_hex(tx["maxFeePerGas"]), _quantity_hex(tx["gas"]), _address_hex(tx.get("to")),
            _quantity_hex(tx["value"]), _data_hex(data), _access_list_hex(tx.get("accessList")),
            _list_hex("".join([
                _list_hex(_quantity_hex(a["chainId"]) + _address_hex(a["address"]) + _quantity_hex(a["nonce"])
                          + _y_parity_hex(a) + _quantity_hex(a["r"]) + _quantity_hex(a["s"]))
                for a in tx["authorizationList"]])),
            _y_parity_hex(tx), r, s))))
    if kind == 0x7E and "sourceHash" in tx:
        mint = tx.get("mint")
        return bytes.fromhex("7e" + _list_hex("".join((
            _hash_hex(tx["sourceHash"]), _address_hex(tx["from"]), _address_hex(tx.get("to")),
            _quantity_hex(mint) if mint else "80", _quantity_hex(tx["value"]), _quantity_hex(tx["gas"]),
            "01" if tx.get("isSystemTx") else "80", _data_hex(tx["input"])))))
    if kind == 0x6A:
        return bytes.fromhex("6a" + _list_hex(_quantity_hex(tx["chainId"]) + _data_hex(tx["input"])))
    raise Uncheckable(f"transaction type 0x{kind:x}")


_EMPTY_BLOOM_AND_LOGS = b"\xb9\x01\x00" + bytes(256) + EMPTY_LIST


def encode_receipt_json(receipt: dict[str, Any], tx_type: int = 0, cache: dict[str, int] | None = None, *,
                        prefer_status: bool = False, recompute_bloom: bool = True) -> tuple[bytes, bytes | None]:
    """`encode_receipt(receipt_from_json(receipt, tx_type))`, made from the hex digits directly,
    and the bloom recomputed from the logs. `cache`, a dict kept for one block, holds the bloom
    bits of each address and topic seen, so that each is hashed once a block.

    With `recompute_bloom=False` the encoding holds the receipt's own `logsBloom` (where it has
    one, and then None stands for the bloom): the receipts root proves it as well, since the
    bloom is part of what the root commits to; only a bloom that disagrees with the logs is then
    reported as a receipts root mismatch rather than as a bloom mismatch."""
    t = receipt.get("type")
    kind = tx_type if t is None else int(t, 16)
    outcome = outcome_json(receipt, prefer_status)
    head = bytes.fromhex((("a0" + outcome[2:]) if len(outcome) == 66 else _quantity_hex(outcome))
                         + _quantity_hex(receipt["cumulativeGasUsed"]))
    tail = ""
    if kind == 0x7E:  # as in encode_receipt: the nonce only with a version (since Canyon)
        nonce, version = receipt.get("depositNonce"), receipt.get("depositReceiptVersion")
        if nonce is not None and version is not None:
            tail = _quantity_hex(nonce) + _quantity_hex(version)
    logs = receipt["logs"]
    if not logs:
        body = head + _EMPTY_BLOOM_AND_LOGS + bytes.fromhex(tail) if tail else head + _EMPTY_BLOOM_AND_LOGS
        bloom = EMPTY_BLOOM
    else:
        sent = None if recompute_bloom else receipt.get("logsBloom")
        if sent is not None and len(sent) != 514:
            sent = None
        if sent is None and cache is None:
            cache = {}
        parts = []
        bits = 0
        for entry in logs:
            address = entry["address"]
            topics = entry["topics"]
            topics_hex = "".join(["a0" + t[2:] if len(t) == 66 else _data_hex(t) for t in topics])
            n = len(topics_hex) >> 1
            log_hex = ("94" + address[2:] if len(address) == 42 else _data_hex(address)) \
                + (_LIST_HEX[n] if n < 256 else _long_hex(n, 0xC0)) + topics_hex + _data_hex(entry["data"])
            n = len(log_hex) >> 1
            parts.append((_LIST_HEX[n] if n < 256 else _long_hex(n, 0xC0)) + log_hex)
            if sent is None:
                b = cache.get(address)
                if b is None:
                    b = cache[address] = bloom_bits(hex_bytes(address))
                bits |= b
                for topic in topics:
                    b = cache.get(topic)
                    if b is None:
                        b = cache[topic] = bloom_bits(hex_bytes(topic))
                    bits |= b
        logs_hex = "".join(parts)
        n = len(logs_hex) >> 1
        logs_hex = (_LIST_HEX[n] if n < 256 else _long_hex(n, 0xC0)) + logs_hex + tail
        if sent is None:
            bloom = bits.to_bytes(256, "big")
            body = head + b"\xb9\x01\x00" + bloom + bytes.fromhex(logs_hex)
        else:
            bloom = None
            body = head + bytes.fromhex("b90100" + sent[2:] + logs_hex)
    n = len(body)
    body = (LIST_PREFIX[n] if n < 256 else long_prefix(n, 0xC0)) + body
    return (body if kind == 0 else BYTE[kind] + body), bloom


def encode_withdrawal_json(withdrawal: dict[str, Any]) -> bytes:
    """`encode_withdrawal(withdrawal_from_json(withdrawal))`, from the hex digits directly."""
    return bytes.fromhex(_list_hex(
        _quantity_hex(withdrawal["index"]) + _quantity_hex(withdrawal["validatorIndex"])
        + _address_hex(withdrawal["address"]) + _quantity_hex(withdrawal["amount"])))
