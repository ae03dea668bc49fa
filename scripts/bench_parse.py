#!/usr/bin/env python3
"""What reading the node's answers costs a worker, by JSON parser: the CPU time of this process
(`time.process_time`, so not the node's) for `chain.fetch_json` of mainnet-shaped batches (the
mainnet-shaped node of indexer/testing/mainnet_node.py, blocks from `--era`, `--batch` blocks a
batch as a worker asks them: the blocks with their transactions, then their receipts), with the
client's parser (msgspec) and with orjson put in its place, the two alternating `--rounds` times
over the same blocks; ms per block, the median of the rounds, and the ratio.

    .venv/bin/python scripts/bench_parse.py [--blocks 400] [--batch 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import msgspec
import orjson

from indexer.chaindata import chain
from indexer.node import rpc_transport
from indexer.node.rpc import RpcClient
from indexer.testing.mainnet_server import NodeProcess

# orjson in msgspec's place, as rpc_transport.py reads it: `msgspec.json.decode`, `msgspec.DecodeError`.
ORJSON = SimpleNamespace(json=SimpleNamespace(decode=orjson.loads), DecodeError=orjson.JSONDecodeError)
PARSERS = {"msgspec": msgspec, "orjson": ORJSON}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--era", type=int, default=18_000_000, help="the first block's height: its era sets the shape")
    ap.add_argument("--blocks", type=int, default=400)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.blocks < 1 or args.batch < 1 or args.rounds < 1:
        ap.error("--blocks, --batch and --rounds must be at least 1")
    spent: dict[str, list[float]] = {name: [] for name in PARSERS}
    with NodeProcess(args.era, args.blocks) as node:
        client = RpcClient([node.url])
        firsts = range(node.first, node.last + 1, args.batch)
        try:
            for _ in range(args.rounds):
                for name, parser in PARSERS.items():
                    rpc_transport.msgspec = parser
                    started = time.process_time()
                    fetched = 0
                    for first in firsts:
                        blocks, _ = chain.fetch_json(client, first, min(first + args.batch - 1, node.last))
                        fetched += len(blocks)
                    assert fetched == args.blocks
                    spent[name].append((time.process_time() - started) / fetched * 1000)
        finally:
            rpc_transport.msgspec = msgspec
    ms = {name: statistics.median(values) for name, values in spent.items()}
    print(f"| parser | fetching, ms of this process's CPU per block (median of {args.rounds}) |")
    print("|---|---:|")
    for name, value in ms.items():
        print(f"| {name} | {value:.3f} |")
    print(f"\nmsgspec / orjson: {ms['msgspec'] / ms['orjson']:.2f}x the CPU "
          f"({args.blocks} mainnet-shaped blocks from {args.era:,}, batches of {args.batch})")


if __name__ == "__main__":
    main()
