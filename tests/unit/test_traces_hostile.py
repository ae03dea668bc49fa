"""Node answers that would end in an exception other than ChainDataError (a KeyError,
AttributeError, TypeError or ValueError) if they got past the normaliser: `fetch_checked` would not
ask again, and the worker would record a crash instead of a refused answer. Each is refused with
ChainDataError before a row is made of it."""

from __future__ import annotations

import copy

import pytest

from indexer.base.errors import ChainDataError
from indexer.chaindata import traces
from indexer.jobs import index_traces

from .test_traces import BLOCK_HASH, TX, A, B, C


CALL_TRACER = [{"txHash": TX, "result": {
    "type": "CALL", "from": A, "to": B, "value": "0x5", "gas": "0x10000", "gasUsed": "0x6000", "input": "0x1234",
    "output": "0x", "calls": [
        {"type": "CALL", "from": B, "to": C, "value": "0x0", "gas": "0x7000", "gasUsed": "0x200", "input": "0xcd",
         "output": "0x"},
    ]}}]
TRACE_BLOCK = [
    {"type": "call", "action": {"callType": "call", "from": A, "to": B, "value": "0x5", "gas": "0x10000",
                                "input": "0x1234"},
     "result": {"gasUsed": "0x4000", "output": "0x"}, "subtraces": 0, "traceAddress": [],
     "transactionHash": TX, "transactionPosition": 0, "blockNumber": 7, "blockHash": BLOCK_HASH},
]


def stored_block() -> index_traces.StoredBlock:
    return index_traces.StoredBlock(7, BLOCK_HASH, [{"hash": TX, "from": A, "to": B, "value": "0x5",
                                                     "input": "0x1234"}],
                                    [{"status": "0x1", "gasUsed": "0x5208", "contractAddress": None, "logs": []}])


def test_a_call_tracer_item_with_neither_result_nor_error_is_refused():
    """traces.py:158 reads item['error'] of an item that has none: KeyError."""
    with pytest.raises(ChainDataError):
        traces.from_call_tracer(7, [{"txHash": TX}])


@pytest.mark.parametrize("result", [[1], "oops", 5, True])
def test_a_trace_block_result_that_is_not_an_object_is_refused(result):
    """traces.py:219 `item.get("result") or {}` keeps a truthy non-object; `.get`/`.items` on it
    raise AttributeError."""
    answer = copy.deepcopy(TRACE_BLOCK)
    answer[0]["result"] = result
    with pytest.raises(ChainDataError):
        traces.from_trace_block(7, answer)


@pytest.mark.parametrize("kind", [["call"], {"a": 1}])
def test_a_trace_block_type_that_is_not_text_is_refused(kind):
    """traces.py:220 `kind not in _ACTION_KNOWN` with an unhashable type: TypeError."""
    answer = copy.deepcopy(TRACE_BLOCK)
    answer[0]["type"] = kind
    with pytest.raises(ChainDataError):
        traces.from_trace_block(7, answer)


@pytest.mark.parametrize("field, bad", [("to", "0x" + "zz" * 20), ("input", "0xzz"), ("output", "0x+1")])
def test_an_inner_call_with_non_hex_text_is_refused_before_its_row_is_made(field, bad):
    """`_address` checks only the length and the 0x, `_data` only the 0x and an even length: an
    inner call (not compared with the transaction) passes check_against_block and settle, then
    index_traces._row's bytes.fromhex raises ValueError while the window's COPY is open."""
    answer = copy.deepcopy(CALL_TRACER)
    answer[0]["result"]["calls"][0][field] = bad
    block = stored_block()
    try:
        rows = traces.from_call_tracer(7, answer)
        traces.check_against_block(7, rows, block.as_block(), block.receipts)
        traces.settle(rows, block.receipts, "gasUsed")
    except ChainDataError:
        return  # refused by name: what the review asks for
    for position, t in enumerate(rows):
        index_traces._row(t, position, block)  # ValueError today


def test_a_trace_block_call_type_that_is_a_list_is_refused():
    """A callType of [] goes through str(): "[]" is refused by name, as it should be (sound)."""
    answer = copy.deepcopy(TRACE_BLOCK)
    answer[0]["action"]["callType"] = []
    with pytest.raises(ChainDataError):
        traces.from_trace_block(7, answer)
