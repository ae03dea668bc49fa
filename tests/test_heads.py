"""The newHeads subscription of `indexer work --follow` (INDEXER_WS_URL, indexer/node/heads.py): a new
block is planned when the node announces it, not at the next poll; polling goes on when the
subscription drops, is refused or brings nonsense, and the subscription comes back with the node;
what is logged names the node by its label alone."""

from __future__ import annotations

import base64
import re

import psycopg
import pytest

from indexer.node.heads import MAX_RETRY_SECONDS, RETRY_SECONDS, retry_delay
from indexer.testing.anvil import Anvil, free_port
from indexer.testing.waiting import wait_for
from indexer.testing.work import pool_metric
from indexer.testing.ws_proxy import WsProxy

# A key as providers put it in the path, and a user and password.
KEY = "0123456789abcdef0123456789abcdef"
USER, PASSWORD = "indexer", "S3cretPassw0rd"


def indexed(conn: psycopg.Connection, number: int) -> bool:
    return conn.execute("SELECT 1 FROM blocks WHERE number = %(n)s", {"n": number}).fetchone() is not None


def follow(work, db_url: str, node: Anvil, ws_url: str, *, poll: str, **env: str):
    return work(db_url, node.url, "--follow", "--from", "0", "--workers", "1", INDEXER_WS_URL=ws_url,
                INDEXER_HEAD_POLL_SECONDS=poll, **env)


def test_a_new_head_is_indexed_before_the_first_poll_could_have_seen_it(db_url, conn, work):
    with Anvil("--no-mining") as node:
        node.mine(3)
        w = follow(work, db_url, node, f"ws://127.0.0.1:{node.port}", poll="60")
        wait_for(lambda: indexed(conn, 3), "the blocks there at the start (the first poll)")
        wait_for(lambda: "subscribed to newHeads" in w.output(), "the subscription")
        # The next poll is a minute away: within 20 s, only the node's announcements get the new
        # blocks planned. The second block comes after any poll the subscription's opening caused.
        for number in (4, 5):
            node.mine(1)
            wait_for(lambda: indexed(conn, number), f"block {number}, announced over the WebSocket", timeout=20)
        assert "head subscription at ws://127.0.0.1" in w.output()
        assert "WARNING indexer.node.heads" not in w.output(), w.output()


def test_polling_goes_on_while_the_subscription_is_down_and_the_subscription_comes_back(db_url, conn, work):
    port = free_port()
    with Anvil("--no-mining") as node, WsProxy(f"ws://127.0.0.1:{node.port}") as proxy:
        w = follow(work, db_url, node, proxy.url, poll="1", INDEXER_METRICS_PORT=str(port))
        wait_for(lambda: pool_metric(port, "indexer_follow_subscribed") == 1, "the subscription")
        node.mine(1)
        wait_for(lambda: indexed(conn, 1), "block 1")
        wait_for(lambda: (pool_metric(port, "indexer_follow_new_heads_total") or 0) >= 1, "block 1's announcement")

        proxy.drop()
        wait_for(lambda: pool_metric(port, "indexer_follow_subscribed") == 0, "the subscription to be seen gone")
        node.mine(1)
        wait_for(lambda: indexed(conn, 2), "block 2, found by polling while the subscription is down")
        assert re.search(rf"WARNING indexer\.node\.heads: head subscription at {proxy.url}: the connection closed \(.*\);"
                         r" polling goes on, subscribing again in [\d.]+ s", w.output()), w.output()

        proxy.restore()
        wait_for(lambda: pool_metric(port, "indexer_follow_subscribed") == 1, "the subscription to come back")
        node.mine(1)
        wait_for(lambda: indexed(conn, 3), "block 3")
        wait_for(lambda: "new heads arrive again" in w.output(), "block 3's announcement")
        assert pool_metric(port, "indexer_follow_new_heads_total") >= 2
        assert w.proc.poll() is None, w.output()


@pytest.mark.parametrize(("subscribe_as", "why"), [
    ("error", "the node refused eth_subscribe: the method eth_subscribe does not exist/is not available (code -32601)"),
    ("garbage", "the node sent '<html><body>502 Bad Gateway: ***</body></html>', not an answer to eth_subscribe"),
])
def test_a_node_that_refuses_the_subscription_or_answers_garbage_is_logged_once_and_polled(
        db_url, conn, work, subscribe_as, why):
    with Anvil("--no-mining") as node, WsProxy(f"ws://127.0.0.1:{node.port}", subscribe_as=subscribe_as) as proxy:
        w = follow(work, db_url, node, f"{proxy.url}/v3/{KEY}", poll="1")
        wait_for(lambda: proxy.subscribes >= 3, "the pool to have asked three times")
        node.mine(1)
        wait_for(lambda: indexed(conn, 1), "block 1, found by polling")
        warnings = [line for line in w.output().splitlines() if "WARNING indexer.node.heads" in line]
        assert len(warnings) == 1, w.output()
        assert re.fullmatch(rf".* head subscription at {proxy.url}: {re.escape(why)}; polling goes on,"
                            r" subscribing again in [\d.]+ s", warnings[0]), warnings[0]
        assert KEY not in w.output()


def test_the_urls_key_and_password_never_appear_in_the_log_even_at_debug(db_url, conn, work):
    with Anvil("--no-mining") as node, WsProxy(f"ws://127.0.0.1:{node.port}") as proxy:
        url = f"ws://{USER}:{PASSWORD}@127.0.0.1:{proxy.port}/v3/{KEY}"
        w = follow(work, db_url, node, url, poll="1", INDEXER_LOG_LEVEL="DEBUG")
        wait_for(lambda: "subscribed to newHeads" in w.output(), "the subscription")
        proxy.drop()  # the failures' texts too: a closed connection, then a refused one
        wait_for(lambda: "Connection refused" in w.output(), "a connection refused")
        proxy.restore()
        node.mine(1)
        wait_for(lambda: indexed(conn, 1), "block 1")
        wait_for(lambda: w.output().count("subscribed to newHeads") >= 2, "the subscription to come back")
        log = w.output()
        assert f"head subscription at {proxy.url}:" in log
        for secret in (KEY, PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()):
            assert secret not in log


def test_retries_back_off_exponentially_up_to_a_cap_with_jitter():
    for failures in range(1, 40):
        full = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2 ** (failures - 1))
        assert full / 2 <= retry_delay(failures) <= full
    assert len({retry_delay(30) for _ in range(20)}) > 1  # pools retrying together spread out
    assert retry_delay(1000) <= MAX_RETRY_SECONDS
