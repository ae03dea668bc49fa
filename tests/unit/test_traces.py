"""`indexer.chaindata.traces`: both tracer families to one kind of row, and what a node may send wrong.
Small hand-made answers here, in the shapes anvil gives (see tests/test_traces.py for anvil's own
answers and the recorded ones of real chains)."""

from __future__ import annotations

import copy

import pytest

from indexer.base.errors import ChainDataError
from indexer.chaindata import traces

A, B, C = "0x" + "aa" * 20, "0x" + "bb" * 20, "0x" + "cc" * 20
TX = "0x" + "11" * 32
BLOCK_HASH = "0x" + "22" * 32

# One transaction: A calls B with 5 wei; B delegatecalls C, then calls C, which reverts (caught).
CALL_TRACER = [{"txHash": TX, "result": {
    "type": "CALL", "from": A, "to": B, "value": "0x5", "gas": "0x10000", "gasUsed": "0x6000", "input": "0x1234",
    "output": "0x", "calls": [
        {"type": "DELEGATECALL", "from": B, "to": C, "gas": "0x8000", "gasUsed": "0x100", "input": "0xab",
         "output": "0x01"},
        {"type": "CALL", "from": B, "to": C, "value": "0x0", "gas": "0x7000", "gasUsed": "0x200", "input": "0xcd",
         "output": "0x08c379a0", "error": "execution reverted", "revertReason": "no"},
    ]}}]
TRACE_BLOCK = [
    {"type": "call", "action": {"callType": "call", "from": A, "to": B, "value": "0x5", "gas": "0x10000",
                                "input": "0x1234"},
     "result": {"gasUsed": "0x4000", "output": "0x"}, "subtraces": 2, "traceAddress": [],
     "transactionHash": TX, "transactionPosition": 0, "blockNumber": 7, "blockHash": BLOCK_HASH},
    {"type": "call", "action": {"callType": "delegatecall", "from": B, "to": C, "value": "0x0", "gas": "0x8000",
                                "input": "0xab"},
     "result": {"gasUsed": "0x100", "output": "0x01"}, "subtraces": 0, "traceAddress": [0],
     "transactionHash": TX, "transactionPosition": 0, "blockNumber": 7, "blockHash": BLOCK_HASH},
    {"type": "call", "action": {"callType": "call", "from": B, "to": C, "value": "0x0", "gas": "0x7000",
                                "input": "0xcd"},
     "result": None, "error": "Reverted", "subtraces": 0, "traceAddress": [1],
     "transactionHash": TX, "transactionPosition": 0, "blockNumber": 7, "blockHash": BLOCK_HASH},
    {"type": "reward", "action": {"author": C, "value": "0x1bc16d674ec80000", "rewardType": "block"},
     "result": None, "subtraces": 0, "traceAddress": [], "transactionHash": None, "transactionPosition": None,
     "blockNumber": 7, "blockHash": BLOCK_HASH},
]
BLOCK = {"hash": BLOCK_HASH, "transactions": [{"hash": TX, "from": A, "to": B, "value": "0x5", "input": "0x1234"}]}
RECEIPTS = [{"contractAddress": None}]


def shape(t: traces.Trace) -> tuple:
    """What both families must agree on."""
    return (t.transaction_index, t.trace_address, t.type, t.from_address, t.to_address, t.value, t.input,
            t.output if not t.failed else None, t.failed, t.subtraces)


def test_both_families_give_the_same_calls_in_the_same_order():
    geth = traces.from_call_tracer(7, CALL_TRACER)
    parity = traces.from_trace_block(7, TRACE_BLOCK)
    assert [shape(t) for t in geth] == [shape(t) for t in parity if t.type != "REWARD"]
    assert [t.trace_address for t in geth] == [(), (0,), (1,)]
    assert [t.type for t in geth] == ["CALL", "DELEGATECALL", "CALL"]
    assert (geth[2].error, geth[2].revert_reason, parity[2].error) == ("execution reverted", "no", "Reverted")
    reward = parity[3]
    assert (reward.type, reward.transaction_index, reward.to_address, reward.value) == ("REWARD", None, C, 2 * 10**18)
    for found in (geth, parity):
        traces.check_against_block(7, found, BLOCK, RECEIPTS)


def test_keys_not_in_a_column_are_kept():
    answer = copy.deepcopy(CALL_TRACER)
    answer[0]["result"]["calls"][0]["logs"] = [{"address": C, "topics": [], "data": "0x"}]
    assert traces.from_call_tracer(7, answer)[1].extra == {"logs": [{"address": C, "topics": [], "data": "0x"}]}
    answer = copy.deepcopy(TRACE_BLOCK)
    answer[0]["action"]["creationMethod_"] = "x"
    answer[0]["result"]["gasRefund"] = "0x1"
    assert traces.from_trace_block(7, answer)[0].extra == {"action.creationMethod_": "x", "result.gasRefund": "0x1"}


@pytest.mark.parametrize("break_it, says", [
    (lambda a: a[0]["result"].update(value="0xzz"), "value is '0xzz', not a hex number"),
    (lambda a: a[0]["result"].update(to="0x12"), "to is '0x12', not an address"),
    (lambda a: a[0]["result"].update(input="0x123"), "input is '0x123', not hex data"),
    (lambda a: a[0]["result"].update(type="JUMP"), "unknown type 'JUMP'"),
    (lambda a: a[0]["result"].update(calls={"a": 1}), "calls that are not a list"),
    (lambda a: a[0]["result"]["calls"].append(7), "call [2] is not a call frame"),
    (lambda a: a.append("x"), "item 1 is not an object"),
])
def test_a_malformed_call_tracer_answer_is_refused_with_what_is_wrong(break_it, says):
    answer = copy.deepcopy(CALL_TRACER)
    break_it(answer)
    with pytest.raises(ChainDataError, match=f"^block 7: .*{says.replace('[', '.').replace(']', '.')}"):
        traces.from_call_tracer(7, answer)


@pytest.mark.parametrize("break_it, says", [
    (lambda a: a[1].update(traceAddress=[-1]), "traceAddress [-1]"),
    (lambda a: a[1].update(blockNumber=8), "is of block 8"),
    (lambda a: a[1].update(subtraces="2"), "subtraces '2'"),
    (lambda a: a[1].update(transactionPosition="0"), "transactionPosition '0'"),
    (lambda a: a[1].update(type="jump"), "unknown type 'jump'"),
    (lambda a: a[1]["action"].update(callType="jump"), "unknown call type 'JUMP'"),
])
def test_a_malformed_trace_block_answer_is_refused_with_what_is_wrong(break_it, says):
    answer = copy.deepcopy(TRACE_BLOCK)
    break_it(answer)
    with pytest.raises(ChainDataError, match=f"^block 7: .*{says.replace('[', '.').replace(']', '.')}"):
        traces.from_trace_block(7, answer)


def test_traces_that_do_not_describe_the_block_are_refused():
    other = copy.deepcopy(TRACE_BLOCK)
    other[0]["blockHash"] = "0x" + "33" * 32
    with pytest.raises(ChainDataError, match="a trace names block 0x3333"):
        traces.check_against_block(7, traces.from_trace_block(7, other), BLOCK, RECEIPTS)
    other = copy.deepcopy(CALL_TRACER)
    other[0]["txHash"] = "0x" + "44" * 32
    with pytest.raises(ChainDataError, match="the trace of transaction 0 names 0x4444"):
        traces.check_against_block(7, traces.from_call_tracer(7, other), BLOCK, RECEIPTS)
    other = copy.deepcopy(CALL_TRACER)
    other[0]["result"]["value"] = "0x6"
    with pytest.raises(ChainDataError, match="transaction 0's top-level call has value 6, the transaction 5"):
        traces.check_against_block(7, traces.from_call_tracer(7, other), BLOCK, RECEIPTS)
    dropped = [t for t in traces.from_trace_block(7, TRACE_BLOCK) if t.trace_address != (1,)]  # a subcall dropped
    with pytest.raises(ChainDataError, match=r"call \[\] says it made 2 call\(s\); 1 found"):
        traces.check_against_block(7, dropped, BLOCK, RECEIPTS)
    with pytest.raises(ChainDataError, match=r"top-level calls for transactions \[\], the block 1 transaction"):
        traces.check_against_block(7, [], BLOCK, RECEIPTS)


@pytest.mark.parametrize("break_it, says", [
    (lambda a: a[0]["result"].update(value="0x1" + "0" * 64), "value is '0x1" + "0" * 64 + "', not a hex number"),
    (lambda a: a[0]["result"].update(gas=hex(2**63)), "gas is 0x8" + "0" * 15 + ", more than a gas can be"),
    (lambda a: a[0]["result"].update(gas="0x" + "f" * 100), "gas is '0xfff"),
    (lambda a: a[0]["result"].update(error="out\x00of gas"), "error is 'out\\\\x00of gas', not text"),
    (lambda a: a[0]["result"].update(error=7), "error is '7', not text"),
    (lambda a: a[0]["result"].update(note="a\x00b"), "a NUL character, which jsonb cannot store"),
    (lambda a: a[0].update(txHash=["0x1"]), r"txHash is \"\['0x1'\]\", not text"),
])
def test_values_no_column_can_hold_are_refused_by_name(break_it, says):
    answer = copy.deepcopy(CALL_TRACER)
    break_it(answer)
    with pytest.raises(ChainDataError, match=f"^block 7: .*{says}"):
        traces.from_call_tracer(7, answer)


def test_a_number_past_64_bits_a_node_adds_is_kept_exactly():
    """jsonb holds any integer, and the client reads one past 64 bits exactly (msgspec): a trace
    keeps it in `extra` as it came, not refused and not a float."""
    answer = copy.deepcopy(CALL_TRACER)
    answer[0]["result"]["l2Fee"] = 2**70 + 1
    (top, *_) = traces.from_call_tracer(7, answer)
    assert top.extra["l2Fee"] == 2**70 + 1 and type(top.extra["l2Fee"]) is int


def test_a_call_tree_deeper_than_the_evm_allows_is_refused_without_a_recursion_error():
    frame = {"type": "CALL", "from": A, "to": B, "value": "0x0", "input": "0x"}
    top = frame
    for _ in range(traces.MAX_DEPTH + 1):
        child = dict(frame)
        frame["calls"] = [child]
        frame = child
    with pytest.raises(ChainDataError, match="nest deeper than the EVM allows"):
        traces.from_call_tracer(7, [{"txHash": TX, "result": top}])
    deep = copy.deepcopy(TRACE_BLOCK)
    deep[1]["traceAddress"] = [0] * traces.MAX_DEPTH
    with pytest.raises(ChainDataError, match="has the traceAddress"):
        traces.from_trace_block(7, deep)


def test_calls_below_a_failed_call_are_reverted_though_no_tracer_says_so():
    answer = copy.deepcopy(CALL_TRACER)
    answer[0]["result"]["calls"][1]["calls"] = [{"type": "CALL", "from": C, "to": A, "value": "0x1", "input": "0x"}]
    found = traces.from_call_tracer(7, answer)
    assert [(t.trace_address, t.failed, t.reverted) for t in found] == [
        ((), False, False), ((0,), False, False), ((1,), True, True), ((1, 0), False, True)]


def test_a_top_level_call_must_fail_exactly_when_its_receipt_says_so():
    found = traces.from_call_tracer(7, CALL_TRACER)
    traces.check_against_block(7, found, BLOCK, [{"contractAddress": None, "status": "0x1"}])
    with pytest.raises(ChainDataError, match="top-level call succeeded, its receipt says the opposite"):
        traces.check_against_block(7, found, BLOCK, [{"contractAddress": None, "status": "0x0"}])


def test_a_log_with_no_call_of_its_account_left_in_the_tree_is_a_call_missing():
    found = traces.from_call_tracer(7, CALL_TRACER)
    # C ran code in B's account by DELEGATECALL: B's log has its call; C's call reverted, so a log of C cannot be.
    traces.check_against_block(7, found, BLOCK, [{"contractAddress": None, "logs": [{"address": B}]}])
    with pytest.raises(ChainDataError, match=f"transaction 0 has a log of {C}.*a call is missing"):
        traces.check_against_block(7, found, BLOCK, [{"contractAddress": None, "logs": [{"address": C}]}])


def test_the_top_level_gas_used_is_the_receipt_s_and_the_tracer_s_is_kept():
    geth, parity = traces.from_call_tracer(7, CALL_TRACER), traces.from_trace_block(7, TRACE_BLOCK)
    receipts = [{"gasUsed": "0x5208"}]
    traces.settle(geth, receipts, "gasUsed")
    traces.settle(parity, receipts, "result.gasUsed")
    assert geth[0].gas_used == parity[0].gas_used == 0x5208
    assert (geth[0].extra, parity[0].extra) == ({"gasUsed": "0x6000"}, {"result.gasUsed": "0x4000"})
    assert geth[1].gas_used == 0x100 and "gasUsed" not in geth[1].extra  # inner calls keep the tracer's


def test_calls_out_of_place_are_refused_before_anything_reads_them():
    """A call of a transaction the block does not have, a call whose caller is not traced, or
    one traced twice: each would be a row of no transaction, or a tree that is not one."""
    def parity(change) -> list[traces.Trace]:
        answer = copy.deepcopy(TRACE_BLOCK)
        change(answer)
        return traces.from_trace_block(7, answer)

    for change, says in [
        (lambda a: a[1].update(transactionPosition=5), "a trace names transaction 5, the block has 1"),
        (lambda a: a[1].update(traceAddress=[4, 0]), r"call \[4, 0\] comes before the call that made it"),
        (lambda a: a.insert(2, copy.deepcopy(a[1])), r"call \[0\] is traced twice"),
    ]:
        with pytest.raises(ChainDataError, match=f"^block 7: .*{says}"):
            traces.check_against_block(7, parity(change), BLOCK, RECEIPTS)


def test_the_logs_a_client_adds_itself_need_no_call_polygon_s_fee_log():
    """A plain transfer on Polygon PoS: one frame, A to B, and a receipt with Bor's LogFeeTransfer
    at 0x...1010, which Bor adds itself, with no code run there. Any other account with no call
    is still a call missing."""
    answer = [{"txHash": TX, "result": {"type": "CALL", "from": A, "to": B, "value": "0x5", "gas": "0x0",
                                        "gasUsed": "0x5208", "input": "0x1234"}}]
    found = traces.from_call_tracer(7, answer)
    fee = {"address": "0x0000000000000000000000000000000000001010"}
    traces.check_against_block(7, found, BLOCK, [{"contractAddress": None, "status": "0x1", "logs": [fee]}])
    with pytest.raises(ChainDataError, match="a call is missing"):
        traces.check_against_block(7, found, BLOCK, [{"contractAddress": None, "logs": [fee, {"address": C}]}])
