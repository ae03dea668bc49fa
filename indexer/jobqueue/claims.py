"""The claims one worker holds, and how holding one ends.

A worker holds the job it runs and, for a moment at a job's end, the next one claimed ahead.
Every claim is held from the moment it is made until its runner finishes it (complete, defer or
give back) or the worker gives it back from here (a lost database connection, SIGTERM): none is
ever forgotten while its lease runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

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
