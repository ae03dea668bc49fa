"""The eras of the mainnet-shaped node (`mainnet_node.py`): what a block of each looked like on
mainnet (transaction types, calldata, logs, receipts, withdrawals), the shapes of its
transactions, and a block's height, timestamp and hash.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


from ..chaindata import rlp_codec
from . import fixtures


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


def recorded_shapes() -> list[Shape]:
    recorded = fixtures.load("mainnet-18000000")
    shapes = []
    for tx, receipt in zip(recorded["block"]["transactions"], recorded["receipts"]):
        logs = [(len(entry["topics"]), (len(entry["data"]) - 2) // 2) for entry in receipt["logs"]]
        kind = "legacy" if tx["type"] == "0x0" else "dynamic"
        shapes.append((kind, tx["to"] is None, (len(tx["input"]) - 2) // 2, logs, receipt["status"] == "0x0"))
    return shapes


def mixed_shape(rng: random.Random, kind: str) -> Shape:
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


def draw_count(rng: random.Random, mean: float) -> int:
    """A whole count of mean `mean`: its floor, plus one with the fraction's chance."""
    whole = int(mean)
    return whole + (rng.random() < mean - whole)


def weighted(rng: random.Random, weights: dict[str, float]) -> str:
    return rng.choices(list(weights), list(weights.values()))[0]


def draw_tx_type(rng: random.Random, era: Era, kind: str) -> int:
    if era.recorded:
        return 0 if kind == "legacy" else 2
    roll = rng.random()
    if roll < era.type1:
        return 1
    return 2 if roll < era.type1 + era.type2 else 0


def calldata(rng: random.Random, size: int) -> bytes:
    """Calldata as contracts get it: 32-byte words, half of them mostly zero padding."""
    out = bytearray(rng.randbytes(size))
    for word in range(4, size - 32, 64):
        out[word:word + 24] = bytes(24)
    return bytes(out)
