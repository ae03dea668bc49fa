"""An HTTP proxy in front of a real node that injects faults into a share of the answers, and
behaves, when asked, like the nodes and providers people actually use.

Faults (`FAULTS`, drawn at random at `rate`, or served in order to the first requests with
`first`): HTTP 500, HTTP 429 with Retry-After, an answer held past the client's timeout, a JSON
body cut in half, a batch answered in reverse order, an HTML page. More that are served only
when named (`faults=` or `first=`): "http413" (the request refused as too large), "http429_bare"
(HTTP 429 without Retry-After), "limit_exceeded" (HTTP 200, each call answered -32005 "limit
exceeded", EIP-1474's name for that code, which Infura sends over its request rate).

Behaviours, off unless asked for (texts and codes as the software that sends them):
- `max_batch=N`: a batch of more than N calls is refused as a whole: `too_large_as="error"`, one
  -32600 error object; "geth", go-ethereum's "batch too large" in a batch of one answer with
  the first call's id (rpc/handler.go respondWithBatchTooLarge); "http413", HTTP 413;
- `max_results=N`: go-ethereum's response cap (BatchResponseMaxSize, counted in calls): every
  call of a batch after the Nth answered is answered -32003 "response too large";
- `lacks=(method, ...)`: those methods answer go-ethereum's -32601 "the method X does not
  exist/is not available" (eth_getBlockReceipts before go-ethereum 1.13);
- `pruned_below=N`: eth_getBlockByNumber and eth_getBlockReceipts of a block number below N
  answer go-ethereum's 4444 "pruned history unavailable" (history expiry);
- `calls_per_second=R`: a provider's rate limit, a token bucket of R calls a second (bursts of
  one second's worth): a request over it gets HTTP 429 (with `retry_after` unless None), or with
  `limit_as="json-rpc"` HTTP 200 and -32005 "limit exceeded" for each call.
- `results={method: value}`: calls of those methods are answered with that result, whatever the
  node would say (a node whose head is "0xzz", null, or a JSON number).
- `errors={method: error}`: calls of those methods are answered with that JSON-RPC error object
  (go-ethereum's -32003 "response too large" to a block's traces).
- `rewrite=f`: each call's result from the node goes through `f(call, result)`, and the client
  gets what it returns (a node that lies: blocks of another fork, hashes that do not link). It
  runs in the thread answering the request, so it may also hold the answer back, or act on the
  node meanwhile; what it changed is counted as "rewritten".
- `slow_receipts=(T, S)`: a request asking eth_getBlockReceipts of a block of at least T
  transactions is answered S seconds late, as a node takes its time over a huge block's
  receipts; its transactions' receipts one by one come at once.
- `echo=(form, ...)`: a gateway that echoes what it was asked in its error texts, the forms
  served in turn to every request but a lone eth_chainId (so that a pool starts): each text
  holds the request's path and query, as sent and percent-decoded, and the user and password of
  its basic authentication. "html": HTTP 503 and a page saying the rate limit was exceeded;
  "html200": HTTP 200 and a page that is not JSON; "json": HTTP 200 and one -32000 error object
  for the whole request; "call": each call answered a -32000 error; "key": each call answered a
  -32000 error that quotes each path segment and query value alone, as sent ("unknown key
  Sh0rt7"), as gateways name the key they refuse.
`calls` counts the calls received, by method; `served` what each request got ("pass", a fault,
"too_large", "rate_limited", "response_too_large", "slow_receipts"), and each call refused as
"method_not_found" or "pruned", or answered by `results` ("result") or `errors` ("error").
"""

from __future__ import annotations

import base64
import random
import threading
import time
from collections import Counter
from typing import Callable
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote

import orjson
import requests

from .loopback import LoopbackServer, send
from .node_errors import BATCH_TOO_LARGE, PRUNED_HISTORY, RESPONSE_TOO_LARGE

FAULTS = ("http500", "http429", "timeout", "truncate", "reorder", "html")
NAMED_FAULTS = ("http413", "http429_bare", "limit_exceeded")
ECHOES = ("html", "html200", "json", "call", "key")

LIMIT_EXCEEDED = {"code": -32005, "message": "limit exceeded"}


class FaultProxy(LoopbackServer):
    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.0,
        faults: tuple[str, ...] = FAULTS,
        hold_seconds: float = 2.0,
        retry_after: str | None = "1",
        max_batch: int | None = None,
        delay: float = 0.0,
        seed: int = 1,
        first: tuple[str, ...] = (),
        too_large_as: str = "error",
        max_results: int | None = None,
        lacks: tuple[str, ...] = (),
        pruned_below: int | None = None,
        calls_per_second: float | None = None,
        limit_as: str = "http429",
        echo: tuple[str, ...] = (),
        results: dict[str, object] | None = None,
        errors: dict[str, dict] | None = None,
        slow_receipts: tuple[int, float] | None = None,
        rewrite: Callable[[dict, object], object] | None = None,
    ) -> None:
        self.upstream = upstream
        self.rate = rate
        self.faults = faults
        self.hold_seconds = hold_seconds
        self.retry_after = retry_after
        self.max_batch = max_batch
        self.delay = delay
        self.first = list(first)  # faults served, in order, to the first requests
        self.too_large_as = too_large_as
        self.max_results = max_results
        self.lacks = set(lacks)
        self.pruned_below = pruned_below
        self.calls_per_second = calls_per_second
        self.limit_as = limit_as
        self.echo = list(echo)
        self.results = dict(results or {})
        self.errors = dict(errors or {})
        self.slow_receipts = slow_receipts
        self.rewrite = rewrite
        self._transactions: dict[str, int] = {}  # a block's transaction count, by its hash or number
        self._echoed = 0
        self._tokens = calls_per_second or 0.0
        self._stamp = time.monotonic()
        self.calls: Counter[str] = Counter()  # calls received, by method
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.served: Counter[str] = Counter()
        self.requests: list[tuple[float, int]] = []  # (monotonic time, calls in the request)
        self._closing = threading.Event()
        super().__init__(self.handle)

    def close(self) -> None:
        # An answer held back (a timeout, slow receipts) is dropped: the node behind may be gone
        # by the time it is due.
        self._closing.set()
        super().close()

    def _choose(self) -> str:
        with self.lock:
            if self.first:
                return self.first.pop(0)
            if self.rng.random() < self.rate:
                return self.rng.choice(self.faults)
            return "pass"

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            request = None
        batch = isinstance(request, list)
        items = request if batch else [request] if isinstance(request, dict) else []
        calls = len(request) if batch else 1
        with self.lock:
            self.requests.append((time.monotonic(), calls))
            self.calls.update(c.get("method") for c in items if isinstance(c, dict))
        if self.delay:
            time.sleep(self.delay)
        if self.calls_per_second is not None and not self._take(calls):
            self._count("rate_limited")
            if self.limit_as == "json-rpc":
                return self._limit_exceeded(h, items, batch)
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return send(h, 429, b'{"error": "too many requests"}', headers)
        if self.max_batch is not None and calls > self.max_batch:
            self._count("too_large")
            if self.too_large_as == "http413":
                return send(h, 413, b"Request Entity Too Large", content_type="text/plain")
            if self.too_large_as == "geth":
                first = next((c.get("id") for c in items if isinstance(c, dict)), None)
                return send(h, 200, orjson.dumps([_error(first, BATCH_TOO_LARGE)]))
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": f"batch too large: {calls} > {self.max_batch}"}}
            return send(h, 200, orjson.dumps(error))
        if self.echo and any(isinstance(c, dict) and c.get("method") != "eth_chainId" for c in items):
            return self._echo(h, items, batch)
        fault = self._choose()
        self._count(fault)
        if fault == "http500":
            return send(h, 500, b"internal error")
        if fault in ("http429", "http429_bare"):
            headers = {"Retry-After": self.retry_after} if fault == "http429" and self.retry_after is not None else {}
            return send(h, 429, b'{"error": "slow down"}', headers)
        if fault == "http413":
            return send(h, 413, b"Request Entity Too Large", content_type="text/plain")
        if fault == "limit_exceeded":
            return self._limit_exceeded(h, items, batch)
        if fault == "html":
            return send(h, 200, b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        if fault == "timeout" and self._closing.wait(self.hold_seconds):
            return
        if self.slow_receipts is not None and self._asks_big_receipts(items):
            self._count("slow_receipts")
            if self._closing.wait(self.slow_receipts[1]):
                return
        local = {i: answer for i, c in enumerate(items) if (answer := self._own_answer(c)) is not None}
        if local or (self.max_results is not None and batch) or self.rewrite is not None:
            status, content = self._answer_some(items, batch, local)
        else:
            upstream = requests.post(self.upstream, data=body, headers={"Content-Type": "application/json"}, timeout=60)
            status, content = upstream.status_code, upstream.content
        if fault == "truncate":
            content = content[: max(1, len(content) // 2)]
        elif fault == "reorder" and batch:
            content = orjson.dumps(list(reversed(orjson.loads(content))))
        send(h, status, content)

    def _own_answer(self, call: object) -> dict | None:
        """What this proxy answers `call` with itself, if anything: {"result": ...} or {"error": ...}."""
        if not isinstance(call, dict):
            return None
        method, params = call.get("method"), call.get("params") or []
        if method in self.results:
            self._count("result")
            return {"result": self.results[method]}
        if method in self.errors:
            self._count("error")
            return {"error": self.errors[method]}
        if method in self.lacks:
            self._count("method_not_found")
            return {"error": {"code": -32601, "message": f"the method {method} does not exist/is not available"}}
        if self.pruned_below is not None and method in ("eth_getBlockByNumber", "eth_getBlockReceipts") and params \
                and isinstance(params[0], str) and params[0].startswith("0x") and len(params[0]) < 66 \
                and int(params[0], 16) < self.pruned_below:
            self._count("pruned")
            return {"error": PRUNED_HISTORY}
        return None

    def _asks_big_receipts(self, items: list) -> bool:
        """Whether the request asks eth_getBlockReceipts of a block with `slow_receipts[0]` or more
        transactions (counted by asking the node, once per block)."""
        assert self.slow_receipts is not None
        for call in items:
            if not isinstance(call, dict) or call.get("method") != "eth_getBlockReceipts" or not call.get("params"):
                continue
            block = call["params"][0]
            if block not in self._transactions:
                by = "eth_getBlockByHash" if isinstance(block, str) and len(block) == 66 else "eth_getBlockByNumber"
                asked = {"jsonrpc": "2.0", "id": 1, "method": by, "params": [block, False]}
                found = orjson.loads(requests.post(self.upstream, data=orjson.dumps(asked), timeout=60,
                                                   headers={"Content-Type": "application/json"}).content)
                self._transactions[block] = len((found.get("result") or {}).get("transactions", []))
            if self._transactions[block] >= self.slow_receipts[0]:
                return True
        return False

    def _answer_some(self, items: list, batch: bool, local: dict[int, dict]) -> tuple[int, bytes]:
        """Answers the calls this node refuses itself, asks the node for the others, and caps a
        batch's answers at `max_results` as go-ethereum does."""
        forward = [c for i, c in enumerate(items) if i not in local]
        by_id: dict = {}
        if forward:
            upstream = requests.post(self.upstream, data=orjson.dumps(forward), timeout=60,
                                     headers={"Content-Type": "application/json"})
            got = orjson.loads(upstream.content)
            by_id = {a.get("id"): a for a in (got if isinstance(got, list) else [got]) if isinstance(a, dict)}
            if self.rewrite is not None:
                by_id = {id_: self._rewritten(forward, a) for id_, a in by_id.items()}
        answers = []
        for i, call in enumerate(items):
            id_ = call.get("id") if isinstance(call, dict) else None
            lost = _error(id_, {"code": -32603, "message": "no answer from the node"})
            answers.append({"jsonrpc": "2.0", "id": id_, **local[i]} if i in local else by_id.get(id_, lost))
        if self.max_results is not None and batch and len(answers) > self.max_results:
            self._count("response_too_large")
            cut = answers[self.max_results:]
            answers = answers[: self.max_results] + [_error(a.get("id"), RESPONSE_TOO_LARGE) for a in cut]
        return 200, orjson.dumps(answers if batch else answers[0])

    def _rewritten(self, calls: list, answer: dict) -> dict:
        """`answer`, its result passed through `rewrite`."""
        assert self.rewrite is not None
        call = next((c for c in calls if isinstance(c, dict) and c.get("id") == answer.get("id")), None)
        if call is None or "result" not in answer:
            return answer
        result = self.rewrite(call, answer["result"])
        if result != answer["result"]:
            self._count("rewritten")
        return {**answer, "result": result}

    def _limit_exceeded(self, h: BaseHTTPRequestHandler, items: list, batch: bool) -> None:
        answers = [_error(c.get("id") if isinstance(c, dict) else None, LIMIT_EXCEEDED) for c in items]
        return send(h, 200, orjson.dumps(answers if batch else answers[0]))

    def _echo(self, h: BaseHTTPRequestHandler, items: list, batch: bool) -> None:
        with self.lock:
            form = self.echo[self._echoed % len(self.echo)]
            self._echoed += 1
        self._count(f"echo_{form}")
        auth = h.headers.get("Authorization", "")
        user = base64.b64decode(auth.removeprefix("Basic ")).decode() if auth.startswith("Basic ") else "nobody"
        asked = f"{h.command} {h.path} (decoded {unquote(h.path)}) for {user}"
        if form == "html":
            page = f"<html><body><h1>503</h1><p>rate limit exceeded: {asked}</p></body></html>"
            return send(h, 503, page.encode(), content_type="text/html")
        if form == "html200":
            return send(h, 200, f"<html><body>Cannot {asked}</body></html>".encode(), content_type="text/html")
        message = f"invalid API key: {asked}"
        if form == "key":
            path, _, query = h.path.partition("?")
            alone = [s for s in path.split("/") if s] + [p.partition("=")[2] or p for p in query.split("&") if p]
            message = "unknown key " + " ".join(alone)
        error = {"code": -32000, "message": message}
        if form == "json":
            return send(h, 200, orjson.dumps(_error(None, error)))
        answers = [_error(c.get("id") if isinstance(c, dict) else None, error) for c in items]
        return send(h, 200, orjson.dumps(answers if batch else answers[0]))

    def _take(self, calls: int) -> bool:
        """Whether `calls` calls fit in the rate limit now (a token bucket)."""
        with self.lock:
            now = time.monotonic()
            rate = self.calls_per_second or 0.0
            self._tokens = min(rate, self._tokens + (now - self._stamp) * rate)
            self._stamp = now
            if self._tokens < calls and not (self._tokens >= rate > 0 and calls > rate):
                return False
            self._tokens -= calls
            return True

    def _count(self, what: str) -> None:
        with self.lock:
            self.served[what] += 1


def _error(id_: object, error: dict) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "error": dict(error)}
