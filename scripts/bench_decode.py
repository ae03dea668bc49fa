#!/usr/bin/env python3
"""Decoding benchmark: token transfers decoded from stored logs by `indexer work`, against
fetching the same logs from the node and against copying them out and back, in one run.

The chain: blocks of many transactions of a contract compiled with solc (scripts/install-solc)
that emits logs in mainnet-like proportions: of every 20, 12 ERC-20 Transfers, 2 ERC-721 Transfers, one
ERC-1155 TransferSingle, one TransferBatch of 3 pairs, and 4 Approvals (not transfers, read and
passed over). On the same node and blocks:
- fetching: `eth_getLogs` of ranges of 100 blocks, 4 requests in flight, the JSON decoded,
  nothing written (the cheapest way to have a node hand its logs over); and the way the indexer
  fetches them, blocks with their transactions and `eth_getBlockReceipts`, 10 blocks a batch;
- decoding: the chain indexed first (not timed), every decoded row deleted, then one
  `decode_logs` job per range (as index_blocks completions enqueue them) run by
  `indexer work --drain` with N workers: wall time from starting the pool to its exit, start-up
  included; logs/s counts every stored log of the range, transfer or not;
- copying out and back (the lower bound of a decoder that works outside the database): the
  same transfer logs of the same ranges, N processes at once, each range read with
  `COPY (SELECT ...) TO STDOUT` and written back with `COPY ... FROM STDIN` into a table shaped
  as `logs`, undecoded, with as many indexes as `token_transfers` (on the contract and the first
  two topics), one transaction per range.
Checks that every transfer was decoded; prints a Markdown table (BENCHMARKS.md has the figures
with this command).

    .venv/bin/python scripts/bench_decode.py [--blocks 200] [--txs 100] [--logs-per-tx 25] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import orjson
import psycopg
import requests
from psycopg.conninfo import make_conninfo

from indexer.base.block_range import DECODE_LOGS, cut
from indexer.decoding import token_transfers
from indexer.jobqueue import queue
from indexer.testing.anvil import Anvil
from indexer.testing.contracts import compile, deploy

INDEXER = str(Path(sys.executable).with_name("indexer"))

SPRAY = """// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

contract Spray {
    event Transfer(address indexed from, address indexed to, uint256 value);
    event TransferSingle(address indexed operator, address indexed from, address indexed to, uint256 id,
                         uint256 value);
    event TransferBatch(address indexed operator, address indexed from, address indexed to, uint256[] ids,
                        uint256[] values);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    bytes32 constant TRANSFER = keccak256("Transfer(address,address,uint256)");

    function spray(uint256 n, uint256 seed) external {
        uint256[] memory ids = new uint256[](3);
        uint256[] memory values = new uint256[](3);
        for (uint256 i = 0; i < n; i++) {
            uint256 r = uint256(keccak256(abi.encode(seed, i)));
            address from = address(uint160(r));
            address to = address(uint160(r >> 80));
            uint256 k = i % 20;
            if (k < 12) {
                emit Transfer(from, to, r >> 160);
            } else if (k < 14) {
                (bytes32 t, uint256 f, uint256 d) = (TRANSFER, uint160(from), uint160(to));
                assembly { log4(0, 0, t, f, d, i) }  // ERC-721's shape: the token id indexed
            } else if (k == 14) {
                emit TransferSingle(msg.sender, from, to, i, r >> 200);
            } else if (k == 15) {
                ids[0] = i; ids[1] = i + 1; ids[2] = r;
                values[0] = 1; values[1] = r >> 240; values[2] = 3;
                emit TransferBatch(msg.sender, from, to, ids, values);
            } else {
                emit Approval(from, to, r);
            }
        }
    }
}
"""



def rows_of(i: int) -> int:
    """token_transfers rows of a transaction's log `i` (Spray.spray's pattern): a TransferBatch
    has 3 pairs, an Approval none."""
    k = i % 20
    return 3 if k == 15 else 1 if k < 16 else 0


def post(session: requests.Session, url: str, calls: list) -> list:
    body = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls)])
    answer = orjson.loads(session.post(url, data=body, headers={"Content-Type": "application/json"},
                                       timeout=300).content)
    return [a["result"] for a in sorted(answer, key=lambda a: a["id"])]


def build(node: Anvil, blocks: int, txs: int, logs_per_tx: int) -> int:
    """`blocks` blocks of `txs` spraying transactions each; returns the head."""
    built = compile({"Spray.sol": SPRAY})
    spray = deploy(node, *built["Spray"])
    accounts = node.rpc("eth_accounts")
    for b in range(blocks):
        node.batch([("eth_sendTransaction", [{
            "from": accounts[i % len(accounts)], "to": spray.address, "gas": hex(100_000 + 3_000 * logs_per_tx),
            "data": spray.functions.spray(logs_per_tx, b * txs + i)._encode_transaction_data()}]) for i in range(txs)])
        node.rpc("evm_mine")
    return node.head()


def fetch_logs(url: str, head: int, span: int = 100, in_flight: int = 4) -> tuple[float, int]:
    """eth_getLogs of every block, `span` blocks a request; (seconds, logs)."""
    local = threading.local()

    def fetch(first: int) -> int:
        s = getattr(local, "s", None) or setattr(local, "s", requests.Session()) or local.s
        last = min(first + span - 1, head)
        (logs,) = post(s, url, [("eth_getLogs", [{"fromBlock": hex(first), "toBlock": hex(last)}])])
        return len(logs)

    return _timed(fetch, head, span, in_flight)


def fetch_receipts(url: str, head: int, span: int = 10, in_flight: int = 4) -> tuple[float, int]:
    """The way `indexer work` fetches: every block with its transactions and receipts, `span`
    blocks a batch; (seconds, logs)."""
    local = threading.local()

    def fetch(first: int) -> int:
        s = getattr(local, "s", None) or setattr(local, "s", requests.Session()) or local.s
        numbers = range(first, min(first + span, head + 1))
        post(s, url, [("eth_getBlockByNumber", [hex(n), True]) for n in numbers])
        receipts = post(s, url, [("eth_getBlockReceipts", [hex(n)]) for n in numbers])
        return sum(len(r["logs"]) for block in receipts for r in block)

    return _timed(fetch, head, span, in_flight)


def _timed(fetch: Callable[[int], int], head: int, span: int, in_flight: int) -> tuple[float, int]:
    started = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        total = sum(pool.map(fetch, range(0, head + 1, span)))
    return time.perf_counter() - started, total


def run_indexer(env: dict[str, str], *args: str) -> None:
    subprocess.run([INDEXER, *args, "--log-level", "WARNING"] if args[0] == "work" else [INDEXER, *args],
                   env=env, check=True, capture_output=True)


COPY_OUT = """
COPY (SELECT * FROM logs WHERE block_number BETWEEN %(first)s AND %(last)s
                          AND topic0 IN (%(transfer)s, %(single)s, %(batch)s)) TO STDOUT (FORMAT binary)
"""
COPY_IN = "COPY copied FROM STDIN (FORMAT binary)"


def copy_back(url: str, ranges: list[tuple[int, int]], workers: int) -> float:
    """Seconds to read the transfer logs of `ranges` out and write them back undecoded, `workers`
    connections at once, one transaction per range."""
    topics = {"transfer": token_transfers.TRANSFER, "single": token_transfers.TRANSFER_SINGLE,
              "batch": token_transfers.TRANSFER_BATCH}
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS copied")
        c.execute("CREATE TABLE copied (LIKE logs INCLUDING ALL)")
        # The index work token_transfers has (token, from, to), on the undecoded columns.
        for columns in ("address, block_number", "topic1, block_number", "topic2, block_number"):
            c.execute(f"CREATE INDEX ON copied ({columns})")

    def one(part: list[tuple[int, int]]) -> None:
        with psycopg.connect(url, autocommit=True) as src, psycopg.connect(url, autocommit=True) as dst:
            for first, last in part:
                with dst.transaction(), dst.cursor().copy(COPY_IN) as into, \
                        src.cursor().copy(COPY_OUT, {"first": first, "last": last} | topics) as out:
                    for chunk in out:
                        into.write(chunk)

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, [ranges[i::workers] for i in range(workers)]))
    elapsed = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TABLE copied")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=200, help="blocks of logs")
    ap.add_argument("--txs", type=int, default=100, help="transactions per block")
    ap.add_argument("--logs-per-tx", type=int, default=25, help="logs each transaction emits")
    ap.add_argument("--workers", type=int, default=2, help="`indexer work` workers, and copying connections")
    ap.add_argument("--chunk", type=int, help="blocks per job (default: a 20th of the chain, at least 1)")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    name = f"bench_{os.getpid()}_decode"
    with psycopg.connect(args.database_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_conninfo(args.database_url, dbname=name)
    try:
        with Anvil("--no-mining", "--gas-limit", "30000000") as node:
            t = time.perf_counter()
            head = build(node, args.blocks, args.txs, args.logs_per_tx)
            print(f"# {head + 1:,} blocks built in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
            env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
            env |= {"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": node.url, "INDEXER_USE_FINALIZED": "false",
                    "INDEXER_CONFIRMATIONS": "0", "INDEXER_METRICS_PORT": "0"}
            chunk = args.chunk or max(1, (head + 1) // 20)
            ranges = cut(0, head + 1, chunk)
            run_indexer(env, "migrate")
            run_indexer(env, "plan", "--from", "0", "--to", str(head + 1), "--chunk", str(chunk))
            run_indexer(env, "work", "--drain", "--workers", str(args.workers))  # indexes, and decodes once
            fetch_seconds, fetched = fetch_logs(node.url, head)
            receipts_seconds, fetched_again = fetch_receipts(node.url, head)

            with psycopg.connect(url, autocommit=True) as c:
                stored = c.execute("SELECT count(*) FROM logs").fetchone()[0]
                assert fetched == fetched_again == stored, (fetched, fetched_again, stored)
                c.execute("TRUNCATE token_transfers")
                queue.enqueue(c, DECODE_LOGS, [r.payload() for r in ranges])
                c.execute("VACUUM ANALYZE")
            started = time.perf_counter()
            run_indexer(env, "work", "--drain", "--workers", str(args.workers))
            decode_seconds = time.perf_counter() - started
            with psycopg.connect(url, autocommit=True) as c:
                rows = c.execute("SELECT count(*) FROM token_transfers").fetchone()[0]
                left = c.execute("SELECT count(*) FROM jobs").fetchone()[0]
            sprays = args.blocks * args.txs
            transfers = sprays * sum(rows_of(i) > 0 for i in range(args.logs_per_tx))
            assert left == 0 and rows == sprays * sum(map(rows_of, range(args.logs_per_tx))), (left, rows, stored)
            copy_seconds = copy_back(url, [(r.first, r.last) for r in ranges], args.workers)
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    fetch_rate, decode_rate, copy_rate = stored / fetch_seconds, stored / decode_seconds, transfers / copy_seconds
    print(f"{stored:,} logs in {head + 1:,} blocks ({transfers:,} transfers, written as {rows:,} rows), "
          f"jobs of {chunk:,} blocks, {args.workers} worker(s).\n")
    print("| | seconds | logs/s (all logs) | transfer logs/s |")
    print("|---|---:|---:|---:|")
    print(f"| fetching: eth_getLogs, 4 in flight | {fetch_seconds:.2f} | {fetch_rate:,.0f} | "
          f"{transfers / fetch_seconds:,.0f} |")
    print(f"| fetching: blocks and receipts (as `indexer work` does), 10 blocks a batch, 4 in flight | "
          f"{receipts_seconds:.2f} | {stored / receipts_seconds:,.0f} | {transfers / receipts_seconds:,.0f} |")
    print(f"| copying the transfer logs out and back, {args.workers} connection(s) | {copy_seconds:.2f} | "
          f"{stored / copy_seconds:,.0f} | {copy_rate:,.0f} |")
    print(f"| decoding: `indexer work --drain --workers {args.workers}` | {decode_seconds:.2f} | {decode_rate:,.0f} | "
          f"{transfers / decode_seconds:,.0f} |")
    receipts_rate = stored / receipts_seconds
    print(f"\nDecoding is {decode_rate / fetch_rate:.1f}x fetching by eth_getLogs, {decode_rate / receipts_rate:.1f}x"
          f" fetching blocks and receipts, and {copy_seconds / decode_seconds:.2f}x the speed of copying the transfer"
          " logs out and back.")


if __name__ == "__main__":
    main()
