"""The root of an ordered trie (the transactions', receipts' and withdrawals' tries of a block:
key rlp(i), value the i-th encoding), computed from the sorted keys in one pass, with as few
Python calls per node as the shape allows (BENCHMARKS.md, "Root checks": 10x py-trie's
HexaryTrie on a mainnet block).
"""

from __future__ import annotations

from typing import Sequence

from .rlp_codec import (BYTE, EMPTY_STRING, LIST_PREFIX, STRING_PREFIX, keccak, long_prefix, rlp_int, rlp_list,
                        rlp_string)

EMPTY_ROOT = keccak(EMPTY_STRING)  # 0x56e81f...b421: the root of a trie with nothing in it
EMPTY_ROOT_HEX = "0x" + EMPTY_ROOT.hex()
ZERO_HASH_HEX = "0x" + "00" * 32

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
            encoded += (STRING_PREFIX[n] if n < 256 else long_prefix(n, 0x80)) + value
        n = len(encoded)
        if n < 31:  # the node's encoding, one byte more, is under 32 bytes: held inline
            return LIST_PREFIX[n] + encoded
        return b"\xa0" + keccak((LIST_PREFIX[n] if n < 256 else long_prefix(n, 0xC0)) + encoded)
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
    prefix = b"" if n == 1 and value[0] < 0x80 else STRING_PREFIX[n] if n < 256 else long_prefix(n, 0x80)
    n += len(path) + len(prefix)
    if n < 31:
        return LIST_PREFIX[n] + path + prefix + value
    return b"\xa0" + keccak(b"".join((LIST_PREFIX[n] if n < 256 else long_prefix(n, 0xC0), path, prefix, value)))


_ODD_LEAF_PATHS = [BYTE[0x30 + nibble] for nibble in range(16)]  # one nibble left: 0x3N


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
