"""Roots recomputed before writing (INDEXER_VERIFY_ROOTS): real recorded blocks fetched from the
replay node are proven; one byte changed in what the node sends, in a transaction, a receipt, a
log or a withdrawal, is refused before anything could be written, naming the block's root and the
endpoint."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from indexer.chaindata import chain, roots
from indexer.jobs import planner
from indexer.node.rpc import RpcClient
from indexer.testing import fixtures
from indexer.testing.replay import ReplayNode

N = 18_000_000


def flip(value: str) -> str:
    """One hex digit changed (the last), as a corrupting or careless provider would."""
    return value[:-1] + ("1" if value[-1] != "1" else "2")


@pytest.mark.parametrize("name", fixtures.names())
def test_every_recorded_block_is_proven_when_fetched(name):
    with ReplayNode([name]) as node:
        number = node.head
        rows = chain.fetch(RpcClient([node.url], max_attempts=1), number, number, verify_roots=True)
    assert rows.unproven == [] and len(rows.blocks) == 1


def a_log(receipts: list[dict[str, Any]]) -> dict[str, Any]:
    """The first log of the block (the tampering changes it in place)."""
    return next(x for x in receipts if x["logs"])["logs"][0]


TAMPERINGS: list[tuple[str, Callable[[dict[str, Any], list[dict[str, Any]]], None]]] = [
    ("transactions", lambda b, r: b["transactions"][10].update(value=flip(b["transactions"][10]["value"]))),
    ("transactions", lambda b, r: b["transactions"][40].update(input=flip(b["transactions"][40]["input"]))),
    ("receipts", lambda b, r: r[5].update(cumulativeGasUsed=flip(r[5]["cumulativeGasUsed"]))),
    ("receipts", lambda b, r: a_log(r).update(data=a_log(r)["data"] + "00")),
    ("receipts", lambda b, r: a_log(r)["topics"].__setitem__(0, flip(a_log(r)["topics"][0]))),
    ("receipts", lambda b, r: a_log(r).update(address=flip(a_log(r)["address"]))),
    ("receipts", lambda b, r: next(x for x in r if x["logs"])["logs"].pop()),
    # The bloom alone changed, its logs left as they are: no bloom is recomputed from the logs,
    # but the receipts root commits to each receipt's bloom.
    ("receipts", lambda b, r: next(x for x in r if x["logs"]).update(
        logsBloom=flip(next(x for x in r if x["logs"])["logsBloom"]))),
    ("withdrawals", lambda b, r: b["withdrawals"][3].update(amount=flip(b["withdrawals"][3]["amount"]))),
]


@pytest.mark.parametrize("root, tamper", TAMPERINGS)
def test_one_changed_byte_is_refused_before_writing(root, tamper):
    with ReplayNode(["mainnet-18000000"]) as node:
        tamper(node.blocks[N], node.receipts[N])
        client = RpcClient([node.url], max_attempts=1)
        assert chain.fetch(client, N, N).blocks  # unchecked, the node's word is taken
        with pytest.raises(roots.RootMismatch) as caught:
            chain.fetch(client, N, N, verify_roots=True)
    assert str(caught.value) == f"{root} root mismatch at block {N} from {client.endpoints[0].label}"


@pytest.mark.parametrize("verify_roots", [None, "false"])
def test_a_pool_proves_by_default_and_writes_nothing_of_a_tampered_block(db_url, conn, work, verify_roots):
    """Root checks are on unless turned off: a worker with default settings refuses a block one of
    whose logs the node left out, fails the job naming the root and writes nothing; with
    INDEXER_VERIFY_ROOTS=false the node's word is taken and the block written as sent."""
    env = {"INDEXER_MAX_ATTEMPTS": "1"}
    if verify_roots is not None:
        env["INDEXER_VERIFY_ROOTS"] = verify_roots
    with ReplayNode(["mainnet-18000000"]) as node:
        next(x for x in node.receipts[N] if x["logs"])["logs"].pop()
        planner.plan(conn, N, N + 1, 1)
        w = work(db_url, node.url, "--workers", "1", "--drain", **env)
        code = w.wait()
    logs = conn.execute("SELECT count(*) FROM logs").fetchone()[0]
    if verify_roots is None:
        assert code == 1, w.output()
        status, error = conn.execute("SELECT status, last_error FROM jobs").fetchone()
        assert status == "failed" and error.startswith(f"receipts root mismatch at block {N} from "), error
        assert conn.execute("SELECT count(*) FROM blocks").fetchone() == (0,) and logs == 0
    else:
        assert code == 0, w.output()
        assert logs == 290  # the recorded block's 291, less the one left out
