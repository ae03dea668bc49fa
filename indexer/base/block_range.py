"""The `index_blocks` job and its payload: a range of blocks, both ends inclusive.

The payload is the article's `{"from": F, "to": T}` with JSON whole numbers
`0 <= F <= T <= MAX_BLOCK`. This module is its one owner in Python: the planner and
`verify --repair` cut ranges on the same grid (`cut`; the planner does it in SQL), `queue.enqueue`
refuses any other payload for a kind in `RANGE_KINDS` (`check_payload`), and the worker reads a
claimed job's range with `BlockRange.of`. The database enforces the same format
(schema/007_block_range_payloads.sql): the `block_ranges` view reads it for planning and
progress, and a CHECK constraint on `jobs` refuses any other payload for these kinds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JOB_KIND = "index_blocks"
# Decodes the stored logs of a range (indexer/jobs/decode_logs.py); enqueued by the completion of the
# `index_blocks` job of the same range (queue.py).
DECODE_LOGS = "decode_logs"
# Builds the query indexes of one partition of the chain tables, whose range it names
# (indexer/jobs/partitions.py); enqueued once nothing is left to write into the partition.
INDEX_PARTITION = "index_partition"
# Fetches and stores the traces of a range's stored transactions (indexer/jobs/index_traces.py):
# planned by `indexer plan --traces`, or enqueued by the completion of an `index_blocks` job when
# INDEXER_TRACES is on.
INDEX_TRACES = "index_traces"

# Kinds whose payload is a block range; the database's constraint names the same kinds
# (schema/007_block_range_payloads.sql, made again by 008_decoded_events.sql and
# 011_partitioned_chain_tables.sql and 015_traces.sql): a new kind is added to both.
RANGE_KINDS = frozenset({JOB_KIND, DECODE_LOGS, INDEX_PARTITION, INDEX_TRACES})

# The largest block number a job may name: one below PostgreSQL's bigint maximum, because
# ranges are computed as int8range, whose half-open upper bound must itself fit in a bigint.
MAX_BLOCK = 2**63 - 2
# The largest exclusive end of a range, the largest `--to`.
MAX_END = MAX_BLOCK + 1


@dataclass(frozen=True, order=True)
class BlockRange:
    first: int
    last: int  # inclusive

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last <= MAX_BLOCK:
            raise ValueError(f"not a block range: {self.first}..{self.last}")

    @property
    def blocks(self) -> int:
        return self.last - self.first + 1

    def payload(self) -> dict[str, int]:
        return {"from": self.first, "to": self.last}

    @classmethod
    def of(cls, kind: str, payload: Any) -> BlockRange | None:
        """The range of a job, or None if it is not a well-formed `index_blocks` job."""
        return cls.from_payload(payload) if kind == JOB_KIND else None

    @classmethod
    def from_payload(cls, payload: Any) -> BlockRange | None:
        """The range a payload names, or None if it is not exactly a block-range payload."""
        if not isinstance(payload, dict):
            return None
        first, last = payload.get("from"), payload.get("to")
        # type() rather than isinstance(): a JSON true is a bool, and bool is an int. A JSON 5.0
        # is a float here, and the database refuses it too (its text is not all digits).
        if type(first) is not int or type(last) is not int or not 0 <= first <= last <= MAX_BLOCK:
            return None
        return cls(first, last)


def check_payload(kind: str, payload: Any) -> Any:
    """`payload`, if a job of `kind` may carry it; ValueError if the database would refuse it."""
    if kind in RANGE_KINDS and BlockRange.from_payload(payload) is None:
        raise ValueError(
            f"{kind} payload must be {{\"from\": F, \"to\": T}} with whole numbers"
            f" 0 <= F <= T <= {MAX_BLOCK}, got {payload!r}")
    return payload


def cut(start: int, end: int, chunk: int) -> list[BlockRange]:
    """Blocks [start, end) as ranges cut at multiples of `chunk`: overlapping plans, and repairs
    of a few blocks, get the same boundaries as the plan that first covered them."""
    if chunk <= 0:
        raise ValueError(f"chunk must be positive, got {chunk}")
    ranges = []
    lo = start
    while lo < end:
        hi = min((lo // chunk + 1) * chunk, end)
        ranges.append(BlockRange(lo, hi - 1))
        lo = hi
    return ranges
