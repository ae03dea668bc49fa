"""An HTTP proxy in front of a real node that injects faults into a share of the answers.

Faults: HTTP 500, HTTP 429 with Retry-After, an answer held past the client's timeout, a JSON
body cut in half, a batch answered in reverse order, an HTML page, and a JSON-RPC error saying
the batch is too large for batches above `max_batch`.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import requests

FAULTS = ("http500", "http429", "timeout", "truncate", "reorder", "html")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A client killed mid-request (the chaos run kills workers) resets its connection: expected.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.0,
        faults: tuple[str, ...] = FAULTS,
        hold_seconds: float = 2.0,
        retry_after: str = "1",
        max_batch: int | None = None,
        delay: float = 0.0,
        seed: int = 1,
        first: tuple[str, ...] = (),
    ) -> None:
        self.upstream = upstream
        self.rate = rate
        self.faults = faults
        self.hold_seconds = hold_seconds
        self.retry_after = retry_after
        self.max_batch = max_batch
        self.delay = delay
        self.first = list(first)  # faults served, in order, to the first requests
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.served: Counter[str] = Counter()
        self.requests: list[tuple[float, int]] = []  # (monotonic time, calls in the request)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.handle(self, body)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

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
        calls = len(request) if isinstance(request, list) else 1
        with self.lock:
            self.requests.append((time.monotonic(), calls))
        if self.delay:
            time.sleep(self.delay)
        if self.max_batch is not None and calls > self.max_batch:
            self._count("too_large")
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": f"batch too large: {calls} > {self.max_batch}"}}
            return self._send(h, 200, orjson.dumps(error))
        fault = self._choose()
        self._count(fault)
        if fault == "http500":
            return self._send(h, 500, b"internal error")
        if fault == "http429":
            return self._send(h, 429, b'{"error": "slow down"}', {"Retry-After": self.retry_after})
        if fault == "html":
            return self._send(h, 200, b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")
        if fault == "timeout":
            time.sleep(self.hold_seconds)
        upstream = requests.post(self.upstream, data=body, headers={"Content-Type": "application/json"}, timeout=60)
        content = upstream.content
        if fault == "truncate":
            content = content[: max(1, len(content) // 2)]
        elif fault == "reorder" and isinstance(request, list):
            content = orjson.dumps(list(reversed(orjson.loads(content))))
        self._send(h, upstream.status_code, content)

    def _count(self, what: str) -> None:
        with self.lock:
            self.served[what] += 1

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, content: bytes, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", content_type)
            h.send_header("Content-Length", str(len(content)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(content)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): nothing to do

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
