"""Transactions, receipts and withdrawals as the plain values their encodings are made of, and those
encodings, the leaves of a block's tries:
- plain values (ints, bytes, small named tuples) to encodings: `encode_transaction` (and one
  function per type: `legacy_transaction` ... `set_code_transaction`, `deposit_transaction`,
  `arbitrum_internal_transaction`), `encode_receipt` (its bloom recomputed from its logs),
  `encode_withdrawal`;
- the JSON-RPC JSON (hex strings as nodes send them) to those plain values:
  `transaction_from_json`, `receipt_from_json`, `withdrawal_from_json`.
`indexer verify --roots` (`stored_roots.py`) makes them from stored rows; a fetched block's check
takes the faster path of `json_encodings.py`, held byte for byte against this one by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from .ordered_trie import ZERO_HASH_HEX
from .rlp_codec import BYTE, EMPTY_LIST, keccak, rlp_address, rlp_int, rlp_list, rlp_string, rlp_strings

# --- transactions: plain values -------------------------------------------------------------------

AccessList = Sequence[tuple[bytes, Sequence[bytes]]]  # [(address, [storage key, ...]), ...]


class Authorization(NamedTuple):
    """One entry of an EIP-7702 authorization list."""

    chain_id: int
    address: bytes
    nonce: int
    y_parity: int
    r: int
    s: int


def _rlp_access_list(access_list: AccessList) -> bytes:
    if not access_list:
        return EMPTY_LIST
    return rlp_list(b"".join([rlp_list(rlp_string(address) + rlp_strings(keys)) for address, keys in access_list]))


def _rlp_authorizations(authorizations: Sequence[Authorization]) -> bytes:
    return rlp_list(b"".join([
        rlp_list(rlp_int(a.chain_id) + rlp_string(a.address) + rlp_int(a.nonce) + rlp_int(a.y_parity)
                 + rlp_int(a.r) + rlp_int(a.s))
        for a in authorizations
    ]))


def legacy_transaction(nonce: int, gas_price: int, gas: int, to: bytes | None, value: int, data: bytes,
                       v: int, r: int, s: int) -> bytes:
    """Type 0: rlp([nonce, gasPrice, gas, to, value, data, v, r, s]), v as signed (27/28 before
    EIP-155, chainId * 2 + 35/36 since); `to` None for a contract creation."""
    return rlp_list(b"".join((rlp_int(nonce), rlp_int(gas_price), rlp_int(gas), rlp_address(to), rlp_int(value),
                              rlp_string(data), rlp_int(v), rlp_int(r), rlp_int(s))))


def access_list_transaction(chain_id: int, nonce: int, gas_price: int, gas: int, to: bytes | None, value: int,
                            data: bytes, access_list: AccessList, y_parity: int, r: int, s: int) -> bytes:
    """Type 1 (EIP-2930): 0x01 || rlp([chainId, nonce, gasPrice, gas, to, value, data,
    accessList, yParity, r, s])."""
    return b"\x01" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(gas_price), rlp_int(gas), rlp_address(to), rlp_int(value),
        rlp_string(data), _rlp_access_list(access_list), rlp_int(y_parity), rlp_int(r), rlp_int(s))))


def dynamic_fee_transaction(chain_id: int, nonce: int, max_priority_fee_per_gas: int, max_fee_per_gas: int,
                            gas: int, to: bytes | None, value: int, data: bytes, access_list: AccessList,
                            y_parity: int, r: int, s: int) -> bytes:
    """Type 2 (EIP-1559): 0x02 || rlp([chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas,
    to, value, data, accessList, yParity, r, s])."""
    return b"\x02" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(max_priority_fee_per_gas), rlp_int(max_fee_per_gas),
        rlp_int(gas), rlp_address(to), rlp_int(value), rlp_string(data), _rlp_access_list(access_list),
        rlp_int(y_parity), rlp_int(r), rlp_int(s))))


def blob_transaction(chain_id: int, nonce: int, max_priority_fee_per_gas: int, max_fee_per_gas: int, gas: int,
                     to: bytes | None, value: int, data: bytes, access_list: AccessList, max_fee_per_blob_gas: int,
                     blob_versioned_hashes: Sequence[bytes], y_parity: int, r: int, s: int) -> bytes:
    """Type 3 (EIP-4844), as a block holds it (without the blobs): 0x03 || rlp([chainId, nonce,
    maxPriorityFeePerGas, maxFeePerGas, gas, to, value, data, accessList, maxFeePerBlobGas,
    blobVersionedHashes, yParity, r, s])."""
    return b"\x03" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(max_priority_fee_per_gas), rlp_int(max_fee_per_gas),
        rlp_int(gas), rlp_address(to), rlp_int(value), rlp_string(data), _rlp_access_list(access_list),
        rlp_int(max_fee_per_blob_gas), rlp_strings(blob_versioned_hashes), rlp_int(y_parity), rlp_int(r),
        rlp_int(s))))


def set_code_transaction(chain_id: int, nonce: int, max_priority_fee_per_gas: int, max_fee_per_gas: int,
                         gas: int, to: bytes | None, value: int, data: bytes, access_list: AccessList,
                         authorization_list: Sequence[Authorization], y_parity: int, r: int, s: int) -> bytes:
    """Type 4 (EIP-7702): 0x04 || rlp([chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas,
    to, value, data, accessList, authorizationList, yParity, r, s]), each authorization
    [chainId, address, nonce, yParity, r, s]."""
    return b"\x04" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(max_priority_fee_per_gas), rlp_int(max_fee_per_gas),
        rlp_int(gas), rlp_address(to), rlp_int(value), rlp_string(data), _rlp_access_list(access_list),
        _rlp_authorizations(authorization_list), rlp_int(y_parity), rlp_int(r), rlp_int(s))))


def deposit_transaction(source_hash: bytes, sender: bytes, to: bytes | None, mint: int, value: int, gas: int,
                        is_system_tx: bool, data: bytes) -> bytes:
    """OP-stack deposit, type 0x7e: 0x7e || rlp([sourceHash, from, to, mint, value, gas,
    isSystemTx, data]) (no mint is 0; isSystemTx false is the empty string)."""
    return b"\x7e" + rlp_list(b"".join((
        rlp_string(source_hash), rlp_string(sender), rlp_address(to), rlp_int(mint), rlp_int(value), rlp_int(gas),
        rlp_int(1 if is_system_tx else 0), rlp_string(data))))


def arbitrum_internal_transaction(chain_id: int, data: bytes) -> bytes:
    """Arbitrum's ArbOS internal transaction, type 0x6a: 0x6a || rlp([chainId, data])."""
    return b"\x6a" + rlp_list(rlp_int(chain_id) + rlp_string(data))


@dataclass(slots=True)
class Transaction:
    """A transaction's encoded fields, whatever its type (None or empty where a type has no such
    field). `v` is the signature's v as a type-0 transaction carries it (27/28, or EIP-155's
    chainId * 2 + 35/36); typed transactions carry `y_parity` instead."""

    type: int
    nonce: int = 0
    gas: int = 0
    to: bytes | None = None
    value: int = 0
    data: bytes = b""
    r: int = 0
    s: int = 0
    v: int | None = None
    y_parity: int | None = None
    chain_id: int | None = None
    gas_price: int | None = None
    max_priority_fee_per_gas: int | None = None
    max_fee_per_gas: int | None = None
    access_list: AccessList = ()
    max_fee_per_blob_gas: int | None = None
    blob_versioned_hashes: Sequence[bytes] = ()
    authorization_list: Sequence[Authorization] = ()
    # OP-stack deposits (type 0x7e)
    source_hash: bytes | None = None
    sender: bytes | None = None
    mint: int | None = None
    is_system_tx: bool = False


class Uncheckable(Exception):
    """What a node sent cannot be encoded here; the message is the reason, short and stable (a
    metric label)."""


SIGNED_TYPES = frozenset((0, 1, 2, 3, 4))


def encode_transaction(tx: Transaction) -> bytes:
    """A transaction as the transactions trie holds it (its signed, typed encoding). Raises
    Uncheckable for a type this module does not encode, or for a transaction that is not
    signed (a system transaction that a node lists in a block but not in its transactions
    root, such as Polygon PoS's state syncs)."""
    kind = tx.type
    if kind in SIGNED_TYPES and tx.r == 0 and tx.s == 0:
        raise Uncheckable(f"unsigned transaction of type 0x{kind:x} (a system transaction)")
    if kind == 2:
        return dynamic_fee_transaction(tx.chain_id, tx.nonce, tx.max_priority_fee_per_gas, tx.max_fee_per_gas,
                                       tx.gas, tx.to, tx.value, tx.data, tx.access_list, tx.y_parity, tx.r, tx.s)
    if kind == 0:
        return legacy_transaction(tx.nonce, tx.gas_price, tx.gas, tx.to, tx.value, tx.data, tx.v, tx.r, tx.s)
    if kind == 1:
        return access_list_transaction(tx.chain_id, tx.nonce, tx.gas_price, tx.gas, tx.to, tx.value, tx.data,
                                       tx.access_list, tx.y_parity, tx.r, tx.s)
    if kind == 3:
        return blob_transaction(tx.chain_id, tx.nonce, tx.max_priority_fee_per_gas, tx.max_fee_per_gas, tx.gas,
                                tx.to, tx.value, tx.data, tx.access_list, tx.max_fee_per_blob_gas,
                                tx.blob_versioned_hashes, tx.y_parity, tx.r, tx.s)
    if kind == 4:
        return set_code_transaction(tx.chain_id, tx.nonce, tx.max_priority_fee_per_gas, tx.max_fee_per_gas,
                                    tx.gas, tx.to, tx.value, tx.data, tx.access_list, tx.authorization_list,
                                    tx.y_parity, tx.r, tx.s)
    if kind == 0x7E and tx.source_hash is not None:
        return deposit_transaction(tx.source_hash, tx.sender, tx.to, tx.mint or 0, tx.value, tx.gas,
                                   tx.is_system_tx, tx.data)
    if kind == 0x6A:
        return arbitrum_internal_transaction(tx.chain_id, tx.data)
    raise Uncheckable(f"transaction type 0x{kind:x}")


# --- receipts and withdrawals: plain values -------------------------------------------------------


class Log(NamedTuple):
    address: bytes
    topics: Sequence[bytes]
    data: bytes


def bloom_bits(item: bytes) -> int:
    """The three bits of the 2048-bit logs bloom that an address or topic sets."""
    h = keccak(item)
    return (1 << (((h[0] << 8) | h[1]) & 2047)) | (1 << (((h[2] << 8) | h[3]) & 2047)) \
        | (1 << (((h[4] << 8) | h[5]) & 2047))


EMPTY_BLOOM = bytes(256)


def logs_bloom(logs: Sequence[Log]) -> bytes:
    """The logs bloom of a receipt (256 bytes), from its logs' addresses and topics."""
    bloom = 0
    for address, topics, _ in logs:
        bloom |= bloom_bits(address)
        for topic in topics:
            bloom |= bloom_bits(topic)
    return bloom.to_bytes(256, "big")


class Receipt(NamedTuple):
    """A receipt's encoded fields. `outcome` is the status (an int, since Byzantium) or the
    32-byte post-transaction state root (bytes, before it)."""

    type: int
    outcome: int | bytes
    cumulative_gas_used: int
    logs: Sequence[Log]
    deposit_nonce: int | None = None  # OP-stack deposit receipts since Regolith (encoded since Canyon)
    deposit_receipt_version: int | None = None  # since Canyon


def encode_receipt(receipt: Receipt) -> bytes:
    """A receipt as the receipts trie holds it: rlp([outcome, cumulativeGasUsed, logsBloom,
    logs]) behind its type byte (none for type 0), each log rlp([address, topics, data]), the
    bloom recomputed from the logs. OP-stack deposit receipts since Canyon (those with a
    depositReceiptVersion) append depositNonce and depositReceiptVersion; from Regolith to Canyon
    nodes send the nonce, but the receipts root left it out (op-geth's encoding, which reth
    matches by stripping it)."""
    kind, outcome, cumulative_gas_used, logs, deposit_nonce, deposit_receipt_version = receipt
    parts = [
        rlp_string(outcome) if isinstance(outcome, bytes) else rlp_int(outcome),
        rlp_int(cumulative_gas_used),
        rlp_string(logs_bloom(logs)),
        rlp_list(b"".join([rlp_list(rlp_string(address) + rlp_strings(topics) + rlp_string(data))
                           for address, topics, data in logs])),
    ]
    if deposit_receipt_version is not None and deposit_nonce is not None:
        parts.append(rlp_int(deposit_nonce))
        parts.append(rlp_int(deposit_receipt_version))
    body = rlp_list(b"".join(parts))
    return body if kind == 0 else BYTE[kind] + body


class Withdrawal(NamedTuple):
    index: int
    validator_index: int
    address: bytes
    amount: int  # gwei


def encode_withdrawal(withdrawal: Withdrawal) -> bytes:
    """EIP-4895: rlp([index, validatorIndex, address, amount])."""
    index, validator_index, address, amount = withdrawal
    return rlp_list(rlp_int(index) + rlp_int(validator_index) + rlp_string(address) + rlp_int(amount))


# --- the JSON-RPC JSON to plain values ------------------------------------------------------------


def transaction_type(tx: dict[str, Any]) -> int:
    """`type`, or for a node that predates typed transactions and sends none, the type the
    fields imply."""
    t = tx.get("type")
    if t is not None:
        return int(t, 16)
    if "authorizationList" in tx:
        return 4
    if "blobVersionedHashes" in tx or "maxFeePerBlobGas" in tx:
        return 3
    if tx.get("maxFeePerGas") is not None:
        return 2
    if tx.get("accessList") is not None:
        return 1
    return 0


def y_parity(tx: dict[str, Any]) -> int:
    """A typed transaction's (or authorization's) y parity: `yParity`, or `v` where a node sends
    only that (0 or 1, or 27/28 from some)."""
    y = tx.get("yParity")
    if y is not None:
        return int(y, 16)
    v = int(tx["v"], 16)
    return v if v < 2 else 1 - (v & 1)


def hex_bytes(value: str) -> bytes:
    if len(value) & 1:
        raise ValueError(f"hex data of odd length: {value[:20]!r}")
    return bytes.fromhex(value[2:])


def _optional_int(value: str | None) -> int | None:
    return None if value is None else int(value, 16)


def _to(value: str | None) -> bytes | None:
    return None if value is None or value == "0x" else hex_bytes(value)


def _input(tx: dict[str, Any]) -> str:
    data = tx.get("input")
    return tx["data"] if data is None else data


def transaction_from_json(tx: dict[str, Any]) -> Transaction:
    """A transaction of eth_getBlockByNumber(n, true) as plain values."""
    kind = transaction_type(tx)
    typed = kind in SIGNED_TYPES and kind != 0
    authorizations = tx.get("authorizationList")
    mint = tx.get("mint")
    return Transaction(
        type=kind,
        nonce=int(tx.get("nonce") or "0x0", 16),
        gas=int(tx["gas"], 16),
        to=_to(tx.get("to")),
        value=int(tx.get("value") or "0x0", 16),
        data=hex_bytes(_input(tx)),
        r=int(tx.get("r") or "0x0", 16),
        s=int(tx.get("s") or "0x0", 16),
        v=_optional_int(tx.get("v")),
        y_parity=y_parity(tx) if typed else _optional_int(tx.get("yParity")),
        chain_id=_optional_int(tx.get("chainId")),
        gas_price=_optional_int(tx.get("gasPrice")),
        max_priority_fee_per_gas=_optional_int(tx.get("maxPriorityFeePerGas")),
        max_fee_per_gas=_optional_int(tx.get("maxFeePerGas")),
        access_list=[(hex_bytes(e["address"]), [hex_bytes(k) for k in e["storageKeys"]]) for e in tx.get("accessList") or ()],
        max_fee_per_blob_gas=_optional_int(tx.get("maxFeePerBlobGas")),
        blob_versioned_hashes=[hex_bytes(h) for h in tx.get("blobVersionedHashes") or ()],
        authorization_list=[
            Authorization(int(a["chainId"], 16), hex_bytes(a["address"]), int(a["nonce"], 16), y_parity(a),
                          int(a["r"], 16), int(a["s"], 16))
            for a in authorizations or ()
        ],
        source_hash=None if tx.get("sourceHash") is None else hex_bytes(tx["sourceHash"]),
        sender=None if tx.get("from") is None else hex_bytes(tx["from"]),
        mint=int(mint, 16) if mint else None,
        is_system_tx=bool(tx.get("isSystemTx")),
    )


def outcome_json(receipt: dict[str, Any], prefer_status: bool) -> str:
    """The hex of what a receipt commits to: its post-transaction state root before Byzantium
    (`root`, 32 bytes), its status since. Nodes differ: Parity sends `"status": null` beside the
    root, go-ethereum no `status` at all, Nethermind both, cdk-erigon a zero root beside the
    status; Erigon and reth send a made-up status and no root before Byzantium."""
    root = receipt.get("root")
    status = receipt.get("status")
    if root is not None and len(root) == 66 and root != ZERO_HASH_HEX and (status is None or not prefer_status):
        return root
    if status is not None:
        return status
    raise Uncheckable("receipt without status or state root")


def receipt_from_json(receipt: dict[str, Any], tx_type: int = 0, *, prefer_status: bool = False) -> Receipt:
    """A receipt of eth_getBlockReceipts as plain values; `tx_type` stands in for a `type` the
    node does not send (nodes from before typed transactions)."""
    t = receipt.get("type")
    kind = tx_type if t is None else int(t, 16)
    outcome = outcome_json(receipt, prefer_status)
    deposit_nonce = version = None
    if kind == 0x7E:
        deposit_nonce = _optional_int(receipt.get("depositNonce"))
        version = _optional_int(receipt.get("depositReceiptVersion"))
    return Receipt(
        kind,
        hex_bytes(outcome) if len(outcome) == 66 else int(outcome, 16),
        int(receipt["cumulativeGasUsed"], 16),
        [Log(hex_bytes(e["address"]), [hex_bytes(t) for t in e["topics"]], hex_bytes(e["data"])) for e in receipt["logs"]],
        deposit_nonce,
        version,
    )


def withdrawal_from_json(withdrawal: dict[str, Any]) -> Withdrawal:
    return Withdrawal(int(withdrawal["index"], 16), int(withdrawal["validatorIndex"], 16),
                      hex_bytes(withdrawal["address"]), int(withdrawal["amount"], 16))
