"""Recorded JSON-RPC answers of real chains (tests/fixtures, sources in its README.md): each file
is `{"block": <eth_getBlockByNumber(n, true)>, "receipts": [<receipt>, ...]}`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"


def names() -> list[str]:
    """Every recorded block, as `<chain>-<number>`."""
    return sorted(path.stem for path in FIXTURES.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    """One recorded block: {"block": ..., "receipts": [...]}."""
    return orjson.loads((FIXTURES / f"{name}.json").read_bytes())


# The recorded tracer answers of each recorded block (tests/fixtures/traces; sources in
# tests/fixtures/README.md, "Traces (issue 26)"): per method, one file for the block's methods
# (debug_traceBlockByHash, trace_block), one per transaction, in order, for the others.
TRACES: dict[str, dict[str, str | list[str]]] = {
    "optimism-goerli-5003318": {
        "debug_traceBlockByHash": "optimism-rosetta-debug_traceBlockByHash-call-tracer-optimism-goerli-5003318.json",
        "debug_traceTransaction": ["optimism-rosetta-debug_traceTransaction-call-tracer-optimism-goerli-5003318-0.json",
                                   "optimism-rosetta-debug_traceTransaction-call-tracer-optimism-goerli-5003318-1.json"],
    },
    # Only the transaction's trace was recorded: the block's form answers -32601.
    "optimism-sepolia-4089330": {
        "debug_traceTransaction": ["optimism-rosetta-debug_traceTransaction-call-tracer-optimism-sepolia-4089330-0.json"],
    },
}


def recorded_trace(file: str) -> Any:
    """A recorded tracer answer's result, whatever envelope its source stored it in: erigon
    rpc-tests' request/response pairs, a JSON-RPC response, or the bare result."""
    data = orjson.loads((FIXTURES / "traces" / file).read_bytes())
    if isinstance(data, list) and data and isinstance(data[0], dict) and "response" in data[0]:
        return data[0]["response"]["result"]
    if isinstance(data, dict) and "jsonrpc" in data:
        return data["result"]
    return data
