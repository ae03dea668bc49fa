"""The test kit's deployment (indexer/testing/contracts.py) waits, with a deadline, for a block
to hold the transaction it sent: a node may answer a transaction before it knows of it, as anvil
does under load, or a node behind a load balancer whose other members have not seen it yet."""

from __future__ import annotations

from collections import Counter
from http.server import BaseHTTPRequestHandler

import orjson
import pytest
import requests

from indexer.testing.anvil import EMITTER_INIT, Anvil, Node
from indexer.testing.contracts import deploy, mined
from indexer.testing.loopback import LoopbackServer, send


class LateNode(LoopbackServer):
    """A real node behind a proxy that says it does not know a transaction the first `unknown_for`
    times it is asked about it (eth_getTransactionByHash, eth_getTransactionReceipt)."""

    def __init__(self, upstream: str, unknown_for: int = 3) -> None:
        self.upstream = upstream
        self.unknown_for = unknown_for
        self.asked: Counter[str] = Counter()
        super().__init__(self.handle)

    def handle(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        call = orjson.loads(body)
        if isinstance(call, dict) and call.get("method") in ("eth_getTransactionByHash", "eth_getTransactionReceipt"):
            self.asked[call["params"][0]] += 1
            if self.asked[call["params"][0]] <= self.unknown_for:
                return send(h, 200, orjson.dumps({"jsonrpc": "2.0", "id": call.get("id"), "result": None}))
        answer = requests.post(self.upstream, data=body, headers={"Content-Type": "application/json"}, timeout=60)
        send(h, answer.status_code, answer.content)


@pytest.mark.parametrize("mining", [[], ["--no-mining"]], ids=["mines by itself", "no mining"])
def test_a_deployment_waits_for_the_node_to_know_its_transaction(mining):
    with Anvil(*mining) as node, LateNode(node.url) as late:
        before = node.head()
        emitter = deploy(Node(late.url), [], EMITTER_INIT)
        assert node.rpc("eth_getCode", emitter.address, "latest") != "0x"
        assert node.head() == before + 1  # the one block that holds it: none mined in vain
        accounts = node.rpc("eth_accounts")
        sent = node.rpc("eth_sendTransaction", {"from": accounts[0], "to": emitter.address, "data": "0x" + "11" * 32})
        assert mined(Node(late.url), sent)["status"] == 1
        assert late.asked and min(late.asked.values()) > late.unknown_for
