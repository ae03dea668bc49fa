"""One HTTP request of JSON-RPC calls to one endpoint (`post`): sent on the endpoint's session of
this thread, its answer read in one piece or a megabyte at a time (`_body`; gzipped only from a
node far away: `accepted_encoding`; never past the endpoint's `max_answer` bytes) and parsed by
msgspec, each call's result matched by id, a call's error kept as `Failed`, a request that
failed as a whole `Refused`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence
from urllib.parse import urljoin, urlsplit

import msgspec
import orjson
import requests
import urllib3
from requests.models import DEFAULT_REDIRECT_LIMIT

from ..base import metrics
from ..base.errors import Secrets
from ..base.urls import endpoint_label
from .rpc_encoding import UNDECIDED_SECONDS, accepted_encoding
from .rpc_errors import (ERROR, PRUNED, RATE_LIMITED, TOO_LARGE, UNSUPPORTED, backoff_seconds, classify,
                         retry_after_seconds)
from .rpc_rate import AdaptiveRate


log = logging.getLogger(__name__)

Call = tuple[str, Sequence[Any]]

# Bytes of an answer read at a time when it is not read in one piece (`_body`): a batch of
# mainnet's blocks is megabytes, and requests' own 10 KB pieces each cost a trip through requests,
# urllib3 and http.client: fetching took a worker 19% more CPU (BENCHMARKS.md, "An answer's body
# read a megabyte at a time").
BODY_PIECE = 1 << 20

# The largest answer read, once decompressed, unless told (INDEXER_RPC_MAX_ANSWER_MB): a batch
# of mainnet's blocks is tens of megabytes, and a node that sends without end, or a few
# megabytes of gzip that inflate to gigabytes, would otherwise take the worker's memory.
MAX_ANSWER_BYTES = 256 << 20

# What is read of an answer other than HTTP 200: its error's words, a piece's worth.
ERROR_BODY = BODY_PIECE


@dataclass(eq=False)
class Endpoint:
    url: str
    label: str
    max_batch: int
    rate: AdaptiveRate
    compression: str = "auto"
    max_answer: int = MAX_ANSWER_BYTES
    unsupported: set[str] = field(default_factory=set)  # methods it answered "method not found" for
    _local: threading.local = field(default_factory=threading.local)
    _encoding: str | None = None  # `accepted_encoding`, once decided
    _tried: float | None = None  # when it last could not be (monotonic seconds)

    def session(self) -> requests.Session:
        s = getattr(self._local, "session", None)
        if s is None:
            s = _Session()
            s.headers["Content-Type"] = "application/json"
            # What requests reads from the environment before every request (the proxies and
            # NO_PROXY, a CA bundle, ~/.netrc), read once: the URL never changes, and reading it
            # was a quarter of the HTTP client's CPU a request (BENCHMARKS.md, "The environment
            # read once a session"). A change to them takes effect when the process restarts.
            s.trust_env = False
            s.proxies = requests.utils.get_environ_proxies(requests.Request("POST", self.url).prepare().url)
            s.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
            s.auth = requests.utils.get_netrc_auth(self.url)
            self._local.session = s
        # Each request: a session made while the node's name did not resolve takes the decision
        # another thread's session made since.
        s.headers["Accept-Encoding"] = self._accepted(s)
        return s

    def _accepted(self, s: requests.Session) -> str:
        """The Accept-Encoding to send (`accepted_encoding`): a node reached through a proxy is
        taken for far away; a name that did not resolve is tried again a minute later at most,
        gzip meanwhile (a resolver that hangs then costs each request nothing)."""
        if self._encoding is None and (self._tried is None or time.monotonic() - self._tried >= UNDECIDED_SECONDS):
            self._tried = time.monotonic()
            proxied = self.compression == "auto" and urlsplit(self.url).scheme in s.proxies
            self._encoding = "gzip" if proxied else accepted_encoding(self.url, self.compression)
        return self._encoding or "gzip"


class _Session(requests.Session):
    """A session that reads the environment once (`Endpoint.session`), and again, as requests does
    by default, for a redirect's new URL: its netrc entry and its proxies. A redirect's own body
    is never read."""

    @contextmanager
    def _trusting_env(self) -> Iterator[None]:
        self.trust_env = True
        try:
            yield
        finally:
            self.trust_env = False

    def get_redirect_target(self, resp: requests.Response) -> str | None:
        target = super().get_redirect_target(resp)
        if target is None:
            return None
        # requests reads a redirect's body whole, inflated, before it follows it: a node could
        # send a gzip bomb with its 307. Its connection is closed rather than reused with the
        # body still in it (a redirect to the same host would read that body as the next
        # answer), and the body taken as read and empty.
        resp.raw.close()
        if resp.status_code in (301, 302, 303):
            # Followed, they repeat the call as a GET without its body, which a node answers
            # with a parse error: say where the node went instead.
            moved = endpoint_label(urljoin(resp.url, target))
            raise Moved(f"answered HTTP {resp.status_code}, moved to {moved}: a JSON-RPC call is not repeated "
                        "there; give that address in INDEXER_RPC_URL")
        resp._content = b""
        return target

    def rebuild_auth(self, prepared_request: requests.PreparedRequest, response: requests.Response) -> None:
        with self._trusting_env():
            super().rebuild_auth(prepared_request, response)

    def rebuild_proxies(self, prepared_request: requests.PreparedRequest, proxies: Any) -> dict[str, str]:
        with self._trusting_env():
            return super().rebuild_proxies(prepared_request, proxies)


class Moved(requests.RequestException):
    """A node's redirect that would lose the call (301, 302, 303)."""


@dataclass(eq=False)
class Slot:
    """One call still to answer: a call of the caller (`part` None), or one of the calls its
    fallback expanded it into."""

    call: Call
    owner: int
    part: int | None = None
    excluded: set[int] = field(default_factory=set)  # ids of the endpoints that cannot answer it
    why: str = ""  # why the last of them cannot
    bad_answer: bool = False  # the last of them answered a value that does not parse
    too_slow: bool = False  # timed out whole: answered through the fallback's calls instead


class Refused(Exception):
    """A whole request failed. `kind` is its metric label."""

    def __init__(self, message: str, kind: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after
        self.sent_at = 0.0


@dataclass
class Failed:
    """A call answered with an error, or, for the whole request, what went wrong (and where)."""

    kind: str
    message: str
    retry_after: float | None = None
    where: str = ""


MISSING = object()


def post(endpoint: Endpoint, chunk: list[Slot], *, timeout: float, secrets: Secrets) -> list[Any]:
    """One HTTP request of `chunk`'s calls: for each call its result, a `Failed`, or `MISSING`.
    Raises `Refused` when the request failed as a whole. Every text the node sends is scrubbed of
    `secrets`."""
    body = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": s.call[0], "params": list(s.call[1])}
                         for i, s in enumerate(chunk)])
    where = endpoint.label
    said = secrets.scrub
    methods = {s.call[0] for s in chunk}
    method = methods.pop() if len(methods) == 1 else "mixed"
    started = time.perf_counter()
    try:
        try:
            with endpoint.session().post(endpoint.url, data=body, timeout=timeout, stream=True) as resp:
                content = _body(resp, endpoint.max_answer, where)
        finally:
            metrics.counted.rpc_seconds.labels(where, method).observe(time.perf_counter() - started)
    except requests.Timeout:
        raise Refused(f"{where}: no answer within {timeout:g} s", "timeout") from None
    except requests.exceptions.ChunkedEncodingError:
        raise Refused(f"{where}: answer cut short: the connection closed before its end", "http") from None
    except Moved as exc:
        raise Refused(f"{where}: {exc}", "http") from None
    except requests.TooManyRedirects:
        raise Refused(f"{where}: redirected more than {DEFAULT_REDIRECT_LIMIT} times (a loop?)", "http") from None
    except requests.exceptions.ContentDecodingError:
        encoding = said(resp.headers.get("Content-Encoding", ""))[:40]
        raise Refused(f"{where}: answer is not valid {encoding}, as its Content-Encoding says", "invalid_json") from None
    except requests.ConnectionError as exc:
        if isinstance(exc.args[0] if exc.args else None, urllib3.exceptions.ReadTimeoutError):
            # requests' reading of a body that stalls midway (iter_content)
            raise Refused(f"{where}: no answer within {timeout:g} s", "timeout") from None
        raise Refused(f"{where}: {_connection_failure(exc)}", "connection") from None
    except requests.RequestException as exc:  # its text may hold the full URL, key and all
        raise Refused(f"{where}: {type(exc).__name__}", "http") from None
    try:
        answer = msgspec.json.decode(content)
    except msgspec.DecodeError:
        answer = None
    except RecursionError:
        answer = _deep_json(content)
    # Every text the node sends is scrubbed whole (`said`), before anything cuts it: a key cut
    # in two is no longer found.
    if resp.status_code == 429:
        retry_after = retry_after_seconds(resp.headers.get("Retry-After"))
        if retry_after is None and isinstance(answer, dict):
            retry_after = backoff_seconds(answer.get("error"))
        raise Refused(f"{where}: HTTP 429 rate limited", "http_429", retry_after)
    if resp.status_code == 413:
        raise Refused(f"{where}: HTTP 413 request too large", TOO_LARGE)
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        # One error for the whole request, whatever the HTTP status.
        error = answer["error"]
        message = said(str(error.get("message", "")))
        kind = classify(error.get("code"), message)
        if kind in (TOO_LARGE, RATE_LIMITED):
            raise Refused(f"{where}: batch refused: {message[:200]}", kind, backoff_seconds(error))
        if kind == PRUNED or kind == UNSUPPORTED and len({s.call[0] for s in chunk}) == 1:
            return [Failed(kind, message) for _ in chunk]
        if resp.status_code == 200:
            raise Refused(f"{where}: batch refused: {said(str(error))[:200]}", ERROR)
        raise Refused(f"{where}: HTTP {resp.status_code}: {said(str(error))[:200]}", f"http_{resp.status_code // 100}xx")
    if resp.status_code != 200:
        text = said(content.decode("utf-8", "replace"))[:300]
        kind = classify(None, text)
        if kind == TOO_LARGE:
            raise Refused(f"{where}: HTTP {resp.status_code}: {text[:100]}", TOO_LARGE)
        if kind == RATE_LIMITED:
            raise Refused(f"{where}: HTTP {resp.status_code}: {text[:100]}", RATE_LIMITED,
                           retry_after_seconds(resp.headers.get("Retry-After")))
        raise Refused(f"{where}: HTTP {resp.status_code}", f"http_{resp.status_code // 100}xx")
    if answer is None:
        shown = said(content.decode("utf-8", "replace")).encode()
        raise Refused(f"{where}: answer is not JSON: {shown[:40]!r}", "invalid_json")
    if isinstance(answer, dict) and "result" in answer:  # a batch of one answered without its list
        answer = [answer]
    if not isinstance(answer, list):
        raise Refused(f"{where}: answer is neither a list nor an error", "invalid_json")
    by_id: dict[Any, Any] = {}
    for item in answer:
        if isinstance(item, dict) and "id" in item:
            by_id[item["id"]] = item
    results: list[Any] = []
    for i in range(len(chunk)):
        item = by_id.get(i)
        if item is None:
            results.append(MISSING)
        elif item.get("error") is not None:
            error = item["error"]
            if isinstance(error, dict):
                message = said(str(error.get("message", error)))
                results.append(Failed(classify(error.get("code"), message), message, backoff_seconds(error)))
            else:
                message = said(str(error))
                results.append(Failed(classify(None, message), message))
        elif "result" not in item:
            results.append(Failed("invalid_json", "answer has neither result nor error"))
        else:
            results.append(item["result"])
    if all(r is MISSING for r in results):
        raise Refused(f"{where}: answer lacks all {len(chunk)} results", "incomplete")
    return results


def _body(resp: requests.Response, limit: int, where: str) -> bytes:
    """The answer's body, decompressed (by urllib3, a piece at a time, so a piece never inflates
    past BODY_PIECE); `Refused` as too large past `limit` bytes: the batch is halved, and a single
    call that large is asked of the other endpoints. Of an answer other than HTTP 200 only the
    first ERROR_BODY bytes are read (its words), whatever its size."""
    if resp.status_code != 200:
        try:
            return _pieces(resp, ERROR_BODY, None)
        except requests.RequestException:  # its words cut short or garbled: its status says enough
            return b""
    too_large = Refused(f"{where}: answer larger than {limit / (1 << 20):g} MB (INDEXER_RPC_MAX_ANSWER_MB)", TOO_LARGE)
    declared = resp.headers.get("Content-Length", "")
    plain = declared.isascii() and declared.isdigit() and not resp.raw.chunked \
        and resp.headers.get("Content-Encoding", "identity") == "identity"
    # (A dozen digits are past any limit; int() refuses 4,300 and more.)
    if plain and (len(digits := declared.lstrip("0")) > 12 or int(digits or "0") > limit):
        raise too_large
    # Only a length http.client reads as one ("²", or 5,000 digits, it takes for no length and
    # reads to the connection's end, which only the pieces count).
    if plain and len(declared) <= 12:
        # Its length known and nothing to inflate: read in one piece, straight from the socket.
        # Piece by piece, urllib3 copies each piece through a buffer, and the pieces are joined:
        # three more copies of 1.5 MB a mainnet block (BENCHMARKS.md, "An answer read in one piece").
        try:
            return resp.raw.read(decode_content=False)
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise requests.exceptions.ReadTimeout(exc) from None
        except urllib3.exceptions.HTTPError as exc:  # the connection closed, a TLS record that does not decrypt
            raise requests.exceptions.ChunkedEncodingError(exc) from None
    return _pieces(resp, limit, too_large)


def _pieces(resp: requests.Response, limit: int, too_large: Refused | None) -> bytes:
    """The body read a piece at a time up to `limit` bytes: past it, `too_large` is raised, or
    with None the body is cut there."""
    pieces, size = [], 0
    for piece in resp.iter_content(BODY_PIECE):
        pieces.append(piece)
        size += len(piece)
        if too_large is None and size >= limit:
            break
        if size > limit:
            raise too_large
    return b"".join(pieces)[:limit]


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
