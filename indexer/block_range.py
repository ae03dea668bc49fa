"""The `index_blocks` job and its payload: a range of blocks, both ends inclusive.

The payload is the article's `{"from": F, "to": T}` with whole numbers `0 <= F <= T`. This module
is its one owner in Python: the planner and `verify --repair` cut ranges with `cut`, and the
worker reads a claimed job's range with `BlockRange.of`. The `block_ranges` view
(schema/003_block_ranges_and_expirations.sql) reads the same format in SQL, for planning and
progress, and yields NULL bounds for a payload that `of` would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JOB_KIND = "index_blocks"


@dataclass(frozen=True, order=True)
class BlockRange:
    first: int
    last: int  # inclusive

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last:
            raise ValueError(f"not a block range: {self.first}..{self.last}")

    @property
    def blocks(self) -> int:
        return self.last - self.first + 1

    def payload(self) -> dict[str, int]:
        return {"from": self.first, "to": self.last}

    @classmethod
    def of(cls, kind: str, payload: Any) -> BlockRange | None:
        """The range of a job, or None if it is not a well-formed `index_blocks` job."""
        if kind != JOB_KIND or not isinstance(payload, dict):
            return None
        first, last = payload.get("from"), payload.get("to")
        # type() rather than isinstance(): a JSON true is a bool, and bool is an int.
        if type(first) is not int or type(last) is not int or not 0 <= first <= last:
            return None
        return cls(first, last)


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
