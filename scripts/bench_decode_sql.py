#!/usr/bin/env python3
"""What the decode jobs' token transfers cost PostgreSQL a mainnet-shaped block, decoded in SQL and
in C, against the same rows COPYed in as a loader would, on the tables as a backfill has them
(the query indexes not built yet: indexer/jobs/partitions.py builds them once a partition's
blocks are all in).

The blocks (`--blocks` from the mainnet-shaped node, 18,000,000 on) are fetched, decoded and
stored once, as a worker does (`chain.fetch_json`, `chain.decode`, `store.write`), into a fresh
database (`--database-url`, or a PostgreSQL of its own started by scripts/pg-start). Then, its
turns alternating `--rounds` times with the token transfers emptied before each, each way of
filling `token_transfers` for the stored logs, in windows of `--window` blocks, one transaction
each; the CPU of the PostgreSQL backend that does it (from /proc, with no parallel plan, so that
it is all there), ms per block:
- decode_range in SQL: `token_transfers.decode_range` as a decode job runs it where the C part
  is not built (one INSERT ... SELECT, and the TransferBatch logs through eth-abi);
- decode_range in C: the same, as it runs with `_native_copy.transfers` (the transfer logs
  read out as one value, TRANSFER_LOGS, decoded in C, the rows COPYed in); this process's CPU
  is shown beside it;
- copy: the rows decode_range made, read out once beforehand, COPYed in (FORMAT binary): what
  the COPY-only loader of bench_backfill.py does;
- out and back: the same SELECT, its rows COPYed out (FORMAT binary) and straight back in, so
  the rows go in by COPY: what is left of decode_range's cost once the insert is a COPY's.
And, over the same stored logs, `abi_uint256` alone: `sum(abi_uint256(data))` of the logs of
32 bytes of data against their `count(*)`. Checks that every way stored the same rows.

    .venv/bin/python scripts/bench_decode_sql.py [--blocks 1000] [--window 500] [--rounds 3] [--database-url URL]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time

import psycopg
from psycopg import sql

from bench_backfill import drop_database, partitioned_database

from indexer.base import db
from indexer.chaindata import chain, store
from indexer.decoding import token_transfers
from indexer.node.rpc import RpcClient
from indexer.testing.cluster import postgres_at
from indexer.testing.mainnet_server import NodeProcess
from indexer.testing.processes import cpu_seconds

FIRST = 18_000_000
SCRATCH = f"bench_decode_sql_{os.getpid()}"
COLUMNS = ("block_number, log_index, position, standard, token_address, from_address, to_address, token_id, "
           "amount, transaction_hash")
COPY_IN = f"COPY token_transfers ({COLUMNS}) FROM STDIN (FORMAT binary)"
COPY_OUT = f"COPY (SELECT {COLUMNS} FROM token_transfers WHERE block_number BETWEEN %s AND %s) TO STDOUT (FORMAT binary)"
CONTENT = "SELECT count(*), sum(amount), sum(token_id), count(DISTINCT (block_number, log_index, position)) FROM token_transfers"
# The backend's own CPU is what is read: a parallel plan would put part of it in other processes.
SERIAL = "-c max_parallel_workers_per_gather=0"
ABI_ALONE = "SELECT sum(abi_uint256(data)) FROM logs WHERE length(data) = 32"
SCAN_ALONE = "SELECT count(*) FROM logs WHERE length(data) = 32"


def params(first: int, last: int) -> dict:
    return {"first": first, "last": last, "transfer": token_transfers.TRANSFER,
            "single": token_transfers.TRANSFER_SINGLE, "batch": token_transfers.TRANSFER_BATCH}


def decoded_rows_select() -> str:
    """DECODE_FIXED's rows as a SELECT: its CTE of shapes, and its INSERT's SELECT list."""
    statement = token_transfers.DECODE_FIXED
    shaped = statement.split("), inserted AS (")[0]
    select = statement.split("transaction_hash)", 1)[1].rsplit("\n)\nSELECT shape", 1)[0]
    return f"{shaped})\n{select}"


def store_blocks(url: str, node_url: str, first: int, last: int) -> None:
    client = RpcClient([node_url])
    with psycopg.connect(url, autocommit=True, options=db.worker_session_options(300)) as conn:
        store.prepare(conn)
        for start in range(first, last + 1, 20):
            end = min(start + 19, last)
            blocks, receipts = chain.fetch_json(client, start, end)
            with conn.transaction():
                store.write(conn, chain.decode(start, blocks, receipts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=1000)
    ap.add_argument("--window", type=int, default=500, help="blocks a transaction, as a decode job's window")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--database-url", help="a PostgreSQL to make a scratch database in (default: one of its own)")
    args = ap.parse_args()
    if args.blocks < 1 or args.window < 1 or args.rounds < 1:
        ap.error("--blocks, --window and --rounds must be at least 1")
    last = FIRST + args.blocks - 1
    windows = [(w, min(w + args.window - 1, last)) for w in range(FIRST, last + 1, args.window)]
    select = decoded_rows_select()

    with postgres_at(args.database_url) as admin_url, NodeProcess(FIRST, args.blocks) as node:
        url = partitioned_database(admin_url, SCRATCH, FIRST, last)
        try:
            store_blocks(url, node.url, FIRST, last)
            native = token_transfers._native_copy
            with psycopg.connect(url, autocommit=True) as conn:
                token_transfers._native_copy = None  # DECODE_FIXED's rows are the ones to compare with
                for first, end in windows:
                    with conn.transaction():
                        token_transfers.decode_range(conn, first, end)
                token_transfers._native_copy = native
                expected = conn.execute(CONTENT).fetchone()
                dumped = {}
                for first, end in windows:
                    with conn.cursor().copy(COPY_OUT, (first, end)) as copy:
                        dumped[first] = b"".join(bytes(piece) for piece in copy)

            def in_sql(conn: psycopg.Connection, first: int, end: int) -> None:
                token_transfers._native_copy = None
                try:
                    token_transfers.decode_range(conn, first, end)
                finally:
                    token_transfers._native_copy = native

            def in_c(conn: psycopg.Connection, first: int, end: int) -> None:
                assert native is not None, "_native_copy is not built: run scripts/setup-venv"
                token_transfers.decode_range(conn, first, end)

            def by_copy(conn: psycopg.Connection, first: int, end: int) -> None:
                with conn.cursor().copy(COPY_IN) as copy:
                    copy.write(dumped[first])

            def out_and_back(conn: psycopg.Connection, first: int, end: int) -> None:
                statement = sql.SQL("COPY ({}) TO STDOUT (FORMAT binary)").format(
                    sql.SQL(psycopg.ClientCursor(conn).mogrify(select, params(first, end))))
                data = io.BytesIO()
                with conn.cursor().copy(statement) as copy:
                    for piece in copy:
                        data.write(piece)
                with conn.cursor().copy(COPY_IN) as copy:
                    copy.write(data.getvalue())

            ways = {"decode_range in SQL": in_sql, "decode_range in C": in_c, "copy": by_copy,
                    "out and back": out_and_back}
            spent: dict[str, list[float]] = {name: [] for name in ways}
            client: dict[str, list[float]] = {name: [] for name in ways}
            for _ in range(args.rounds):
                for name, way in ways.items():
                    with psycopg.connect(url, autocommit=True, options=SERIAL) as conn:
                        conn.execute("TRUNCATE token_transfers")
                        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                        before, ours = cpu_seconds(backend), time.process_time()
                        for first, end in windows:
                            with conn.transaction():
                                way(conn, first, end)
                        spent[name].append((cpu_seconds(backend) - before) * 1000 / args.blocks)
                        client[name].append((time.process_time() - ours) * 1000 / args.blocks)
                        got = conn.execute(CONTENT).fetchone()
                        assert got == expected, (name, got, expected)
            with psycopg.connect(url, autocommit=True, options=SERIAL) as conn:
                backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                alone = {}
                for name, statement in (("abi_uint256", ABI_ALONE), ("scan", SCAN_ALONE)):
                    values = []
                    for _ in range(args.rounds):
                        before = cpu_seconds(backend)
                        conn.execute(statement).fetchone()
                        values.append((cpu_seconds(backend) - before) * 1000 / args.blocks)
                    alone[name] = statistics.median(values)
                calls = conn.execute(SCAN_ALONE).fetchone()[0]
        finally:
            drop_database(admin_url, SCRATCH)

    print(f"{args.blocks:,} mainnet-shaped blocks, {expected[0]:,} token transfers, windows of {args.window} blocks, "
          f"no query indexes; PostgreSQL backend CPU, median of {args.rounds}\n")
    print("| way | ms of PostgreSQL's CPU a block | / copy | ms of this process's CPU a block |")
    print("|---|---:|---:|---:|")
    copy_ms = statistics.median(spent["copy"])
    for name, values in spent.items():
        ms = statistics.median(values)
        ratio = f"{ms / copy_ms:.2f}x" if copy_ms > 0 else "n/a"  # a few blocks can take under a clock tick
        print(f"| {name} | {ms:.2f} ({min(values):.2f}-{max(values):.2f}) | {ratio} | "
              f"{statistics.median(client[name]):.2f} |")
    print(f"\nabi_uint256 over {calls:,} logs of 32 bytes of data: {alone['abi_uint256'] - alone['scan']:.2f} ms a block "
          f"beyond reading them ({alone['scan']:.2f})")


if __name__ == "__main__":
    main()
