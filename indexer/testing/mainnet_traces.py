"""The call trees the mainnet-shaped node serves (`debug_traceBlockByHash` with callTracer, and
`trace_block`): each transaction's tree shaped after a recorded block's (24,298,763), its top
call the transaction itself, so that `traces.check_against_block` passes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


from . import fixtures
from .mainnet_eras import calldata


@dataclass(frozen=True)
class CallShape:
    """A transaction as its call tree must show it (`traces.check_against_block`)."""

    sender: str
    to: str | None
    created: str | None  # the receipt's contractAddress
    value: str
    input: str
    failed: bool
    gas: int
    gas_used: int
    emitters: tuple[str, ...]  # its logs' addresses, each once, in order


@dataclass(frozen=True)
class _Tree:
    """A recorded transaction's call tree (`callTracer`), and the accounts its CALLs that were
    not undone ran in, below the top frame (each once, in order): where logs can come from."""

    frame: dict[str, Any]
    emitters: tuple[str, ...]


TRACES_FIXTURE = "traces/erigon-rpc-tests-debug_traceBlockByNumber-callTracer-24298763"
_TREES: list[_Tree] = []


def recorded_trees() -> list[_Tree]:
    """The call trees of the transactions with calldata of recorded mainnet block 24,298,763."""
    if not _TREES:
        answer = fixtures.load(TRACES_FIXTURE)[0]["response"]["result"]
        trees = []
        for item in answer:
            top = item["result"]
            if top["input"] == "0x":
                continue
            found: dict[str, None] = {}
            outside = {top["from"], top.get("to")}

            def walk(frame: dict[str, Any], undone: bool) -> None:
                for call in frame.get("calls", ()):
                    gone = undone or "error" in call
                    if call["type"] == "CALL" and not gone and call["to"] not in outside:
                        found[call["to"]] = None
                    walk(call, gone)

            walk(top, False)  # the top frame's own error is the transaction's (`call_tree` sets it)
            trees.append(_Tree(top, tuple(found)))
        _TREES[:] = trees
    return _TREES


def _hex_size(data: str | None) -> int:
    return 0 if not data else (len(data) - 2) // 2


def call_tree(rng: random.Random, call: CallShape, trees: list[_Tree]) -> dict[str, Any]:
    """A callTracer frame for `call`: a plain transfer's is its top frame alone; a contract call's
    or creation's has the shape of a recorded tree (`recorded_trees`: its types, depths, errors,
    gas, value keys, input and output sizes; fresh addresses and data), picked at random. The
    accounts its CALLs ran in are given the addresses of the transaction's logs, in order; a log's
    address left over is given a CALL frame of its own, below the top one."""
    context = call.to if call.to is not None else call.created
    needed = [a for a in call.emitters if a != context]
    recorded = rng.choice(trees) if call.to is None or call.input != "0x" else None
    mapping: dict[str | None, str] = {}
    if recorded is not None:
        mapping[recorded.frame["from"]] = call.sender
        if context is not None:
            mapping[recorded.frame["to"]] = context
        mapping |= dict(zip(recorded.emitters, needed))

    def address(recorded_address: str) -> str:
        if recorded_address not in mapping:
            mapping[recorded_address] = "0x" + rng.randbytes(20).hex()
        return mapping[recorded_address]

    def rewrite(frame: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"from": address(frame["from"]), "gas": frame["gas"], "gasUsed": frame["gasUsed"]}
        if "to" in frame:
            out["to"] = address(frame["to"])
        out["input"] = "0x" + calldata(rng, _hex_size(frame.get("input"))).hex()
        if "output" in frame:
            out["output"] = "0x" + calldata(rng, _hex_size(frame["output"])).hex()
        for key in ("error", "revertReason"):
            if key in frame:
                out[key] = frame[key]
        if frame.get("calls"):
            out["calls"] = [rewrite(c) for c in frame["calls"]]
        if "value" in frame:
            out["value"] = frame["value"]
        out["type"] = frame["type"]
        return out

    top = rewrite(recorded.frame) if recorded is not None else {}
    size = _hex_size(call.input)
    intrinsic = 21_000 + 16 * size + (32_000 if call.to is None else 0)
    calls = top.pop("calls", [])
    for key in ("to", "output", "error", "revertReason", "value", "type"):
        top.pop(key, None)
    top |= {"from": call.sender, "gas": hex(max(call.gas - intrinsic, 0)), "gasUsed": hex(call.gas_used)}
    if context is not None:
        top["to"] = context
    top["input"] = call.input
    if call.failed:
        top["error"] = "execution reverted"
    elif call.to is None:
        top["output"] = "0x" + calldata(rng, size // 3).hex()  # the deployed code
    elif recorded is not None and "output" in recorded.frame:
        top["output"] = "0x" + calldata(rng, _hex_size(recorded.frame["output"])).hex()
    for emitter in needed[len(recorded.emitters) if recorded is not None else 0:]:
        used = rng.randrange(3_000, 40_000)
        calls.append({"from": context, "gas": hex(used + rng.randrange(0, 100_000)), "gasUsed": hex(used),
                      "to": emitter, "input": "0x" + calldata(rng, 68).hex(),
                      "output": "0x" + calldata(rng, 32).hex(), "value": "0x0", "type": "CALL"})
    if calls:
        top["calls"] = calls
    top["value"] = call.value
    top["type"] = "CREATE" if call.to is None else "CALL"
    return top


# Markers in a template's JSON, each replaced by a block's own value: {{bh}} its hash, {{ph}} its
# parent's, {{bn}} its number, {{ts}} its timestamp, {{sr}} its state root, {{tr}} its
# transactions root, {{wr}} its withdrawals root, {{r8}} the last 16 hex digits of every
# transaction's r, {{tN}} transaction N's hash, {{wN}} withdrawal N's index.
