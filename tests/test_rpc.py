"""The JSON-RPC client against a real anvil, directly and through a fault-injecting proxy."""

from __future__ import annotations

import pytest

from indexer.rpc import RpcClient, RpcError
from indexer.testing.anvil import free_port
from indexer.testing.faultproxy import FaultProxy
from indexer.urls import endpoint_label, parse_urls


def block_calls(n: int) -> list:
    return [("eth_getBlockByNumber", (hex(i), False)) for i in range(n)]


def test_a_batch_comes_back_in_call_order_even_when_answered_out_of_order(chain_node):
    with FaultProxy(chain_node.url, first=("reorder",)) as proxy:
        blocks = RpcClient([proxy.url]).batch(block_calls(20))
    assert proxy.served["reorder"] == 1
    assert [int(b["number"], 16) for b in blocks] == list(range(20))


@pytest.mark.parametrize("fault", ["http500", "truncate", "html", "timeout"])
def test_transient_faults_are_retried(chain_node, fault):
    with FaultProxy(chain_node.url, first=(fault, fault), hold_seconds=1.5) as proxy:
        client = RpcClient([proxy.url], timeout=0.5, max_attempts=4)
        assert int(client.call("eth_chainId"), 16) == 31337
    assert proxy.served[fault] == 2
    assert proxy.served["pass"] == 1


def test_retry_after_is_honoured(chain_node):
    with FaultProxy(chain_node.url, first=("http429",), retry_after="1") as proxy:
        assert RpcClient([proxy.url]).call("eth_chainId") == "0x7a69"
    (t429, _), (t_next, _) = proxy.requests
    assert t_next - t429 >= 0.95


def test_a_batch_refused_as_too_large_is_split(chain_node):
    with FaultProxy(chain_node.url, max_batch=8) as proxy:
        client = RpcClient([proxy.url], max_batch=50)
        blocks = client.batch(block_calls(30))
    assert [int(b["number"], 16) for b in blocks] == list(range(30))
    assert proxy.served["too_large"] >= 1
    assert client.max_batch <= 8
    accepted = [calls for _, calls in proxy.requests if calls <= 8]
    assert sum(accepted) == 30


def test_failover_to_the_next_endpoint(chain_node):
    dead = f"http://127.0.0.1:{free_port()}"
    client = RpcClient([dead, chain_node.url], max_attempts=3)
    assert [int(b["number"], 16) for b in client.batch(block_calls(5))] == list(range(5))


def test_gives_up_after_the_last_attempt_with_a_clear_error(chain_node):
    with FaultProxy(chain_node.url, rate=1.0, faults=("http500",)) as proxy:
        with pytest.raises(RpcError, match=r"1 call\(s\) failed after 3 attempts; last: .*HTTP 500"):
            RpcClient([proxy.url], max_attempts=3).call("eth_chainId")
    assert proxy.served["http500"] == 3


def test_method_not_found_is_not_retried(chain_node):
    with FaultProxy(chain_node.url) as proxy:
        with pytest.raises(RpcError, match="not supported by the node"):
            RpcClient([proxy.url], max_attempts=5).call("eth_noSuchMethod")
    assert len(proxy.requests) == 1


def test_the_rate_limit_spaces_requests(chain_node):
    with FaultProxy(chain_node.url) as proxy:
        client = RpcClient([proxy.url], max_batch=10, rate_limit=50)
        client.batch(block_calls(30))
        client.batch(block_calls(30))
    # 60 calls at 50/s with a burst of 50: the last 10 must wait at least 0.2 s after the first.
    times = [t for t, _ in proxy.requests]
    assert times[-1] - times[0] >= 0.19


def test_endpoint_labels_keep_no_secrets():
    assert endpoint_label("https://user:pw@eth.example:8545/v2/KEY123?apikey=XYZ") == "https://eth.example:8545"


@pytest.mark.parametrize("text", ["not a url", "ftp://example", "http://", "127.0.0.1:8545", "http://h:notaport/"])
def test_bad_rpc_urls_are_refused(text):
    with pytest.raises(ValueError, match="not an http"):
        parse_urls(text)


def test_several_urls_are_accepted():
    assert parse_urls("http://a:1, https://b/x") == ["http://a:1", "https://b/x"]
