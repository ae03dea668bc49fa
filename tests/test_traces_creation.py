"""A contract-creation transaction whose creation failed. go-ethereum (core/state_processor.go,
MakeReceipt), anvil and reth give its receipt a `contractAddress` (the address the contract would
have had: it depends only on the sender and nonce), while its status is 0; the call tracer names
no `to` for a failed CREATE, and trace_block (anvil, reth) still gives `result.address`. A failed
creation created nothing: its row has no `to_address` in either family (the address a family
gave is kept in `extra`), and the check does not ask the top-level call for the receipt's
address."""

from __future__ import annotations

from typing import Iterator

import pytest

from indexer.base import db
from indexer.chaindata import traces
from indexer.testing.anvil import Anvil
from indexer.testing.waiting import wait_for

A, CREATED = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266", "0x5fbdb2315678afecb367f032d93f642f64180aa3"
TX = "0xe321e9327d1e7a6f9a21801aa7d92cab756a96c7d5834a4b31d40f12926b71b6"
BLOCK_HASH = "0x" + "22" * 32
INIT = "0x60006000fd"  # REVERT(0, 0): the creation fails

# anvil 1.x's answers for that transaction (block 1 of a fresh anvil), verbatim.
CALL_TRACER = [{"result": {"from": A, "gas": "0x230be", "gasUsed": "0xcf48", "input": INIT,
                           "error": "execution reverted", "value": "0x0", "type": "CREATE"}, "txHash": TX}]
TRACE_BLOCK = [{"action": {"from": A, "gas": "0x230be", "init": INIT, "value": "0x0", "creationMethod": "create"},
                "blockHash": BLOCK_HASH, "blockNumber": 1, "error": "Reverted",
                "result": {"address": CREATED, "code": "0x", "gasUsed": "0x6"}, "subtraces": 0,
                "traceAddress": [], "transactionHash": TX, "transactionPosition": 0, "type": "create"}]
BLOCK = {"hash": BLOCK_HASH, "transactions": [{"hash": TX, "from": A, "to": None, "value": "0x0", "input": INIT}]}
# The receipt as go-ethereum, reth and anvil give it: status 0, and the would-be address.
RECEIPTS = [{"status": "0x0", "gasUsed": "0xcf48", "contractAddress": CREATED, "logs": []}]


def test_a_failed_creation_s_call_tracer_trace_describes_its_block():
    rows = traces.from_call_tracer(1, CALL_TRACER)
    traces.check_against_block(1, rows, BLOCK, RECEIPTS)  # ChainDataError today: "to None, the transaction 0x5fbd..."


def test_a_failed_creation_creates_nothing_in_either_family():
    by_trace_block = traces.from_trace_block(1, TRACE_BLOCK)
    by_call_tracer = traces.from_call_tracer(1, CALL_TRACER)
    assert by_call_tracer[0].to_address is None
    assert by_trace_block[0].to_address == by_call_tracer[0].to_address  # CREATED today


@pytest.fixture
def failed_creation_node() -> Iterator[Anvil]:
    with Anvil() as node:
        sender = node.rpc("eth_accounts")[0]
        tx = node.rpc("eth_sendTransaction", {"from": sender, "data": INIT, "gas": "0x30000"})
        receipt = wait_for(lambda: node.rpc("eth_getTransactionReceipt", tx), "the transaction mined")
        assert receipt["status"] == "0x0" and receipt["contractAddress"] is not None
        yield node


def test_the_pool_traces_a_block_with_a_failed_creation(failed_creation_node, db_url, work):
    node = failed_creation_node
    assert db_url  # the pool indexes the block, then its traces (INDEXER_TRACES on)
    from .conftest import run_indexer
    assert run_indexer("plan", "--from", "0", "--to", str(node.head() + 1), db_url=db_url).returncode == 0
    pool = work(db_url, node.url, "--drain", INDEXER_TRACES="true", INDEXER_MAX_ATTEMPTS="1")
    code = pool.wait()
    with db.connect(db_url) as conn:
        states = conn.execute("SELECT kind, status, last_error FROM jobs WHERE kind = 'index_traces'"
                              " UNION ALL SELECT kind, status, last_error FROM jobs_history"
                              " WHERE kind = 'index_traces'").fetchall()
        assert code == 0 and states and all(s == "done" for _, s, _ in states), (states, pool.output()[-2000:])
        assert conn.execute("SELECT to_address FROM traces WHERE block_number = 1").fetchall() == [(None,)]
