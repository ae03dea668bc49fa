"""Which nodes are asked for gzipped answers (INDEXER_RPC_COMPRESSION): by default only one that
is neither on this machine nor on a private network, where compressing costs both sides more
CPU than the bandwidth it saves."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from indexer.base.settings import Settings
from indexer.node.rpc import RpcClient
from indexer.node import rpc_encoding
from indexer.node.rpc_encoding import accepted_encoding


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8545", "http://127.8.9.10", "http://localhost:8545", "http://node.localhost",
    "http://[::1]:8545", "http://10.0.0.5:8545", "http://172.16.0.1", "http://172.31.255.254",
    "http://192.168.1.2/rpc?key=x", "http://[fd00::1]:8545", "http://169.254.10.1", "http://[fe80::1]",
    "https://user:secret@10.1.2.3:443/v1/key", "http://localhost.:8545", "http://[::ffff:10.0.0.1]:8545",
    "http://0.0.0.0:8545", "http://[::]:8545",  # a node's listen address copied: this machine
])
def test_a_node_on_this_machine_or_a_private_network_is_asked_for_answers_uncompressed(url):
    assert accepted_encoding(url, "auto") == "identity"


@pytest.mark.parametrize("url", [
    "https://8.8.8.8/v2/key", "http://1.1.1.1:8545", "http://[2001:4860:4860::8888]:8545",
    "http://172.32.0.1", "http://100.64.0.1",  # outside 172.16/12; carrier-grade NAT is not a private network
    # What Python's is_private also takes: Teredo (2001::/32), documentation, benchmarking, reserved.
    "http://[2001:0:4136:e378::1]", "http://192.0.2.10", "http://198.18.0.1", "http://240.0.0.1",
    "http://[::ffff:8.8.8.8]",
])
def test_a_node_far_away_is_asked_for_gzip(url):
    assert accepted_encoding(url, "auto") == "gzip"


def test_a_name_that_does_not_resolve_is_asked_for_gzip_and_tried_again_a_minute_later(monkeypatch):
    assert accepted_encoding("http://node.invalid:8545", "auto") is None
    endpoint = RpcClient(["http://node.invalid:8545"]).endpoints[0]
    session = endpoint.session()
    assert session.headers["Accept-Encoding"] == "gzip"
    real = rpc_encoding.socket.getaddrinfo
    asked = []

    def resolves(host, *args, **kwargs):
        asked.append(host)
        return real("127.0.0.1" if host == "node.invalid" else host, *args, **kwargs)

    monkeypatch.setattr(rpc_encoding.socket, "getaddrinfo", resolves)
    assert endpoint.session() is session and session.headers["Accept-Encoding"] == "gzip" and asked == []
    endpoint._tried -= rpc_encoding.UNDECIDED_SECONDS  # a minute later
    assert endpoint.session() is session and session.headers["Accept-Encoding"] == "identity"
    assert asked == ["node.invalid"]
    endpoint.session()
    assert asked == ["node.invalid"]  # decided: never asked again


def test_a_thread_s_session_made_while_undecided_takes_the_decision_made_since(monkeypatch):
    endpoint = RpcClient(["http://node.invalid:8545"]).endpoints[0]
    with ThreadPoolExecutor(1) as other:  # one thread, its own session
        first = other.submit(endpoint.session).result()
        assert first.headers["Accept-Encoding"] == "gzip"
        real = rpc_encoding.socket.getaddrinfo
        monkeypatch.setattr(rpc_encoding.socket, "getaddrinfo",
                            lambda host, *a, **k: real("127.0.0.1" if host == "node.invalid" else host, *a, **k))
        endpoint._tried -= rpc_encoding.UNDECIDED_SECONDS
        assert endpoint.session().headers["Accept-Encoding"] == "identity"  # decided in this thread
        again = other.submit(endpoint.session).result()
    assert again is first and again.headers["Accept-Encoding"] == "identity"


@pytest.mark.parametrize("no_proxy, expected", [("", "gzip"), ("10.0.0.5", "identity")])
def test_a_node_reached_through_a_proxy_is_asked_for_gzip(monkeypatch, no_proxy, expected):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert RpcClient(["http://10.0.0.5:8545"]).endpoints[0].session().headers["Accept-Encoding"] == expected


def test_the_setting_overrides_where_the_node_is():
    assert accepted_encoding("http://127.0.0.1:8545", "gzip") == "gzip"
    assert accepted_encoding("https://8.8.8.8", "none") == "identity"


def test_an_unknown_compression_is_refused_at_once():
    with pytest.raises(ValueError, match="compression must be one of auto, gzip, none, not 'br'"):
        RpcClient(["http://127.0.0.1:1"], compression="br")
    with pytest.raises(ValueError, match="compression must be one of"):
        accepted_encoding("http://127.0.0.1:1", "zstd")


def test_the_settings_reach_the_client(monkeypatch):
    monkeypatch.setenv("INDEXER_RPC_COMPRESSION", "gzip")
    monkeypatch.setenv("INDEXER_RPC_MAX_ANSWER_MB", "3")
    endpoint = RpcClient.from_settings(Settings(_env_file=None), ["http://127.0.0.1:1"]).endpoints[0]
    assert (endpoint.compression, endpoint.max_answer) == ("gzip", 3 << 20)
    assert endpoint.session().headers["Accept-Encoding"] == "gzip"


def test_an_unknown_compression_setting_is_refused(monkeypatch):
    monkeypatch.setenv("INDEXER_RPC_COMPRESSION", "brotli")
    with pytest.raises(ValueError, match="rpc_compression"):
        Settings(_env_file=None)
