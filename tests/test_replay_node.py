"""indexer.testing.replay.ReplayNode: a loopback node serving recorded answers of real chains
(tests/fixtures). It must serve exactly what the recordings say, answer like a node (batches,
ids, null for the unknown) and switch on, one by one, the behaviours of real nodes and
providers. No database, no chain: plain HTTP requests against the node."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from indexer.testing import fixtures
from indexer.testing.node_errors import ALCHEMY_RATE_LIMITED, INFURA_RATE_LIMITED, PRUNED_HISTORY, RESPONSE_TOO_LARGE
from indexer.testing.replay import ReplayNode

TEST_CHAIN = 3503995874084926  # the chain id of execution-apis' test chain (tests/fixtures/README.md)
ERAS = ["mainnet-47218", "mainnet-1755635", "mainnet-18000000", "arbitrum-sepolia-185232421",
        "execution-apis-20", "execution-apis-45"]


def post(node: ReplayNode, body: Any) -> requests.Response:
    return requests.post(node.url, json=body, timeout=10)


def call(node: ReplayNode, method: str, *params: Any, id_: Any = 1) -> dict[str, Any]:
    answer = post(node, {"jsonrpc": "2.0", "id": id_, "method": method, "params": list(params)})
    assert answer.status_code == 200
    return answer.json()


def result(node: ReplayNode, method: str, *params: Any) -> Any:
    answer = call(node, method, *params)
    assert "error" not in answer, answer
    return answer["result"]


def calls(*items: tuple[str, list[Any]]) -> list[dict[str, Any]]:
    return [{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(items)]


@pytest.fixture(scope="module")
def node():
    with ReplayNode(ERAS) as n:
        yield n


@pytest.mark.parametrize("name", ERAS)
def test_blocks_and_receipts_are_served_as_recorded(node, name):
    recorded = fixtures.load(name)
    block, receipts = recorded["block"], recorded["receipts"]
    number, hash_ = block["number"], block["hash"]

    served = result(node, "eth_getBlockByNumber", number, True)
    assert served == block
    assert list(served) == list(block)  # key for key, in the recorded order
    assert result(node, "eth_getBlockByHash", hash_, True) == block
    assert result(node, "eth_getBlockByHash", hash_.upper().replace("0X", "0x"), True) == block
    # Without full transactions: the same block with the transactions' hashes, as a node does.
    hashes = dict(block, transactions=[tx["hash"] for tx in block["transactions"]])
    assert result(node, "eth_getBlockByNumber", number, False) == hashes
    assert result(node, "eth_getBlockByHash", hash_, False) == hashes

    assert result(node, "eth_getBlockReceipts", number) == receipts
    assert result(node, "eth_getBlockReceipts", hash_) == receipts
    assert result(node, "eth_getBlockReceipts", {"blockHash": hash_}) == receipts
    for tx, receipt in zip(block["transactions"], receipts):
        assert result(node, "eth_getTransactionReceipt", tx["hash"]) == receipt


def test_the_recorded_eras_are_in_the_fixtures():
    """The fixtures the replay node is for: every era issue 13 asks for that was found."""
    types: set[str] = set()
    for name in fixtures.names():
        block = fixtures.load(name)["block"]
        types |= {tx.get("type", "legacy") for tx in block["transactions"]}
    assert {"legacy", "0x0", "0x1", "0x2", "0x3", "0x4", "0x6a"} <= types
    frontier = fixtures.load("mainnet-47218")
    assert all("root" in r for r in frontier["receipts"])                      # pre-Byzantium
    assert all(int(tx["v"], 16) in (27, 28) for tx in frontier["block"]["transactions"])  # pre-EIP-155
    assert fixtures.load("mainnet-18000000")["block"]["withdrawals"]
    blob = fixtures.load("execution-apis-20")
    assert any(tx["type"] == "0x3" and tx["blobVersionedHashes"] for tx in blob["block"]["transactions"])
    assert any("blobGasUsed" in r for r in blob["receipts"])
    setcode = fixtures.load("execution-apis-45")
    assert any(tx["type"] == "0x4" and tx["authorizationList"] for tx in setcode["block"]["transactions"])
    assert any(tx.get("to") is None for tx in setcode["block"]["transactions"])  # a contract creation
    assert all(r["blockHash"] == setcode["block"]["hash"] for r in setcode["receipts"])


def test_the_chain_head_and_ids(node):
    head = max(int(fixtures.load(n)["block"]["number"], 16) for n in ERAS)
    assert result(node, "eth_blockNumber") == hex(head)
    assert result(node, "eth_chainId") == "0x1"
    assert result(node, "net_version") == "1"
    for tag in ("latest", "finalized", "safe", "pending"):
        assert int(result(node, "eth_getBlockByNumber", tag, False)["number"], 16) == head
        assert result(node, "eth_getBlockReceipts", tag) == node.receipts[head]
    assert result(node, "eth_getBlockByNumber", "earliest", False)["number"] == "0x14"  # execution-apis-20

    with ReplayNode(["execution-apis-20", "execution-apis-45"], chain_id=TEST_CHAIN) as other:
        assert result(other, "eth_chainId") == hex(TEST_CHAIN)
        assert result(other, "net_version") == str(TEST_CHAIN)
        assert result(other, "eth_blockNumber") == "0x2d"


def test_what_the_node_does_not_have_is_null(node):
    assert result(node, "eth_getBlockByNumber", "0xb86b", True) is None     # 47211: not recorded
    assert result(node, "eth_getBlockByHash", "0x" + "ab" * 32, True) is None
    assert result(node, "eth_getBlockReceipts", "0xb86b") is None
    assert result(node, "eth_getBlockReceipts", "0x" + "ab" * 32) is None
    assert result(node, "eth_getTransactionReceipt", "0x" + "cd" * 32) is None


def test_malformed_calls_get_a_nodes_errors(node):
    assert call(node, "eth_getBlockByNumber", "12", True)["error"]["code"] == -32602
    assert call(node, "eth_getBlockByNumber", "0x1")["error"] == \
        {"code": -32602, "message": "missing value for required argument 1"}
    assert call(node, "eth_getBlockByHash", "0x1234", True)["error"]["code"] == -32602
    assert call(node, "eth_getBalance", "0x" + "00" * 20, "latest")["error"] == \
        {"code": -32601, "message": "the method eth_getBalance does not exist/is not available"}
    garbage = requests.post(node.url, data=b"{not json", timeout=10)
    assert garbage.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
    assert post(node, []).json()["error"] == {"code": -32600, "message": "empty batch"}


def test_a_batch_is_answered_call_by_call_by_id(node):
    block = fixtures.load("mainnet-47218")["block"]
    batch = [
        {"jsonrpc": "2.0", "id": "b", "method": "eth_getBlockByNumber", "params": [block["number"], True]},
        {"jsonrpc": "2.0", "method": "eth_chainId", "params": []},                    # a notification
        {"jsonrpc": "2.0", "id": 7, "method": "eth_nope", "params": []},
        {"jsonrpc": "2.0", "id": None, "method": "eth_blockNumber", "params": []},   # id null is a call
        {"jsonrpc": "2.0", "id": 3, "method": "eth_getBlockReceipts", "params": [block["hash"]]},
    ]
    answers = post(node, batch).json()
    assert [a["id"] for a in answers] == ["b", 7, None, 3]
    by_id = {a["id"]: a for a in answers}
    assert by_id["b"]["result"] == block
    assert by_id[7]["error"]["code"] == -32601
    assert by_id[3]["result"] == fixtures.load("mainnet-47218")["receipts"]


def test_served_counts_calls_by_method():
    with ReplayNode(["mainnet-47218", "mainnet-47219"]) as n:
        post(n, calls(("eth_getBlockByNumber", ["0xb872", True]), ("eth_getBlockByNumber", ["0xb873", True]),
                      ("eth_getBlockReceipts", ["0xb872"]), ("eth_x", [])))
        result(n, "eth_blockNumber")
        assert n.served == {"eth_getBlockByNumber": 2, "eth_getBlockReceipts": 1, "eth_blockNumber": 1}
        assert n.refused == {"method_not_found": 1}
        assert n.requests == [4, 1]


def test_blocks_of_the_same_number_cannot_both_be_loaded():
    with pytest.raises(ValueError, match="at least one"):
        ReplayNode([])
    with pytest.raises(ValueError, match="loaded twice"):
        ReplayNode(["mainnet-47218", "mainnet-47218"])


def test_by_default_it_serves_mainnet():
    with ReplayNode() as n:
        assert sorted(n.blocks) == sorted(int(fixtures.load(x)["block"]["number"], 16)
                                          for x in fixtures.names() if x.startswith("mainnet-"))


# --- the behaviours of real nodes, one switch at a time ------------------------------------------


def test_without_block_receipts_the_method_does_not_exist():
    recorded = fixtures.load("mainnet-1755635")
    block, receipts = recorded["block"], recorded["receipts"]
    with ReplayNode(["mainnet-1755635"], block_receipts=False) as n:
        for param in (block["number"], block["hash"]):
            assert call(n, "eth_getBlockReceipts", param)["error"] == {
                "code": -32601, "message": "the method eth_getBlockReceipts does not exist/is not available"}
        # What a client falls back to still works.
        answers = post(n, calls(*[("eth_getTransactionReceipt", [tx["hash"]]) for tx in block["transactions"]])).json()
        assert [a["result"] for a in sorted(answers, key=lambda a: a["id"])] == receipts
        assert n.refused == {"method_not_found": 2}


def test_calls_past_the_batch_cap_are_answered_response_too_large():
    block = fixtures.load("execution-apis-45")["block"]
    with ReplayNode(["execution-apis-20", "execution-apis-45"], max_batch_results=2) as n:
        batch = calls(*[("eth_getTransactionReceipt", [tx["hash"]]) for tx in block["transactions"]])
        answers = post(n, batch).json()
        assert [a["id"] for a in answers] == list(range(len(batch)))   # every call gets an answer
        assert all("result" in a for a in answers[:2])
        assert [a["error"] for a in answers[2:]] == [{"code": -32003, "message": "response too large"}] * (len(batch) - 2)
        assert RESPONSE_TOO_LARGE == {"code": -32003, "message": "response too large"}
        assert n.refused == {"response_too_large": len(batch) - 2}
        # A batch within the cap, and a single call, are answered in full.
        assert all("result" in a for a in post(n, batch[:2]).json())
        assert "result" in call(n, "eth_getBlockReceipts", "0x2d")


def test_the_byte_cap_answers_the_call_that_crosses_it_and_refuses_the_rest():
    """go-ethereum's BatchResponseMaxSize: each answer's result (or error) is counted after it is
    added; once the total passes the cap, the calls still waiting get "response too large"."""
    receipts = fixtures.load("execution-apis-45")["receipts"]
    with ReplayNode(["execution-apis-45"], batch_response_max_size=10) as n:
        answers = post(n, calls(("eth_blockNumber", []), ("eth_getBlockReceipts", ["0x2d"]),
                                ("eth_blockNumber", []), ("eth_chainId", []))).json()
        assert answers[0]["result"] == "0x2d"          # 6 bytes: within the cap
        assert answers[1]["result"] == receipts        # crosses the cap, and is still answered
        assert [a["error"] for a in answers[2:]] == [RESPONSE_TOO_LARGE] * 2


def test_a_batch_over_the_request_limit_is_refused_whole():
    with ReplayNode(["mainnet-0"], max_batch_requests=3) as n:
        answers = post(n, [{"jsonrpc": "2.0", "id": 10 + i, "method": "eth_chainId"} for i in range(4)]).json()
        assert answers == [{"jsonrpc": "2.0", "id": 10, "error": {"code": -32600, "message": "batch too large"}}]
        assert len(post(n, [{"jsonrpc": "2.0", "id": i, "method": "eth_chainId"} for i in range(3)]).json()) == 3


def test_history_below_the_pruning_point_is_unavailable():
    old, new = fixtures.load("mainnet-47218"), fixtures.load("mainnet-18000000")
    with ReplayNode(["mainnet-47218", "mainnet-18000000"], pruned_below=15_537_394) as n:
        for method, param in (("eth_getBlockByNumber", [old["block"]["number"], True]),
                              ("eth_getBlockByHash", [old["block"]["hash"], False]),
                              ("eth_getBlockReceipts", [old["block"]["number"]]),
                              ("eth_getBlockReceipts", [old["block"]["hash"]]),
                              ("eth_getBlockByNumber", ["0x1", False])):            # not recorded either
            assert call(n, method, *param)["error"] == {"code": 4444, "message": "pruned history unavailable"}
        assert PRUNED_HISTORY["code"] == 4444
        # The node no longer knows the transaction: null, as go-ethereum answers.
        assert result(n, "eth_getTransactionReceipt", old["block"]["transactions"][0]["hash"]) is None
        assert result(n, "eth_getBlockByNumber", new["block"]["number"], True) == new["block"]
        assert result(n, "eth_getBlockReceipts", new["block"]["hash"]) == new["receipts"]
        assert result(n, "eth_getTransactionReceipt", new["block"]["transactions"][0]["hash"]) == new["receipts"][0]
        assert n.refused == {"pruned": 5}


def test_every_kth_request_is_rate_limited_as_infura_does():
    with ReplayNode(["mainnet-0"], limit_exceeded_every=3) as n:
        answers = [call(n, "eth_chainId", id_=i) for i in range(6)]
        assert [("error" in a) for a in answers] == [False, False, True, False, False, True]
        assert answers[2] == {"jsonrpc": "2.0", "id": 2, "error": INFURA_RATE_LIMITED}
        assert INFURA_RATE_LIMITED == {"code": -32005, "message": "project ID request rate exceeded"}
        # A batch so refused gets the error once per call, by id.
        post(n, calls(("eth_chainId", [])))
        post(n, calls(("eth_chainId", [])))
        refused = post(n, calls(("eth_chainId", []), ("eth_blockNumber", [])))
        assert refused.status_code == 200
        assert refused.json() == [{"jsonrpc": "2.0", "id": 0, "error": INFURA_RATE_LIMITED},
                                  {"jsonrpc": "2.0", "id": 1, "error": INFURA_RATE_LIMITED}]
        assert n.refused == {"limit_exceeded": 3}
        assert n.served == {"eth_chainId": 6}


def test_every_kth_request_can_be_an_http_429_as_alchemy_sends():
    with ReplayNode(["mainnet-0"], limit_exceeded_every=2, limit_exceeded_as="http-429", retry_after="1") as n:
        assert post(n, {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}).status_code == 200
        refused = post(n, {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId"})
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "1"
        assert refused.json() == {"jsonrpc": "2.0", "id": 2, "error": ALCHEMY_RATE_LIMITED}
        assert ALCHEMY_RATE_LIMITED["code"] == 429
        assert ALCHEMY_RATE_LIMITED["message"].startswith("Your app has exceeded its compute units per second capacity.")
        assert post(n, calls(("eth_chainId", []))).status_code == 200
        assert post(n, calls(("eth_chainId", []))).status_code == 429


def test_switches_are_checked():
    with pytest.raises(ValueError):
        ReplayNode(["mainnet-0"], max_batch_results=0)
    with pytest.raises(ValueError):
        ReplayNode(["mainnet-0"], limit_exceeded_as="http-500")  # type: ignore[arg-type]
