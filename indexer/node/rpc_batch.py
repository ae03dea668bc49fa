"""The calls of one `RpcClient.batch` as the client works through them (`Work`): which endpoint may
be asked which call, the calls a method's `Fallback` answers instead, the results so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..base import metrics
from .rpc_errors import UNSUPPORTED, BadAnswer, RpcError
from .rpc_transport import MISSING, Call, Endpoint, Slot


@dataclass(frozen=True)
class Fallback:
    """How to answer calls of `method` on an endpoint that lacks it: `expand` turns one such call
    into calls of `instead` (any number, even none), and `combine` turns their results, in order,
    into the result the call would have had."""

    method: str
    instead: str
    expand: Callable[[Call], list[Call]]
    combine: Callable[[list[Any]], Any] = list


class Work:
    """The calls of one `RpcClient.batch` still unanswered, and the results so far."""

    def __init__(self, calls: Sequence[Call], fallback: Fallback | None,
                 parse: Callable[[Any], Any] | None = None) -> None:
        self.fallback = fallback
        self.parse = parse
        self.results: list[Any] = [MISSING] * len(calls)
        self.parts: dict[int, list[Any]] = {}  # owner -> results of its fallback's calls
        self.pending = [Slot(call, i) for i, call in enumerate(calls)]

    def takes(self, endpoint: Endpoint, slot: Slot) -> bool:
        """Whether `endpoint` may be asked `slot` (itself or through the fallback)."""
        if id(endpoint) in slot.excluded:
            return False
        method = slot.call[0]
        return method not in endpoint.unsupported or self._falls_back(slot)

    def _falls_back(self, slot: Slot) -> bool:
        return self.fallback is not None and slot.call[0] == self.fallback.method and slot.part is None

    def draw(self, endpoint: Endpoint) -> list[Slot]:
        """The calls to send `endpoint` next, at most its batch size (`AdaptiveRate.burst`); a call
        of a method it lacks, or one too slow to answer whole, is replaced, in `pending`, by its
        fallback's calls."""
        chunk: list[Slot] = []
        size = endpoint.rate.burst(endpoint.max_batch)
        i = 0
        while i < len(self.pending) and len(chunk) < size:
            slot = self.pending[i]
            if not self.takes(endpoint, slot):
                i += 1
            elif slot.call[0] in endpoint.unsupported or slot.too_slow:
                assert self.fallback is not None
                calls = self.fallback.expand(slot.call)
                metrics.counted.rpc_fallback_calls.labels(endpoint.label, slot.call[0]).inc()
                self.pending[i:i + 1] = [Slot(c, slot.owner, j) for j, c in enumerate(calls)]
                self.parts[slot.owner] = [MISSING] * len(calls)
                if not calls:
                    self.results[slot.owner] = self.fallback.combine([])
            else:
                chunk.append(slot)
                i += 1
        return chunk

    def keep(self, slot: Slot, result: Any) -> None:
        if slot.part is None:
            self.results[slot.owner] = result
            return
        mine = self.parts[slot.owner]
        mine[slot.part] = result
        if self.fallback is not None and MISSING not in mine:
            self.results[slot.owner] = self.fallback.combine(mine)

    def answered(self, slots: list[Slot]) -> None:
        done = {id(s) for s in slots}
        self.pending = [s for s in self.pending if id(s) not in done]

    def too_slow(self, chunk: list[Slot]) -> list[Slot]:
        """Marks the calls of `chunk` that the fallback can answer in smaller pieces, to be asked
        through it from now on; returns them."""
        slow = [s for s in chunk if self._falls_back(s) and not s.too_slow]
        for slot in slow:
            slot.too_slow = True
        return slow

    def stuck(self, endpoints: list[Endpoint]) -> Slot | None:
        """A pending call that no endpoint may be asked any more, if there is one."""
        return next((s for s in self.pending if not any(self.takes(e, s) for e in endpoints)), None)

    @staticmethod
    def why_not(slot: Slot, endpoints: list[Endpoint]) -> RpcError:
        """The error for a call that no endpoint can answer."""
        method, params = slot.call
        if slot.bad_answer:
            return BadAnswer(slot.why)
        if all(method in e.unsupported for e in endpoints):
            return RpcError(f"{method} is not supported by the node ({slot.why or 'method not found'})", UNSUPPORTED)
        shown = ", ".join(str(p)[:70] for p in params)
        return RpcError(f"{method}({shown}): no endpoint can answer it; last: {slot.why}")
