"""A TCP proxy on loopback that adds a set round-trip time, to measure the queue as workers on
other machines see it (scripts/bench_queue.py --latency): what one side sends is held for half
the delay, then written to the other side, in order, as over a link with that latency and no
bandwidth limit (bytes are not held behind each other).

Loopback only, both ways: it listens on 127.0.0.1 and forwards only to a loopback address. The
delay is bounded (`MAX_RTT_MS`). One thread serves every connection: select() for what arrives,
a heap of what falls due. select() is used rather than epoll for its timeout in microseconds
(epoll's is in whole milliseconds, too coarse for a 0.5 ms round trip); what arrives is read at
once and held from then. Sends block (a peer that stops reading would stall the proxy): the
database and the benchmark's workers always read their answers.
"""

from __future__ import annotations

import heapq
import ipaddress
import itertools
import select
import socket
import threading
import time

MAX_RTT_MS = 100.0


class LatencyProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, rtt_ms: float) -> None:
        if not ipaddress.ip_address(upstream_host).is_loopback:
            raise ValueError(f"the latency proxy forwards to loopback addresses only, not {upstream_host}")
        if not 0 <= rtt_ms <= MAX_RTT_MS:
            raise ValueError(f"a round trip of {rtt_ms} ms is outside 0..{MAX_RTT_MS:g} ms")
        self.upstream = (upstream_host, upstream_port)
        self.rtt_ms = rtt_ms
        self._one_way = rtt_ms / 2000
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._wake_read, self._wake = socket.socketpair()
        self._pairs: dict[int, tuple[socket.socket, socket.socket]] = {}  # fd -> (that socket, its other end)
        self._due: list[tuple[float, int, socket.socket, bytes | None]] = []  # None: close the pair
        self._order = itertools.count()
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._wake.send(b"x")
        self._thread.join()
        for a, b in list(self._pairs.values()):
            a.close()
            b.close()
        for s in (self._listener, self._wake, self._wake_read):
            s.close()

    def __enter__(self) -> "LatencyProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            self._send_due()
            wait = max(0.0, self._due[0][0] - time.monotonic()) if self._due else None
            watched = [self._wake_read, self._listener, *(pair[0] for pair in self._pairs.values())]
            readable, _, _ = select.select(watched, [], [], wait)
            for sock in readable:
                if sock is self._wake_read:
                    return
                if sock is self._listener:
                    self._accept()
                elif sock.fileno() in self._pairs:
                    self._read(sock.fileno())

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        server = socket.create_connection(self.upstream)
        for s, other in ((client, server), (server, client)):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pairs[s.fileno()] = (s, other)

    def _read(self, fd: int) -> None:
        sock, other = self._pairs[fd]
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        due = time.monotonic() + self._one_way
        if not data:  # one side has gone: the other learns it after the delay, like the rest
            self._forget(sock)
            self._forget(other)
            heapq.heappush(self._due, (due, next(self._order), other, None))
            sock.close()
            return
        heapq.heappush(self._due, (due, next(self._order), other, data))

    def _send_due(self) -> None:
        now = time.monotonic()
        while self._due and self._due[0][0] <= now:
            _, _, sock, data = heapq.heappop(self._due)
            try:
                if data is None:
                    sock.close()
                else:
                    sock.sendall(data)
            except OSError:  # its other end went meanwhile
                pass

    def _forget(self, sock: socket.socket) -> None:
        self._pairs.pop(sock.fileno(), None)
