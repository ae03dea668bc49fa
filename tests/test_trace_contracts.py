"""The traces chain (indexer/testing/trace_contracts.py) on a real anvil, traced block by block by
both tracer families: geth's `debug_traceBlockByNumber(n, {"tracer": "callTracer"})` and
parity's `trace_block(n)`. The checks are those a user makes of a trace, plus the
normaliser (`indexer.chaindata.traces`), under which both families give the same rows.

What the two families answer on anvil 1.7.1, seen on this chain (and asserted below):

Shape
- callTracer: one {"txHash", "result"} per transaction, in block order; `result` is the top
  frame, children nested in `calls` (absent when none), in execution order. No position, no
  depth: both come from walking the tree.
- trace_block: one flat list for the block, each entry with blockHash, blockNumber,
  transactionHash, transactionPosition, `traceAddress` (the path of child indexes from the top
  frame, [] for the top) and `subtraces` (its number of children); in depth-first pre-order,
  i.e. the order of a walk of the callTracer tree. Same number of entries per transaction as
  callTracer frames, SELFDESTRUCT and precompile calls included in both.
- Addresses are lower case in both; quantities are hex strings in both ("0x0", not "0x").

Calls
- callTracer `type` is CALL / DELEGATECALL / STATICCALL (upper case); trace_block has type "call"
  and `action.callType` "call" / "delegatecall" / "staticcall".
- STATICCALL: callTracer omits `value`; trace_block gives value "0x0".
- DELEGATECALL: both give the value of the calling frame (msg.value, kept by DELEGATECALL; 7 wei
  in `deep`): no ETH moves, so the normaliser must not count it as a transfer.
- Calls to a precompile (sha256 at 0x02, by STATICCALL) are traced by both.
- Empty output: callTracer omits `output` (a call to a receive() or an EOA, a function returning
  nothing); trace_block gives result.output "0x". callTracer's `input` is always there ("0x").

Creations
- callTracer: type CREATE / CREATE2, `to` = the new address, `input` = the init code, `output`
  = the deployed code; `value` present ("0x0" when none). The top frame of a creation
  transaction is a CREATE with `to` = receipt.contractAddress (the transaction's own `to` is
  null).
- trace_block: type "create" for both opcodes, told apart by `action.creationMethod` "create" /
  "create2"; `action.init` = init code, no `action.to`: the address is `result.address`, the
  code `result.code`.

SELFDESTRUCT
- callTracer: a child frame of the frame that ran the opcode, type SELFDESTRUCT, from = the
  destroyed contract, to = the beneficiary, value = the balance sent, gas "0x0", gasUsed "0x0",
  input "0x", no output.
- trace_block: type "suicide", action {address (the contract), refundAddress (beneficiary),
  balance}, `result` null, no gas at all, subtraces 0, its own traceAddress (a child, like
  callTracer).
- Post-Cancun (EIP-6780) both families show exactly the same thing whether the contract was
  created in the same transaction (really destroyed: eth_getCode is empty afterwards) or earlier
  (only the balance moves, the code stays). Traces cannot tell the two apart; the state can.

Reverts
- A reverted frame: callTracer sets error "execution reverted", keeps `output` (the revert
  data) and adds `revertReason` (decoded) only for Error(string); a custom error (Nope(7)) has
  no revertReason, only its ABI-encoded output. trace_block sets error "Reverted" on the entry
  (beside action, not in result) and still gives `result` {gasUsed, output = the revert data};
  it never decodes a reason.
- A failed transaction (receipt status 0): its top frame carries the error in both, with
  revertReason "boom" in callTracer. Frames under a reverted frame that themselves succeeded
  (the 1 wei CALL in `failed`) carry no error in either family, although their effects were
  undone: the normaliser must propagate "reverted" down from an ancestor itself.

Gas
- `gas` (gas given to the frame) is the same number in both, for every frame; for the top frame
  it is the transaction's gas limit minus the intrinsic gas.
- gasUsed of inner frames is the same number in both.
- gasUsed of the top frame differs, and neither is the receipt's gasUsed:
  trace_block gives the execution gas only: receipt.gasUsed - intrinsic gas (0 for a plain
  transfer) before refunds, i.e. receipt.gasUsed + refund - intrinsic (`refund` checks it);
  callTracer (debug_traceBlockByNumber and debug_traceTransaction alike) gives
  receipt.cumulativeGasUsed, the block's gas used up to and including the transaction: an anvil
  bug (foundry-rs/foundry#15893, fixed by #15901 after 1.7.1; geth, and a fixed anvil, give the
  transaction's own receipt.gasUsed, intrinsic gas and refund included). Equal for a block's
  first transaction only. The normaliser should take the transaction's gas used from its
  receipt, not from either trace.

Blocks
- The traces of a block list its transactions in block order in both, callTracer as an array
  index, trace_block as transactionPosition.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from indexer.chaindata import traces
from indexer.testing.anvil import Anvil
from indexer.testing.trace_contracts import (BOOM_REASON, CUSTOM_ERROR_CODE, NOPE_SELECTOR, REVERT_REASON,
                                             TraceChain, build_trace_chain)


class Traced:
    def __init__(self, node: Anvil, chain: TraceChain) -> None:
        self.chain = chain
        self.geth: dict[str, dict[str, Any]] = {}  # tx hash: top frame
        self.parity: dict[str, list[dict[str, Any]]] = {}  # tx hash: entries, as given
        self.txs: dict[str, dict[str, Any]] = {}
        self.receipts: dict[str, dict[str, Any]] = {}
        self.block_order: dict[int, tuple[list[str], list[str], list[str]]] = {}
        self.geth_answers: dict[int, Any] = {}  # block: the answers, whole
        self.parity_answers: dict[int, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        for n in chain.blocks:
            geth, parity = node.batch([("debug_traceBlockByNumber", [hex(n), {"tracer": "callTracer"}]),
                                       ("trace_block", [hex(n)])])
            self.geth_answers[n], self.parity_answers[n] = geth, parity
            for answer in geth:
                self.geth[answer["txHash"]] = answer["result"]
            for entry in parity:
                assert entry["blockNumber"] == n
                self.parity.setdefault(entry["transactionHash"], []).append(entry)
            block = self.blocks[n] = node.rpc("eth_getBlockByNumber", hex(n), True)
            positions = {e["transactionHash"]: e["transactionPosition"] for e in parity}
            self.block_order[n] = ([t["hash"] for t in block["transactions"]], [a["txHash"] for a in geth],
                                   sorted(positions, key=positions.__getitem__))
            for t in block["transactions"]:
                self.txs[t["hash"]] = t
                self.receipts[t["hash"]] = node.rpc("eth_getTransactionReceipt", t["hash"])
        self.code = {name: node.rpc("eth_getCode", address, "latest") for name, address in chain.addresses.items()}
        self.balance = {name: int(node.rpc("eth_getBalance", address, "latest"), 16)
                        for name, address in chain.addresses.items()}

    def of(self, kind: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        tx = self.chain.tx(kind)
        return self.geth[tx.hash], self.parity[tx.hash]


@pytest.fixture(scope="module")
def traced() -> Iterator[Traced]:
    with Anvil() as node:
        yield Traced(node, build_trace_chain(node))


def walk(frame: dict[str, Any], path: tuple[int, ...] = ()) -> Iterator[tuple[tuple[int, ...], dict[str, Any]]]:
    """callTracer frames in depth-first pre-order, with their trace address."""
    yield path, frame
    for i, child in enumerate(frame.get("calls", [])):
        yield from walk(child, path + (i,))


def intrinsic_gas(tx: dict[str, Any]) -> int:
    data = bytes.fromhex(tx["input"][2:])
    gas = 21_000 + sum(16 if b else 4 for b in data)
    if tx["to"] is None:
        gas += 32_000 + 2 * ((len(data) + 31) // 32)  # EIP-3860: per word of init code
    return gas


def test_blocks_hold_several_transactions_in_the_same_order_in_both_families(traced: Traced) -> None:
    chain = traced.chain
    assert len(chain.blocks) == 5 and chain.blocks == sorted(chain.blocks)
    assert sum(len(chain.in_block(n)) > 1 for n in chain.blocks) >= 3
    assert len({t.kind for t in chain.txs}) == len(chain.txs)
    for n in chain.blocks:
        in_block, geth, parity = traced.block_order[n]
        assert in_block == geth == parity == [t.hash for t in chain.in_block(n)]
    for t in chain.txs:
        assert int(traced.receipts[t.hash]["status"], 16) == t.ok, t.kind


def test_top_level_call_is_the_transaction(traced: Traced) -> None:
    for t in traced.chain.txs:
        tx, receipt = traced.txs[t.hash], traced.receipts[t.hash]
        top, entries = traced.geth[t.hash], traced.parity[t.hash]
        first = entries[0]
        assert first["traceAddress"] == [] and all(e["traceAddress"] for e in entries[1:]), t.kind
        assert top["from"] == first["action"]["from"] == tx["from"]
        assert int(top["value"], 16) == int(first["action"]["value"], 16) == int(tx["value"], 16)
        assert top["input"] == tx["input"]
        if tx["to"] is None:
            assert top["type"] == "CREATE" and top["to"] == receipt["contractAddress"], t.kind
            assert first["type"] == "create" and first["action"]["creationMethod"] == "create"
            assert first["action"]["init"] == tx["input"] and first["result"]["address"] == receipt["contractAddress"]
        else:
            assert top["type"] == "CALL" and top["to"] == tx["to"], t.kind
            assert first["type"] == "call" and first["action"]["callType"] == "call"
            assert first["action"]["to"] == tx["to"] and first["action"]["input"] == tx["input"]
        # The gas given to the top frame: the limit less the intrinsic gas, in both.
        assert int(top["gas"], 16) == int(first["action"]["gas"], 16) == int(tx["gas"], 16) - intrinsic_gas(tx)


def test_every_kind_of_call_appears(traced: Traced) -> None:
    geth_types = {f["type"] for top in traced.geth.values() for _, f in walk(top)}
    assert geth_types == {"CALL", "DELEGATECALL", "STATICCALL", "CREATE", "CREATE2", "SELFDESTRUCT"}
    parity_types = {(e["type"], e["action"].get("callType") or e["action"].get("creationMethod"))
                    for entries in traced.parity.values() for e in entries}
    assert parity_types == {("call", "call"), ("call", "delegatecall"), ("call", "staticcall"),
                            ("create", "create"), ("create", "create2"), ("suicide", None)}
    expected = {
        "transfer": ["CALL"],
        "create_hub": ["CREATE", "CREATE", "CREATE"],
        "create_plain": ["CREATE"],
        "forward": ["CALL", "CALL", "CALL"],
        "delegate": ["CALL", "DELEGATECALL"],
        "look": ["CALL", "STATICCALL"],
        "precompile": ["CALL", "STATICCALL"],
        "create": ["CALL", "CREATE"],
        "create2": ["CALL", "CREATE2"],
        "selfdestruct_same_tx": ["CALL", "CREATE", "CALL", "SELFDESTRUCT"],
        "selfdestruct_later": ["CALL", "CALL", "SELFDESTRUCT"],
        "try_catch": ["CALL", "CALL", "CALL"],
        "failed": ["CALL", "CALL"],
        "deep": ["CALL"] * 5 + ["STATICCALL", "DELEGATECALL"],
        "refund": ["CALL", "DELEGATECALL"],
    }
    assert {t.kind: [f["type"] for _, f in walk(traced.geth[t.hash])] for t in traced.chain.txs} == expected
    a = traced.chain.addresses
    create, create2 = traced.of("create")[0]["calls"][0], traced.of("create2")[0]["calls"][0]
    assert create["to"] == a["child"].lower() and create2["to"] == a["child2"].lower()
    assert traced.of("precompile")[0]["calls"][0]["to"] == "0x" + "00" * 19 + "02"


def test_value_moves_by_internal_calls(traced: Traced) -> None:
    a, eoa = traced.chain.addresses, traced.chain.accounts[8].lower()
    top, _ = traced.of("forward")
    to_eoa, to_sink = top["calls"]
    assert (to_eoa["to"], int(to_eoa["value"], 16), "output" in to_eoa) == (eoa, 10**18, False)
    assert (to_sink["to"], int(to_sink["value"], 16)) == (a["sink"].lower(), 10**18)
    # DELEGATECALL shows the caller's msg.value in both families, though no ETH moves.
    geth, parity = traced.of("deep")
    delegate = [f for _, f in walk(geth) if f["type"] == "DELEGATECALL"][0]
    assert int(delegate["value"], 16) == 7
    assert [int(e["action"]["value"], 16) for e in parity if e["action"].get("callType") == "delegatecall"] == [7]


def test_nesting_is_deep(traced: Traced) -> None:
    geth, parity = traced.of("deep")
    assert max(len(path) for path, _ in walk(geth)) == 4  # five frames down, counting the top
    assert max(len(e["traceAddress"]) for e in parity) == 4
    assert [e["traceAddress"] for e in parity][-3:] == [[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2]]


def test_selfdestruct_looks_the_same_whether_it_destroys_or_not(traced: Traced) -> None:
    """EIP-6780: destroyed only when created in the same transaction; the traces are alike."""
    beneficiary = traced.chain.accounts[7].lower()
    for kind, child, balance in [("selfdestruct_same_tx", "doomed", 125 * 10**15),
                                 ("selfdestruct_later", "child", 5 * 10**17)]:
        geth, parity = traced.of(kind)
        [frame] = [f for _, f in walk(geth) if f["type"] == "SELFDESTRUCT"]
        assert frame == {"from": traced.chain.addresses[child].lower(), "to": beneficiary, "value": hex(balance),
                         "gas": "0x0", "gasUsed": "0x0", "input": "0x", "type": "SELFDESTRUCT"}
        [entry] = [e for e in parity if e["type"] == "suicide"]
        assert entry["action"] == {"address": frame["from"], "refundAddress": beneficiary, "balance": hex(balance)}
        assert entry["result"] is None and entry["subtraces"] == 0
    assert traced.code["doomed"] == "0x"  # really destroyed
    assert traced.code["child"] != "0x" and traced.balance["child"] == 0  # only emptied


def test_caught_reverts_keep_their_error_and_reason(traced: Traced) -> None:
    geth, parity = traced.of("try_catch")
    assert "error" not in geth and "error" not in parity[0]
    reason, custom = geth["calls"]
    assert (reason["type"], reason["error"], reason["revertReason"]) == ("CALL", "execution reverted", REVERT_REASON)
    assert reason["output"].startswith("0x08c379a0")  # Error(string)
    assert custom["error"] == "execution reverted" and "revertReason" not in custom
    assert custom["output"] == NOPE_SELECTOR + f"{CUSTOM_ERROR_CODE:064x}"
    for entry, frame in zip(parity[1:], (reason, custom)):
        assert entry["error"] == "Reverted" and "revertReason" not in entry
        assert entry["result"]["output"] == frame["output"]
        assert entry["result"]["gasUsed"] == frame["gasUsed"]
    assert bytes.fromhex(reason["output"][2 + 8 + 128:]).rstrip(b"\0").decode() == REVERT_REASON


def test_failed_transaction(traced: Traced) -> None:
    geth, parity = traced.of("failed")
    assert int(traced.receipts[traced.chain.tx("failed").hash]["status"], 16) == 0
    assert (geth["error"], geth["revertReason"]) == ("execution reverted", BOOM_REASON)
    assert parity[0]["error"] == "Reverted" and parity[0]["result"]["output"] == geth["output"]
    # The inner call succeeded before the top frame reverted: no error on it, in either family.
    [inner] = geth["calls"]
    assert "error" not in inner and int(inner["value"], 16) == 1
    assert "error" not in parity[1]


def test_both_families_give_the_same_rows(traced: Traced) -> None:
    """`indexer.chaindata.traces` maps both families to rows with the same place in the tree, type, from,
    to, value, input, output, gas (but a SELFDESTRUCT's, which only callTracer gives), gas used
    of inner calls, failure and subtraces; the rows of both pass the checks against the block."""
    def same(t: traces.Trace) -> tuple:
        gas = None if t.type == "SELFDESTRUCT" else t.gas
        used = t.gas_used if t.trace_address and t.type != "SELFDESTRUCT" else None
        return (t.transaction_index, t.trace_address, t.type, t.from_address, t.to_address, t.value, t.input,
                t.output, gas, used, t.failed, t.subtraces)

    for n in traced.chain.blocks:
        geth = traces.from_call_tracer(n, traced.geth_answers[n])
        parity = traces.from_trace_block(n, traced.parity_answers[n])
        assert [same(t) for t in geth] == [same(t) for t in parity], n
        assert len(geth) == sum(len(traced.parity[t.hash]) for t in traced.chain.in_block(n)), n
        block, receipts = traced.blocks[n], [traced.receipts[tx["hash"]] for tx in traced.blocks[n]["transactions"]]
        traces.check_against_block(n, geth, block, receipts)
        traces.check_against_block(n, parity, block, receipts)


def test_top_frame_gas_used_differs(traced: Traced) -> None:
    """trace_block's top-level gasUsed is the execution gas before refunds; callTracer's is the
    block's cumulative gas on anvil up to 1.7.1 (foundry-rs/foundry#15893), the receipt's
    gasUsed on geth and on a fixed anvil: either is accepted, and on this chain the two differ
    for every transaction but a block's first."""
    for t in traced.chain.txs:
        tx, receipt = traced.txs[t.hash], traced.receipts[t.hash]
        used, cumulative = int(receipt["gasUsed"], 16), int(receipt["cumulativeGasUsed"], 16)
        refund = 4_800 if t.kind == "refund" else 0  # clearing a storage slot (EIP-3529)
        assert int(traced.parity[t.hash][0]["result"]["gasUsed"], 16) == used + refund - intrinsic_gas(tx), t.kind
        assert int(traced.geth[t.hash]["gasUsed"], 16) in (cumulative, used), t.kind
