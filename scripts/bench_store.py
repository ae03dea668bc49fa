#!/usr/bin/env python3
"""What decoding and writing cost, one version of the indexer against another, on the same answers.

The answers are recorded once (`--record FILE`): `chain.fetch_json` batches, as a worker asks
them, of three chains: anvil's dense chain (200 blocks of 50 transactions, every other one a call
emitting two logs: scripts/bench_backfill.py's), anvil's sparse chain (3,000 empty blocks) and the
mainnet-shaped node (200 blocks from 18,000,000). Each version (`--trees`: source trees, such as a
`git archive` of an older commit; `.` for this one) then runs in a process of its own, with that
tree first on PYTHONPATH, its turns alternating with the others' `--rounds` times: its
`chain.decode` of every batch (CPU time of its process, best of 3), the COPY data made of its
rows (`store.encoded`, binary or text, best of 3), and its `store.write` of every batch in a
transaction of its own, with a worker's session settings, into a fresh database migrated by that
version (wall time, the PostgreSQL backend's CPU time, and the bytes of the chain
tables and their indexes after), the median of 3. No node is involved in the timed part.

    .venv/bin/python scripts/bench_store.py --record /tmp/answers.json
    .venv/bin/python scripts/bench_store.py --answers /tmp/answers.json --trees /tmp/old,. [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

CHAINS = ("sparse", "dense", "mainnet")


def record(path: Path, scale: float = 1.0) -> None:
    from indexer.chaindata import chain
    from indexer.node.rpc import RpcClient
    from indexer.testing.anvil import Anvil, build_dense
    from indexer.testing.mainnet_server import NodeProcess

    def batches(url: str, first: int, last: int, size: int) -> list:
        client = RpcClient([url], timeout=120, max_attempts=1)
        out = []
        for start in range(first, last + 1, size):
            blocks, receipts = chain.fetch_json(client, start, min(last, start + size - 1))
            out.append((start, blocks, {str(k): v for k, v in receipts.items()}))
        return out

    answers = {}
    sparse, dense, mainnet = (max(2, int(n * scale)) for n in (3000, 200, 200))
    with Anvil("--prune-history", "--hardfork", "cancun") as node:
        node.rpc("anvil_mine", hex(sparse), "0x1")
        answers["sparse"] = batches(node.url, 0, sparse - 1, 100)
    with Anvil("--no-mining") as node:
        build_dense(node, dense, 50)
        answers["dense"] = batches(node.url, 1, node.head(), 12)
    with NodeProcess(18_000_000, mainnet) as node:
        answers["mainnet"] = batches(node.url, node.first, node.last, 4)
    path.write_bytes(orjson.dumps(answers))
    print(f"recorded {', '.join(f'{k}: {sum(len(b) for _, b, _ in v):,} blocks' for k, v in answers.items())} in {path}")


def _backend_cpu(pid: int) -> float:
    # Not indexer.testing.processes.cpu_seconds: this runs with the tree being measured first on
    # PYTHONPATH, which may be older than that function.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SIZES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'r'
  AND (c.relname IN ('blocks', 'transactions', 'logs', 'withdrawals')
       OR c.relname ~ '^(blocks|transactions|logs|withdrawals)_[0-9]+$')
"""


def measure(answers_path: Path, admin_url: str) -> dict:
    """This process's version (whatever `indexer` is first on the path), on every chain."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    import indexer
    from indexer.base import db
    from indexer.chaindata import chain, store
    try:
        from indexer.jobs import partitions
    except ImportError:  # a version from before the tables were partitioned
        partitions = None

    answers = orjson.loads(answers_path.read_bytes())
    result = {"tree": str(Path(indexer.__file__).parents[1])}
    for kind in CHAINS:
        batches = [(first, blocks, {int(k): v for k, v in receipts.items()}) for first, blocks, receipts in answers[kind]]
        count = sum(len(blocks) for _, blocks, _ in batches)
        decode = []
        for _ in range(3):
            started = time.process_time()
            rows = [chain.decode(first, blocks, receipts) for first, blocks, receipts in batches]
            decode.append(time.process_time() - started)
        encode = [_encoding_seconds(rows) for _ in range(3)]
        writes = []
        for _ in range(3):
            name = f"bench_store_{os.getpid()}"
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.execute(f'CREATE DATABASE "{name}"')
            url = make_conninfo(admin_url, dbname=name)
            with db.connect(url) as conn:
                db.migrate(conn)
                if partitions is not None:
                    partitions.ensure(conn, rows[0].first, rows[-1].last)
            with psycopg.connect(url, autocommit=True, options=db.worker_session_options(300)) as conn:
                store.prepare(conn)
                backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                cpu, started = _backend_cpu(backend), time.perf_counter()
                for batch in rows:
                    with conn.transaction():
                        store.write(conn, batch)
                writes.append((time.perf_counter() - started, _backend_cpu(backend) - cpu,
                               conn.execute(SIZES).fetchone()[0]))
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        result[kind] = {
            "blocks": count,
            "decode_ms": 1000 * min(decode) / count,
            "encode_ms": 1000 * min(encode) / count,
            "write_ms": 1000 * statistics.median(w[0] for w in writes) / count,
            "postgres_ms": 1000 * statistics.median(w[1] for w in writes) / count,
            "kib": writes[-1][2] / 1024 / count,
        }
    return result


def _encoding_seconds(rows: list) -> float:
    """CPU seconds to make the COPY data of every table of every batch, as bytes for the socket:
    `store.encoded` (binary, or text encoded), or in a tree from before it, the text joined."""
    from indexer.chaindata import store  # the tree's own, imported by measure()
    encoded = getattr(store, "encoded", None)
    started = time.process_time()
    for batch in rows:
        for table in ("blocks", "transactions", "logs", "withdrawals"):
            lines = getattr(batch, table)
            if lines:
                data = encoded(table, lines) if encoded else "\n".join(lines) + "\n"
                if isinstance(data, str):
                    data.encode()
    return time.process_time() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", type=Path, help="record the answers to this file, then exit")
    ap.add_argument("--scale", type=float, default=1.0, help="record this fraction of each chain's blocks")
    ap.add_argument("--answers", type=Path, help="the recorded answers")
    ap.add_argument("--trees", default=".", help="comma-separated source trees to compare ('.': this one)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)  # one version, in a child process
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    if args.record:
        record(args.record, args.scale)
        return
    if not args.answers or not args.answers.exists():
        ap.error("--answers FILE (made by --record FILE) is needed")
    if args.measure:
        print(json.dumps(measure(args.answers, args.database_url)))
        return
    here = Path(__file__).resolve().parents[1]
    trees = [here if t == "." else Path(t).resolve() for t in args.trees.split(",")]
    runs: dict[Path, list[dict]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            env = os.environ | {"PYTHONPATH": str(tree)}
            done = subprocess.run([sys.executable, __file__, "--measure", "--answers", str(args.answers),
                                   "--database-url", args.database_url], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"measuring {tree} failed:\n{done.stderr}")
            runs[tree].append(json.loads(done.stdout))
            print(f"# {tree}: {runs[tree][-1]}", file=sys.stderr, flush=True)
    print(f"Each figure is per block: the runs of each version, in the order they ran ({args.rounds} rounds,"
          " alternating).\n")
    print("| chain | version | decoding (ms CPU) | COPY data (ms CPU) | writing (ms) | PostgreSQL (ms CPU) | stored (KiB) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for kind in CHAINS:
        for tree in trees:
            r = [run[kind] for run in runs[tree]]
            fmt = lambda key, f: ", ".join(format(x[key], f) for x in r)  # noqa: E731
            print(f"| {kind} ({r[0]['blocks']:,} blocks) | {tree.name if tree != here else 'this tree'} | {fmt('decode_ms', '.3f')} "
                  f"| {fmt('encode_ms', '.4f')} | {fmt('write_ms', '.3f')} | {fmt('postgres_ms', '.3f')} | {fmt('kib', '.1f')} |")


if __name__ == "__main__":
    main()
