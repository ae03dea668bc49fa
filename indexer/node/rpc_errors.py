"""What a node's refusals mean: the JSON-RPC error codes and texts of clients and providers read
as kinds (`classify`), and the errors the client raises when no endpoint can answer.
"""

from __future__ import annotations

import re
from typing import Any


from ..base.errors import ChainDataError, IndexerError


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
TIMEOUT_TEXT = re.compile(r"deadline|time ?out|timed out")
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
    if TIMEOUT_TEXT.search(text):
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
LIMITS = (RATE_LIMITED, "http_429")


def retry_after_seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: rare from nodes; the limiter's own wait applies


def backoff_seconds(error: Any) -> float | None:
    """Infura's `data.backoff_seconds` in a rate-limit error."""
    data = error.get("data") if isinstance(error, dict) else None
    value = data.get("backoff_seconds") if isinstance(data, dict) else None
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None
