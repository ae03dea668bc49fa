"""How fast an endpoint may be asked: the adaptive rate of `AdaptiveRate`, cut at once by a rate
limit and raised slowly while answers stay clean.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable




_MAX_RETRY_AFTER = 120.0


class AdaptiveRate:
    """The calls per second one endpoint is sent by this process: a token bucket (bursts of up to
    one second's worth, and of one call at least) whose rate adapts to the endpoint's rate limit,
    so that nobody needs to know that limit.

    It starts at `ceiling`, or with no limit at all when there is none. A rate-limited answer
    cuts it at once to DECREASE times what the endpoint took: the rate in force, or, if lower,
    the calls it answered over the last WINDOW seconds (those sent, when it answered none);
    answers to requests sent before that cut cut nothing more, so one burst of refusals counts
    once. With no limit in force and less than a second of sending to measure, a refusal only
    holds calls back for HOLD seconds: a rate measured from a call or two would be far too low
    for the batches that follow. For each RAISE_EVERY seconds of clean answers in which the limit
    held calls back, it grows by STEP_SHARE of itself (at least MIN_STEP), never past `ceiling`:
    a tenth of a call a second more each second near a provider's limit of 2, and from the floor
    to 100 in about a minute and a half once a spent quota is renewed. A Retry-After holds every
    call back until it has passed. Under a limit, a request carries at most one second's worth
    of calls (`burst`)."""

    DECREASE = 0.7
    STEP_SHARE = 0.05
    MIN_STEP = 0.1
    RAISE_EVERY = 1.0
    # Raises at once at most: at a low rate the clean answers that raise it come seconds apart.
    MOST_STEPS = 10
    # Never below a call every ten seconds: providers' free tiers allow a few calls a second,
    # and at that rate the batches shrink to fit the lease (`RpcClient.allowed_calls_per_second`).
    # One that allows less, or nothing (a spent quota), keeps refusing: `RateLimited` after the
    # client's patience.
    FLOOR = 0.1
    WINDOW = 5.0
    HOLD = 1.0

    def __init__(self, ceiling: float | None = None, on_change: Callable[[float | None], None] | None = None) -> None:
        self.ceiling = ceiling if ceiling and ceiling > 0 else None
        self.rate: float | None = self.ceiling  # None: no limit in force
        self.on_change = on_change
        self._lock = threading.Lock()
        now = time.monotonic()
        self._tokens = self.rate or 0.0
        self._stamp = now
        self._not_before = 0.0
        self._last_cut = float("-inf")
        self._last_raise = now
        self._held_back = False  # since the last raise
        self._sent: deque[tuple[float, int]] = deque()  # (time, calls) over the last WINDOW seconds
        self._answered: deque[tuple[float, int]] = deque()  # (time sent, calls) of those answered

    def acquire(self, calls: int) -> tuple[float, float]:
        """Waits until `calls` calls may be sent; returns the seconds waited and the time
        (monotonic) they are sent at, which `limited` and `clean` are later given."""
        with self._lock:
            now = time.monotonic()
            wait = max(0.0, self._not_before - now)
            if self.rate is not None:
                self._tokens = self._refilled(now)
                self._stamp = now
                self._tokens -= calls
                if self._tokens < 0:
                    self._held_back = True
                    wait = max(wait, -self._tokens / self.rate)
            self._sent.append((now + wait, calls))
            self._forget(now)
        if wait > 0:
            time.sleep(wait)
        return wait, now + wait

    def delay(self, calls: int) -> float:
        """The seconds `acquire(calls)` would wait now."""
        with self._lock:
            now = time.monotonic()
            wait = max(0.0, self._not_before - now)
            if self.rate is not None:
                tokens = self._refilled(now) - calls
                if tokens < 0:
                    wait = max(wait, -tokens / self.rate)
            return wait

    def burst(self, most: int) -> int:
        """The calls one request may carry: `most`, or under a limit one second's worth (at least
        one): a provider counting calls per second refuses a bigger request however long it was
        held back for."""
        rate = self.rate
        return most if rate is None else max(1, min(most, int(rate)))

    def answered(self, sent_at: float, calls: int) -> None:
        """`calls` calls sent at `sent_at` were answered (not refused)."""
        with self._lock:
            self._answered.append((sent_at, calls))
            self._forget(time.monotonic())

    def limited(self, sent_at: float, retry_after: float | None = None) -> bool:
        """A rate-limited answer to calls sent at `sent_at`; returns whether it cut the rate."""
        with self._lock:
            now = time.monotonic()
            if retry_after is not None:
                self._not_before = max(self._not_before, now + min(retry_after, _MAX_RETRY_AFTER))
            if sent_at < self._last_cut:
                return False
            measured = self._measured(now)
            if measured is None and self.rate is None:
                self._not_before = max(self._not_before, now + (self.HOLD if retry_after is None else 0.0))
                return False
            if measured is None:
                base = self.rate
            elif self.rate is None:
                base = measured
            else:
                base = min(self.rate, measured)
            rate = max(self.FLOOR, base * self.DECREASE)
            if self.ceiling is not None:
                rate = min(rate, self.ceiling)
            self.rate = rate
            self._tokens = min(self._tokens, 0.0)  # what is left of the burst goes too
            self._stamp = now
            self._last_cut = self._last_raise = now
            self._held_back = False
        if self.on_change:
            self.on_change(rate)
        return True

    def clean(self) -> None:
        """A clean answer: the rate grows, a step for each RAISE_EVERY seconds since the last
        raise, if that was RAISE_EVERY ago and the limit held calls back since (a limit nobody
        reaches is not raised)."""
        with self._lock:
            now = time.monotonic()
            if self.rate is None or now - self._last_raise < self.RAISE_EVERY:
                return
            steps = min(self.MOST_STEPS, (now - self._last_raise) / self.RAISE_EVERY) if self.RAISE_EVERY else 1
            self._last_raise = now
            if not self._held_back or (self.ceiling is not None and self.rate >= self.ceiling):
                return
            self._held_back = False
            rate = self.rate + steps * max(self.MIN_STEP, self.STEP_SHARE * self.rate)
            self.rate = rate = min(rate, self.ceiling) if self.ceiling is not None else rate
        if self.on_change:
            self.on_change(rate)

    def _refilled(self, now: float) -> float:
        """The tokens at `now`: one second's worth at most, but never less than one call, so that
        below a call a second an idle endpoint is asked at once. Capped at the rate alone, a rate
        under 0.5 made every single call wait more than a second however long nobody had asked,
        and a client that waits at most a second (the head planner) never asked again: its rate,
        raised only by answers, stayed down for good (a CI chaos run's follow phase stalled on it)."""
        assert self.rate is not None
        return min(max(self.rate, 1.0), self._tokens + (now - self._stamp) * self.rate)

    def _measured(self, now: float) -> float | None:
        """Calls per second the endpoint answered over the last WINDOW seconds, or, when it
        answered none, that it was sent; None with less than a second of sending to measure."""
        self._forget(now)
        if not self._sent or now - self._sent[0][0] < 1.0:
            return None
        calls = sum(n for _, n in self._answered) or sum(n for _, n in self._sent)
        return calls / (now - self._sent[0][0])

    def _forget(self, now: float) -> None:
        """Drops what was sent and answered before the last WINDOW seconds (on every request: a
        worker that is never refused must not keep a record of each request it ever sent)."""
        for sent in (self._sent, self._answered):
            while sent and sent[0][0] < now - self.WINDOW:
                sent.popleft()
