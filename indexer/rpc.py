"""JSON-RPC client for the hot path: batches, retries, failover, rate limits that adapt.

When the project was designed, web3.py's `batch_requests()` reached 2,949 blocks/s on a local
node where plain HTTP batches parsed with orjson reached 22,053, so the fetch path speaks
JSON-RPC itself: one `requests` session per thread and endpoint, requests written by orjson,
answers read by msgspec (1.5x faster than orjson on mainnet's blocks and exact on integers past
64 bits, which orjson turns into floats: BENCHMARKS.md, "Less CPU per block").

`RpcClient.batch(calls)` sends the calls in HTTP requests of at most that endpoint's batch size
(and, under a rate limit, of at most one second's worth of calls); each request goes to the next
endpoint in turn. What a node answers, and what happens then:
- a result: kept, whatever became of the other calls of the same request; with `parse`, only
  once it parses: a value that does not (a head of "0xzz", null) is asked of the other endpoints
  at once, and from none that parses it is a `BadAnswer` naming the endpoint and the value;
- a connection error, a timeout, HTTP 5xx, a body that is not JSON (truncated, HTML), an answer
  lacking some ids, any other error: the calls still unanswered are asked again, on the next
  endpoint, after a jittered exponential backoff; `max_attempts` requests in a row that bring no
  answer at all make an `RpcError` naming the calls, the endpoint and, when it helps, what to
  check ("is a node running at ...?");
- rate limited (HTTP 429, or a JSON-RPC error saying so: Alchemy's 429 "...exceeded its compute
  units per second capacity", Infura's -32005 "project ID request rate exceeded", -32029, "rate
  limit", "too many requests"): backpressure, never a failed attempt. That endpoint's rate is
  cut at once, down to what it accepts (below a call a second if need be), and raised slowly
  while its answers stay clean (`AdaptiveRate`); `Retry-After` (or Infura's `backoff_seconds`)
  is honoured before that endpoint is asked again. Only when nothing but rate limits would have
  come back for `patience` seconds (the refusals so far and the wait the limiter asks next, or
  that wait alone) is it a `RateLimited` error (the endpoint is alive: a worker gives its job
  back with no attempt spent);
- a timeout of a request with calls that `fallback` can answer in smaller pieces (a huge block's
  eth_getBlockReceipts): those calls are answered through the fallback's calls instead (its
  receipts by transaction, at most a batch at a time), never asked whole again;
- too large (HTTP 413, a batch refused as a whole, or go-ethereum's -32003 "response too large"
  on the calls past its `BatchResponseMaxSize`): the answered calls are kept and the others
  asked again in smaller requests; that endpoint's batch size stays at the smaller size;
- a method the endpoint lacks (-32601, or a text saying so): learned for that endpoint, logged
  once and shown in `indexer_rpc_method_unsupported`; its calls go at once to an endpoint that
  has it, or, with a `Fallback`, are answered by the fallback's calls on any endpoint;
- history the endpoint has pruned (4444 "pruned history unavailable", erigon's "old data not
  available due to pruning", ...): those calls go at once to the other endpoints.
When no endpoint can answer a call, for the last two reasons, the batch fails at once with an
`RpcError` that says why. Answers are matched by id, so a batch answered out of order is fine.
Every text a node sends back is scrubbed of the URLs' secrets (`errors.Secrets`: gateways echo
the path and query, where API keys live) before it goes into an error, a log line or a job.
"""

from __future__ import annotations

import json
import logging
import random
import re
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import msgspec
import orjson
import requests

from . import metrics
from .errors import IndexerError, Secrets
from .rows import ChainDataError
from .urls import endpoint_label

log = logging.getLogger(__name__)

Call = tuple[str, Sequence[Any]]

_MAX_RETRY_AFTER = 120.0
# Bytes of an answer read at a time: a batch of mainnet's blocks is megabytes, and requests'
# own 10 KB pieces each cost a trip through requests, urllib3 and http.client: fetching took a
# worker 19% more CPU (BENCHMARKS.md, "An answer's body read a megabyte at a time").
BODY_PIECE = 1 << 20

# How a JSON-RPC error is read. Sources of the texts and codes:
# - go-ethereum rpc/errors.go: -32601 "the method %s does not exist/is not available"; -32003
#   "response too large" (each call left once a batch's answers pass BatchResponseMaxSize,
#   rpc/handler.go); -32600 "batch too large" (past BatchRequestLimit, answered once with the id
#   of the first call); core/history/historymode.go: 4444 "pruned history unavailable".
# - erigon: "batch limit %d exceeded (can increase by --rpc.batch.limit)"; db/state
#   PrunedError "old data not available due to pruning".
# - jsonrpsee (reth): "Request is too big", "Response is too big", "The batch request was too
#   large", "The batch response was too large", "Batched requests are not supported by the server".
# - nethermind: "Receipts for block N ... are neither stored nor reproducible from state history."
# - providers: Alchemy 429 "Your app has exceeded its compute units per second capacity"
#   (alchemy.com/docs/reference/throughput); Infura -32005 "daily request count exceeded, request
#   rate limited" and "project ID request rate exceeded" with data.backoff_seconds
#   (docs.infura.io, avoid rate limiting); QuickNode -32007 "100/second request limit reached",
#   -32012 "credits limited to 6000/sec", Alchemy -32016 "rate limit" (alloy-rs/alloy
#   ErrorPayload::is_retry_err); dRPC "no available upstreams"; zksync "Block with such an ID is
#   pruned", sei "height is not available" (drpcorg/dshackle lower-bound detectors); -32029 "too
#   many requests" (tRPC's code, used by JSON-RPC gateways).
_METHOD_NOT_FOUND = -32601
_PRUNED_HISTORY = 4444
_RATE_LIMITED_CODES = frozenset({429, -32005, -32029})
_UNSUPPORTED_TEXT = re.compile(
    r"method\b[^.]*?(not (found|supported|allowed|implemented)|does not exist|unsupported)"
    r"|unsupported method|method not available|not whitelisted")
# dRPC's "no available upstreams" is left out: it is as often a passing outage as missing history.
_PRUNED_TEXT = re.compile(
    r"prun|histor(y|ical)\b[^.]*?(not |un)available|neither stored nor reproducible|height is not available")
_TOO_LARGE_TEXT = re.compile(
    r"too (large|big)|response size|batch (size|limit)|size limit|max(imum)? batch|batch[^.]*?(exceed|not supported)"
    r"|too many (calls|requests) in (a |the )?batch|(response|body|payload) (size )?exceed")
# A timeout says "exceeded" too ("context deadline exceeded", "response timeout exceeded"): it is
# worth another try, never a reason to ask for less or to leave the node.
_TIMEOUT_TEXT = re.compile(r"deadline|time ?out|timed out")
_RATE_LIMITED_TEXT = re.compile(
    r"rate.?limit|rate exceeded|too many requests|credits limited|request limit|capacity|throttl|limit exceeded"
    r"|quota|server is busy|overloaded")

# What became of a call (and metric `kind` labels of indexer_rpc_errors).
UNSUPPORTED, PRUNED, TOO_LARGE, RATE_LIMITED, ERROR = "unsupported", "pruned", "too_large", "rate_limited", "rpc_error"


def classify(code: Any, message: str) -> str:
    """What a JSON-RPC error means for the client: UNSUPPORTED (the endpoint lacks the method),
    PRUNED (it no longer has that history), TOO_LARGE (ask for less at a time), RATE_LIMITED, or
    ERROR (anything else: worth another try)."""
    text = message.lower()
    if _TIMEOUT_TEXT.search(text):
        return RATE_LIMITED if code in _RATE_LIMITED_CODES else ERROR
    if code == _METHOD_NOT_FOUND or _UNSUPPORTED_TEXT.search(text):
        return UNSUPPORTED
    if code == _PRUNED_HISTORY or _PRUNED_TEXT.search(text):
        return PRUNED
    if _TOO_LARGE_TEXT.search(text):
        return TOO_LARGE
    if code in _RATE_LIMITED_CODES or _RATE_LIMITED_TEXT.search(text):
        return RATE_LIMITED
    return ERROR


class RpcError(IndexerError):
    """The node could not give an answer, even after retries, or the call can never succeed.
    `kind`: what the last attempt met (a metric label of indexer_rpc_errors: "connection",
    "timeout", "rpc_error", ...), None when no attempt was made."""

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class RateLimited(RpcError):
    """Rate limits alone would have held the calls back longer than the client's `patience`: the
    node is alive but takes no more calls now. Not a failure of the calls, nor of the job that
    made them."""


class BadAnswer(ChainDataError, RpcError):
    """An endpoint answered a call with a value that is not what the call returns (a head of
    "0xzz", null or a JSON number), and no other endpoint answered it with one that is."""


# What a rate limit is called, as a request's or a call's failure.
_LIMITS = (RATE_LIMITED, "http_429")


@dataclass(frozen=True)
class Fallback:
    """How to answer calls of `method` on an endpoint that lacks it: `expand` turns one such call
    into calls of `instead` (any number, even none), and `combine` turns their results, in order,
    into the result the call would have had."""

    method: str
    instead: str
    expand: Callable[[Call], list[Call]]
    combine: Callable[[list[Any]], Any] = list


class AdaptiveRate:
    """The calls per second one endpoint is sent by this process: a token bucket (bursts of up to
    one second's worth) whose rate adapts to the endpoint's rate limit, so that nobody needs to
    know that limit.

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
                self._tokens = min(self.rate, self._tokens + (now - self._stamp) * self.rate)
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
                tokens = min(self.rate, self._tokens + (now - self._stamp) * self.rate) - calls
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


@dataclass(eq=False)
class Endpoint:
    url: str
    label: str
    max_batch: int
    rate: AdaptiveRate
    unsupported: set[str] = field(default_factory=set)  # methods it answered "method not found" for
    _local: threading.local = field(default_factory=threading.local)

    def session(self) -> requests.Session:
        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = requests.Session()
            s.headers["Content-Type"] = "application/json"
        return s


@dataclass(eq=False)
class _Slot:
    """One call still to answer: a call of the caller (`part` None), or one of the calls its
    fallback expanded it into."""

    call: Call
    owner: int
    part: int | None = None
    excluded: set[int] = field(default_factory=set)  # ids of the endpoints that cannot answer it
    why: str = ""  # why the last of them cannot
    bad_answer: bool = False  # the last of them answered a value that does not parse
    too_slow: bool = False  # timed out whole: answered through the fallback's calls instead


class _Refused(Exception):
    """A whole request failed. `kind` is its metric label."""

    def __init__(self, message: str, kind: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after
        self.sent_at = 0.0


@dataclass
class _Failed:
    """A call answered with an error, or, for the whole request, what went wrong (and where)."""

    kind: str
    message: str
    retry_after: float | None = None
    where: str = ""


_MISSING = object()


class _Work:
    """The calls of one `RpcClient.batch` still unanswered, and the results so far."""

    def __init__(self, calls: Sequence[Call], fallback: Fallback | None,
                 parse: Callable[[Any], Any] | None = None) -> None:
        self.fallback = fallback
        self.parse = parse
        self.results: list[Any] = [_MISSING] * len(calls)
        self.parts: dict[int, list[Any]] = {}  # owner -> results of its fallback's calls
        self.pending = [_Slot(call, i) for i, call in enumerate(calls)]

    def takes(self, endpoint: Endpoint, slot: _Slot) -> bool:
        """Whether `endpoint` may be asked `slot` (itself or through the fallback)."""
        if id(endpoint) in slot.excluded:
            return False
        method = slot.call[0]
        return method not in endpoint.unsupported or self._falls_back(slot)

    def _falls_back(self, slot: _Slot) -> bool:
        return self.fallback is not None and slot.call[0] == self.fallback.method and slot.part is None

    def draw(self, endpoint: Endpoint) -> list[_Slot]:
        """The calls to send `endpoint` next, at most its batch size (`AdaptiveRate.burst`); a call
        of a method it lacks, or one too slow to answer whole, is replaced, in `pending`, by its
        fallback's calls."""
        chunk: list[_Slot] = []
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
                self.pending[i:i + 1] = [_Slot(c, slot.owner, j) for j, c in enumerate(calls)]
                self.parts[slot.owner] = [_MISSING] * len(calls)
                if not calls:
                    self.results[slot.owner] = self.fallback.combine([])
            else:
                chunk.append(slot)
                i += 1
        return chunk

    def keep(self, slot: _Slot, result: Any) -> None:
        if slot.part is None:
            self.results[slot.owner] = result
            return
        mine = self.parts[slot.owner]
        mine[slot.part] = result
        if self.fallback is not None and _MISSING not in mine:
            self.results[slot.owner] = self.fallback.combine(mine)

    def answered(self, slots: list[_Slot]) -> None:
        done = {id(s) for s in slots}
        self.pending = [s for s in self.pending if id(s) not in done]

    def too_slow(self, chunk: list[_Slot]) -> list[_Slot]:
        """Marks the calls of `chunk` that the fallback can answer in smaller pieces, to be asked
        through it from now on; returns them."""
        slow = [s for s in chunk if self._falls_back(s) and not s.too_slow]
        for slot in slow:
            slot.too_slow = True
        return slow

    def stuck(self, endpoints: list[Endpoint]) -> _Slot | None:
        """A pending call that no endpoint may be asked any more, if there is one."""
        return next((s for s in self.pending if not any(self.takes(e, s) for e in endpoints)), None)

    @staticmethod
    def why_not(slot: _Slot, endpoints: list[Endpoint]) -> RpcError:
        """The error for a call that no endpoint can answer."""
        method, params = slot.call
        if slot.bad_answer:
            return BadAnswer(slot.why)
        if all(method in e.unsupported for e in endpoints):
            return RpcError(f"{method} is not supported by the node ({slot.why or 'method not found'})", UNSUPPORTED)
        shown = ", ".join(str(p)[:70] for p in params)
        return RpcError(f"{method}({shown}): no endpoint can answer it; last: {slot.why}")


# A batch that met nothing but rate limits for this long is `RateLimited`: a quota spent for the
# day would otherwise hold a command without a word. A worker's client waits less, half its lease.
DEFAULT_PATIENCE = 300.0


class RpcClient:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        timeout: float = 30.0,
        max_attempts: int = 8,
        max_batch: int = 100,
        rate_limit: float = 0.0,
        backoff_max: float = 10.0,
        patience: float | None = DEFAULT_PATIENCE,
    ) -> None:
        """`rate_limit`: the most calls per second each endpoint is sent (0: no ceiling; the
        rates adapt below it); `max_batch`: calls per HTTP request until an endpoint wants fewer;
        `patience`: the seconds of nothing but rate limits (refusals, and waits the limiter asks)
        after which a batch is `RateLimited` (None: no end; 0: at the first refusal, which then
        holds nothing back: a health check's)."""
        self.timeout = timeout
        self.max_attempts = max_attempts
        self.patience = patience
        self.max_batch = max_batch
        self.backoff_max = backoff_max
        # Gateways echo the request's path and query, where API keys live, in their error texts.
        self.secrets = Secrets(urls)
        self.endpoints: list[Endpoint] = []
        for url in urls:
            label = endpoint_label(url)
            metrics.counted.endpoint(label)
            rate = AdaptiveRate(rate_limit or None, on_change=self._show_rate(label))
            self.endpoints.append(Endpoint(url, label, max_batch, rate))
            metrics.counted.rpc_rate.labels(label).set(rate.rate or 0)
            metrics.counted.rpc_batch_size.labels(label).set(max_batch)
        self._next = 0
        self._lock = threading.Lock()

    # -- public -------------------------------------------------------------------------------

    def call(self, method: str, *params: Any, parse: Callable[[Any], Any] | None = None) -> Any:
        """The result of one call; with `parse`, parsed (see `batch`)."""
        return self.batch([(method, params)], parse=parse)[0]

    def batch(self, calls: Sequence[Call], *, fallback: Fallback | None = None,
              parse: Callable[[Any], Any] | None = None) -> list[Any]:
        """Results in the order of `calls`. With `fallback`, calls of `fallback.method` that an
        endpoint lacks, or that time out whole, are answered through the fallback's calls
        instead. With `parse`, each result is what `parse` makes of it; a value it refuses
        (TypeError, ValueError, KeyError: its text says why) is asked of another endpoint, and
        from none that answers better it is a `BadAnswer`."""
        work = _Work(calls, fallback, parse)
        failures = 0  # requests in a row that brought no answer (rate limits aside)
        limited_since: float | None = None  # since when nothing but rate limits came back
        limit: _Failed | None = None  # the last of them
        while work.pending:
            endpoint = self._pick()
            chunk = work.draw(endpoint)
            if not chunk:  # (or every call left went to a fallback of no calls)
                if work.pending and (stuck := work.stuck(self.endpoints)) is not None:
                    raise work.why_not(stuck, self.endpoints)
                continue  # the next endpoint can
            if self.patience is not None:  # never waits past it, for the limiter's own pace either
                now = time.monotonic()
                wait = endpoint.rate.delay(len(chunk))
                if wait > 0 and now + wait >= (now if limited_since is None else limited_since) + self.patience:
                    raise self._impatient(work, limited_since, limit, endpoint, wait)
            try:
                answers, sent_at = self._request(endpoint, chunk)
            except _Refused as exc:
                metrics.counted.rpc_errors.labels(endpoint.label, exc.kind).inc()
                if exc.kind == "timeout" and (slow := work.too_slow(chunk)):
                    self._asking_in_pieces(endpoint, slow, work.fallback)
                    continue  # not the same request again: the fallback's, at once
                if exc.kind == TOO_LARGE and len(chunk) == 1 and (slow := work.too_slow(chunk)):
                    self._asking_in_pieces(endpoint, slow, work.fallback, why="was too large to answer")
                    continue
                answered, error = 0, self._refused(endpoint, chunk, exc)
            else:
                answered, error = self._absorb(endpoint, work, chunk, answers, sent_at)
            if answered:
                failures, limited_since, limit = 0, None, None
            if error is None or answered:
                continue  # what is left is asked at once
            metrics.counted.rpc_retries.labels(endpoint.label).inc()
            if error.kind in _LIMITS:  # backpressure: the rate limiter does the waiting
                log.debug("%s; held back by the rate limit", error.message)
                limit = error
                if limited_since is None:
                    limited_since = time.monotonic()
                if self.patience == 0:
                    raise self._impatient(work, limited_since, limit, endpoint, 0.0)
                continue
            failures += 1
            if failures >= self.max_attempts:
                attempts = f"{failures} attempt{'s' if failures > 1 else ''}"
                raise RpcError(f"{_what(work.pending)} failed after {attempts}; last: {error.message}{_hint(error)}",
                               error.kind)
            log.debug("rpc attempt %d failed (%s); retrying", failures, error.message)
            self._backoff(failures)
        return work.results

    def rates(self) -> dict[str, float | None]:
        """The calls per second each endpoint is allowed now (None: no limit in force)."""
        return {e.label: e.rate.rate for e in self.endpoints}

    def allowed_calls_per_second(self) -> float | None:
        """The calls per second this client may send in all, now: None while no endpoint has a
        limit in force; otherwise the lowest endpoint's rate times the number of endpoints
        (requests go to each in turn, so the slowest paces them all: a lower bound when the
        others allow more)."""
        limited = [rate for rate in (e.rate.rate for e in self.endpoints) if rate is not None]
        return len(self.endpoints) * min(limited) if limited else None

    def lacking(self) -> dict[str, list[str]]:
        """The methods each endpoint is known to lack."""
        with self._lock:  # fetch threads add to these sets
            return {e.label: sorted(e.unsupported) for e in self.endpoints}

    def learn(self, label: str, methods: Sequence[str]) -> None:
        """Takes as known that the endpoint `label` lacks `methods` (found by other workers): it
        is not asked them, and nothing is logged."""
        for endpoint in self.endpoints:
            if endpoint.label == label:
                with self._lock:
                    new = set(methods) - endpoint.unsupported
                    endpoint.unsupported |= new
                for method in new:
                    metrics.counted.rpc_unsupported.labels(label, method).set(1)

    # -- internals ----------------------------------------------------------------------------

    @staticmethod
    def _show_rate(label: str) -> Callable[[float | None], None]:
        return lambda rate: metrics.counted.rpc_rate.labels(label).set(rate or 0)

    def _pick(self) -> Endpoint:
        with self._lock:
            endpoint = self.endpoints[self._next % len(self.endpoints)]
            self._next += 1
        return endpoint

    def _backoff(self, failures: int) -> None:
        """Full jitter: up to 0.05 s, 0.1 s, 0.2 s, ... at most `backoff_max`."""
        time.sleep(random.uniform(0, min(self.backoff_max, 0.05 * 2 ** (failures - 1))))

    def _refused(self, endpoint: Endpoint, chunk: list[_Slot], exc: _Refused) -> _Failed | None:
        """A request failed as a whole: what to retry it for (None: asked again at once)."""
        if exc.kind == TOO_LARGE:
            self._too_large(endpoint, chunk, answered=0, why=str(exc))
            return None
        if exc.kind in _LIMITS:
            self._limited(endpoint, exc.sent_at, exc.retry_after)
        return _Failed(exc.kind, str(exc), where=endpoint.label)

    def _impatient(self, work: _Work, since: float | None, limit: _Failed | None, endpoint: Endpoint,
                   wait: float) -> RateLimited:
        what = _what(work.pending)
        if since is not None and limit is not None:
            held = time.monotonic() - since + wait
            return RateLimited(f"{what}: the rate limit would hold it back {held:.0f} s with no answer, more than the "
                               f"{self.patience:g} s it may wait; last: {limit.message}", limit.kind)
        return RateLimited(f"{what}: {endpoint.label} allows {endpoint.rate.rate or 0:.2g} calls/s now, which would "
                           f"hold it back {wait:.0f} s, more than the {self.patience:g} s it may wait", RATE_LIMITED)

    def _limited(self, endpoint: Endpoint, sent_at: float, retry_after: float | None) -> None:
        """A client without patience takes a rate limit for an answer (a health check): it holds
        nothing back for it, nor cuts the rate it shows."""
        if self.patience != 0:
            endpoint.rate.limited(sent_at, retry_after)

    def _asking_in_pieces(self, endpoint: Endpoint, slow: list[_Slot], fallback: Fallback | None,
                          why: str | None = None) -> None:
        assert fallback is not None
        log.warning("%s: %d %s call(s) %s; asking %s instead, at most %d at a time", endpoint.label, len(slow),
                    fallback.method, why or f"got no answer within {self.timeout:g} s", fallback.instead,
                    endpoint.max_batch)

    def _absorb(self, endpoint: Endpoint, work: _Work, chunk: list[_Slot], answers: list[Any],
                sent_at: float) -> tuple[int, _Failed | None]:
        """Keeps the results of one request and learns from its errors; returns how many calls
        it answered, and what to retry the others for (None: asked again at once)."""
        answered: list[_Slot] = []
        kinds: set[str] = set()
        error: _Failed | None = None
        retry_after: float | None = None
        for slot, answer in zip(chunk, answers):
            if answer is _MISSING:
                kinds.add("incomplete")
            elif not isinstance(answer, _Failed):
                if work.parse is not None and slot.part is None:
                    try:
                        answer = work.parse(answer)
                    except (TypeError, ValueError, KeyError) as exc:
                        kinds.add("bad_answer")
                        shown = self.secrets.scrub(orjson.dumps(answer).decode("utf-8", "replace"))
                        slot.why = f"{endpoint.label}: {slot.call[0]} answered {shown[:40]}: {exc}"
                        slot.bad_answer = True
                        slot.excluded.add(id(endpoint))
                        continue
                work.keep(slot, answer)
                answered.append(slot)
            else:
                method = slot.call[0]
                if answer.kind == ERROR and work.fallback is not None and _TIMEOUT_TEXT.search(answer.message.lower()) \
                        and work.too_slow([slot]):
                    kinds.add("timeout")
                    self._asking_in_pieces(endpoint, [slot], work.fallback)
                    continue
                # Too large on its own (a huge block's traces): what the fallback asks is smaller.
                if answer.kind == TOO_LARGE and len(chunk) == 1 and work.too_slow([slot]):
                    self._asking_in_pieces(endpoint, [slot], work.fallback, why="was too large to answer")
                    continue
                kinds.add(answer.kind)
                if answer.kind == UNSUPPORTED:
                    slot.why = f"{endpoint.label}: {answer.message[:200]}"
                    self._learn(endpoint, method, answer.message, work.fallback)
                elif answer.kind == PRUNED:
                    slot.why = f"{endpoint.label}: {answer.message[:200]}"
                    slot.excluded.add(id(endpoint))
                elif answer.kind == RATE_LIMITED:
                    retry_after = answer.retry_after if retry_after is None else retry_after
                    error = error or _Failed(RATE_LIMITED, f"{endpoint.label}: {method}: {answer.message[:200]}",
                                             where=endpoint.label)
                elif answer.kind != TOO_LARGE:
                    error = error or _Failed(answer.kind, f"{endpoint.label}: {method} failed: {answer.message[:200]}",
                                             where=endpoint.label)
        work.answered(answered)
        if TOO_LARGE in kinds:
            # go-ethereum answers a batch past its request limit with one error, for the first id.
            kinds.discard("incomplete")
            done = {id(s) for s in answered}
            self._too_large(endpoint, [s for s in chunk if id(s) not in done], answered=len(answered),
                            why=f"{endpoint.label}: response too large", size=len(chunk))
        if "incomplete" in kinds and error is None:
            error = _Failed("incomplete", f"{endpoint.label}: answer lacks some of {len(chunk)} results",
                            where=endpoint.label)
        for kind in kinds:
            metrics.counted.rpc_errors.labels(endpoint.label, kind).inc()
        if answered:
            endpoint.rate.answered(sent_at, len(answered))
        if RATE_LIMITED in kinds:
            self._limited(endpoint, sent_at, retry_after)
        elif answered:
            endpoint.rate.clean()
        return len(answered), error

    def _learn(self, endpoint: Endpoint, method: str, message: str, fallback: Fallback | None) -> None:
        with self._lock:
            if method in endpoint.unsupported:
                return
            endpoint.unsupported.add(method)
        metrics.counted.rpc_unsupported.labels(endpoint.label, method).set(1)
        if fallback is not None and method == fallback.method:
            then = f"asking {fallback.instead} instead"
        elif len(self.endpoints) > 1:
            then = "asking the other endpoints"
        else:
            then = "no other endpoint to ask"
        log.warning("%s does not support %s (%s); %s", endpoint.label, method, message[:120], then)

    def _too_large(self, endpoint: Endpoint, unanswered: list[_Slot], *, answered: int, why: str,
                   size: int | None = None) -> None:
        """`endpoint` found a request of `size` calls too large: its batch size shrinks to what it
        answered (or to half); a call too large on its own goes to the other endpoints."""
        size = size or len(unanswered)
        metrics.counted.rpc_splits.labels(endpoint.label).inc()
        if size == 1:
            for slot in unanswered:
                slot.excluded.add(id(endpoint))
                slot.why = f"{why}, even for a single {slot.call[0]} call"
            return
        smaller = answered or size // 2
        with self._lock:
            if smaller >= endpoint.max_batch:
                return
            endpoint.max_batch = max(1, smaller)
        metrics.counted.rpc_batch_size.labels(endpoint.label).set(endpoint.max_batch)
        log.warning("%s found a batch of %d calls too large; sending it at most %d from now on",
                    endpoint.label, size, endpoint.max_batch)

    def _request(self, endpoint: Endpoint, chunk: list[_Slot]) -> tuple[list[Any], float]:
        """One HTTP request: for each call of `chunk` its result, a `_Failed`, or `_MISSING`;
        and when it was sent. Raises `_Refused` when the request failed as a whole."""
        waited, sent_at = endpoint.rate.acquire(len(chunk))
        if waited:
            metrics.counted.rpc_rate_limit_wait.labels(endpoint.label).inc(waited)
        try:
            return self._post(endpoint, chunk), sent_at
        except _Refused as exc:
            exc.sent_at = sent_at
            raise

    def _post(self, endpoint: Endpoint, chunk: list[_Slot]) -> list[Any]:
        body = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": s.call[0], "params": list(s.call[1])}
                             for i, s in enumerate(chunk)])
        where = endpoint.label
        methods = {s.call[0] for s in chunk}
        method = methods.pop() if len(methods) == 1 else "mixed"
        started = time.perf_counter()
        try:
            try:
                with endpoint.session().post(endpoint.url, data=body, timeout=self.timeout, stream=True) as resp:
                    content = b"".join(resp.iter_content(BODY_PIECE))
            finally:
                metrics.counted.rpc_seconds.labels(where, method).observe(time.perf_counter() - started)
        except requests.Timeout:
            raise _Refused(f"{where}: no answer within {self.timeout:g} s", "timeout") from None
        except requests.ConnectionError as exc:
            raise _Refused(f"{where}: {_connection_failure(exc)}", "connection") from None
        except requests.RequestException as exc:  # its text may hold the full URL, key and all
            raise _Refused(f"{where}: {type(exc).__name__}", "http") from None
        try:
            answer = msgspec.json.decode(content)
        except msgspec.DecodeError:
            answer = None
        except RecursionError:
            answer = _deep_json(content)
        # Every text the node sends is scrubbed whole, before anything cuts it: a key cut in two
        # is no longer found.
        said = self.secrets.scrub
        if resp.status_code == 429:
            retry_after = _retry_after(resp.headers.get("Retry-After"))
            if retry_after is None and isinstance(answer, dict):
                retry_after = _backoff_seconds(answer.get("error"))
            raise _Refused(f"{where}: HTTP 429 rate limited", "http_429", retry_after)
        if resp.status_code == 413:
            raise _Refused(f"{where}: HTTP 413 request too large", TOO_LARGE)
        if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
            # One error for the whole request, whatever the HTTP status.
            error = answer["error"]
            message = said(str(error.get("message", "")))
            kind = classify(error.get("code"), message)
            if kind in (TOO_LARGE, RATE_LIMITED):
                raise _Refused(f"{where}: batch refused: {message[:200]}", kind, _backoff_seconds(error))
            if kind == PRUNED or kind == UNSUPPORTED and len({s.call[0] for s in chunk}) == 1:
                return [_Failed(kind, message) for _ in chunk]
            if resp.status_code == 200:
                raise _Refused(f"{where}: batch refused: {said(str(error))[:200]}", ERROR)
            raise _Refused(f"{where}: HTTP {resp.status_code}: {said(str(error))[:200]}", f"http_{resp.status_code // 100}xx")
        if resp.status_code != 200:
            text = said(content.decode("utf-8", "replace"))[:300]
            kind = classify(None, text)
            if kind == TOO_LARGE:
                raise _Refused(f"{where}: HTTP {resp.status_code}: {text[:100]}", TOO_LARGE)
            if kind == RATE_LIMITED:
                raise _Refused(f"{where}: HTTP {resp.status_code}: {text[:100]}", RATE_LIMITED,
                               _retry_after(resp.headers.get("Retry-After")))
            raise _Refused(f"{where}: HTTP {resp.status_code}", f"http_{resp.status_code // 100}xx")
        if answer is None:
            shown = said(content.decode("utf-8", "replace")).encode()
            raise _Refused(f"{where}: answer is not JSON: {shown[:40]!r}", "invalid_json")
        if isinstance(answer, dict) and "result" in answer:  # a batch of one answered without its list
            answer = [answer]
        if not isinstance(answer, list):
            raise _Refused(f"{where}: answer is neither a list nor an error", "invalid_json")
        by_id: dict[Any, Any] = {}
        for item in answer:
            if isinstance(item, dict) and "id" in item:
                by_id[item["id"]] = item
        results: list[Any] = []
        for i in range(len(chunk)):
            item = by_id.get(i)
            if item is None:
                results.append(_MISSING)
            elif item.get("error") is not None:
                error = item["error"]
                if isinstance(error, dict):
                    message = said(str(error.get("message", error)))
                    results.append(_Failed(classify(error.get("code"), message), message, _backoff_seconds(error)))
                else:
                    message = said(str(error))
                    results.append(_Failed(classify(None, message), message))
            elif "result" not in item:
                results.append(_Failed("invalid_json", "answer has neither result nor error"))
            else:
                results.append(item["result"])
        if all(r is _MISSING for r in results):
            raise _Refused(f"{where}: answer lacks all {len(chunk)} results", "incomplete")
        return results


# The nesting a JSON answer may have: a call tracer's tree of a transaction whose calls go the
# EVM's 1,024 deep nests past 2,048 levels (two a frame), and msgspec stops at the interpreter's
# recursion limit (1,000 by default).
DEEPEST_JSON = 4_200


def _deep_json(content: bytes) -> Any:
    """An answer nested deeper than msgspec parses, parsed by the standard library (whose parser
    recurses once a level: the interpreter's limit is raised to allow it, once, for good, since
    another thread may be parsing meanwhile); None if it is not JSON, or deeper still."""
    if sys.getrecursionlimit() < DEEPEST_JSON + 200:
        sys.setrecursionlimit(DEEPEST_JSON + 200)
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return None


def _what(slots: list[_Slot]) -> str:
    """The calls left, for an error: "eth_chainId", or "12 calls (eth_getBlockByNumber, ...)"."""
    methods = list(dict.fromkeys(s.call[0] for s in slots))
    return methods[0] if len(slots) == 1 else f"{len(slots)} calls ({', '.join(methods[:4])})"


def _hint(failed: _Failed) -> str:
    """What to check, after a failure whose cause is likely the setup rather than the node."""
    if failed.kind == "connection":
        return f"; is a node running at {failed.where}? (INDEXER_RPC_URL)"
    if failed.kind == "http_4xx":
        return f"; is INDEXER_RPC_URL the JSON-RPC URL of {failed.where}, with its key if it needs one?"
    return ""


def _connection_failure(exc: BaseException) -> str:
    """Why a connection failed, from the exceptions requests and urllib3 wrap around the cause:
    their own texts hold the full URL, key and all."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return "host name not found"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
        todo += [x for x in (getattr(e, "reason", None), e.__cause__, e.__context__, *e.args)
                 if isinstance(x, BaseException)]
    return "connection failed"


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from nodes; the limiter's own wait applies


def _backoff_seconds(error: Any) -> float | None:
    """Infura's `data.backoff_seconds` in a rate-limit error."""
    data = error.get("data") if isinstance(error, dict) else None
    value = data.get("backoff_seconds") if isinstance(data, dict) else None
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None
