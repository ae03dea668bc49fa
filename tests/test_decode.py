"""Decoding a node's answers into rows (`indexer.chaindata.chain`): answers that disagree with each other
are refused before anything is written."""

from __future__ import annotations

import pytest

from indexer.chaindata.chain import decode, fetch

from indexer.base.errors import ChainDataError
from indexer.node.rpc import RpcClient


def test_inconsistent_answers_are_refused_before_anything_is_written(chain_node):
    client = RpcClient([chain_node.url])
    busy = next(n for n in range(chain_node.head() + 1)
                if len(chain_node.rpc("eth_getBlockByNumber", hex(n), False)["transactions"]) >= 2)
    blocks = [chain_node.rpc("eth_getBlockByNumber", hex(n), True) for n in (busy, busy + 1)]
    receipts = chain_node.rpc("eth_getBlockReceipts", hex(busy))
    assert fetch(client, busy, busy + 1).blocks  # the true answers pass

    with pytest.raises(ChainDataError, match="transactions but"):
        decode(busy, blocks, {busy: receipts[:-1]})
    with pytest.raises(ChainDataError, match="does not belong to transaction"):
        decode(busy, blocks, {busy: list(reversed(receipts))})
    other = dict(receipts[0], blockHash="0x" + "11" * 32)
    with pytest.raises(ChainDataError, match="does not belong"):
        decode(busy, blocks, {busy: [other, *receipts[1:]]})
    with pytest.raises(ChainDataError, match="parent hash does not match"):
        decode(busy, [blocks[0], dict(blocks[1], parentHash="0x" + "22" * 32)], {busy: receipts})
    with pytest.raises(ChainDataError, match="returned block"):
        decode(busy + 5, blocks[:1], {busy + 5: receipts})
    with pytest.raises(ChainDataError, match="no block"):
        decode(busy, [None], {})
    tampered = dict(blocks[0], hash="0x12\t34")
    with pytest.raises(ChainDataError):
        decode(busy, [tampered], {busy: [dict(r, blockHash="0x12\t34") for r in receipts]})
