"""The JSON-RPC client against real nodes: anvil, directly and through a fault-injecting proxy
that behaves like the nodes and providers people use, and recorded mainnet answers replayed."""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import replace

import pytest

from indexer.base import metrics
from indexer.base.urls import endpoint_label, parse_urls
from indexer.chaindata import chain
from indexer.node import rpc_errors, rpc_rate
from indexer.node.endpoints import Recorder
from indexer.node.rpc import RpcClient
from indexer.node.rpc_batch import Fallback
from indexer.node.rpc_errors import RATE_LIMITED, RpcError, classify
from indexer.node.rpc_rate import AdaptiveRate
from indexer.testing import fixtures
from indexer.testing.anvil import free_port
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.replay import ReplayNode

from .conftest import run_indexer

MAINNET = 18_000_000
# A fallback for eth_getBlockReceipts of a block without transactions: no call at all.
NO_TRANSACTIONS = Fallback("eth_getBlockReceipts", "eth_getTransactionReceipt", lambda call: [])


def block_calls(n: int, first: int = 0) -> list:
    return [("eth_getBlockByNumber", (hex(i), False)) for i in range(first, first + n)]


def numbers(blocks: list) -> list[int]:
    return [int(b["number"], 16) for b in blocks]


def value(metric, *labels) -> float:
    return metric.labels(*labels)._value.get()


@pytest.fixture(scope="module")
def busy(chain_node) -> tuple[int, int]:
    """A range of the shared chain whose blocks have transactions."""
    with_txs = [n for n in range(chain_node.head() + 1)
                if chain_node.rpc("eth_getBlockByNumber", hex(n), False)["transactions"]]
    return with_txs[0], with_txs[0] + 9


def test_a_batch_comes_back_in_call_order_even_when_answered_out_of_order(chain_node):
    with FaultProxy(chain_node.url, first=("reorder",)) as proxy:
        blocks = RpcClient([proxy.url]).batch(block_calls(20))
    assert proxy.served["reorder"] == 1
    assert numbers(blocks) == list(range(20))


@pytest.mark.parametrize("fault", ["http500", "truncate", "html", "timeout"])
def test_transient_faults_are_retried(chain_node, fault):
    with FaultProxy(chain_node.url, first=(fault, fault), hold_seconds=1.5) as proxy:
        client = RpcClient([proxy.url], timeout=0.5, max_attempts=4)
        assert int(client.call("eth_chainId"), 16) == 31337
    assert proxy.served[fault] == 2
    assert proxy.served["pass"] == 1


def test_failover_to_the_next_endpoint(chain_node):
    dead = f"http://127.0.0.1:{free_port()}"
    client = RpcClient([dead, chain_node.url], max_attempts=3)
    assert numbers(client.batch(block_calls(5))) == list(range(5))


def test_gives_up_after_the_last_attempt_with_a_clear_error(chain_node):
    with FaultProxy(chain_node.url, rate=1.0, faults=("http500",)) as proxy:
        with pytest.raises(RpcError, match=r"^eth_chainId failed after 3 attempts; last: .*: HTTP 500$"):
            RpcClient([proxy.url], max_attempts=3).call("eth_chainId")
    assert proxy.served["http500"] == 3


def test_a_node_that_is_down_is_named_with_the_call_and_what_to_check(caplog):
    port = free_port()
    where = f"http://127.0.0.1:{port}"
    with caplog.at_level(logging.DEBUG, "indexer.node.rpc"), pytest.raises(RpcError) as caught:
        RpcClient([f"{where}/v3/SECRETKEY1234567890"], max_attempts=3).call("eth_blockNumber")
    assert str(caught.value) == (f"eth_blockNumber failed after 3 attempts; last: {where}: connection refused; "
                                 f"is a node running at {where}? (INDEXER_RPC_URL)")
    # The retries before it say nothing unless asked to (DEBUG).
    assert [r.levelno for r in caplog.records if r.name == "indexer.node.rpc"] == [logging.DEBUG] * 2
    with pytest.raises(RpcError, match=r"^3 calls \(eth_getBlockByNumber\) failed after 1 attempt; last: "):
        RpcClient([where], max_attempts=1).batch(block_calls(3))


def test_the_rate_limit_spaces_requests(chain_node):
    with FaultProxy(chain_node.url) as proxy:
        client = RpcClient([proxy.url], max_batch=10, rate_limit=50)
        started = time.monotonic()
        client.batch(block_calls(30))
        client.batch(block_calls(30))
    # 60 calls at 50/s with a burst of 50: the last 10 are sent at least 0.2 s after the first
    # were. Measured from before the first was sent, not from when the proxy saw it: the first
    # request also opens the connection, and arrived up to 15 ms later than the sending did in a
    # loaded CI run, which a bound on the gap between arrivals took for no wait at all.
    assert proxy.requests[-1][0] - started >= 0.2


# -- a node without eth_getBlockReceipts ---------------------------------------------------------------


def test_a_node_without_block_receipts_is_asked_per_transaction_learned_once(chain_node, busy, caplog):
    first, last = busy
    truth = chain.fetch_json(RpcClient([chain_node.url]), first, last)
    with_txs = len(truth[1])
    with FaultProxy(chain_node.url, lacks=("eth_getBlockReceipts",)) as proxy, caplog.at_level(logging.INFO, "indexer.node.rpc"):
        client = RpcClient([proxy.url])
        label = endpoint_label(proxy.url)
        assert chain.fetch_json(client, first, last) == truth
        asked_once = proxy.calls["eth_getBlockReceipts"]
        assert chain.fetch_json(client, first, last) == truth
        assert chain.fetch(client, first, last).blocks == chain.fetch(RpcClient([chain_node.url]), first, last).blocks
    # One batch of eth_getBlockReceipts was refused; from then on, the receipts came by transaction.
    assert asked_once == with_txs and proxy.calls["eth_getBlockReceipts"] == asked_once
    assert proxy.calls["eth_getTransactionReceipt"] == 3 * sum(len(r) for r in truth[1].values())
    learned = [r.getMessage() for r in caplog.records if "does not support" in r.getMessage()]
    assert learned == [f"{label} does not support eth_getBlockReceipts (the method eth_getBlockReceipts does not "
                       "exist/is not available); asking eth_getTransactionReceipt instead"]
    assert value(metrics.counted.rpc_unsupported, label, "eth_getBlockReceipts") == 1
    assert value(metrics.counted.rpc_fallback_calls, label, "eth_getBlockReceipts") == 3 * with_txs
    assert value(metrics.counted.rpc_errors, label, "rpc_error") == 0  # not retried as an error


def test_the_fallback_is_per_endpoint(chain_node, busy):
    """Of two endpoints, only the one that lacks the method is asked per transaction."""
    first, last = busy
    truth = chain.fetch_json(RpcClient([chain_node.url]), first, last)
    with FaultProxy(chain_node.url, lacks=("eth_getBlockReceipts",)) as old, FaultProxy(chain_node.url) as new:
        client = RpcClient([old.url, new.url], max_batch=4)
        for _ in range(3):
            assert chain.fetch_json(client, first, last) == truth
    assert client.lacking() == {endpoint_label(old.url): ["eth_getBlockReceipts"], endpoint_label(new.url): []}
    assert old.served["method_not_found"] == old.calls["eth_getBlockReceipts"] <= 4  # one batch, once
    assert new.calls["eth_getBlockReceipts"] > 0  # whole blocks from the endpoint that can
    # The blocks `old` took were asked per transaction (of either endpoint, whichever came next).
    assert old.calls["eth_getTransactionReceipt"] + new.calls["eth_getTransactionReceipt"] > 0


def test_a_missing_receipt_says_so(chain_node, busy):
    """A node whose transaction index does not reach back to a block answers null for the receipt
    of a transaction in it."""
    first, _ = busy
    with FaultProxy(chain_node.url, lacks=("eth_getBlockReceipts",)) as proxy:
        client = RpcClient([proxy.url])
        tx = chain.fetch_json(client, first, first)[0][0]["transactions"][0]["hash"]
        asked = client.batch
        client.batch = lambda calls, fallback=None: asked(calls, fallback=fallback and replace(
            fallback, combine=lambda receipts: [None, *receipts[1:]]))
        with pytest.raises(chain.ChainDataError, match=f"block {first}: the node has no receipt for transaction {tx}"):
            chain.fetch_json(client, first, first)


# -- too large ------------------------------------------------------------------------------------------


def test_calls_cut_by_the_response_cap_are_asked_again_and_the_rest_kept(chain_node):
    """go-ethereum answers every call past its batch response cap with -32003 "response too
    large": the answered ones are kept, only the others asked again, in batches of the size that
    fitted, from then on."""
    with FaultProxy(chain_node.url, max_results=7) as proxy:
        client = RpcClient([proxy.url], max_batch=20)
        assert numbers(client.batch(block_calls(30))) == list(range(30))
        assert client.endpoints[0].max_batch == 7
        sizes = [calls for _, calls in proxy.requests]
        assert sizes[0] == 20 and max(sizes[1:]) <= 7
        assert sum(sizes) == 30 + 13  # the 13 cut from the first batch, and no other, asked twice
        assert proxy.calls["eth_getBlockByNumber"] == 43
        assert numbers(client.batch(block_calls(14))) == list(range(14))  # remembered: 7 and 7
        assert [calls for _, calls in proxy.requests][len(sizes):] == [7, 7]
    label = endpoint_label(proxy.url)
    assert value(metrics.counted.rpc_batch_size, label) == 7
    assert value(metrics.counted.rpc_splits, label) == 1


@pytest.mark.parametrize("form", ["error", "geth", "http413"])
def test_a_batch_refused_as_too_large_is_split(chain_node, form):
    """A batch refused as a whole: a -32600 error object, go-ethereum's "batch too large" answered
    for the first id alone, or HTTP 413."""
    with FaultProxy(chain_node.url, max_batch=8, too_large_as=form) as proxy:
        client = RpcClient([proxy.url], max_batch=50, max_attempts=2)
        assert numbers(client.batch(block_calls(30))) == list(range(30))
    assert proxy.served["too_large"] >= 1
    assert client.endpoints[0].max_batch <= 8
    accepted = [calls for _, calls in proxy.requests if calls <= 8]
    assert sum(accepted) == 30


def test_http_413_on_a_single_call_fails_over(chain_node):
    with FaultProxy(chain_node.url, rate=1.0, faults=("http413",)) as refuses, FaultProxy(chain_node.url) as good:
        client = RpcClient([refuses.url, good.url])
        assert client.call("eth_chainId") == "0x7a69"
        with pytest.raises(RpcError, match="no endpoint can answer it; last: .*even for a single eth_chainId call"):
            RpcClient([refuses.url]).call("eth_chainId")


# -- errors that cannot succeed on that node -------------------------------------------------------------


def test_method_not_found_is_not_retried(chain_node):
    with FaultProxy(chain_node.url) as proxy:
        with pytest.raises(RpcError, match="eth_noSuchMethod is not supported by the node"):
            RpcClient([proxy.url], max_attempts=5).call("eth_noSuchMethod")
    assert len(proxy.requests) == 1


def test_pruned_history_fails_over_at_once_and_never_asks_that_node_again(chain_node):
    with FaultProxy(chain_node.url, pruned_below=10) as pruned, FaultProxy(chain_node.url) as archive:
        client = RpcClient([pruned.url, archive.url], max_batch=20, max_attempts=5)
        assert numbers(client.batch(block_calls(20))) == list(range(20))
        # The pruned node answered its share; the calls it refused went to the archive node at once.
        assert pruned.served["pruned"] == 10
        assert len(pruned.requests) == 1 and len(archive.requests) == 1
    with FaultProxy(chain_node.url, pruned_below=10) as pruned:
        with pytest.raises(RpcError, match=r"eth_getBlockByNumber\(0x0, False\): no endpoint can answer it; "
                                           r"last: .*pruned history unavailable"):
            RpcClient([pruned.url], max_attempts=5).batch(block_calls(5))
        assert len(pruned.requests) == 1


def test_a_method_one_endpoint_lacks_goes_to_the_others(chain_node):
    with FaultProxy(chain_node.url, lacks=("eth_getBlockByNumber",)) as lacking, FaultProxy(chain_node.url) as good:
        client = RpcClient([lacking.url, good.url], max_attempts=5)
        for _ in range(3):
            assert numbers(client.batch(block_calls(5))) == list(range(5))
        assert client.call("eth_chainId") == "0x7a69"
    assert lacking.calls["eth_getBlockByNumber"] == 5  # one batch, once
    assert good.calls["eth_getBlockByNumber"] == 15


# -- rate limits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["http429_bare", "limit_exceeded"])
def test_a_rate_limit_is_never_a_failed_attempt(chain_node, fault):
    """HTTP 429 without Retry-After, or -32005 for each call, more times in a row than the
    attempts allowed: backpressure, not a failure; the calls are answered once the limit lets them."""
    with FaultProxy(chain_node.url, first=(fault,) * 3) as proxy:
        client = RpcClient([proxy.url], max_attempts=2)
        assert numbers(client.batch(block_calls(3))) == list(range(3))
    assert proxy.served[fault] == 3


def test_nothing_but_rate_limits_for_the_patience_is_rate_limited_not_failed(chain_node):
    with FaultProxy(chain_node.url, rate=1.0, faults=("http429_bare",)) as proxy:
        with pytest.raises(rpc_errors.RateLimited) as caught:
            RpcClient([proxy.url], max_attempts=2, patience=3).call("eth_chainId")
    assert proxy.served["http429_bare"] > 2  # more than the attempts allowed a failure
    assert re.fullmatch(rf"eth_chainId: the rate limit would hold it back \d s with no answer, more than the 3 s "
                        rf"it may wait; last: {proxy.url}: HTTP 429 rate limited",
                        str(caught.value)), caught.value


def test_the_rate_falls_below_a_call_a_second_when_the_provider_allows_no_more():
    rate = AdaptiveRate(2)
    for _ in range(3):
        assert rate.limited(time.monotonic())
    assert rate.rate == pytest.approx(2 * 0.7 ** 3)  # 0.69 calls a second
    assert rate.burst(100) == 1  # and a request carries one call at a time


def test_below_half_a_call_a_second_an_idle_endpoint_is_asked_at_once(monkeypatch):
    # Capped at one second's worth of calls, the bucket never held a whole call below a rate of
    # 1: at 0.43 every call waited 1.3 s however long nobody had asked, and the head planner,
    # which waits at most a second, never asked again (a chaos run's follow phase stalled).
    clock = [1000.0]
    monkeypatch.setattr(rpc_rate.time, "monotonic", lambda: clock[0])
    rate = AdaptiveRate(2)
    for _ in range(6):
        clock[0] += 1
        assert rate.limited(clock[0])
    assert rate.rate < 0.5 and rate.delay(1) > 1  # right after the cut: held back
    clock[0] += 1 / rate.rate + 0.01  # nobody asks for as long as a call takes at that rate
    assert rate.delay(1) == 0 and rate.acquire(1)[0] == 0
    assert rate.delay(1) > 1  # and the next waits its turn again


def test_the_rate_allowed_in_all_is_the_slowest_endpoint_s_for_each(chain_node):
    with FaultProxy(chain_node.url) as a, FaultProxy(chain_node.url) as b:
        client = RpcClient([a.url, b.url])
        assert client.allowed_calls_per_second() is None  # no limit in force
        client.endpoints[0].rate.limited(time.monotonic())
        client.endpoints[0].rate.limited(time.monotonic())  # measured nothing: held back, no rate yet
        assert client.allowed_calls_per_second() is None
        limited = RpcClient([a.url, b.url], rate_limit=10)
        limited.endpoints[1].rate.limited(time.monotonic())
        assert limited.allowed_calls_per_second() == pytest.approx(2 * 7)


def test_retry_after_is_honoured(chain_node):
    with FaultProxy(chain_node.url, first=("http429",), retry_after="1") as proxy:
        client = RpcClient([proxy.url])
        assert client.call("eth_chainId") == "0x7a69"
    (t429, _), (t_next, _) = proxy.requests
    assert t_next - t429 >= 0.95


@pytest.mark.parametrize("fault", ["http429_bare", "limit_exceeded"])
def test_with_no_ceiling_the_first_rate_limit_starts_limiting(chain_node, fault):
    with FaultProxy(chain_node.url) as proxy:
        client = RpcClient([proxy.url], max_batch=10, max_attempts=2)
        label = endpoint_label(proxy.url)
        # Refused at once, before a second of sending to measure: held back a second, no rate set.
        proxy.first.append(fault)
        started = time.monotonic()
        assert numbers(client.batch(block_calls(10))) == list(range(10))
        assert time.monotonic() - started >= 0.95 and client.rates() == {label: None}
        deadline = time.monotonic() + 1.2
        while time.monotonic() < deadline:
            client.batch(block_calls(10))
        sent = sum(calls for t, calls in proxy.requests if t > proxy.requests[-1][0] - 1)
        proxy.first.append(fault)
        assert numbers(client.batch(block_calls(10))) == list(range(10))
    assert proxy.served[fault] == 2
    rate = client.rates()[label]
    assert rate is not None and rate < sent  # 70% of what it was sending
    assert value(metrics.counted.rpc_rate, label) == rate


@pytest.mark.parametrize(("ceiling", "limit_as"), [(150, "http429"), (0, "json-rpc")])
def test_the_rate_falls_on_rate_limits_and_rises_again_within_the_ceiling(chain_node, monkeypatch, ceiling, limit_as):
    """Behind a provider's limit of 100 calls a second (HTTP 429, or -32005 "limit exceeded" per
    call), the rate falls below it; once the limit is gone it rises again, never past the ceiling."""
    monkeypatch.setattr(AdaptiveRate, "RAISE_EVERY", 0.1)  # ten times faster than in production
    with FaultProxy(chain_node.url, calls_per_second=100, limit_as=limit_as, retry_after=None) as proxy:
        client = RpcClient([proxy.url], max_batch=10, max_attempts=20, rate_limit=ceiling)
        label = endpoint_label(proxy.url)
        assert client.rates()[label] == (ceiling or None)
        seen = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert numbers(client.batch(block_calls(10))) == list(range(10))
            seen.append(client.rates()[label])
        fell_to = min(r for r in seen if r is not None)
        assert fell_to < 110  # cut to 70% of what was sent, once per burst of refusals
        refused = proxy.served["rate_limited"]
        assert 0 < refused < len(proxy.requests) / 3, (refused, len(proxy.requests))

        proxy.calls_per_second = None  # the limit is lifted
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            client.batch(block_calls(10))
            seen.append(client.rates()[label])
    risen = client.rates()[label]
    assert risen > fell_to + 30
    if ceiling:
        assert seen[0] == max(seen) == risen == ceiling
    assert value(metrics.counted.rpc_rate, label) == risen


def test_aimd_steps():
    """The rules, without a node: cut at once to 70% of what was sent, once per burst; raised by
    5% per clean interval in which the limit held calls back; never past the ceiling."""
    rate = AdaptiveRate(200)
    sent = [rate.acquire(10)[1] for _ in range(3)]
    assert rate.limited(sent[2]) and rate.rate == pytest.approx(140)  # 70% of the rate in force
    assert not rate.limited(sent[1])  # sent before the cut: counts once
    rate.RAISE_EVERY = 0.0
    rate.clean()
    assert rate.rate == pytest.approx(140)  # nothing was held back: not raised
    rate.acquire(1)  # the cut emptied the bucket: this waits
    rate.clean()
    assert rate.rate == pytest.approx(147)  # + 5% of 140
    rate.acquire(150)
    rate.clean()
    assert rate.rate == pytest.approx(154.35)  # + 5% of 147
    rate.rate = 198
    rate.acquire(150)
    rate.clean()
    assert rate.rate == 200  # the ceiling

    unlimited = AdaptiveRate()
    assert not unlimited.limited(unlimited.acquire(10)[1]) and unlimited.rate is None  # nothing measured yet
    started = time.monotonic()
    unlimited.acquire(1)
    assert time.monotonic() - started >= 0.95  # held back instead


# -- status and the endpoints table -------------------------------------------------------------------------


def test_status_shows_the_rate_each_endpoint_settled_on(db_url, conn, chain_node):
    with FaultProxy(chain_node.url, first=("http429",), retry_after="0", lacks=("eth_getBlockReceipts",)) as a, \
            FaultProxy(chain_node.url) as b:
        client = RpcClient([a.url, b.url], rate_limit=500)
        client.batch(block_calls(10))
        for _ in range(2):  # one of them goes to `a`, which answers -32601
            client.batch([("eth_getBlockReceipts", ("0x1",))], fallback=NO_TRANSACTIONS)
        label_a, label_b = endpoint_label(a.url), endpoint_label(b.url)
        rate_a = client.rates()[label_a]
        assert rate_a < 500 and client.rates()[label_b] == 500
        recorder = Recorder(client, "host:1")
        assert recorder.maybe_record(conn) and not recorder.maybe_record(conn)  # at most every 10 s
        other = RpcClient([a.url, b.url])  # no ceiling, never rate limited: no limit in force
        Recorder(other, "host:2").maybe_record(conn)
        conn.execute("INSERT INTO rpc_endpoints VALUES (%s, 'gone:3', 1000, '{}', now() - interval '2 minutes')",
                      (label_a,))

        text = run_indexer("status", db_url=db_url)
        assert text.returncode == 0, text.stderr
        lines = [line for line in text.stdout.splitlines() if line.startswith("rpc ")]
        assert lines == sorted([f"rpc      {label_a}: no rate limit in force (2 worker(s)); lacks eth_getBlockReceipts",
                                f"rpc      {label_b}: no rate limit in force (2 worker(s))"])
        conn.execute("DELETE FROM rpc_endpoints WHERE worker = 'host:2'")
        text = run_indexer("status", db_url=db_url).stdout
        assert f"rpc      {label_a}: {rate_a:,.1f} calls/s allowed (1 worker(s)); lacks eth_getBlockReceipts" in text
        assert f"rpc      {label_b}: 500.0 calls/s allowed (1 worker(s))" in text
        record = json.loads(run_indexer("status", "--json", db_url=db_url).stdout)
        assert record["rpc_endpoints"] == sorted([
            {"endpoint": label_a, "workers": 1, "calls_per_second": rate_a, "unlimited_workers": 0,
             "unsupported": ["eth_getBlockReceipts"]},
            {"endpoint": label_b, "workers": 1, "calls_per_second": 500.0, "unlimited_workers": 0, "unsupported": []},
        ], key=lambda e: e["endpoint"])

        # A worker started later learns what the live ones found: it never asks `a` for the method.
        later = RpcClient([a.url])
        Recorder(later, "host:4").maybe_record(conn)
        asked = a.calls["eth_getBlockReceipts"]
        later.batch([("eth_getBlockReceipts", ("0x1",))], fallback=NO_TRANSACTIONS)
        assert a.calls["eth_getBlockReceipts"] == asked
        recorder.forget(conn)
        assert conn.execute("SELECT count(*) FROM rpc_endpoints WHERE worker = 'host:1'").fetchone()[0] == 0


# -- what nodes say, read ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "message", "kind"), [
    (-32601, "the method eth_getBlockReceipts does not exist/is not available", "unsupported"),  # go-ethereum
    (-32601, "Method not found", "unsupported"),  # anvil, jsonrpsee
    (-32600, "Unsupported method: eth_getBlockReceipts", "unsupported"),
    (-32602, "method not available", "unsupported"),
    (4444, "pruned history unavailable", "pruned"),  # go-ethereum history expiry
    (-32000, "old data not available due to pruning", "pruned"),  # erigon
    (-32602, "Receipts for block 5 (0xab) are neither stored nor reproducible from state history.", "pruned"),  # nethermind
    (-32003, "response too large", "too_large"),  # go-ethereum's response cap
    (-32600, "batch too large", "too_large"),  # go-ethereum's request limit
    (-32600, "batch limit 100 exceeded (can increase by --rpc.batch.limit). Requested batch of size: 200", "too_large"),
    (-32005, "Batch size limit exceeded", "too_large"),  # nethermind
    (-32011, "The batch response was too large", "too_large"),  # jsonrpsee (reth)
    (-32007, "Request is too big", "too_large"),
    (429, "Your app has exceeded its compute units per second capacity. If you have retries enabled, you can "
          "safely ignore this message. If not, check out https://docs.alchemy.com/reference/throughput", RATE_LIMITED),
    (-32005, "daily request count exceeded, request rate limited", RATE_LIMITED),  # infura
    (-32005, "project ID request rate exceeded", RATE_LIMITED),  # infura
    (-32005, "limit exceeded", RATE_LIMITED),  # EIP-1474's name
    (-32029, "Rate limit exceeded", RATE_LIMITED),
    (-32007, "100/second request limit reached - reduce calls per second or upgrade your account at quicknode.com",
     RATE_LIMITED),
    (-32012, "credits limited to 6000/sec", RATE_LIMITED),  # quicknode
    (-32000, "Too many requests", RATE_LIMITED),
    (-32000, "header not found", "rpc_error"),
    (-32002, "request timed out", "rpc_error"),
    # Passing troubles that say "exceeded" or "not available": worth another try on the same node.
    (-32000, "failed to get response: context deadline exceeded", "rpc_error"),
    (-32000, "batch request failed: context deadline exceeded", "rpc_error"),
    (-32000, "upstream response timeout exceeded", "rpc_error"),
    (-32000, "method handler is temporarily not available", "rpc_error"),
    (-32000, "no available upstreams", "rpc_error"),  # dRPC, often a passing outage
])
def test_real_error_texts_are_read_as_what_they_mean(code, message, kind):
    assert classify(code, message) == kind


# -- recorded mainnet answers ---------------------------------------------------------------------------------


def recorded(name: str) -> tuple[dict, list]:
    answer = fixtures.load(name)
    return answer["block"], answer["receipts"]


@pytest.mark.parametrize(("answer", "shown"), [("0xzz", '"0xzz"'), (None, "null"), (12345, "12345"), ("12", '"12"'),
                                              ("0x", '"0x"'), (" 0x1_0", '" 0x1_0"')])
def test_a_head_that_is_not_a_hex_number_is_chain_data_naming_the_endpoint(chain_node, answer, shown):
    with FaultProxy(chain_node.url, results={"eth_blockNumber": answer}) as bad:
        with pytest.raises(chain.ChainDataError) as caught:
            chain.safe_head(RpcClient([bad.url]), confirmations=0, tag=None)
        assert str(caught.value) == f"{bad.url}: eth_blockNumber answered {shown}: not a hex number"
        assert bad.calls["eth_blockNumber"] == 1  # not asked again: it would say the same
        with FaultProxy(chain_node.url) as good:  # another endpoint answers it
            assert chain.safe_head(RpcClient([bad.url, good.url]), confirmations=0, tag=None) == \
                chain_node.head()


def test_a_chain_id_or_finalized_block_that_is_not_a_hex_number_is_chain_data(chain_node):
    with FaultProxy(chain_node.url, results={"eth_chainId": None}) as proxy:
        with pytest.raises(chain.ChainDataError, match=f"^{proxy.url}: eth_chainId answered null: not a hex number$"):
            chain.chain_id(RpcClient([proxy.url]))
    with FaultProxy(chain_node.url, results={"eth_getBlockByNumber": {"number": "0xzz"}}) as proxy:
        with pytest.raises(chain.ChainDataError, match=f'^{proxy.url}: eth_getBlockByNumber answered {{"number":"0xzz"}}: '
                                                       "its number is not a hex number$"):
            chain.safe_head(RpcClient([proxy.url]), confirmations=0, tag="finalized")


def test_mainnet_receipts_by_transaction_equal_the_block_s(caplog):
    """Block 18,000,000 from a node without eth_getBlockReceipts (go-ethereum before 1.13)."""
    block, receipts = recorded("mainnet-18000000")
    with ReplayNode(["mainnet-18000000"], block_receipts=False) as node, caplog.at_level(logging.WARNING, "indexer.node.rpc"):
        client = RpcClient([node.url])
        for _ in range(2):
            assert chain.fetch_json(client, MAINNET, MAINNET) == ([block], {MAINNET: receipts})
        assert node.refused["method_not_found"] == 1
        assert node.served["eth_getTransactionReceipt"] == 2 * len(receipts)
    assert sum("does not support eth_getBlockReceipts" in r.getMessage() for r in caplog.records) == 1


def test_mainnet_receipts_cut_by_the_response_cap_are_all_kept():
    block, receipts = recorded("mainnet-18000000")
    with ReplayNode(["mainnet-18000000"], block_receipts=False, max_batch_results=40) as node:
        client = RpcClient([node.url], max_batch=100)
        assert chain.fetch_json(client, MAINNET, MAINNET) == ([block], {MAINNET: receipts})
        assert client.endpoints[0].max_batch == 40
        # 94 receipts: a batch of 94 (40 kept), then 54 in batches of 40: nothing asked three times.
        assert node.served["eth_getTransactionReceipt"] == len(receipts)
        assert node.refused["response_too_large"] == len(receipts) - 40


def test_mainnet_pruned_history_fails_over_at_once():
    block, receipts = recorded("mainnet-18000000")
    with ReplayNode(["mainnet-18000000"], pruned_below=MAINNET + 1) as pruned, \
            ReplayNode(["mainnet-18000000"]) as archive:
        client = RpcClient([pruned.url, archive.url], max_attempts=8)
        assert chain.fetch_json(client, MAINNET, MAINNET) == ([block], {MAINNET: receipts})
        # Each call it was given, it was given once (blocks, then receipts), never again.
        assert pruned.requests in ([1], [1, 1]) and pruned.refused["pruned"] == len(pruned.requests)
        asked = len(pruned.requests)
        with pytest.raises(RpcError, match="pruned history unavailable"):
            chain.fetch_json(RpcClient([pruned.url], max_attempts=8), MAINNET, MAINNET)
        assert len(pruned.requests) == asked + 1


@pytest.mark.parametrize("form", ["json-rpc", "http-429"])
def test_mainnet_rate_limits_are_ridden_out(form):
    block, receipts = recorded("mainnet-18000000")
    with ReplayNode(["mainnet-18000000"], block_receipts=False, limit_exceeded_every=3, limit_exceeded_as=form) as node:
        client = RpcClient([node.url], max_batch=50, max_attempts=4, rate_limit=1000)
        assert chain.fetch_json(client, MAINNET, MAINNET) == ([block], {MAINNET: receipts})
        assert node.refused["limit_exceeded"] >= 1
    assert client.rates()[endpoint_label(node.url)] < 1000


# -- URLs -------------------------------------------------------------------------------------------------------


def test_endpoint_labels_keep_no_secrets():
    assert endpoint_label("https://user:pw@eth.example:8545/v2/KEY123?apikey=XYZ") == "https://eth.example:8545"


@pytest.mark.parametrize("text", ["not a url", "ftp://example", "http://", "127.0.0.1:8545", "http://h:notaport/"])
def test_bad_rpc_urls_are_refused(text):
    with pytest.raises(ValueError, match="not an http"):
        parse_urls(text)


def test_several_urls_are_accepted():
    assert parse_urls("http://a:1, https://b/x") == ["http://a:1", "https://b/x"]


@pytest.mark.parametrize("form", ["html", "html200", "json", "call"])
def test_what_a_gateway_echoes_of_the_url_is_scrubbed_before_it_is_cut(chain_node, form):
    key = "k" + "0123456789abcdef" * 2
    with FaultProxy(chain_node.url, echo=(form,)) as proxy:
        url = proxy.url.replace("://", "://user:" + key + "@") + f"/v3/{key}?apikey={key}"
        with pytest.raises(RpcError) as caught:  # "html" says "rate limit exceeded": no patience for it here
            RpcClient([url], max_attempts=1, patience=0).call("eth_blockNumber")
    message = str(caught.value)
    assert "***" in message
    # Not even a piece of the key: the answers are cut to 40 or 200 characters, which must not
    # leave the start of a key that the cut made too short to be found.
    assert not any(key[i:i + 6] in message for i in range(len(key) - 5)), message


def test_a_call_tree_as_deep_as_the_evm_allows_is_read_though_msgspec_stops_at_half_its_depth():
    """A transaction whose calls go 1,024 deep (the call-depth attacks of 2016 did) comes from the
    call tracer as a JSON tree of more than 2,048 levels; msgspec refuses past the interpreter's
    recursion limit (1,000 by default). The client
    reads it with the standard library instead, in a fetch thread as the workers do; an answer
    deeper than any trace is still refused as not JSON."""
    from indexer.chaindata import traces
    from indexer.testing.loopback import LoopbackServer, send

    frame = '{"type":"CALL","from":"0x' + "aa" * 20 + '","to":"0x' + "bb" * 20 + '","value":"0x0","input":"0x"'
    tree = (frame + ',"calls":[') * 1023 + frame + "}" + "]}" * 1023
    deep = ('[{"jsonrpc":"2.0","id":0,"result":[{"txHash":"0x' + "11" * 32 + '","result":' + tree + "}]}]").encode()
    answers = {"deep": deep, "deeper": b"[" * 5000 + b"]" * 5000}

    def handle(request, body):
        send(request, 200, answers[json.loads(body)[0]["params"][0]])

    with LoopbackServer(handle) as node:
        client = RpcClient([node.url], max_attempts=1)
        (answer,) = client.batch([("debug_traceBlockByHash", ("deep",))])
        assert len(traces.from_call_tracer(1, answer)) == 1024
        # Not JSON past DEEPEST_JSON, or, where the interpreter allows deeper still (its recursion
        # limit is the process's), no answer to the call: refused either way.
        with pytest.raises(RpcError, match="answer is not JSON|answer lacks all 1 results"):
            client.batch([("debug_traceBlockByHash", ("deeper",))])


def test_an_integer_past_64_bits_in_an_answer_is_read_exactly():
    """A node may put a JSON number where a hex string belongs (anvil's receipt blockTimestamp is
    one) or in a key of its own, which is stored in `extra`: past 64 bits it must stay the same
    integer, not become the nearest float (as orjson reads it)."""
    from indexer.chaindata import rows
    from indexer.testing.loopback import LoopbackServer, send

    big = 2**255 + 12345
    answer = ('[{"jsonrpc":"2.0","id":0,"result":{"hash":"0x' + "11" * 32 + f'","l2Extra":{big}}}}}]').encode()

    def handle(request, body):
        send(request, 200, answer)

    with LoopbackServer(handle) as node:
        (result,) = RpcClient([node.url], max_attempts=1).batch([("eth_getBlockByNumber", ("0x1", True))])
    assert result["l2Extra"] == big and type(result["l2Extra"]) is int
    assert rows._extra(result, frozenset({"hash"})) == '{"l2Extra":' + str(big) + "}"
