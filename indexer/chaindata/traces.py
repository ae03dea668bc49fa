"""The calls inside a block's transactions, from either tracer family, as one kind of row.

Nodes trace in two families, and a trace row must not depend on which one answered:
- go-ethereum's `callTracer` (`debug_traceBlockByNumber(n, {"tracer": "callTracer"})`: go-ethereum,
  reth, nethermind, anvil) gives each transaction's call tree, frames nested in `calls`;
- parity's `trace_block(n)` (erigon, reth, nethermind, anvil) gives a flat list in which each
  trace names its place in the tree (`traceAddress`), plus the block's rewards on chains that
  have them.

`from_call_tracer` and `from_trace_block` turn each into `Trace`s, in the same order (by
transaction, then depth first), with the same place (`trace_address`), type, addresses, value,
input and output, and whether the call failed. What the families say differently stays theirs:
the error's words (`execution reverted` / `Reverted`); gas, which `trace_block` gives net
of a transaction's intrinsic gas at the top level and `callTracer` gross; and a CALLCODE's `to`,
which `callTracer` gives as the address of the code run and `trace_block` as the caller's own
(whose storage it runs on), so that the code's address is not in its answer at all. Every key of either
family not in a column is kept in `extra`, verbatim, as for the other tables.

`check_against_block` holds the rows to the block they describe before anything is written: one
top-level call per transaction, from the transaction's sender, to its recipient (or creating the
receipt's contract), with its value and input, failed exactly when its receipt says it failed;
every call's count of subcalls equal to the calls found below it. `settle` then gives the rows
what neither family says alike: the top-level call's gas used is the receipt's (the tracer's own
figure is kept in `extra`), and `reverted` marks each call that failed or sits inside one that
did (callTracer marks only the frame that failed: the calls below it succeeded, then were undone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..base.errors import ChainDataError
from .rows import jsonb_text

CALL_TYPES = ("CALL", "DELEGATECALL", "STATICCALL", "CALLCODE", "CREATE", "CREATE2", "SELFDESTRUCT", "REWARD")

# callTracer frame keys held in columns (or in the tree's shape: `calls`).
_FRAME_KNOWN = frozenset({"type", "from", "to", "value", "gas", "gasUsed", "input", "output", "error", "revertReason",
                          "calls"})
# trace_block: the keys of a trace, of its action and of its result held in columns.
_TRACE_KNOWN = frozenset({"type", "action", "result", "error", "traceAddress", "subtraces", "transactionPosition",
                          "transactionHash", "blockNumber", "blockHash"})
_ACTION_KNOWN = {
    "call": frozenset({"callType", "from", "to", "value", "gas", "input"}),
    "create": frozenset({"from", "value", "gas", "init", "creationMethod"}),
    "suicide": frozenset({"address", "refundAddress", "balance"}),
    "selfdestruct": frozenset({"address", "refundAddress", "balance"}),
    "reward": frozenset({"author", "value"}),  # rewardType ("block", "uncle") is kept in extra
}
_RESULT_KNOWN = {"call": frozenset({"gasUsed", "output"}), "create": frozenset({"gasUsed", "address", "code"})}

# Bounds of what a column holds, so that a hostile answer is refused here, by name, rather than
# by the database: numeric(78,0) for value, bigint for gas, integer for positions. The EVM's call
# depth is at most 1024, so no path is longer.
MAX_VALUE = 2**256 - 1
MAX_GAS = 2**63 - 1
MAX_INT = 2**31 - 1
MAX_DEPTH = 1025
_HEX = re.compile(r"0x[0-9a-fA-F]*")

# Accounts whose logs a client adds to receipts itself, with no call running there: Polygon PoS's
# Bor logs each transaction's fee (LogFeeTransfer) and a plain transfer of the native token
# (LogTransfer) at its MATIC/POL contract. The log check does not look for a call of theirs.
SYSTEM_LOG_ADDRESSES = frozenset({"0x0000000000000000000000000000000000001010"})


@dataclass
class Trace:
    block_number: int
    transaction_index: int | None  # None for a block's reward
    trace_address: tuple[int, ...]  # the path from the transaction's top-level call: () is that call
    type: str  # one of CALL_TYPES
    from_address: str | None
    to_address: str | None  # for a CREATE, the contract created (None when the creation failed)
    value: int | None
    gas: int | None
    gas_used: int | None
    input: str | None
    output: str | None
    error: str | None
    revert_reason: str | None
    subtraces: int
    extra: dict[str, Any] = field(default_factory=dict)
    reverted: bool = False  # this call or one it is inside failed (`settle`)
    # What the tracer says the call belongs to, checked against the block, not stored.
    transaction_hash: str | None = None
    block_hash: str | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None


def _quantity(value: Any, what: str, number: int, most: int = MAX_GAS) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value[:2] in ("0x", "0X") and len(value) <= 66:
        try:
            n = int(value, 16)
        except ValueError:
            pass
        else:
            if n <= most:
                return n
            raise ChainDataError(f"block {number}: a trace's {what} is {value}, more than a {what} can be")
    raise ChainDataError(f"block {number}: a trace's {what} is {str(value)[:80]!r}, not a hex number")


def _text(value: Any, what: str, number: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or "\x00" in value:
        raise ChainDataError(f"block {number}: a trace's {what} is {str(value)[:80]!r}, not text")
    return value


def _address(value: Any, what: str, number: int) -> str | None:
    if value is None:
        return None
    if not (isinstance(value, str) and len(value) == 42 and _HEX.fullmatch(value)):
        raise ChainDataError(f"block {number}: a trace's {what} is {str(value)[:80]!r}, not an address")
    return value.lower()


def _data(value: Any, what: str, number: int) -> str | None:
    if value is None:
        return None
    if not (isinstance(value, str) and len(value) % 2 == 0 and _HEX.fullmatch(value)):
        raise ChainDataError(f"block {number}: a trace's {what} is {str(value)[:80]!r}, not hex data")
    return value.lower()


def _extra(item: dict[str, Any], known: frozenset[str], prefix: str = "") -> dict[str, Any]:
    return {prefix + k: v for k, v in item.items() if k not in known}


def _storable(number: int, extra: dict[str, Any]) -> dict[str, Any]:
    """`extra`, if jsonb can hold it (`rows.jsonb_text`)."""
    if extra:
        try:
            jsonb_text(extra)
        except ChainDataError as exc:
            raise ChainDataError(f"block {number}: in a trace's extra, {exc}") from None
    return extra


def from_call_tracer(number: int, answer: Any) -> list[Trace]:
    """`debug_traceBlockByNumber` with `callTracer`: a list, one item per transaction, each
    `{"txHash": ..., "result": frame}` (go-ethereum, reth) or the frame itself (older nodes)."""
    if not isinstance(answer, list):
        raise ChainDataError(f"block {number}: the call tracer answered {type(answer).__name__}, not a list")
    traces: list[Trace] = []
    for index, item in enumerate(answer):
        if not isinstance(item, dict):
            raise ChainDataError(f"block {number}: the call tracer's item {index} is not an object")
        if "result" not in item and "type" not in item:  # {"txHash", "error"}: no trace of this transaction
            raise ChainDataError(f"block {number}: the call tracer could not trace transaction {index}: "
                                 f"{str(item.get('error', 'no result, no error'))[:200]}")
        start = len(traces)
        _walk(number, index, (), item["result"] if "result" in item else item, traces)
        traces[start].transaction_hash = _text(item.get("txHash"), "txHash", number)
    _mark_reverted(traces)
    return traces


def _walk(number: int, index: int, path: tuple[int, ...], top: Any, out: list[Trace]) -> None:
    """The frames of one tree, depth first, without recursion: a tree may be 1,024 calls deep."""
    stack = [(path, top)]
    while stack:
        path, frame = stack.pop()
        calls = _frame(number, index, path, frame, out)
        stack.extend(((*path, position), call) for position, call in reversed(list(enumerate(calls))))


def _frame(number: int, index: int, path: tuple[int, ...], frame: Any, out: list[Trace]) -> list[Any]:
    """One frame as a Trace, appended to `out`; returns the calls it made."""
    if len(path) >= MAX_DEPTH:
        raise ChainDataError(f"block {number}: transaction {index}'s calls nest deeper than the EVM allows")
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise ChainDataError(f"block {number}: transaction {index}'s call {list(path)} is not a call frame")
    kind = frame["type"].upper()
    if kind not in CALL_TYPES:
        raise ChainDataError(f"block {number}: transaction {index}'s call {list(path)} has the unknown type {kind!r}")
    calls = frame.get("calls") or []
    if not isinstance(calls, list):
        raise ChainDataError(f"block {number}: transaction {index}'s call {list(path)} has calls that are not a list")
    extra = _extra(frame, _FRAME_KNOWN)
    to = frame.get("to")
    if kind in ("CREATE", "CREATE2") and "error" in frame and to is not None:  # a failed creation created nothing
        extra["to"], to = to, None
    out.append(Trace(
        block_number=number, transaction_index=index, trace_address=path, type=kind,
        from_address=_address(frame.get("from"), "from", number),
        to_address=_address(to, "to", number),
        value=_quantity(frame.get("value", "0x0" if kind in ("DELEGATECALL", "STATICCALL") else None), "value", number,
                        MAX_VALUE),
        # A SELFDESTRUCT has no gas of its own (callTracer says 0 and 0, trace_block nothing): its
        # cost is its caller's.
        gas=None if kind == "SELFDESTRUCT" else _quantity(frame.get("gas"), "gas", number),
        gas_used=None if kind == "SELFDESTRUCT" else _quantity(frame.get("gasUsed"), "gasUsed", number),
        # A SELFDESTRUCT carries no data (callTracer says "0x", trace_block nothing); callTracer
        # leaves any other call's empty output out, where trace_block says "0x".
        input=None if kind == "SELFDESTRUCT" and frame.get("input") in (None, "0x") else
        _data(frame.get("input"), "input", number),
        output=None if kind == "SELFDESTRUCT" else
        _data(frame.get("output", None if "error" in frame else "0x"), "output", number),
        error=_text(frame.get("error"), "error", number),
        revert_reason=_text(frame.get("revertReason"), "revertReason", number), subtraces=len(calls),
        extra=_storable(number, extra),
    ))
    return calls


def from_trace_block(number: int, answer: Any) -> list[Trace]:
    """`trace_block`: a flat list of traces, each with its `traceAddress` and
    `transactionPosition` (None for a reward)."""
    if not isinstance(answer, list):
        raise ChainDataError(f"block {number}: trace_block answered {type(answer).__name__}, not a list")
    traces = []
    for position, item in enumerate(answer):
        if not isinstance(item, dict) or not isinstance(item.get("action"), dict):
            raise ChainDataError(f"block {number}: trace_block's item {position} is not a trace")
        kind, action, result = item.get("type"), item["action"], item.get("result") or {}
        if not isinstance(result, dict):
            raise ChainDataError(f"block {number}: trace_block's item {position} has a result that is not an object")
        if not isinstance(kind, str) or kind not in _ACTION_KNOWN:
            raise ChainDataError(f"block {number}: trace_block's item {position} has the unknown type {kind!r}")
        of = item.get("blockNumber", number)
        if (_quantity(of, "blockNumber", number) if isinstance(of, str) else of) != number:
            raise ChainDataError(f"block {number}: trace_block's item {position} is of block {of!r}")
        address = item.get("traceAddress")
        if not isinstance(address, list) or len(address) >= MAX_DEPTH or \
                not all(type(a) is int and 0 <= a <= MAX_INT for a in address):
            raise ChainDataError(f"block {number}: trace_block's item {position} has the traceAddress {address!r}")
        tx = item.get("transactionPosition")
        if tx is not None and not (type(tx) is int and 0 <= tx <= MAX_INT):
            raise ChainDataError(f"block {number}: trace_block's item {position} has the transactionPosition {tx!r}")
        extra = _extra(item, _TRACE_KNOWN) | _extra(action, _ACTION_KNOWN[kind], "action.")
        if kind in _RESULT_KNOWN:
            extra |= _extra(result, _RESULT_KNOWN[kind], "result.")
        if kind == "call":
            call_type = str(action.get("callType", "call")).upper()
            frm, to, value, data = action.get("from"), action.get("to"), action.get("value"), action.get("input")
            output = result.get("output")
        elif kind == "create":
            call_type = "CREATE2" if action.get("creationMethod") == "create2" else "CREATE"
            frm, to, value, data = action.get("from"), result.get("address"), action.get("value"), action.get("init")
            output = result.get("code")
            if item.get("error") is not None and to is not None:  # a failed creation created nothing
                extra["result.address"], to = to, None
        elif kind == "reward":
            call_type, frm, to, value, data, output = "REWARD", None, action.get("author"), action.get("value"), None, None
        else:
            call_type = "SELFDESTRUCT"
            frm, to, value = action.get("address"), action.get("refundAddress"), action.get("balance")
            data = output = None
        if call_type not in CALL_TYPES:
            raise ChainDataError(f"block {number}: trace_block's item {position} has the unknown call type {call_type!r}")
        traces.append(Trace(
            block_number=number, transaction_index=tx, trace_address=tuple(address), type=call_type,
            from_address=_address(frm, "from", number), to_address=_address(to, "to", number),
            value=_quantity(value, "value", number, MAX_VALUE), gas=_quantity(action.get("gas"), "gas", number),
            gas_used=_quantity(result.get("gasUsed"), "gasUsed", number),
            input=_data(data, "input", number), output=_data(output, "output", number),
            error=_text(item.get("error"), "error", number), revert_reason=None,
            subtraces=_count(item.get("subtraces"), number, position), extra=_storable(number, extra),
            transaction_hash=_text(item.get("transactionHash"), "transactionHash", number),
            block_hash=_text(item.get("blockHash"), "blockHash", number),
        ))
    _mark_reverted(traces)
    return traces


def _mark_reverted(traces: list[Trace]) -> None:
    """`reverted` for each call that failed or sits below one that did: both families mark only
    the call that failed, though the calls below it were undone with it."""
    failed = {(t.transaction_index, t.trace_address) for t in traces if t.failed}
    if not failed:
        return
    for t in traces:
        t.reverted = any((t.transaction_index, t.trace_address[:depth]) in failed
                         for depth in range(len(t.trace_address) + 1))


def _count(value: Any, number: int, position: int) -> int:
    if not (type(value) is int and 0 <= value <= MAX_INT):
        raise ChainDataError(f"block {number}: trace_block's item {position} has the subtraces {value!r}")
    return value


def check_against_block(number: int, traces: list[Trace], block: dict[str, Any], receipts: list[dict[str, Any]]) -> None:
    """One top-level call per transaction, in order, equal to the transaction: its sender, its
    recipient or the contract its receipt says it created, its value and its input, failed
    exactly when the receipt's status says so; each log of a receipt emitted by a call of its
    transaction that was not undone (the account whose code context the call ran in: a dropped
    call that emitted a log is caught here); and each call's subtraces are the calls found below
    it."""
    transactions = block.get("transactions") or []
    top = [t for t in traces if t.trace_address == () and t.transaction_index is not None]
    if [t.transaction_index for t in top] != list(range(len(transactions))):
        raise ChainDataError(f"block {number}: the traces have top-level calls for transactions "
                             f"{[t.transaction_index for t in top]}, the block {len(transactions)} transaction(s)")
    for t in traces:
        if t.block_hash is not None and t.block_hash.lower() != block["hash"].lower():
            raise ChainDataError(f"block {number}: a trace names block {t.block_hash}, the block is {block['hash']}")
    for trace, tx, receipt in zip(top, transactions, receipts):
        if trace.transaction_hash is not None and trace.transaction_hash.lower() != tx["hash"].lower():
            raise ChainDataError(f"block {number}: the trace of transaction {trace.transaction_index} names "
                                 f"{trace.transaction_hash}, the block's transaction is {tx['hash']}")
        # A failed creation created nothing, though go-ethereum's receipt names the address it would have had.
        created = receipt.get("contractAddress") if tx.get("to") is None and not trace.failed else None
        expected = {
            "from": (tx.get("from") or "").lower(),
            "to": (tx.get("to") or created or "").lower() or None,
            "value": int(tx.get("value", "0x0"), 16),
            "input": (tx.get("input") or "0x").lower(),
        }
        found = {"from": trace.from_address, "to": trace.to_address, "value": trace.value or 0,
                 "input": trace.input or "0x"}
        for key in expected:
            if found[key] != expected[key]:
                raise ChainDataError(f"block {number}: transaction {trace.transaction_index}'s top-level call has "
                                     f"{key} {found[key]!r}, the transaction {expected[key]!r}")
        status = receipt.get("status")
        if status in ("0x0", "0x1") and trace.failed != (status == "0x0"):
            raise ChainDataError(f"block {number}: transaction {trace.transaction_index}'s top-level call "
                                 f"{'failed' if trace.failed else 'succeeded'}, its receipt says the opposite")
    emitters: dict[int | None, set[str | None]] = {}
    for t in traces:
        if not t.reverted:
            context = t.from_address if t.type in ("DELEGATECALL", "CALLCODE") else t.to_address
            emitters.setdefault(t.transaction_index, set()).add(context)
    for index, receipt in enumerate(receipts):
        for entry in receipt.get("logs") or ():
            address = (entry.get("address") or "").lower()
            if address not in emitters.get(index, ()) and address not in SYSTEM_LOG_ADDRESSES:
                raise ChainDataError(f"block {number}: transaction {index} has a log of {entry.get('address')}, and no "
                                     "call of it that was not undone ran in that account: a call is missing")
    places = set()
    for t in traces:
        place = (t.transaction_index, t.trace_address)
        if t.transaction_index is not None and t.transaction_index >= len(transactions):
            raise ChainDataError(f"block {number}: a trace names transaction {t.transaction_index}, the block has "
                                 f"{len(transactions)} transaction(s)")
        if t.trace_address and (t.transaction_index, t.trace_address[:-1]) not in places:
            raise ChainDataError(f"block {number}: transaction {t.transaction_index}'s call {list(t.trace_address)} "
                                 "comes before the call that made it, or without it")
        if place in places and t.type != "REWARD":
            raise ChainDataError(f"block {number}: transaction {t.transaction_index}'s call {list(t.trace_address)} "
                                 "is traced twice")
        places.add(place)
    below: dict[tuple[int | None, tuple[int, ...]], int] = {}
    for t in traces:
        if t.trace_address:
            key = (t.transaction_index, t.trace_address[:-1])
            below[key] = below.get(key, 0) + 1
    for t in traces:
        if below.get((t.transaction_index, t.trace_address), 0) != t.subtraces:
            raise ChainDataError(f"block {number}: transaction {t.transaction_index}'s call {list(t.trace_address)} "
                                 f"says it made {t.subtraces} call(s); {below.get((t.transaction_index, t.trace_address), 0)} found")


def settle(traces: list[Trace], receipts: list[dict[str, Any]], tracer_key: str) -> None:
    """After `check_against_block`: each top-level call's gas used is its receipt's. The families
    disagree about it (trace_block leaves out the intrinsic gas and counts the refund; anvil's
    callTracer gives the block's cumulative gas), so the tracer's own figure, where it differs,
    is kept in `extra` under the key it came in (`tracer_key`)."""
    for t in traces:
        if t.trace_address == () and t.transaction_index is not None:
            used = int(receipts[t.transaction_index]["gasUsed"], 16)
            if t.gas_used is not None and t.gas_used != used:
                t.extra[tracer_key] = hex(t.gas_used)
            t.gas_used = used
