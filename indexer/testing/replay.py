"""A loopback JSON-RPC node that serves recorded answers of real chains (tests/fixtures).

A fake that serves real recorded answers: every block, transaction and receipt it returns is the
recorded JSON, key for key (`eth_getBlockByNumber(n, false)` swaps the transaction objects for
their hashes, as a node does). Single calls and batches; answers carry the request's id, and
notifications (calls without an "id" member) get no answer, as in go-ethereum.

Methods: eth_chainId, net_version, eth_blockNumber (the highest block loaded),
eth_getBlockByNumber (hex number, "latest", "pending", "finalized", "safe": the highest block;
"earliest": the lowest), eth_getBlockByHash, eth_getBlockReceipts (by hash, number, tag or an
EIP-1898 object), eth_getTransactionReceipt. An unknown block or transaction answers `null`;
any other method answers go-ethereum's -32601.

Traces, from recorded tracer answers (tests/fixtures/traces, listed per block in `TRACES`):
debug_traceBlockByHash and debug_traceTransaction with `{"tracer": "callTracer"}`, trace_block
(hex number) and trace_transaction. A loaded block with no recording of a method answers
go-ethereum's -32601 for that method, as a node without it does, so that a client's fallback
(to the transaction-by-transaction form, then to the other family) is what answers it; an
unknown block or transaction answers go-ethereum's "not found" errors (debug_*) or `null`
(trace_*, as erigon does).

Behaviours of real nodes and providers, off unless asked for; every error text is copied from
the software or provider that sends it (sources beside each constant):
- `block_receipts=False`: eth_getBlockReceipts does not exist (go-ethereum before 1.13);
- `max_batch_results=N`: in a batch, every call after the Nth is answered with go-ethereum's
  "response too large" error (its `BatchResponseMaxSize` cap, counted in calls rather than
  bytes); `batch_response_max_size=B` is the cap as go-ethereum counts it, in bytes;
- `max_batch_requests=N`: a batch of more than N calls gets go-ethereum's "batch too large"
  (its `BatchRequestLimit`, default 1000);
- `pruned_below=N`: blocks below N answer go-ethereum's "pruned history unavailable" (code 4444,
  EIP-4444 history expiry); a receipt by transaction hash in such a block answers `null`, since
  the node no longer knows the transaction;
- `limit_exceeded_every=K`: every Kth HTTP request is refused the way a provider refuses
  requests over its rate: a JSON-RPC error -32005 for each call (Infura's form), or with
  `limit_exceeded_as="http-429"` an HTTP 429 (Alchemy's form).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Literal

import orjson

from . import fixtures
from .fixtures import TRACES, recorded_trace
from .loopback import LoopbackServer, send
from .node_errors import (ALCHEMY_RATE_LIMITED, BATCH_TOO_LARGE, EMPTY_BATCH, INFURA_RATE_LIMITED, INVALID_REQUEST,
                          METHOD_NOT_FOUND, PARSE_ERROR, PRUNED_HISTORY, RESPONSE_TOO_LARGE)

_TAGS_HIGHEST = ("latest", "pending", "finalized", "safe")

TRACE_METHODS = ("debug_traceBlockByHash", "debug_traceTransaction", "trace_block", "trace_transaction")


class _InvalidParams(Exception):
    """A call whose parameters a node would refuse (-32602)."""


class _Refused(Exception):
    """A call answered with one of the node's errors; `kind` is its key in `refused`."""

    def __init__(self, error: dict[str, Any], kind: str) -> None:
        self.error = error
        self.kind = kind


class ReplayNode(LoopbackServer):
    def __init__(
        self,
        names: list[str] | None = None,
        *,
        chain_id: int = 1,
        block_receipts: bool = True,
        max_batch_results: int | None = None,
        pruned_below: int | None = None,
        limit_exceeded_every: int | None = None,
        limit_exceeded_as: Literal["json-rpc", "http-429"] = "json-rpc",
        retry_after: str | None = None,
        batch_response_max_size: int | None = None,
        max_batch_requests: int | None = None,
    ) -> None:
        """`names`: recorded blocks (`fixtures.names()`), not necessarily consecutive; by default
        every `mainnet-*` one. Two blocks of the same number, or none at all, is an error."""
        if names is None:
            names = [n for n in fixtures.names() if n.startswith("mainnet-")]
        if not names:
            raise ValueError("a replay node needs at least one recorded block")
        for name, value in (("max_batch_results", max_batch_results), ("limit_exceeded_every", limit_exceeded_every),
                            ("batch_response_max_size", batch_response_max_size),
                            ("max_batch_requests", max_batch_requests)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if limit_exceeded_as not in ("json-rpc", "http-429"):
            raise ValueError(f"limit_exceeded_as is 'json-rpc' or 'http-429', not {limit_exceeded_as!r}")
        self.chain_id = chain_id
        self.block_receipts = block_receipts
        self.max_batch_results = max_batch_results
        self.pruned_below = pruned_below
        self.limit_exceeded_every = limit_exceeded_every
        self.limit_exceeded_as = limit_exceeded_as
        self.retry_after = retry_after
        self.batch_response_max_size = batch_response_max_size
        self.max_batch_requests = max_batch_requests

        self.blocks: dict[int, dict[str, Any]] = {}       # number -> eth_getBlockByNumber(n, true)
        self.receipts: dict[int, list[dict[str, Any]]] = {}
        self._by_hash: dict[str, int] = {}
        self._tx: dict[str, tuple[int, int]] = {}         # tx hash -> (block number, index)
        for name in names:
            recorded = fixtures.load(name)
            block, receipts = recorded["block"], recorded["receipts"]
            number = int(block["number"], 16)
            if number in self.blocks:
                raise ValueError(f"{name}: block {number} is loaded twice")
            if len(receipts) != len(block["transactions"]):
                raise ValueError(f"{name}: {len(block['transactions'])} transactions but {len(receipts)} receipts")
            self.blocks[number] = block
            self.receipts[number] = receipts
            self._by_hash[block["hash"].lower()] = number
            for index, tx in enumerate(block["transactions"]):
                self._tx[tx["hash"].lower()] = (number, index)
        # method -> block number (block methods) or tx hash (transaction methods) -> result
        self.traces: dict[str, dict[Any, Any]] = {m: {} for m in TRACE_METHODS}
        for name in names:
            number = int(fixtures.load(name)["block"]["number"], 16)
            for method, files in TRACES.get(name, {}).items():
                if method not in TRACE_METHODS:
                    raise ValueError(f"{name}: no method {method} to serve traces by")
                if isinstance(files, str):
                    self.traces[method][number] = recorded_trace(files)
                    continue
                transactions = self.blocks[number]["transactions"]
                if len(files) != len(transactions):
                    raise ValueError(f"{name}: {len(files)} recorded {method} answers, {len(transactions)} transactions")
                for tx, file in zip(transactions, files):
                    self.traces[method][tx["hash"].lower()] = recorded_trace(file)
        self.head = max(self.blocks)
        self.earliest = min(self.blocks)
        self._handlers = self._methods()

        self.lock = threading.Lock()
        self.served: Counter[str] = Counter()    # method -> calls answered with a result (null included)
        self.refused: Counter[str] = Counter()   # kind -> calls (or requests) answered with an error
        self.requests: list[int] = []            # calls in each HTTP request, in order
        super().__init__(lambda request, body: send(request, *self.handle(body)))

    # --- one HTTP request ---------------------------------------------------------------------

    def handle(self, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        """The HTTP status, body and extra headers answering one POSTed body."""
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            request = None
            parsed = False
        else:
            parsed = True
        batch = isinstance(request, list)
        with self.lock:
            self.requests.append(len(request) if batch else 1)
            count = len(self.requests)
        if self.limit_exceeded_every and count % self.limit_exceeded_every == 0:
            return self._limit_exceeded(request, batch)
        if not parsed:
            return 200, orjson.dumps(_error(None, PARSE_ERROR)), {}
        if not batch:
            answer = self._answer(request)
            return 200, (orjson.dumps(answer) if answer is not None else b""), {}
        if not request:
            return 200, orjson.dumps(_error(None, EMPTY_BATCH)), {}
        if self.max_batch_requests is not None and len(request) > self.max_batch_requests:
            first = next((c["id"] for c in request if _is_call(c)), None)
            self._count_refused("batch_too_large")
            return 200, orjson.dumps([_error(first, BATCH_TOO_LARGE)]), {}
        answers: list[dict[str, Any]] = []
        answered = size = 0
        capped = False
        for call in request:
            if capped:
                if _is_call(call):
                    self._count_refused("response_too_large")
                    answers.append(_error(call.get("id"), RESPONSE_TOO_LARGE))
                continue
            answer = self._answer(call)
            if answer is None:  # a notification
                continue
            answers.append(answer)
            answered += 1
            if self.max_batch_results is not None and answered >= self.max_batch_results:
                capped = True
            if self.batch_response_max_size is not None:
                # go-ethereum counts the encoded result or error of each answer, then answers
                # every call still waiting with "response too large" once past the limit.
                size += len(orjson.dumps(answer.get("result") if "result" in answer else answer.get("error")))
                if size > self.batch_response_max_size:
                    capped = True
        return 200, orjson.dumps(answers), {}

    def _limit_exceeded(self, request: Any, batch: bool) -> tuple[int, bytes, dict[str, str]]:
        self._count_refused("limit_exceeded")
        calls = request if batch else [request]
        if self.limit_exceeded_as == "http-429":
            first = calls[0].get("id") if calls and isinstance(calls[0], dict) else None
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            return 429, orjson.dumps(_error(first if not batch else None, ALCHEMY_RATE_LIMITED)), headers
        answers = [_error(c.get("id") if isinstance(c, dict) else None, INFURA_RATE_LIMITED) for c in calls]
        return 200, orjson.dumps(answers if batch else answers[0]), {}

    def _answer(self, call: Any) -> dict[str, Any] | None:
        """The answer to one call, or None for a notification."""
        if not isinstance(call, dict) or not isinstance(call.get("method"), str):
            return _error(call.get("id") if isinstance(call, dict) else None, INVALID_REQUEST)
        if not _is_call(call):
            return None
        method, params, id_ = call["method"], call.get("params") or [], call["id"]
        handler = self._handlers.get(method)
        if handler is None:
            self._count_refused("method_not_found")
            return _error(id_, {"code": METHOD_NOT_FOUND, "message": f"the method {method} does not exist/is not available"})
        try:
            result = handler(params if isinstance(params, list) else [params])
        except _InvalidParams as exc:
            self._count_refused("invalid_params")
            return _error(id_, {"code": -32602, "message": str(exc)})
        except _Refused as exc:
            self._count_refused(exc.kind)
            return _error(id_, exc.error)
        with self.lock:
            self.served[method] += 1
        return {"jsonrpc": "2.0", "id": id_, "result": result}

    # --- the methods --------------------------------------------------------------------------

    def _methods(self) -> dict[str, Any]:
        methods = {
            "eth_chainId": lambda p: hex(self.chain_id),
            "net_version": lambda p: str(self.chain_id),
            "eth_blockNumber": lambda p: hex(self.head),
            "eth_getBlockByNumber": self._block_by_number,
            "eth_getBlockByHash": self._block_by_hash,
            "eth_getTransactionReceipt": self._transaction_receipt,
            "debug_traceBlockByHash": self._debug_trace_block_by_hash,
            "debug_traceTransaction": self._debug_trace_transaction,
            "trace_block": self._trace_block,
            "trace_transaction": self._trace_transaction,
        }
        if self.block_receipts:
            methods["eth_getBlockReceipts"] = self._block_receipts
        return methods

    def _block_by_number(self, params: list[Any]) -> dict[str, Any] | None:
        number = self._number(_arg(params, 0))
        return self._block(number, _full(params))

    def _block_by_hash(self, params: list[Any]) -> dict[str, Any] | None:
        number = self._by_hash.get(_hash(_arg(params, 0)))
        return None if number is None else self._block(number, _full(params))

    def _block_receipts(self, params: list[Any]) -> list[dict[str, Any]] | None:
        which = _arg(params, 0)
        if isinstance(which, dict):  # EIP-1898: {"blockHash": ...} or {"blockNumber": ...}
            if "blockHash" in which:
                which = which["blockHash"]
            elif "blockNumber" in which:
                which = which["blockNumber"]
            else:
                raise _InvalidParams("invalid argument 0: neither block nor hash specified")
        if isinstance(which, str) and len(which) == 66:
            number = self._by_hash.get(_hash(which))
            if number is None:
                return None
        else:
            number = self._number(which)
        self._check_history(number)
        return self.receipts[number] if number in self.blocks else None

    def _transaction_receipt(self, params: list[Any]) -> dict[str, Any] | None:
        where = self._tx.get(_hash(_arg(params, 0)))
        if where is None:
            return None
        number, index = where
        if self.pruned_below is not None and number < self.pruned_below:
            return None  # go-ethereum: the pruned body no longer names the transaction
        return self.receipts[number][index]

    # go-ethereum eth/tracers/api.go: "block %#x not found" (a hash), errTxNotFound.
    def _debug_trace_block_by_hash(self, params: list[Any]) -> Any:
        hash_ = _hash(_arg(params, 0))
        _call_tracer(params)
        number = self._by_hash.get(hash_)
        if number is None:
            raise _Refused({"code": -32000, "message": f"block {hash_} not found"}, "not_found")
        self._check_history(number)
        return self._recorded("debug_traceBlockByHash", number)

    def _debug_trace_transaction(self, params: list[Any]) -> Any:
        hash_ = _hash(_arg(params, 0))
        _call_tracer(params)
        if hash_ not in self._tx:
            raise _Refused({"code": -32000, "message": "transaction not found"}, "not_found")
        return self._recorded("debug_traceTransaction", hash_)

    def _trace_block(self, params: list[Any]) -> Any:
        number = self._number(_arg(params, 0))
        if number not in self.blocks:
            return None
        self._check_history(number)
        return self._recorded("trace_block", number)

    def _trace_transaction(self, params: list[Any]) -> Any:
        hash_ = _hash(_arg(params, 0))
        return None if hash_ not in self._tx else self._recorded("trace_transaction", hash_)

    def _recorded(self, method: str, key: Any) -> Any:
        """The recorded answer, or -32601 for a block (or transaction) with none for `method`."""
        if key not in self.traces[method]:
            raise _Refused({"code": METHOD_NOT_FOUND, "message": f"the method {method} does not exist/is not available"},
                           "method_not_found")
        return self.traces[method][key]

    def _block(self, number: int, full: bool) -> dict[str, Any] | None:
        self._check_history(number)
        block = self.blocks.get(number)
        if block is None or full:
            return block
        return dict(block, transactions=[tx["hash"] for tx in block["transactions"]])

    def _check_history(self, number: int) -> None:
        if self.pruned_below is not None and number < self.pruned_below:
            raise _Refused(PRUNED_HISTORY, "pruned")

    def _number(self, value: Any) -> int:
        if value in _TAGS_HIGHEST:
            return self.head
        if value == "earliest":
            return self.earliest
        if not isinstance(value, str):
            raise _InvalidParams("invalid argument 0: json: cannot unmarshal non-string into Go value of type string")
        if not value.startswith(("0x", "0X")):
            raise _InvalidParams("invalid argument 0: hex string without 0x prefix")
        try:
            return int(value, 16)
        except ValueError:
            raise _InvalidParams("invalid argument 0: invalid hex string") from None

    # --- plumbing -------------------------------------------------------------------------------

    def _count_refused(self, kind: str) -> None:
        with self.lock:
            self.refused[kind] += 1


def _is_call(call: Any) -> bool:
    """A call awaits an answer; a notification (no "id" at all) does not. `"id": null` is a call."""
    return isinstance(call, dict) and "id" in call


def _error(id_: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": dict(error)}


def _arg(params: list[Any], index: int) -> Any:
    if len(params) <= index:
        raise _InvalidParams(f"missing value for required argument {index}")
    return params[index]


def _full(params: list[Any]) -> bool:
    full = _arg(params, 1)
    if not isinstance(full, bool):
        raise _InvalidParams("invalid argument 1: json: cannot unmarshal non-bool into Go value of type bool")
    return full


def _call_tracer(params: list[Any]) -> None:
    """Only call-tracer answers are recorded: any other tracer (or none, the struct logger) is a
    call this node cannot answer."""
    options = params[1] if len(params) > 1 else None
    if not (isinstance(options, dict) and options.get("tracer") == "callTracer"):
        raise _InvalidParams(f"the replay node has only callTracer recordings, not {options!r}")


def _hash(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("0x", "0X")) or len(value) != 66:
        raise _InvalidParams("invalid argument 0: hex string has length %d, want 64 for common.Hash"
                             % (max(0, len(value) - 2) if isinstance(value, str) else 0))
    return value.lower()
