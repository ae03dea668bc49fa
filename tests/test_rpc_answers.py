"""How a node's answers are read: gzipped or not (INDEXER_RPC_COMPRESSION), never past the largest
answer allowed (INDEXER_RPC_MAX_ANSWER_MB), and what a node that lies about either gets.

The servers are the loopback ones the test nodes share, which gzip an answer whenever the
request accepts it, as go-ethereum and Erigon do."""

from __future__ import annotations

import logging
import time
import tracemalloc
import zlib
from typing import Callable, Iterator

import orjson
import pytest

from indexer.chaindata import chain
from indexer.node.rpc import RpcClient
from indexer.node.rpc_errors import RpcError
from indexer.testing import fixtures
from indexer.testing.loopback import LoopbackServer, gzipped, send
from indexer.testing.mainnet_node import MainnetNode
from indexer.testing.replay import ReplayNode

Answer = Callable[[list[dict]], tuple[bytes, dict[str, str]]]


class Node(LoopbackServer):
    """Answers each call with `result(call)`; keeps each request's Accept-Encoding and whether the
    answer went out gzipped. `raw`, when set, is sent instead, as it is, with its headers."""

    def __init__(self, result: Callable[[dict], object] = lambda call: "0x1") -> None:
        self.asked: list[str | None] = []
        self.raw: Answer | None = None

        def handle(request, body: bytes) -> None:
            calls = orjson.loads(body)
            self.asked.append(request.headers.get("Accept-Encoding"))
            if self.raw is not None:
                content, headers = self.raw(calls)
                request.send_response(200)
                for k, v in {"Content-Type": "application/json", "Content-Length": str(len(content)), **headers}.items():
                    request.send_header(k, v)
                request.end_headers()
                request.wfile.write(content)
                return
            send(request, 200, orjson.dumps([{"jsonrpc": "2.0", "id": c["id"], "result": result(c)} for c in calls]))

        super().__init__(handle)


@pytest.fixture
def node() -> Iterator[Node]:
    with Node(lambda call: call["params"][0]) as n:
        yield n


def answers(calls: list[dict]) -> bytes:
    return orjson.dumps([{"jsonrpc": "2.0", "id": c["id"], "result": c["params"][0]} for c in calls])


def test_a_node_on_this_machine_is_asked_for_its_answers_uncompressed(node):
    assert RpcClient([node.url]).batch([("echo", ["0xab"]), ("echo", ["0xcd"])]) == ["0xab", "0xcd"]
    assert node.asked == ["identity"]


@pytest.mark.parametrize("compression, asked", [("auto", "identity"), ("gzip", "gzip")])
def test_the_pool_s_health_check_asks_as_the_workers_do(compression, asked):
    from indexer.operations import health

    with Node() as node:  # every call answered "0x1"
        health.Dependencies("postgresql://127.0.0.1:1/x", [node.url], every=60, rpc_batch=10,
                            compression=compression)._node()
    assert node.asked == [asked]


def test_asked_for_gzip_the_answers_come_gzipped_and_read_the_same(node):
    def as_asked(calls: list[dict]) -> tuple[bytes, dict[str, str]]:
        if node.asked[-1] == "gzip":
            return gzipped(answers(calls)), {"Content-Encoding": "gzip"}
        return answers(calls), {}

    node.raw = as_asked
    assert RpcClient([node.url], compression="gzip").batch([("echo", [hex(n)]) for n in range(300)]) == \
        [hex(n) for n in range(300)]
    assert node.asked == ["gzip"] * 3  # 100 calls a request


def test_recorded_blocks_make_the_same_rows_gzipped_or_not():
    """Every recorded mainnet block, fetched, checked and its roots checked through gzip, makes the
    same rows as uncompressed."""
    with ReplayNode() as replay:
        numbers = sorted(int(fixtures.load(n)["block"]["number"], 16) for n in fixtures.names() if n.startswith("mainnet-"))
        plain = RpcClient([replay.url])
        packed = RpcClient([replay.url], compression="gzip")
        for number in numbers:
            rows = chain.fetch(packed, number, number, verify_roots=True, chain_id=1)
            assert rows == chain.fetch(plain, number, number, verify_roots=True, chain_id=1)
            assert len(rows.blocks) == 1


def test_mainnet_shaped_batches_make_the_same_rows_gzipped_or_not():
    with MainnetNode(18_000_000, 18_000_019, templates=4) as mainnet:
        packed = chain.fetch(RpcClient([mainnet.url], compression="gzip"), 18_000_000, 18_000_019,
                             verify_roots=True, chain_id=1)
        assert packed == chain.fetch(RpcClient([mainnet.url]), 18_000_000, 18_000_019, verify_roots=True, chain_id=1)
        assert len(packed.blocks) == 20 and len(packed.transactions) > 1_000 and packed.unproven == []


def test_a_node_that_gzips_unasked_is_read_all_the_same(node):
    node.raw = lambda calls: (gzipped(answers(calls)), {"Content-Encoding": "gzip"})
    assert RpcClient([node.url]).call("echo", "0x12") == "0x12"
    assert node.asked == ["identity"]


def test_an_answer_that_is_not_the_gzip_it_claims_is_refused_and_another_endpoint_asked(node):
    node.raw = lambda calls: (answers(calls), {"Content-Encoding": "gzip"})
    with pytest.raises(RpcError, match=r"^echo failed after 2 attempts; last: http://127\.0\.0\.1:\d+: answer is not valid gzip, "
                                       "as its Content-Encoding says"):
        RpcClient([node.url], max_attempts=2, backoff_max=0).call("echo", "0x1")
    with Node(lambda call: call["params"][0]) as honest:
        assert RpcClient([node.url, honest.url], backoff_max=0).batch([("echo", [hex(n)]) for n in range(6)]) == \
            [hex(n) for n in range(6)]


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_an_answer_cut_short_of_its_length_is_a_failed_attempt_and_asked_again(node, encoding):
    """The node closes the connection halfway through the body it declared."""
    cut = []

    def halfway(calls: list[dict]) -> tuple[bytes, dict[str, str]]:
        content = answers(calls) if encoding == "identity" else gzipped(answers(calls))
        headers = {} if encoding == "identity" else {"Content-Encoding": "gzip"}
        if not cut:
            cut.append(len(content))
            return content[:len(content) // 2], {**headers, "Content-Length": str(len(content)), "Connection": "close"}
        return content, headers

    node.raw = halfway
    assert RpcClient([node.url], compression="gzip", backoff_max=0).batch([("echo", [hex(n)]) for n in range(50)]) == \
        [hex(n) for n in range(50)]
    assert len(node.asked) == 2
    with pytest.raises(RpcError, match=r"^echo failed after 1 attempt; last: http://127\.0\.0\.1:\d+: answer cut short: "
                                       "the connection closed before its end$"):
        cut.clear()
        RpcClient([node.url], compression="gzip", max_attempts=1).call("echo", "0x1" * 2000)


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_an_answer_that_stalls_halfway_is_a_timeout(encoding):
    def stalls(request, body: bytes) -> None:
        content = answers(orjson.loads(body))
        content = gzipped(content) if encoding == "gzip" else content
        request.send_response(200)
        request.send_header("Content-Length", str(len(content)))
        if encoding == "gzip":
            request.send_header("Content-Encoding", "gzip")
        request.end_headers()
        request.wfile.write(content[:len(content) // 2])
        request.wfile.flush()
        time.sleep(1.5)

    with LoopbackServer(stalls) as stalling:
        with pytest.raises(RpcError, match=r"^echo failed after 1 attempt; last: http://127\.0\.0\.1:\d+: no answer within "
                                           r"0\.5 s$"):
            RpcClient([stalling.url], compression=encoding.replace("identity", "none"), max_attempts=1,
                      timeout=0.5).call("echo", "0x1" * 5000)


def test_a_gzip_bomb_is_refused_as_too_large_without_being_inflated(node):
    """A megabyte of gzip that inflates to a gigabyte: the client stops at its limit (8 MB here)
    having held little more than that, and says which setting allows more."""
    member = gzipped(b" " * (16 << 20))
    bomb = member * 64  # gzip members one after another are one answer: 1 GB of spaces
    node.raw = lambda calls: (bomb, {"Content-Encoding": "gzip"})
    client = RpcClient([node.url], max_attempts=1, max_answer=8 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(RpcError, match=r"answer larger than 8 MB \(INDEXER_RPC_MAX_ANSWER_MB\), even for a single "
                                           "echo call"):
            client.call("echo", "0x1")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(bomb) < 2 << 20 and zlib.decompressobj(31).decompress(member) == b" " * (16 << 20)
    assert peak < 32 << 20


def test_a_redirect_s_body_is_never_read_so_a_gzip_bomb_in_it_is_not_inflated(node):
    """requests reads a redirect's body whole, inflated, before following it: not here."""
    bomb = gzipped(b" " * (16 << 20)) * 64

    def redirect(request, body: bytes) -> None:
        request.send_response(307)
        for k, v in {"Location": node.url, "Content-Encoding": "gzip", "Content-Length": str(len(bomb))}.items():
            request.send_header(k, v)
        request.end_headers()
        request.wfile.write(bomb)

    with LoopbackServer(redirect) as redirector:
        client = RpcClient([redirector.url], max_attempts=1)
        tracemalloc.start()
        try:
            assert client.call("echo", "0x7") == "0x7"
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert node.asked == ["identity"]
    assert peak < 32 << 20


def test_a_redirect_to_the_same_host_is_followed_on_a_connection_of_its_own():
    """A trailing-slash redirect on one keep-alive connection: its body is not read, so the
    connection is closed, not reused with the body still in it."""
    connections: set[int] = set()

    def slash(request, body: bytes) -> None:
        connections.add(request.client_address[1])
        if request.path == "/rpc":
            return send(request, 307, b'{"moved": true}', {"Location": "/rpc/"})
        send(request, 200, answers(orjson.loads(body)))

    with LoopbackServer(slash) as node:
        client = RpcClient([node.url + "/rpc"], max_attempts=1)
        assert [client.call("echo", hex(n)) for n in range(5)] == [hex(n) for n in range(5)]
    assert len(connections) <= 6


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_would_repeat_the_call_as_a_get_is_refused_naming_where_the_node_went(status):
    """requests repeats a POST moved by 301, 302 or 303 as a GET without its body, which a node
    answers with a parse error: the address it moved to is named instead (its key left out)."""
    def moved(request, body: bytes) -> None:
        send(request, status, b"", {"Location": "https://node.example:8443/v2/SECRETKEY"})

    with LoopbackServer(moved) as node:
        with pytest.raises(RpcError, match=rf"^echo failed after 1 attempt; last: http://127\.0\.0\.1:\d+: answered HTTP "
                                           rf"{status}, moved to https://node\.example:8443: a JSON-RPC call is not "
                                           r"repeated there; give that address in INDEXER_RPC_URL$"):
            RpcClient([node.url], max_attempts=1).call("echo", "0x1")


def test_a_redirect_loop_ends_in_words_that_say_so():
    def loop(request, body: bytes) -> None:
        send(request, 307, b"", {"Location": "/again"})

    with LoopbackServer(loop) as node:
        with pytest.raises(RpcError, match=r"^echo failed after 1 attempt; last: http://127\.0\.0\.1:\d+: redirected "
                                           r"more than 30 times \(a loop\?\)$"):
            RpcClient([node.url], max_attempts=1).call("echo", "0x1")


def test_a_batch_whose_answer_is_past_the_limit_is_halved_until_it_fits(caplog):
    with Node(lambda call: "0x" + "ab" * (512 << 10)) as big:  # a megabyte a result
        client = RpcClient([big.url], max_batch=16, max_answer=5 << 20)
        with caplog.at_level(logging.WARNING):
            results = client.batch([("big", [n]) for n in range(16)])
    assert results == ["0x" + "ab" * (512 << 10)] * 16
    assert client.endpoints[0].max_batch == 4
    assert "found a batch of 16 calls too large; sending it at most 8 from now on" in caplog.text
    assert "found a batch of 8 calls too large; sending it at most 4 from now on" in caplog.text


@pytest.mark.parametrize("length", ["\u00b2", "-5", "12abc", "", "0" * 4300 + "9"])
def test_a_declared_length_that_is_not_a_number_is_read_to_the_connection_s_end(node, length):
    """http.client then reads to the end of the connection, which the node closes."""
    node.raw = lambda calls: (answers(calls), {"Content-Length": length, "Connection": "close"})
    assert RpcClient([node.url], max_attempts=1).call("echo", "0x3") == "0x3"


@pytest.mark.parametrize("status, kind", [(429, "rate limited"), (503, "HTTP 503")])
def test_an_error_answer_is_read_for_its_words_only_whatever_its_size(status, kind):
    """A 429 or 503 declaring more than the largest answer is still a rate limit or a server
    error, not an answer too large: only its first megabyte is read."""
    def refuse(request, body: bytes) -> None:
        send(request, status, b"too busy " * (600_000))

    with LoopbackServer(refuse) as node:
        client = RpcClient([node.url], max_attempts=1, max_answer=2 << 20, patience=0)
        with pytest.raises(RpcError, match=kind):
            client.batch([("echo", ["0x1"]), ("echo", ["0x2"])])
        assert client.endpoints[0].max_batch == 100


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_an_error_answer_cut_short_is_still_what_its_status_says(node, encoding):
    """A 429 whose body ends before its declared length (or is not the gzip it claims) is a
    rate limit all the same, its Retry-After kept."""
    def cut(request, body: bytes) -> None:
        request.send_response(429)
        for k, v in {"Content-Length": "2000000", "Retry-After": "7", "Connection": "close",
                     **({"Content-Encoding": "gzip"} if encoding == "gzip" else {})}.items():
            request.send_header(k, v)
        request.end_headers()
        request.wfile.write(b"too busy")

    with LoopbackServer(cut) as limited:
        with pytest.raises(RpcError, match="rate limited"):
            RpcClient([limited.url], max_attempts=1, patience=0).call("echo", "0x1")


@pytest.mark.parametrize("length", [str(1 << 40), "9" * 5000])
def test_a_declared_length_past_the_limit_is_refused_before_its_body_is_read(node, length):
    node.raw = lambda calls: (answers(calls), {"Content-Length": length})
    with pytest.raises(RpcError, match=r"answer larger than 1 MB \(INDEXER_RPC_MAX_ANSWER_MB\), even for a single"):
        RpcClient([node.url], max_attempts=1, max_answer=1 << 20, timeout=5).call("echo", "0x1")
