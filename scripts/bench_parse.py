#!/usr/bin/env python3
"""What reading the node's answers costs a worker, by JSON parser and by how the body is read: the
CPU time of this process (`time.process_time`, so not the node's) for `chain.fetch_json` of
mainnet-shaped batches (the mainnet-shaped node of indexer/testing/mainnet_node.py, blocks from
`--era`, `--batch` blocks a batch as a worker asks them: the blocks with their transactions, then
their receipts), with the client as it is (msgspec, the body read in one piece), with orjson put
in msgspec's place, and with the body read in 1 MB pieces and joined (as before "An answer read
in one piece"), the three alternating `--rounds` times over the same blocks; ms per block, the
median of the rounds, and the ratios. Then what gzip would cost the same answers (the node's
bodies as a worker asks them, compressed at go-ethereum's level, zlib's 6 standing in for Go's):
their size, the CPU to compress them (the node's, for each request that accepts gzip) and to
inflate them (the worker's).

    .venv/bin/python scripts/bench_parse.py [--blocks 400] [--batch 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
import zlib
from types import SimpleNamespace

import msgspec
import orjson
import requests

from indexer.chaindata import chain
from indexer.node import rpc_transport
from indexer.node.rpc import RpcClient
from indexer.testing.loopback import gzipped
from indexer.testing.mainnet_server import NodeProcess

# orjson in msgspec's place, as rpc_transport.py reads it: `msgspec.json.decode`, `msgspec.DecodeError`.
ORJSON = SimpleNamespace(json=SimpleNamespace(decode=orjson.loads), DecodeError=orjson.JSONDecodeError)


def in_pieces(resp, limit: int, where: str) -> bytes:
    """The body as it was read before: 1 MB pieces through requests and urllib3, joined."""
    return b"".join(resp.iter_content(rpc_transport.BODY_PIECE))


# Each way: the parser in msgspec's place, and how the body is read (None: as the client reads it).
WAYS = {"msgspec": (msgspec, None), "orjson": (ORJSON, None), "msgspec, read in 1 MB pieces": (msgspec, in_pieces)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--era", type=int, default=18_000_000, help="the first block's height: its era sets the shape")
    ap.add_argument("--blocks", type=int, default=400)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.blocks < 1 or args.batch < 1 or args.rounds < 1:
        ap.error("--blocks, --batch and --rounds must be at least 1")
    spent: dict[str, list[float]] = {name: [] for name in WAYS}
    as_it_is = rpc_transport._body
    with NodeProcess(args.era, args.blocks) as node:
        client = RpcClient([node.url])
        firsts = range(node.first, node.last + 1, args.batch)
        try:
            for _ in range(args.rounds):
                for name, (parser, read) in WAYS.items():
                    rpc_transport.msgspec, rpc_transport._body = parser, read or as_it_is
                    started = time.process_time()
                    fetched = 0
                    for first in firsts:
                        blocks, _ = chain.fetch_json(client, first, min(first + args.batch - 1, node.last))
                        fetched += len(blocks)
                    assert fetched == args.blocks
                    spent[name].append((time.process_time() - started) / fetched * 1000)
        finally:
            rpc_transport.msgspec, rpc_transport._body = msgspec, as_it_is
        size, small, compressing, inflating = gzip_costs(node.url, firsts, args.batch, node.last)
    ms = {name: statistics.median(values) for name, values in spent.items()}
    print(f"| way | fetching, ms of this process's CPU per block (median of {args.rounds}) |")
    print("|---|---:|")
    for name, value in ms.items():
        print(f"| {name} | {value:.3f} |")
    print(f"\nmsgspec / orjson: {ms['msgspec'] / ms['orjson']:.2f}x the CPU; read in one piece / in 1 MB pieces: "
          f"{ms['msgspec'] / ms['msgspec, read in 1 MB pieces']:.2f}x "
          f"({args.blocks} mainnet-shaped blocks from {args.era:,}, batches of {args.batch})")

    print("\n| answers a block | bytes | gzip's bytes | compressing (ms CPU/block) | inflating (ms CPU/block) |")
    print("|---|---:|---:|---:|---:|")
    print(f"| {args.batch}-block batches | {size / args.blocks:,.0f} | {small / args.blocks:,.0f} ({size / small:.2f}x smaller) "
          f"| {compressing / args.blocks * 1000:.2f} | {inflating / args.blocks * 1000:.2f} |")


def gzip_costs(url: str, firsts: range, batch: int, last: int) -> tuple[int, int, float, float]:
    """The bytes of the node's bodies as a worker asks them (the blocks with their transactions,
    then the receipts of each), uncompressed and gzipped, and the CPU seconds to compress and to
    inflate them all, a body at a time."""
    session = requests.Session()
    session.headers.update({"Content-Type": "application/json", "Accept-Encoding": "identity"})
    size = small = 0
    compressing = inflating = 0.0

    def post(calls: list[dict]) -> bytes:
        nonlocal size, small, compressing, inflating
        body = session.post(url, data=orjson.dumps(calls)).content
        started = time.process_time()
        packed = gzipped(body)
        compressed = time.process_time()
        assert zlib.decompress(packed, 31) == body
        inflating += time.process_time() - compressed
        compressing += compressed - started
        size, small = size + len(body), small + len(packed)
        return body

    for first in firsts:
        numbers = range(first, min(first + batch - 1, last) + 1)
        blocks = post([{"jsonrpc": "2.0", "id": i, "method": "eth_getBlockByNumber", "params": [hex(n), True]}
                       for i, n in enumerate(numbers)])
        post([{"jsonrpc": "2.0", "id": i, "method": "eth_getBlockReceipts", "params": [a["result"]["hash"]]}
              for i, a in enumerate(orjson.loads(blocks))])
    return size, small, compressing, inflating


if __name__ == "__main__":
    main()
