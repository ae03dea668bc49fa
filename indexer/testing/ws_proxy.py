"""A WebSocket proxy on loopback in front of a real node's WebSocket endpoint (anvil serves one on
its HTTP port), for the tests of the newHeads subscription (`indexer/heads.py`).

Each client connection gets a connection of its own to the node, and every message is relayed
both ways, whatever path the client asked for: a provider's key sits in the path, and anvil
serves only "/". What it can do besides:
- `drop()`: every connection closed (1001, going away) and new ones refused, as a node or load
  balancer that goes away; `restore()` listens again on the same port;
- `subscribe_as="error"`: eth_subscribe answered go-ethereum's -32601 "the method eth_subscribe
  does not exist/is not available", as a node without subscriptions over that transport;
  "garbage": answered an HTML page that quotes the request's path, as a gateway's error page
  does. Other calls are relayed still.
`subscribes` counts the eth_subscribe requests received.
"""

from __future__ import annotations

import threading

import orjson
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.sync.server import Server, ServerConnection, serve

from .node_errors import METHOD_NOT_FOUND

SUBSCRIBE_AS = ("relay", "error", "garbage")



class WsProxy:
    def __init__(self, upstream: str, *, subscribe_as: str = "relay") -> None:
        if subscribe_as not in SUBSCRIBE_AS:
            raise ValueError(f"subscribe_as is one of {SUBSCRIBE_AS}, not {subscribe_as!r}")
        self.upstream = upstream
        self.subscribe_as = subscribe_as
        self.subscribes = 0
        self._lock = threading.Lock()
        self._server: Server | None = None
        self.port = 0
        self.restore()
        self.url = f"ws://127.0.0.1:{self.port}"

    def restore(self) -> None:
        """Listens (again, on the same port once it has one)."""
        if self._server is not None:
            return
        self._server = serve(self._relay, "127.0.0.1", self.port)
        self.port = self._server.socket.getsockname()[1]
        threading.Thread(target=self._server.serve_forever, name="ws-proxy", daemon=True).start()

    def drop(self) -> None:
        """Closes every connection and refuses new ones, until `restore()`."""
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    def close(self) -> None:
        self.drop()

    def __enter__(self) -> "WsProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _relay(self, client: ServerConnection) -> None:
        path = client.request.path if client.request is not None else "/"
        with connect(self.upstream, open_timeout=10) as node:
            back = threading.Thread(target=self._back, args=(node, client), daemon=True)
            back.start()
            try:
                for message in client:
                    answer = self._answer(message, path)
                    if answer is None:
                        node.send(message)
                    else:
                        client.send(answer)
            except ConnectionClosed:
                pass
        back.join(10)

    def _back(self, node: ClientConnection, client: ServerConnection) -> None:
        try:
            for message in node:
                client.send(message)
        except ConnectionClosed:
            pass
        client.close()

    def _answer(self, message: str | bytes, path: str) -> str | None:
        """The proxy's own answer to `message`, or None to relay it."""
        try:
            call = orjson.loads(message)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(call, dict) or call.get("method") != "eth_subscribe":
            return None
        with self._lock:
            self.subscribes += 1
        if self.subscribe_as == "error":
            error = {"code": METHOD_NOT_FOUND, "message": "the method eth_subscribe does not exist/is not available"}
            return orjson.dumps({"jsonrpc": "2.0", "id": call.get("id"), "error": error}).decode()
        if self.subscribe_as == "garbage":
            return f"<html><body>502 Bad Gateway: {path}</body></html>"
        return None
