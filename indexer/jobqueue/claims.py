"""The claims one worker holds, and how holding one ends.

A worker holds the job it runs and, for a moment at a job's end, the next one claimed ahead.
Every claim is held from the moment it is made until its runner finishes it (complete, defer or
give back) or the worker gives it back from here (a lost database connection, SIGTERM): none is
ever forgotten while its lease runs.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

import psycopg

from ..base.states import Outcome
from . import queue
from .queue import Claim


class LostClaim(Exception):
    """The job's lease was taken back (and perhaps claimed by another worker)."""


class Stopping(Exception):
    """SIGTERM/SIGINT arrived while the job ran."""


class Unrunnable(Exception):
    """A job that no retry can make succeed (an unknown kind, a malformed payload): failed at once."""


class Unready(Exception):
    """A job that cannot run until something else is done, which nothing queued will do (the
    traces of blocks not stored, with no job to store them): given back, an attempt spent, so
    that it fails with this error kept unless the operator plans what it waits for."""


@dataclass(frozen=True)
class Ended:
    """How a runner ended its claim (an error it raises ends it too: the worker gives it back)."""

    outcome: Outcome
    detail: str  # for the log line
    following: Claim | None = None  # claimed with the completion, to run next


T = TypeVar("T")

# How often a wait looks whether the worker is stopping.
STOP_POLL_SECONDS = 0.5


def keeping_leases(future: Future[T], *, keep_alive: Callable[[], None], lease_seconds: float,
                   stop: threading.Event) -> T:
    """The future's result, once the work in it is done. A wait of a third of a lease or more
    calls `keep_alive` (the worker extends the leases it holds): the node is slow, not the
    worker, and the reaper must not take the job. `Stopping` as soon as `stop` is set."""
    kept_at = time.perf_counter()
    while True:
        try:
            return future.result(timeout=STOP_POLL_SECONDS)
        except FutureTimeout:
            if stop.is_set():
                raise Stopping() from None
            if time.perf_counter() - kept_at >= lease_seconds / 3:
                keep_alive()
                kept_at = time.perf_counter()


# A claim whose heartbeat, completion or defer found its lease taken back.
LOST = Ended(Outcome.LOST_CLAIM, "its lease was taken back; stopping it")


class HeldClaims:
    def __init__(self) -> None:
        self._claims: list[Claim] = []

    def add(self, claim: Claim) -> None:
        if claim not in self._claims:
            self._claims.append(claim)

    def claims(self) -> list[Claim]:
        return list(self._claims)

    def release(self, claim: Claim) -> None:
        """No longer ours: finished, given back, or lost."""
        if claim in self._claims:
            self._claims.remove(claim)

    def give_back_all(self, conn: psycopg.Connection) -> Iterator[tuple[Claim, bool]]:
        """Returns each claim to pending with no attempt spent; yields it with False if its lease
        had been taken back already. A claim whose give-back raises stays held, to try again."""
        while self._claims:
            claim = self._claims[0]
            kept = queue.defer(conn, claim)
            self._claims.pop(0)
            yield claim, kept
