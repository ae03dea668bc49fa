"""A block's transactionsRoot, receiptsRoot and withdrawalsRoot recomputed from what the node
answered and compared with its header's, before anything is written: a node or provider that
left out, reordered or changed a transaction, receipt, log or withdrawal is caught.

The layers, so that `indexer verify --roots` can recompute the same roots from stored rows:
- plain values (ints, bytes, small named tuples) to encodings: `encode_transaction` (and one
  function per type: `legacy_transaction` ... `set_code_transaction`, `deposit_transaction`,
  `arbitrum_internal_transaction`), `encode_receipt` (its bloom recomputed from its logs),
  `encode_withdrawal`; `ordered_trie_root` over the encodings;
- the JSON-RPC JSON (hex strings as nodes send them) to those plain values:
  `transaction_from_json`, `receipt_from_json`, `withdrawal_from_json`;
- the hot path of `check_block`: the same encodings made straight from the JSON's hex digits
  (`encode_transaction_json`, `encode_receipt_json`, `encode_withdrawal_json`), with one
  `bytes.fromhex` per transaction or receipt instead of an int or bytes object per field (1.3x
  as fast for transactions, 1.8x for receipts with logs). The tests hold both paths, byte for byte, against each other and against the
  `rlp` package, on every recorded block.

RLP is encoded by the few small functions below rather than by `rlp.encode`, which infers a
sedes for every item and costs several times as much per transaction. keccak-256 is eth-hash's
pysha3 backend, on safe-pysha3 (a dependency: a C extension, under 1 us a hash), or, where that
cannot be imported, eth-hash's pycryptodome backend (about 5 us a hash, through ctypes);
`KECCAK_BACKEND` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple, Sequence

from .rows import ZERO_BLOOM, ChainDataError

# --- keccak-256 -----------------------------------------------------------------------------------


def _keccak_backend() -> tuple[Callable[[bytes], bytes], str]:
    try:
        from eth_hash.backends.pysha3 import keccak256

        name = "eth-hash pysha3 backend (safe-pysha3)"
    except ImportError:
        from eth_hash.auto import keccak as keccak256

        name = "eth-hash auto backend (pycryptodome)"
    if keccak256(b"") != bytes.fromhex("c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"):
        raise ImportError(f"{name} is not keccak-256")
    return keccak256, name


keccak, KECCAK_BACKEND = _keccak_backend()

# --- RLP ------------------------------------------------------------------------------------------

_BYTE = [bytes((i,)) for i in range(256)]
EMPTY_STRING = b"\x80"  # rlp(b"") and rlp(0)
EMPTY_LIST = b"\xc0"


def _long_prefix(length: int, offset: int) -> bytes:
    size = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return _BYTE[offset + 55 + len(size)] + size


# The prefix of a string or list of n < 256 bytes, short form or long.
_STRING_PREFIX = [_BYTE[0x80 + n] if n < 56 else _long_prefix(n, 0x80) for n in range(256)]
_LIST_PREFIX = [_BYTE[0xC0 + n] if n < 56 else _long_prefix(n, 0xC0) for n in range(256)]


def rlp_string(value: bytes) -> bytes:
    """rlp(value) for a byte string."""
    n = len(value)
    if n < 256:
        if n == 1 and value[0] < 0x80:
            return value
        return _STRING_PREFIX[n] + value
    return _long_prefix(n, 0x80) + value


def rlp_int(value: int) -> bytes:
    """rlp(value) for a non-negative integer: its big-endian bytes without leading zeros."""
    if value < 0x80:
        if value > 0:
            return _BYTE[value]
        if value == 0:
            return EMPTY_STRING
        raise ValueError(f"RLP cannot encode the negative integer {value}")
    size = (value.bit_length() + 7) // 8
    if size < 56:
        return _BYTE[0x80 + size] + value.to_bytes(size, "big")
    return rlp_string(value.to_bytes(size, "big"))


def rlp_list(payload: bytes) -> bytes:
    """rlp([...]) from `payload`, the concatenated encodings of the items."""
    n = len(payload)
    return (_LIST_PREFIX[n] if n < 256 else _long_prefix(n, 0xC0)) + payload


def _rlp_address(to: bytes | None) -> bytes:
    return EMPTY_STRING if to is None else rlp_string(to)


def _rlp_strings(items: Iterable[bytes]) -> bytes:
    return rlp_list(b"".join([rlp_string(item) for item in items]))


# --- the ordered trie -----------------------------------------------------------------------------

EMPTY_ROOT = keccak(EMPTY_STRING)  # 0x56e81f...b421: the root of a trie with nothing in it
_EMPTY_ROOT_HEX = "0x" + EMPTY_ROOT.hex()
_ZERO_HASH_HEX = "0x" + "00" * 32

# rlp(i) as hex digits, the key's nibbles, for the first indices (more are made when asked for).
_KEYS = [rlp_int(i).hex() for i in range(1024)]


def _key(i: int) -> str:
    return _KEYS[i] if i < 1024 else rlp_int(i).hex()


def _compact(nibbles: str, leaf: bool) -> bytes:
    """rlp(hex-prefix encoding) of a path of nibbles, given as hex digits."""
    if len(nibbles) & 1:
        return rlp_string(bytes.fromhex(("3" if leaf else "1") + nibbles))
    return rlp_string(bytes.fromhex(("20" if leaf else "00") + nibbles))


# A leaf's path is what is left of its key: for up to 128 values, one nibble or none.
_LEAF_PATHS = {nibbles: _compact(nibbles, True) for nibbles in ("", *"0123456789abcdef")}


def _node(items: list[tuple[str, bytes]], depth: int) -> bytes:
    """How the parent holds the node of `items` below `depth` nibbles of their keys: the node's
    encoding when under 32 bytes, else rlp(keccak(encoding)). `items` are (key, value) sorted
    by key, none a prefix of another (rlp(i) is a prefix-free code, so no branch holds a value)."""
    if len(items) == 1:
        key, value = items[0]
        path = key[depth:]
        encoded = _LEAF_PATHS.get(path) or _compact(path, True)
        n = len(value)
        if n == 1 and value[0] < 0x80:
            encoded += value
        else:
            encoded += (_STRING_PREFIX[n] if n < 256 else _long_prefix(n, 0x80)) + value
        n = len(encoded)
        if n < 31:  # the node's encoding, one byte more, is under 32 bytes: held inline
            return _LIST_PREFIX[n] + encoded
        return b"\xa0" + keccak((_LIST_PREFIX[n] if n < 256 else _long_prefix(n, 0xC0)) + encoded)
    first, last = items[0][0], items[-1][0]
    shared = depth
    while first[shared] == last[shared]:
        shared += 1
    if shared > depth:
        encoded = rlp_list(_compact(first[depth:shared], False) + _node(items, shared))
    else:
        slots = [EMPTY_STRING] * 17
        start = 0
        nibble = first[depth]
        for i in range(1, len(items)):
            next_nibble = items[i][0][depth]
            if next_nibble != nibble:
                slots[int(nibble, 16)] = _node(items[start:i], depth + 1)
                start, nibble = i, next_nibble
        slots[int(nibble, 16)] = _node(items[start:], depth + 1)
        encoded = rlp_list(b"".join(slots))
    return encoded if len(encoded) < 32 else b"\xa0" + keccak(encoded)


def _leaf(path: bytes, value: bytes) -> bytes:
    """How a parent holds the leaf of `value`, `path` being rlp(the rest of its key, hex-prefix
    encoded) and a single byte."""
    n = len(value)
    prefix = b"" if n == 1 and value[0] < 0x80 else _STRING_PREFIX[n] if n < 256 else _long_prefix(n, 0x80)
    n += len(path) + len(prefix)
    if n < 31:
        return _LIST_PREFIX[n] + path + prefix + value
    return b"\xa0" + keccak(b"".join((_LIST_PREFIX[n] if n < 256 else _long_prefix(n, 0xC0), path, prefix, value)))


_ODD_LEAF_PATHS = [_BYTE[0x30 + nibble] for nibble in range(16)]  # one nibble left: 0x3N


def _small_root(values: Sequence[bytes]) -> bytes:
    """ordered_trie_root of 2 to 128 values, whose keys are one byte: 0x01..0x7f, and 0x80 for
    value 0. The root is a branch on the high nibble: its slot 8 the leaf of value 0, slot g
    the values 16g..16g+15 (a leaf if one, else a branch on the low nibble)."""
    n = len(values)
    slots = [EMPTY_STRING] * 17
    slots[8] = _leaf(b"\x30", values[0])
    for g in range(8):
        low, high = (16 * g) or 1, min(16 * g + 16, n)
        if high - low < 2:
            if high - low == 1:
                slots[g] = _leaf(_ODD_LEAF_PATHS[low & 15], values[low])
            break
        branch = [EMPTY_STRING] * 17
        for i in range(low, high):
            branch[i & 15] = _leaf(b"\x20", values[i])
        node = rlp_list(b"".join(branch))
        slots[g] = node if len(node) < 32 else b"\xa0" + keccak(node)
    return keccak(rlp_list(b"".join(slots)))


def ordered_trie_root(values: Sequence[bytes]) -> bytes:
    """The root of the Merkle-Patricia trie that maps rlp(i) to values[i]: Ethereum's
    transactionsRoot, receiptsRoot and withdrawalsRoot of the encodings in block order."""
    n = len(values)
    if n == 0:
        return EMPTY_ROOT
    if 1 < n <= 128:
        return _small_root(values)
    # Keys in byte order: rlp(1)..rlp(127) are the bytes 0x01..0x7f, then rlp(0) = 0x80, then
    # rlp(128..255) = 0x81xx, rlp(256..65535) = 0x82xxxx, ...
    order = [*range(1, min(n, 128)), 0, *range(128, n)]
    node = _node([(_key(i), values[i]) for i in order], 0)
    # The root is hashed even when its node is under 32 bytes.
    return node[1:] if len(node) == 33 and node[0] == 0xA0 else keccak(node)


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
    return rlp_list(b"".join([rlp_list(rlp_string(address) + _rlp_strings(keys)) for address, keys in access_list]))


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
    return rlp_list(b"".join((rlp_int(nonce), rlp_int(gas_price), rlp_int(gas), _rlp_address(to), rlp_int(value),
                              rlp_string(data), rlp_int(v), rlp_int(r), rlp_int(s))))


def access_list_transaction(chain_id: int, nonce: int, gas_price: int, gas: int, to: bytes | None, value: int,
                            data: bytes, access_list: AccessList, y_parity: int, r: int, s: int) -> bytes:
    """Type 1 (EIP-2930): 0x01 || rlp([chainId, nonce, gasPrice, gas, to, value, data,
    accessList, yParity, r, s])."""
    return b"\x01" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(gas_price), rlp_int(gas), _rlp_address(to), rlp_int(value),
        rlp_string(data), _rlp_access_list(access_list), rlp_int(y_parity), rlp_int(r), rlp_int(s))))


def dynamic_fee_transaction(chain_id: int, nonce: int, max_priority_fee_per_gas: int, max_fee_per_gas: int,
                            gas: int, to: bytes | None, value: int, data: bytes, access_list: AccessList,
                            y_parity: int, r: int, s: int) -> bytes:
    """Type 2 (EIP-1559): 0x02 || rlp([chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas,
    to, value, data, accessList, yParity, r, s])."""
    return b"\x02" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(max_priority_fee_per_gas), rlp_int(max_fee_per_gas),
        rlp_int(gas), _rlp_address(to), rlp_int(value), rlp_string(data), _rlp_access_list(access_list),
        rlp_int(y_parity), rlp_int(r), rlp_int(s))))


def blob_transaction(chain_id: int, nonce: int, max_priority_fee_per_gas: int, max_fee_per_gas: int, gas: int,
                     to: bytes | None, value: int, data: bytes, access_list: AccessList, max_fee_per_blob_gas: int,
                     blob_versioned_hashes: Sequence[bytes], y_parity: int, r: int, s: int) -> bytes:
    """Type 3 (EIP-4844), as a block holds it (without the blobs): 0x03 || rlp([chainId, nonce,
    maxPriorityFeePerGas, maxFeePerGas, gas, to, value, data, accessList, maxFeePerBlobGas,
    blobVersionedHashes, yParity, r, s])."""
    return b"\x03" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(max_priority_fee_per_gas), rlp_int(max_fee_per_gas),
        rlp_int(gas), _rlp_address(to), rlp_int(value), rlp_string(data), _rlp_access_list(access_list),
        rlp_int(max_fee_per_blob_gas), _rlp_strings(blob_versioned_hashes), rlp_int(y_parity), rlp_int(r),
        rlp_int(s))))


def set_code_transaction(chain_id: int, nonce: int, max_priority_fee_per_gas: int, max_fee_per_gas: int,
                         gas: int, to: bytes | None, value: int, data: bytes, access_list: AccessList,
                         authorization_list: Sequence[Authorization], y_parity: int, r: int, s: int) -> bytes:
    """Type 4 (EIP-7702): 0x04 || rlp([chainId, nonce, maxPriorityFeePerGas, maxFeePerGas, gas,
    to, value, data, accessList, authorizationList, yParity, r, s]), each authorization
    [chainId, address, nonce, yParity, r, s]."""
    return b"\x04" + rlp_list(b"".join((
        rlp_int(chain_id), rlp_int(nonce), rlp_int(max_priority_fee_per_gas), rlp_int(max_fee_per_gas),
        rlp_int(gas), _rlp_address(to), rlp_int(value), rlp_string(data), _rlp_access_list(access_list),
        _rlp_authorizations(authorization_list), rlp_int(y_parity), rlp_int(r), rlp_int(s))))


def deposit_transaction(source_hash: bytes, sender: bytes, to: bytes | None, mint: int, value: int, gas: int,
                        is_system_tx: bool, data: bytes) -> bytes:
    """OP-stack deposit, type 0x7e: 0x7e || rlp([sourceHash, from, to, mint, value, gas,
    isSystemTx, data]) (no mint is 0; isSystemTx false is the empty string)."""
    return b"\x7e" + rlp_list(b"".join((
        rlp_string(source_hash), rlp_string(sender), _rlp_address(to), rlp_int(mint), rlp_int(value), rlp_int(gas),
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


def _bloom_bits(item: bytes) -> int:
    """The three bits of the 2048-bit logs bloom that an address or topic sets."""
    h = keccak(item)
    return (1 << (((h[0] << 8) | h[1]) & 2047)) | (1 << (((h[2] << 8) | h[3]) & 2047)) \
        | (1 << (((h[4] << 8) | h[5]) & 2047))


EMPTY_BLOOM = bytes(256)


def logs_bloom(logs: Sequence[Log]) -> bytes:
    """The logs bloom of a receipt (256 bytes), from its logs' addresses and topics."""
    bloom = 0
    for address, topics, _ in logs:
        bloom |= _bloom_bits(address)
        for topic in topics:
            bloom |= _bloom_bits(topic)
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
        rlp_list(b"".join([rlp_list(rlp_string(address) + _rlp_strings(topics) + rlp_string(data))
                           for address, topics, data in logs])),
    ]
    if deposit_receipt_version is not None and deposit_nonce is not None:
        parts.append(rlp_int(deposit_nonce))
        parts.append(rlp_int(deposit_receipt_version))
    body = rlp_list(b"".join(parts))
    return body if kind == 0 else _BYTE[kind] + body


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


def _y_parity(tx: dict[str, Any]) -> int:
    """A typed transaction's (or authorization's) y parity: `yParity`, or `v` where a node sends
    only that (0 or 1, or 27/28 from some)."""
    y = tx.get("yParity")
    if y is not None:
        return int(y, 16)
    v = int(tx["v"], 16)
    return v if v < 2 else 1 - (v & 1)


def _bytes(value: str) -> bytes:
    if len(value) & 1:
        raise ValueError(f"hex data of odd length: {value[:20]!r}")
    return bytes.fromhex(value[2:])


def _optional_int(value: str | None) -> int | None:
    return None if value is None else int(value, 16)


def _to(value: str | None) -> bytes | None:
    return None if value is None or value == "0x" else _bytes(value)


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
        data=_bytes(_input(tx)),
        r=int(tx.get("r") or "0x0", 16),
        s=int(tx.get("s") or "0x0", 16),
        v=_optional_int(tx.get("v")),
        y_parity=_y_parity(tx) if typed else _optional_int(tx.get("yParity")),
        chain_id=_optional_int(tx.get("chainId")),
        gas_price=_optional_int(tx.get("gasPrice")),
        max_priority_fee_per_gas=_optional_int(tx.get("maxPriorityFeePerGas")),
        max_fee_per_gas=_optional_int(tx.get("maxFeePerGas")),
        access_list=[(_bytes(e["address"]), [_bytes(k) for k in e["storageKeys"]]) for e in tx.get("accessList") or ()],
        max_fee_per_blob_gas=_optional_int(tx.get("maxFeePerBlobGas")),
        blob_versioned_hashes=[_bytes(h) for h in tx.get("blobVersionedHashes") or ()],
        authorization_list=[
            Authorization(int(a["chainId"], 16), _bytes(a["address"]), int(a["nonce"], 16), _y_parity(a),
                          int(a["r"], 16), int(a["s"], 16))
            for a in authorizations or ()
        ],
        source_hash=None if tx.get("sourceHash") is None else _bytes(tx["sourceHash"]),
        sender=None if tx.get("from") is None else _bytes(tx["from"]),
        mint=int(mint, 16) if mint else None,
        is_system_tx=bool(tx.get("isSystemTx")),
    )


def _outcome_json(receipt: dict[str, Any], prefer_status: bool) -> str:
    """The hex of what a receipt commits to: its post-transaction state root before Byzantium
    (`root`, 32 bytes), its status since. Nodes differ: Parity sends `"status": null` beside the
    root, go-ethereum no `status` at all, Nethermind both, cdk-erigon a zero root beside the
    status; Erigon and reth send a made-up status and no root before Byzantium."""
    root = receipt.get("root")
    status = receipt.get("status")
    if root is not None and len(root) == 66 and root != _ZERO_HASH_HEX and (status is None or not prefer_status):
        return root
    if status is not None:
        return status
    raise Uncheckable("receipt without status or state root")


def receipt_from_json(receipt: dict[str, Any], tx_type: int = 0, *, prefer_status: bool = False) -> Receipt:
    """A receipt of eth_getBlockReceipts as plain values; `tx_type` stands in for a `type` the
    node does not send (nodes from before typed transactions)."""
    t = receipt.get("type")
    kind = tx_type if t is None else int(t, 16)
    outcome = _outcome_json(receipt, prefer_status)
    deposit_nonce = version = None
    if kind == 0x7E:
        deposit_nonce = _optional_int(receipt.get("depositNonce"))
        version = _optional_int(receipt.get("depositReceiptVersion"))
    return Receipt(
        kind,
        _bytes(outcome) if len(outcome) == 66 else int(outcome, 16),
        int(receipt["cumulativeGasUsed"], 16),
        [Log(_bytes(e["address"]), [_bytes(t) for t in e["topics"]], _bytes(e["data"])) for e in receipt["logs"]],
        deposit_nonce,
        version,
    )


def withdrawal_from_json(withdrawal: dict[str, Any]) -> Withdrawal:
    return Withdrawal(int(withdrawal["index"], 16), int(withdrawal["validatorIndex"], 16),
                      _bytes(withdrawal["address"]), int(withdrawal["amount"], 16))


# --- the hot path: the same encodings straight from the JSON's hex digits -------------------------

_STRING_HEX = [prefix.hex() for prefix in _STRING_PREFIX]  # for n < 256 bytes
_LIST_HEX = [prefix.hex() for prefix in _LIST_PREFIX]
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
    return _quantity_hex(y) if y is not None else rlp_int(_y_parity(tx)).hex()


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
    outcome = _outcome_json(receipt, prefer_status)
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
                    b = cache[address] = _bloom_bits(_bytes(address))
                bits |= b
                for topic in topics:
                    b = cache.get(topic)
                    if b is None:
                        b = cache[topic] = _bloom_bits(_bytes(topic))
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
    body = (_LIST_PREFIX[n] if n < 256 else _long_prefix(n, 0xC0)) + body
    return (body if kind == 0 else _BYTE[kind] + body), bloom


def encode_withdrawal_json(withdrawal: dict[str, Any]) -> bytes:
    """`encode_withdrawal(withdrawal_from_json(withdrawal))`, from the hex digits directly."""
    return bytes.fromhex(_list_hex(
        _quantity_hex(withdrawal["index"]) + _quantity_hex(withdrawal["validatorIndex"])
        + _address_hex(withdrawal["address"]) + _quantity_hex(withdrawal["amount"])))


# --- the check ------------------------------------------------------------------------------------


class RootMismatch(ChainDataError):
    """A root recomputed from the node's answers differs from its header's: something was left
    out, reordered or changed."""


# Byzantium (EIP-658: receipts carry a status instead of the state root), for chains with blocks
# before it. Erigon and reth send pre-Byzantium receipts with a made-up status and no root,
# which cannot be checked. For a chain not listed here and not known to be younger, every block
# below mainnet's Byzantium that has no base fee and no typed transaction may predate it.
BYZANTIUM = {1: 4_370_000, 3: 1_700_000, 4: 1_035_301, 42: 5_067_000, 61: 8_772_000}
# Chains whose blocks list unsigned system transactions that their transactions root leaves out.
UNSIGNED_SYSTEM_TRANSACTIONS = frozenset((137, 80001, 80002))  # Polygon PoS, Mumbai, Amoy

# Keys nodes send besides the encoded ones, known not to take part in the encoding. On a root
# mismatch, a key outside these in a transaction or receipt is a chain's own field that this
# module does not encode (Celo's feeCurrency, say): the block is uncheckable, not wrong.
TRANSACTION_KEYS = frozenset((
    "blockHash", "blockNumber", "blockTimestamp", "from", "hash", "transactionIndex", "type", "nonce", "gas",
    "gasPrice", "maxFeePerGas", "maxPriorityFeePerGas", "maxFeePerBlobGas", "to", "value", "input", "data", "v",
    "r", "s", "yParity", "chainId", "accessList", "blobVersionedHashes", "authorizationList",
    "raw", "publicKey", "standardV", "creates", "condition",  # Parity / OpenEthereum
    "sourceHash", "mint", "isSystemTx", "depositReceiptVersion",  # OP-stack deposits
))
RECEIPT_KEYS = frozenset((
    "blockHash", "blockNumber", "blockTimestamp", "contractAddress", "cumulativeGasUsed", "effectiveGasPrice",
    "from", "to", "gasUsed", "logs", "logsBloom", "root", "status", "transactionHash", "transactionIndex", "type",
    "blobGasUsed", "blobGasPrice",
    "gasUsedForL1", "l1BlockNumber", "timeboosted",  # Arbitrum
    "l1Fee", "l1GasPrice", "l1GasUsed", "l1FeeScalar", "l1BaseFeeScalar", "l1BlobBaseFee",  # OP stack
    "l1BlobBaseFeeScalar", "operatorFeeScalar", "operatorFeeConstant", "depositNonce", "depositReceiptVersion",
))
LOG_KEYS = frozenset((
    "address", "topics", "data", "blockHash", "blockNumber", "blockTimestamp", "transactionHash",
    "transactionIndex", "logIndex", "removed",
    "transactionLogIndex", "type",  # Parity
))


def _unknown_keys(objects: Iterable[dict[str, Any]], known: frozenset[str]) -> list[str]:
    unknown: set[str] = set()
    for obj in objects:
        if not known.issuperset(obj):
            unknown.update(k for k in obj if k not in known)
    return sorted(unknown)


def _fields_reason(what: str, unknown: list[str]) -> str:
    more = ", ..." if len(unknown) > 3 else ""
    return f"{what} carry fields this check does not encode ({', '.join(unknown[:3])}{more})"


def _explain_transactions(number: int, txs: list[dict[str, Any]], encoded: list[bytes]) -> str:
    """The transactions root differs. A reason if a transaction that does not hash to its own
    `hash` has fields not encoded here; RootMismatch otherwise (transactions missing, added or
    reordered, or a field changed). OP-stack deposits are no exception: their encoding is
    proven on recorded blocks of OP Goerli, Base Goerli and OP Sepolia (tests/fixtures)."""
    for tx, enc in zip(txs, encoded):
        if "0x" + keccak(enc).hex() == str(tx.get("hash", "")).lower():
            continue
        unknown = _unknown_keys([tx], TRANSACTION_KEYS)
        if unknown:
            return _fields_reason("transactions", unknown)
    raise RootMismatch(f"transactions root mismatch at block {number}")


def _maybe_pre_byzantium(number: int, block: dict[str, Any], chain_id: int | None) -> bool:
    """Whether the block may predate Byzantium: on a chain known to have blocks before it (or,
    with no chain id given, mainnet), below its Byzantium block, with no base fee (London) and
    no typed transaction (Berlin). A chain not known here gets no such benefit of the doubt: a
    receipt left out there is a mismatch, not an old block."""
    if chain_id is None:
        chain_id = 1
    if chain_id not in BYZANTIUM:
        return False
    if number >= BYZANTIUM[chain_id] or "baseFeePerGas" in block:
        return False
    return all(transaction_type(tx) == 0 for tx in block["transactions"])


def _explain_receipts(number: int, block: dict[str, Any], receipts: list[dict[str, Any]],
                      chain_id: int | None) -> str:
    """The receipts root differs. A reason if the receipts hold what this module cannot encode
    for sure; RootMismatch otherwise."""
    txs = block["transactions"]
    if _maybe_pre_byzantium(number, block, chain_id) and any(r.get("root") is None for r in receipts):
        return "pre-Byzantium receipts without their state root"
    unknown = _unknown_keys(txs, TRANSACTION_KEYS)
    if unknown:
        return _fields_reason("transactions", unknown)
    unknown = _unknown_keys(receipts, RECEIPT_KEYS) \
        or _unknown_keys((entry for r in receipts for entry in r.get("logs") or ()), LOG_KEYS)
    if unknown:
        return _fields_reason("receipts", unknown)
    raise RootMismatch(f"receipts root mismatch at block {number}")


def check_block(block: dict[str, Any], receipts: list[dict[str, Any]], *, chain_id: int | None = None,
                recompute_blooms: bool = True) -> str | None:
    """Recompute the roots `block` (eth_getBlockByNumber(n, true)) carries from its
    transactions, `receipts` (the block's receipts, in order) and its withdrawals, and compare
    them with the header's: transactionsRoot and receiptsRoot always, withdrawalsRoot when the
    header has one.

    None: every root was proven. RootMismatch ("receipts root mismatch at block N"; the caller
    adds the endpoint): a root differs, or a receipt's logsBloom is not the bloom of its logs.
    A short reason, stable enough to count blocks by: the block cannot be checked (a
    transaction of a type not encoded here, a system transaction, or a root that differs where
    the answers carry fields not encoded here: a chain's own transaction fields, pre-Byzantium
    receipts sent without their state root). Such a block is
    never reported as a mismatch. `chain_id` narrows which blocks may predate Byzantium (see
    BYZANTIUM); without it, those below mainnet's.

    `recompute_blooms=False` puts each receipt's own logsBloom in its encoding rather than the
    bloom recomputed from its logs: as strong a proof (the root commits to the bloom too: a
    bloom that disagrees with the logs, or a log missing, still changes the root), for less CPU
    (no keccak of each address and topic); a bad bloom is then a receipts root mismatch."""
    number = int(block["number"], 16)
    txs = block["transactions"]
    if block["transactionsRoot"] == _ZERO_HASH_HEX or block["receiptsRoot"] == _ZERO_HASH_HEX:
        return "the header's transactions or receipts root is zero"

    try:
        encoded = [encode_transaction_json(tx) for tx in txs]
    except Uncheckable as exc:
        if not str(exc).startswith("unsigned"):
            return str(exc)
        # Only chains known to list unsigned system transactions (Polygon PoS's state syncs)
        # may: anywhere else one is a transaction the block never held.
        if chain_id not in UNSIGNED_SYSTEM_TRANSACTIONS:
            raise RootMismatch(f"transactions root mismatch at block {number}") from None
        return str(exc)
    if ordered_trie_root(encoded).hex() != block["transactionsRoot"][2:].lower():
        return _explain_transactions(number, txs, encoded)
    types = [enc[0] if enc[0] < 0x80 else 0 for enc in encoded]

    cache: dict[str, int] = {}
    receipt_encodings = []
    blooms = []
    try:
        for i, receipt in enumerate(receipts):
            enc, bloom = encode_receipt_json(receipt, types[i] if i < len(types) else 0, cache,
                                             recompute_bloom=recompute_blooms)
            receipt_encodings.append(enc)
            blooms.append(bloom)
        expected = block["receiptsRoot"][2:].lower()
        if ordered_trie_root(receipt_encodings).hex() != expected:
            # Where a node sends both a state root and a status, the other may be the one.
            both = {i for i, r in enumerate(receipts) if r.get("root") is not None and r.get("status") is not None}
            if not both or ordered_trie_root([
                encode_receipt_json(r, types[i] if i < len(types) else 0, cache, prefer_status=True,
                                    recompute_bloom=recompute_blooms)[0]
                if i in both else receipt_encodings[i] for i, r in enumerate(receipts)
            ]).hex() != expected:
                return _explain_receipts(number, block, receipts, chain_id)
    except Uncheckable as exc:
        return str(exc)
    for i, (receipt, bloom) in enumerate(zip(receipts, blooms)):
        sent = receipt.get("logsBloom")
        if sent is None or bloom is None:
            continue
        if bloom is EMPTY_BLOOM:
            if sent == ZERO_BLOOM:
                continue
        elif sent[2:] == bloom.hex():
            continue
        if sent[2:].lower() != bloom.hex():
            raise RootMismatch(f"logs bloom mismatch at block {number} (receipt {i})")

    withdrawals_root = block.get("withdrawalsRoot")
    if withdrawals_root is not None:
        withdrawals = block.get("withdrawals") or ()
        if not withdrawals and withdrawals_root != _EMPTY_ROOT_HEX and 0x7E in types:
            # The OP stack since Isthmus: withdrawalsRoot is the storage root of the L2-to-L1
            # message passer, and the withdrawals list always empty.
            return None
        if ordered_trie_root([encode_withdrawal_json(w) for w in withdrawals]).hex() != withdrawals_root[2:].lower():
            raise RootMismatch(f"withdrawals root mismatch at block {number}")
    return None
