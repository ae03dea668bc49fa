"""The node's client reads from the environment what requests reads before every request (a
proxy and NO_PROXY, ~/.netrc), once a session: an operator behind a proxy, or with a provider's
credentials in a netrc file, sees no difference."""

from __future__ import annotations

import base64
from typing import Iterator

import orjson
import pytest

from indexer.node.rpc import RpcClient
from indexer.testing.loopback import LoopbackServer, send


class Recorder(LoopbackServer):
    """Answers eth_chainId; keeps each request's target and Authorization header."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

        def handle(request, body: bytes) -> None:
            self.seen.append((request.path, request.headers.get("Authorization")))
            calls = orjson.loads(body)
            send(request, 200, orjson.dumps([{"jsonrpc": "2.0", "id": c["id"], "result": "0x1"} for c in calls]))

        super().__init__(handle)


class Redirector(LoopbackServer):
    """Answers every request with a 307 to `to` (a load balancer sending clients elsewhere)."""

    def __init__(self) -> None:
        self.to = ""
        super().__init__(lambda request, body: send(request, 307, b"", {"Location": self.to}))


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Recorder, Recorder, Redirector]]:
    with Recorder() as node, Recorder() as proxy, Redirector() as redirector:
        yield node, proxy, redirector


@pytest.fixture
def recorder(servers) -> Recorder:
    for server in servers[:2]:
        server.seen.clear()
    return servers[0]


@pytest.fixture
def proxy(servers) -> Recorder:
    return servers[1]


def use_netrc(monkeypatch: pytest.MonkeyPatch, path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))


def basic(user: bytes, password: bytes) -> str:
    return "Basic " + base64.b64encode(user + b":" + password).decode()


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def test_the_environment_s_proxy_carries_the_calls(recorder, proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    # A host that resolves nowhere: only the proxy can answer for it.
    assert RpcClient(["http://node.invalid:8545"], max_attempts=1).call("eth_chainId") == "0x1"
    assert [target for target, _ in proxy.seen] == ["http://node.invalid:8545/"]


def test_a_host_in_no_proxy_is_asked_directly(recorder, proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert RpcClient([recorder.url], max_attempts=1).call("eth_chainId") == "0x1"
    assert proxy.seen == [] and [target for target, _ in recorder.seen] == ["/"]


def test_credentials_in_netrc_are_sent(recorder, monkeypatch, tmp_path):
    use_netrc(monkeypatch, tmp_path / "netrc", "machine 127.0.0.1 login alice password s3cret\n")
    assert RpcClient([recorder.url], max_attempts=1).call("eth_chainId") == "0x1"
    assert recorder.seen == [("/", basic(b"alice", b"s3cret"))]


def test_credentials_in_the_url_are_sent(recorder):
    url = recorder.url.replace("http://", "http://bob:pa55@")
    assert RpcClient([url], max_attempts=1).call("eth_chainId") == "0x1"
    assert recorder.seen == [("/", basic(b"bob", b"pa55"))]


def test_a_redirect_to_another_host_is_sent_its_own_netrc_credentials(recorder, servers, monkeypatch, tmp_path):
    redirector = servers[2]
    redirector.to = recorder.url.replace("127.0.0.1", "localhost") + "/"
    use_netrc(monkeypatch, tmp_path / "netrc",
              "machine 127.0.0.1 login alice password s3cret\nmachine localhost login carol password t0ken\n")
    assert RpcClient([redirector.url], max_attempts=1).call("eth_chainId") == "0x1"
    assert recorder.seen == [("/", basic(b"carol", b"t0ken"))]


def test_a_redirect_out_of_no_proxy_goes_through_the_proxy(recorder, proxy, servers, monkeypatch):
    redirector = servers[2]
    redirector.to = "http://node.invalid:8545/"
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert RpcClient([redirector.url], max_attempts=1).call("eth_chainId") == "0x1"
    assert [target for target, _ in proxy.seen] == ["http://node.invalid:8545/"] and recorder.seen == []
