"""A block's transactionsRoot, receiptsRoot and withdrawalsRoot recomputed from what the node
answered and compared with its header's, before anything is written: a node or provider that
left out, reordered or changed a transaction, receipt, log or withdrawal is caught.

The modules it stands on, bottom up, so that `indexer verify --roots` can recompute the same
roots from stored rows (`stored_roots.py`):
- `rlp_codec.py`: keccak-256 and RLP;
- `ordered_trie.py`: `ordered_trie_root` over a list of encodings;
- `encodings.py`: transactions, receipts and withdrawals as plain values, from the JSON or from
  rows, and their encodings;
- `json_encodings.py`: the same encodings straight from the JSON's hex digits, the path
  `check_block` takes.

`_native_roots.c` does what `check_block` does for a block whose roots all match, in one pass of
C, where the install could compile it (scripts/build_native.py): it answers "proven" or "not
mine to say", and for the second the Python below decides and words the answer, so both give the
same verdict on every block (tests/unit/test_native_roots.py). `NATIVE` says whether it is here.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..base.errors import ChainDataError
from .encodings import EMPTY_BLOOM, Uncheckable, transaction_type
from .json_encodings import encode_receipt_json, encode_transaction_json, encode_withdrawal_json
from .ordered_trie import EMPTY_ROOT_HEX, ZERO_HASH_HEX, ordered_trie_root
from .rlp_codec import keccak
from .rows import ZERO_BLOOM

try:
    from . import _native_roots
except ImportError:  # installed where no C compiler was found: the Python check does all the work
    _native_roots = None

NATIVE = _native_roots is not None


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
    if _native_roots is not None and _native_roots.roots_match(block, receipts, recompute_blooms):
        return None
    txs = block["transactions"]
    if block["transactionsRoot"] == ZERO_HASH_HEX or block["receiptsRoot"] == ZERO_HASH_HEX:
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
        if not withdrawals and withdrawals_root != EMPTY_ROOT_HEX and 0x7E in types:
            # The OP stack since Isthmus: withdrawalsRoot is the storage root of the L2-to-L1
            # message passer, and the withdrawals list always empty.
            return None
        if ordered_trie_root([encode_withdrawal_json(w) for w in withdrawals]).hex() != withdrawals_root[2:].lower():
            raise RootMismatch(f"withdrawals root mismatch at block {number}")
    return None
