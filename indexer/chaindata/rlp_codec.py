"""keccak-256 and RLP, encoded by the few small functions below rather than by the `rlp` package's
`rlp.encode`, which infers a sedes for every item and costs several times as much per
transaction. keccak-256 is eth-hash's pysha3 backend, on safe-pysha3 (a dependency: a C
extension, under 1 us a hash), or, where that cannot be imported, eth-hash's pycryptodome backend
(about 5 us a hash, through ctypes); `KECCAK_BACKEND` says which.
"""

from __future__ import annotations

from typing import Callable, Iterable


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

BYTE = [bytes((i,)) for i in range(256)]
EMPTY_STRING = b"\x80"  # rlp(b"") and rlp(0)
EMPTY_LIST = b"\xc0"


def long_prefix(length: int, offset: int) -> bytes:
    size = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return BYTE[offset + 55 + len(size)] + size


# The prefix of a string or list of n < 256 bytes, short form or long.
STRING_PREFIX = [BYTE[0x80 + n] if n < 56 else long_prefix(n, 0x80) for n in range(256)]
LIST_PREFIX = [BYTE[0xC0 + n] if n < 56 else long_prefix(n, 0xC0) for n in range(256)]


def rlp_string(value: bytes) -> bytes:
    """rlp(value) for a byte string."""
    n = len(value)
    if n < 256:
        if n == 1 and value[0] < 0x80:
            return value
        return STRING_PREFIX[n] + value
    return long_prefix(n, 0x80) + value


def rlp_int(value: int) -> bytes:
    """rlp(value) for a non-negative integer: its big-endian bytes without leading zeros."""
    if value < 0x80:
        if value > 0:
            return BYTE[value]
        if value == 0:
            return EMPTY_STRING
        raise ValueError(f"RLP cannot encode the negative integer {value}")
    size = (value.bit_length() + 7) // 8
    if size < 56:
        return BYTE[0x80 + size] + value.to_bytes(size, "big")
    return rlp_string(value.to_bytes(size, "big"))


def rlp_list(payload: bytes) -> bytes:
    """rlp([...]) from `payload`, the concatenated encodings of the items."""
    n = len(payload)
    return (LIST_PREFIX[n] if n < 256 else long_prefix(n, 0xC0)) + payload


def rlp_address(to: bytes | None) -> bytes:
    return EMPTY_STRING if to is None else rlp_string(to)


def rlp_strings(items: Iterable[bytes]) -> bytes:
    return rlp_list(b"".join([rlp_string(item) for item in items]))
