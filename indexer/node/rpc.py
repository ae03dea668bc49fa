"""JSON-RPC client for the hot path: batches, retries, failover, rate limits that adapt.

When the project was designed, web3.py's `batch_requests()` reached 2,949 blocks/s on a local
node where plain HTTP batches parsed with orjson reached 22,053, so the fetch path speaks
JSON-RPC itself: one `requests` session per thread and endpoint, requests written by orjson,
answers read by msgspec (1.5x faster than orjson on mainnet's blocks and exact on integers past
64 bits, which orjson turns into floats: BENCHMARKS.md, "Less CPU per block"). Below the client:
one HTTP request (`rpc_transport.py`), a batch's calls as they are worked through
(`rpc_batch.py`), each endpoint's rate (`rpc_rate.py`) and what a node's errors mean
(`rpc_errors.py`).

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

import logging
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

import orjson

from ..base import metrics
from ..base.errors import Secrets
from ..base.urls import endpoint_label
from .rpc_batch import Fallback, Work
from .rpc_errors import ERROR, LIMITS, PRUNED, RATE_LIMITED, TIMEOUT_TEXT, TOO_LARGE, UNSUPPORTED, RateLimited, RpcError
from .rpc_rate import AdaptiveRate
from .rpc_encoding import checked
from .rpc_transport import MAX_ANSWER_BYTES, MISSING, Call, Endpoint, Failed, Refused, Slot, post

if TYPE_CHECKING:
    from ..base.settings import Settings


log = logging.getLogger(__name__)

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
        compression: str = "auto",
        max_answer: int = MAX_ANSWER_BYTES,
    ) -> None:
        """`rate_limit`: the most calls per second each endpoint is sent (0: no ceiling; the
        rates adapt below it); `max_batch`: calls per HTTP request until an endpoint wants fewer;
        `patience`: the seconds of nothing but rate limits (refusals, and waits the limiter asks)
        after which a batch is `RateLimited` (None: no end; 0: at the first refusal, which then
        holds nothing back: a health check's); `compression`: whether answers are asked gzipped
        ("auto", "gzip", "none": `rpc_encoding.accepted_encoding`); `max_answer`: the most bytes
        an answer is read to, decompressed, before it is too large."""
        compression = checked(compression)
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
            self.endpoints.append(Endpoint(url, label, max_batch, rate, compression, max_answer))
            metrics.counted.rpc_rate.labels(label).set(rate.rate or 0)
            metrics.counted.rpc_batch_size.labels(label).set(max_batch)
        self._next = 0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, cfg: Settings, urls: Sequence[str] | None = None, **options: Any) -> RpcClient:
        """A client of `urls` (by default the settings' endpoints) with the settings' timeout,
        attempts, compression and largest answer; `options` set the rest."""
        return cls(cfg.rpc_urls if urls is None else urls, timeout=cfg.rpc_timeout, max_attempts=cfg.rpc_max_attempts,
                   compression=cfg.rpc_compression, max_answer=cfg.rpc_max_answer_mb << 20, **options)

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
        work = Work(calls, fallback, parse)
        failures = 0  # requests in a row that brought no answer (rate limits aside)
        limited_since: float | None = None  # since when nothing but rate limits came back
        limit: Failed | None = None  # the last of them
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
            except Refused as exc:
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
            if error.kind in LIMITS:  # backpressure: the rate limiter does the waiting
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

    def _refused(self, endpoint: Endpoint, chunk: list[Slot], exc: Refused) -> Failed | None:
        """A request failed as a whole: what to retry it for (None: asked again at once)."""
        if exc.kind == TOO_LARGE:
            self._too_large(endpoint, chunk, answered=0, why=str(exc))
            return None
        if exc.kind in LIMITS:
            self._limited(endpoint, exc.sent_at, exc.retry_after)
        return Failed(exc.kind, str(exc), where=endpoint.label)

    def _impatient(self, work: Work, since: float | None, limit: Failed | None, endpoint: Endpoint,
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

    def _asking_in_pieces(self, endpoint: Endpoint, slow: list[Slot], fallback: Fallback | None,
                          why: str | None = None) -> None:
        assert fallback is not None
        log.warning("%s: %d %s call(s) %s; asking %s instead, at most %d at a time", endpoint.label, len(slow),
                    fallback.method, why or f"got no answer within {self.timeout:g} s", fallback.instead,
                    endpoint.max_batch)

    def _absorb(self, endpoint: Endpoint, work: Work, chunk: list[Slot], answers: list[Any],
                sent_at: float) -> tuple[int, Failed | None]:
        """Keeps the results of one request and learns from its errors; returns how many calls
        it answered, and what to retry the others for (None: asked again at once)."""
        answered: list[Slot] = []
        kinds: set[str] = set()
        error: Failed | None = None
        retry_after: float | None = None
        for slot, answer in zip(chunk, answers):
            if answer is MISSING:
                kinds.add("incomplete")
            elif not isinstance(answer, Failed):
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
                if answer.kind == ERROR and work.fallback is not None and TIMEOUT_TEXT.search(answer.message.lower()) \
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
                    error = error or Failed(RATE_LIMITED, f"{endpoint.label}: {method}: {answer.message[:200]}",
                                             where=endpoint.label)
                elif answer.kind != TOO_LARGE:
                    error = error or Failed(answer.kind, f"{endpoint.label}: {method} failed: {answer.message[:200]}",
                                             where=endpoint.label)
        work.answered(answered)
        if TOO_LARGE in kinds:
            # go-ethereum answers a batch past its request limit with one error, for the first id.
            kinds.discard("incomplete")
            done = {id(s) for s in answered}
            self._too_large(endpoint, [s for s in chunk if id(s) not in done], answered=len(answered),
                            why=f"{endpoint.label}: response too large", size=len(chunk))
        if "incomplete" in kinds and error is None:
            error = Failed("incomplete", f"{endpoint.label}: answer lacks some of {len(chunk)} results",
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

    def _too_large(self, endpoint: Endpoint, unanswered: list[Slot], *, answered: int, why: str,
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

    def _request(self, endpoint: Endpoint, chunk: list[Slot]) -> tuple[list[Any], float]:
        """One HTTP request: for each call of `chunk` its result, a `Failed`, or `MISSING`;
        and when it was sent. Raises `Refused` when the request failed as a whole."""
        waited, sent_at = endpoint.rate.acquire(len(chunk))
        if waited:
            metrics.counted.rpc_rate_limit_wait.labels(endpoint.label).inc(waited)
        try:
            return post(endpoint, chunk, timeout=self.timeout, secrets=self.secrets), sent_at
        except Refused as exc:
            exc.sent_at = sent_at
            raise


def _what(slots: list[Slot]) -> str:
    """The calls left, for an error: "eth_chainId", or "12 calls (eth_getBlockByNumber, ...)"."""
    methods = list(dict.fromkeys(s.call[0] for s in slots))
    return methods[0] if len(slots) == 1 else f"{len(slots)} calls ({', '.join(methods[:4])})"


def _hint(failed: Failed) -> str:
    """What to check, after a failure whose cause is likely the setup rather than the node."""
    if failed.kind == "connection":
        return f"; is a node running at {failed.where}? (INDEXER_RPC_URL)"
    if failed.kind == "http_4xx":
        return f"; is INDEXER_RPC_URL the JSON-RPC URL of {failed.where}, with its key if it needs one?"
    return ""
