"""An HTTP server on a loopback port (a free one unless given), serving from a thread of its own:
the body the fault proxy, the replay node and the mainnet-shaped node share. Each POST's body goes to `handle(request, body)`, which answers
with `send`: gzipped when the request accepts it, as go-ethereum and Erigon answer."""

from __future__ import annotations

import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

Handle = Callable[[BaseHTTPRequestHandler, bytes], None]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        # A client killed mid-request (the chaos run kills workers) resets its connection: expected.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LoopbackServer:
    def __init__(self, handle: Handle, *, port: int = 0) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # An answer goes out in several writes (its headers, then its parts): with Nagle's
            # algorithm each write after the first waits for the client's delayed ACK, 40 ms,
            # which no real node adds (Go's servers, geth's and Erigon's, disable it too).
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass  # a line per request would drown the test's output

            def do_POST(self) -> None:
                handle(self, self.rfile.read(int(self.headers.get("Content-Length", 0))))

        self.server = _Server(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # serve_forever looks for a shutdown request between polls: at its default of 0.5 s,
        # closing a server took half a second.
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "LoopbackServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def gzip_accepted(request: BaseHTTPRequestHandler) -> bool:
    """Whether the request accepts a gzipped answer, as go-ethereum reads it (`strings.Contains`)."""
    return "gzip" in request.headers.get("Accept-Encoding", "")


def gzipped(content: bytes) -> bytes:
    """`content` in gzip, at go-ethereum's level (Go's default, 6)."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(content) + compressor.flush()


def send(request: BaseHTTPRequestHandler, status: int, content: bytes, headers: dict[str, str] | None = None,
         content_type: str = "application/json") -> None:
    try:
        request.send_response(status)
        request.send_header("Content-Type", content_type)
        if gzip_accepted(request):
            content = gzipped(content)
            request.send_header("Content-Encoding", "gzip")
        request.send_header("Content-Length", str(len(content)))
        for k, v in (headers or {}).items():
            request.send_header(k, v)
        request.end_headers()
        request.wfile.write(content)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up (its timeout): nothing to do
