#!/usr/bin/env python3
"""The anvil chains against the peers (issue 27): a raw fetch-and-parse client, a lean script into
PostgreSQL, cryo (to parquet), ethereum-etl (CSV) and this indexer, side by side in one run.

On each chain (dense: `build_dense`'s blocks of 50 transactions, every other one emitting two
logs; sparse: empty blocks mined by a pruned anvil), on the same node and blocks, each run timed
the same way: the wall time of the process(es) from their start to their exit, process start-up
included, blocks/s over every block of the chain (block 0 to the head):
- raw fetch-and-parse client: bench_backfill's `raw_ceiling` (batches of 100 blocks with full
  transactions plus `eth_getBlockReceipts`, 4 batches in flight, JSON decoded, nothing written),
  in a process of its own; run first and last, and the peers held against the mean of the two
  (the machine's speed drifts);
- lean script into PostgreSQL: the floor to beat. 2 processes, each fetching batches of 100
  blocks (`--lean-batch`) as the raw client does (blocks with full transactions, then their
  receipts), turning them into rows of a few columns (blocks, transactions, logs) and COPYing
  them into plain tables, no index or key, in a scratch database (made before the clock starts),
  one transaction a batch, commits asynchronous as the indexer's workers' are;
- cryo (to parquet): the `cryo` package from PyPI (the Rust extractor's Python bindings; the
  `cryo` command itself is built with cargo, which the machine lacks), `cryo.freeze` of blocks,
  transactions and logs to parquet with its defaults (chunks of 1,000 blocks, 4 at a time);
- ethereum-etl (CSV): `ethereumetl export_blocks_and_transactions`, `extract_csv_column` of the
  transactions' hashes and `export_receipts_and_logs`, batches of 100, 2 workers, one after the
  other as its documentation chains them, timed together;
- this indexer: bench_backfill's `indexer_run`, `indexer work --drain` with 2 workers and the
  defaults on a fresh database (migrate and plan not timed), to the pool's exit.
Each peer's output is checked (every block, transaction and receipt written) and then removed.

The peers are installed on first use into virtualenvs of their own under --peers-dir (made with
--python, the system's python3.11 by default), each at the version pinned below; a peer that
cannot be installed is said so in one line and shown as "not run". ethereum-etl 2.4.2 needs
eth-abi 2 and so parsimonious 0.8.1, which imports `inspect.getargspec` that Python 3.11 no
longer has: the install applies the upstream issue's workaround (that one import made
`getfullargspec`, whose `.args` is the same), since no Python older than 3.11 is at hand.

    .venv/bin/python scripts/bench_peers.py [--dense 2000] [--dense-txs 50] [--sparse 200000]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CRYO_VERSION = "0.3.2"
ETHEREUM_ETL_VERSION = "2.4.2"
# ethereum-etl's own pins leave these open; the versions it was measured with.
# setuptools for pkg_resources, which web3 5 imports: a venv made by uv has none (one made by
# `python -m venv` on 3.11 had it).
ETHEREUM_ETL_PACKAGES = [f"ethereum-etl=={ETHEREUM_ETL_VERSION}", "web3==5.31.4", "eth-abi==2.2.0", "parsimonious==0.8.1",
                         "setuptools<81"]
PEER_COLUMNS = ("raw fetch-and-parse client", "lean script into PostgreSQL", "cryo (to parquet)",
                "ethereum-etl (CSV)", "this indexer")
WORKERS = 2
BATCH = 100


# -- the lean script into PostgreSQL; it runs as `bench_peers.py _lean ...`, a process of its own --

LEAN_TABLES = """
CREATE TABLE blocks (number bigint, hash bytea, parent_hash bytea, timestamp bigint, gas_used bigint,
                     base_fee numeric, transaction_count int);
CREATE TABLE transactions (block_number bigint, index int, hash bytea, sender bytea, recipient bytea,
                           value numeric, gas_used bigint, status smallint);
CREATE TABLE logs (block_number bigint, log_index int, transaction_hash bytea, address bytea, topic0 bytea,
                   data bytea);
"""


def _bytea(h: str | None) -> str:
    return "\\N" if h is None else "\\\\x" + h[2:]


def _int(h: str | None) -> str:
    return "\\N" if h is None else str(int(h, 16))


def _lean_part(url: str, dsn: str, batches: list[tuple[int, int]]) -> None:
    import orjson
    import psycopg
    import requests

    session = requests.Session()

    def call(method: str, params: list[list]) -> list:
        body = orjson.dumps([{"jsonrpc": "2.0", "id": i, "method": method, "params": p} for i, p in enumerate(params)])
        answers = orjson.loads(session.post(url, data=body, headers={"Content-Type": "application/json"},
                                            timeout=120).content)
        return [a["result"] for a in sorted(answers, key=lambda a: a["id"])]

    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
        for first, last in batches:
            blocks = call("eth_getBlockByNumber", [[hex(n), True] for n in range(first, last + 1)])
            receipts = call("eth_getBlockReceipts", [[hex(n)] for n in range(first, last + 1)])
            rows: dict[str, list[str]] = {"blocks": [], "transactions": [], "logs": []}
            for block, block_receipts in zip(blocks, receipts, strict=True):
                number = str(int(block["number"], 16))
                rows["blocks"].append("\t".join((
                    number, _bytea(block["hash"]), _bytea(block["parentHash"]), _int(block["timestamp"]),
                    _int(block["gasUsed"]), _int(block.get("baseFeePerGas")), str(len(block["transactions"])))))
                for tx, receipt in zip(block["transactions"], block_receipts, strict=True):
                    rows["transactions"].append("\t".join((
                        number, _int(tx["transactionIndex"]), _bytea(tx["hash"]), _bytea(tx["from"]),
                        _bytea(tx.get("to")), _int(tx["value"]), _int(receipt["gasUsed"]), _int(receipt.get("status")))))
                    for log in receipt["logs"]:
                        rows["logs"].append("\t".join((
                            number, _int(log["logIndex"]), _bytea(log["transactionHash"]), _bytea(log["address"]),
                            _bytea(log["topics"][0] if log["topics"] else None), _bytea(log["data"]))))
            with conn.transaction():
                for table, lines in rows.items():
                    if lines:
                        with conn.cursor().copy(f"COPY {table} FROM STDIN") as copy:
                            copy.write("\n".join(lines) + "\n")


def lean_main(url: str, dsn: str, first: int, head: int, batch: int) -> None:
    """Batches of `batch` blocks dealt to 2 processes in turn, each fetching and copying its own."""
    import importlib
    import multiprocessing

    for module in ("orjson", "psycopg", "requests"):  # imported once, before the fork, not by each process
        importlib.import_module(module)

    batches = [(b, min(b + batch - 1, head)) for b in range(first, head + 1, batch)]
    procs = [multiprocessing.get_context("fork").Process(target=_lean_part, args=(url, dsn, batches[i::WORKERS]))
             for i in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a lean loader process failed: {[p.exitcode for p in procs]}")


def raw_main(url: str, first: int, head: int) -> None:
    """The raw client in a process of its own, so that its start-up counts as the others' does."""
    from bench_backfill import raw_ceiling

    print(f"{raw_ceiling(url, first, head):.3f}")


# -- installing the peers --

def _venv(peers_dir: Path, python: str, name: str, version: str, packages: list[str],
          fix: "callable | None" = None) -> tuple[Path | None, str]:
    """The virtualenv of one peer at one version, made and installed on first use (a marker file
    says it is complete); (its bin directory, "") or (None, why not)."""
    venv = peers_dir / f"{name}-{version}-venv"
    done = venv / ".installed"
    if done.exists():
        return venv / "bin", ""
    shutil.rmtree(venv, ignore_errors=True)
    print(f"# installing {name} {version} into {venv}", file=sys.stderr, flush=True)
    # uv (which scripts/setup-venv puts beside this Python) installs both peers in about 8 s; pip
    # took about 40 s.
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():
        commands = [[str(uv), "venv", "-q", "--python", python, str(venv)],
                    [str(uv), "pip", "install", "-q", "--python", str(venv / "bin" / "python"), *packages]]
    else:
        commands = [[python, "-m", "venv", str(venv)],
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *packages]]
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)
        if fix:
            fix(venv)
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        errors = [line for line in detail.splitlines() if "ERROR" in line or "Error" in line] or detail.splitlines()
        return None, (errors[-1] if errors else str(e)).strip()[:200]
    done.write_text(" ".join(packages) + "\n")
    return venv / "bin", ""


def _fix_ethereum_etl(venv: Path) -> None:
    """parsimonious 0.8.1 (eth-abi 2's pin) imports inspect.getargspec, gone since Python 3.11."""
    bin_dir = venv / "bin"
    for expressions in venv.glob("lib/python*/site-packages/parsimonious/expressions.py"):
        text = expressions.read_text()
        expressions.write_text(text.replace("from inspect import getargspec\n",
                                            "from inspect import getfullargspec as getargspec\n"))
    subprocess.run([str(bin_dir / "ethereumetl"), "export_blocks_and_transactions", "--help"], check=True,
                   capture_output=True, text=True, timeout=120)


def install_peers(peers_dir: Path, python: str) -> dict[str, tuple[Path | None, str]]:
    peers_dir.mkdir(parents=True, exist_ok=True)
    with (peers_dir / ".lock").open("w") as lock:  # one install at a time (tests side by side, say)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _install_peers(peers_dir, python)


def _install_peers(peers_dir: Path, python: str) -> dict[str, tuple[Path | None, str]]:
    cryo = _venv(peers_dir, python, "cryo", CRYO_VERSION, [f"cryo=={CRYO_VERSION}"])
    if cryo[0] is not None:
        try:
            subprocess.run([str(cryo[0] / "python"), "-c", "import cryo"], check=True, capture_output=True,
                           text=True, timeout=120)
        except subprocess.SubprocessError as e:
            cryo = None, f"import cryo failed: {(getattr(e, 'stderr', '') or str(e)).strip().splitlines()[-1:]}"
    etl = _venv(peers_dir, python, "ethereum-etl", ETHEREUM_ETL_VERSION, ETHEREUM_ETL_PACKAGES, fix=_fix_ethereum_etl)
    return {"cryo": cryo, "ethereum-etl": etl}


# -- the runs --

class RunFailed(Exception):
    """A run's command exited with an error."""


def timed(cmds: list[list[str]], cores, **kw) -> tuple[float, list[str]]:
    """Runs the commands one after the other inside `cores` (their CPU as its client's): the
    seconds from the first's start to the last's exit, and each one's stdout."""
    outs = []
    with cores:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        for cmd in cmds:
            done = subprocess.run(cmd, capture_output=True, text=True, **kw)
            if done.returncode != 0:
                raise RunFailed(f"{cmd[:3]} exited with {done.returncode}: {done.stderr[-2000:]}")
            outs.append(done.stdout)
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cores.client_seconds = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    return elapsed, outs


def count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)



def rate_cell(blocks_per_second: float) -> str:
    """Blocks/s for the table: whole numbers, but two digits below 10 (a run on a loaded machine
    may go below one block a second, which is not none)."""
    return f"{blocks_per_second:,.0f}" if blocks_per_second >= 10 else f"{blocks_per_second:.2g}"

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_lean":
        return lean_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    if len(sys.argv) > 1 and sys.argv[1] == "_raw":
        return raw_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

    import psycopg

    from bench_backfill import Cores, drop_database, fresh_database, indexer_run
    from indexer.testing.anvil import Anvil, build_dense

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dense", type=int, default=2_000, help="blocks on the dense chain (0 to skip)")
    ap.add_argument("--dense-txs", type=int, default=50, help="transactions per dense block")
    ap.add_argument("--sparse", type=int, default=200_000, help="empty blocks on the sparse chain (0 to skip)")
    ap.add_argument("--lean-batch", type=int, default=BATCH,
                    help="blocks per request and per COPY of the lean script (default %(default)s)")
    ap.add_argument("--peers-dir", type=Path, default=REPO / ".cache" / "peers",
                    help="where the peers' virtualenvs are made (kept between runs)")
    ap.add_argument("--python", default=shutil.which("python3.11") or "python3",
                    help="the Python the peers' virtualenvs are made with")
    ap.add_argument("--database-url", default=os.environ.get("INDEXER_BENCH_DATABASE_URL",
                                                             "postgresql://postgres@127.0.0.1:5432/postgres"))
    args = ap.parse_args()
    for name in ("dense", "dense_txs", "sparse"):
        if getattr(args, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must be 0 or more")
    if not 1 <= args.lean_batch <= 10_000:
        ap.error("--lean-batch must be 1 to 10,000")

    peers = install_peers(args.peers_dir, args.python)
    for name, (bin_dir, why) in peers.items():
        if bin_dir is None:
            print(f"{name} could not be installed here ({why}): not run.")
    me = str(Path(__file__).resolve())
    chains = []
    if args.dense:
        chains.append(("dense", args.dense, ("--no-mining",)))
    if args.sparse:
        chains.append(("sparse", args.sparse, ("--prune-history", "--hardfork", "cancun")))
    table: list[tuple[str, dict[str, float | None], float]] = []
    cores_rows: list[tuple[str, str, str]] = []
    notes: list[str] = []
    for kind, size, anvil_args in chains:
        t = time.perf_counter()
        with Anvil(*anvil_args) as node, tempfile.TemporaryDirectory(prefix="bench_peers_") as scratch:
            if kind == "sparse":
                node.rpc("anvil_mine", hex(size - 1), "0x1")
                transactions = 0
            else:
                build_dense(node, size - 1, args.dense_txs)
                transactions = 1 + (size - 1) * args.dense_txs  # the emitter's creation, then the blocks'
            first, head = 0, node.head()
            blocks = head - first + 1
            label = (f"{kind}, {blocks:,} blocks × {args.dense_txs} tx" if kind == "dense"
                     else f"{kind}, {blocks:,} empty blocks")
            print(f"# {label}: built in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
            rates: dict[str, float | str | None] = {}

            def run(column: str, cmds: list[list[str]], check, *, peer: bool = False, output: Path | None = None,
                    **kw) -> None:
                cores = Cores(node.proc.pid)
                try:
                    elapsed, outs = timed(cmds, cores, **kw)
                except RunFailed as exc:
                    if not peer:
                        raise SystemExit(str(exc)) from None
                    # A peer that crashed (cryo 0.3.2 has died of SIGSEGV here under load) is run once
                    # more; failing again, its cell says so, and the other runs go on.
                    print(f"# {kind}: {column}: {str(exc)[:300]}; once more", file=sys.stderr, flush=True)
                    if output is not None:  # what the crashed run wrote: cryo skips the chunks it finds
                        shutil.rmtree(output, ignore_errors=True)
                    try:
                        elapsed, outs = timed(cmds, cores, **kw)
                    except RunFailed as again:
                        rates[column] = "failed"
                        notes.append(f"{column} failed twice on the {kind} chain: {str(again).splitlines()[0][:200]}")
                        return
                check(outs)
                rates[column] = blocks / elapsed
                cores_rows.append((kind, column, str(cores)))
                print(f"# {kind}: {column}: {blocks / elapsed:,.0f} blocks/s ({elapsed:.1f} s), cores node/client/rest "
                      f"{cores}", file=sys.stderr, flush=True)

            raw: list[float] = []
            inside: list[float] = []  # the raw client's own figure, from its first request to its last

            def raw_run() -> None:
                run(PEER_COLUMNS[0], [[sys.executable, me, "_raw", node.url, str(first), str(head)]],
                    lambda outs: inside.append(float(outs[0])))
                raw.append(rates.pop(PEER_COLUMNS[0]))

            raw_run()

            # The lean script, into its scratch database (its tables made before the clock starts).
            name = f"bench_{os.getpid()}_{kind}_lean"
            dsn = fresh_database(args.database_url, name)
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(LEAN_TABLES)

            def lean_check(_: list[str]) -> None:
                with psycopg.connect(dsn) as c:
                    counts = [c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("blocks", "transactions")]
                assert counts == [blocks, transactions], (counts, blocks, transactions)

            lean = [sys.executable, me, "_lean", node.url, dsn, str(first), str(head), str(args.lean_batch)]
            run(PEER_COLUMNS[1], [lean], lean_check)
            drop_database(args.database_url, name)

            cryo_bin = peers["cryo"][0]
            if cryo_bin is None:
                rates[PEER_COLUMNS[2]] = None
            else:
                out_dir = Path(scratch) / "cryo"
                code = (f"import cryo; cryo.freeze(['blocks', 'transactions', 'logs'], blocks=['{first}:{head + 1}'], "
                        f"rpc={node.url!r}, output_dir={str(out_dir)!r}, verbose=True)")

                def cryo_check(outs: list[str]) -> None:
                    collected = re.search(r"blocks collected: ([\d,]+)", outs[0])
                    assert collected and int(collected[1].replace(",", "")) == blocks, outs[0][-1500:]
                    assert re.search(r"chunks errored: +0 /", outs[0]), outs[0][-1500:]
                    assert len(list(out_dir.glob("*__blocks__*.parquet"))) >= 1, list(out_dir.iterdir())

                run(PEER_COLUMNS[2], [[str(cryo_bin / "python"), "-c", code]], cryo_check, peer=True, output=out_dir)
                shutil.rmtree(out_dir, ignore_errors=True)

            etl_bin = peers["ethereum-etl"][0]
            if etl_bin is None:
                rates[PEER_COLUMNS[3]] = None
            else:
                out = Path(scratch) / "etl"
                out.mkdir()
                etl = str(etl_bin / "ethereumetl")
                common = ["--batch-size", str(BATCH), "--max-workers", str(WORKERS), "--provider-uri", node.url]
                cmds = [[etl, "export_blocks_and_transactions", "--start-block", str(first), "--end-block", str(head),
                         *common, "--blocks-output", str(out / "blocks.csv"),
                         "--transactions-output", str(out / "transactions.csv")],
                        [etl, "extract_csv_column", "--input", str(out / "transactions.csv"), "--column", "hash",
                         "--output", str(out / "transaction_hashes.txt")],
                        [etl, "export_receipts_and_logs", "--transaction-hashes", str(out / "transaction_hashes.txt"),
                         *common, "--receipts-output", str(out / "receipts.csv"), "--logs-output", str(out / "logs.csv")]]

                def etl_check(_: list[str]) -> None:
                    # CSV files with a header line; ethereum-etl writes none when it has no rows.
                    written = [max(0, count_lines(out / f) - 1) if (out / f).exists() else 0
                               for f in ("blocks.csv", "transactions.csv", "receipts.csv")]
                    assert written == [blocks, transactions, transactions], (written, blocks, transactions)

                run(PEER_COLUMNS[3], cmds, etl_check, peer=True)
                shutil.rmtree(out, ignore_errors=True)

            cores = Cores(node.proc.pid)
            rate, indexed_rate, rss = indexer_run(args.database_url, node.url, first, head, WORKERS,
                                                  f"bench_{os.getpid()}_{kind}_indexer", cores)
            rates[PEER_COLUMNS[4]] = rate
            cores_rows.append((kind, PEER_COLUMNS[4], str(cores)))
            print(f"# {kind}: this indexer: {rate:,.0f} blocks/s ({indexed_rate:,.0f} to the last range indexed), "
                  f"peak worker RSS {rss} MB, cores node/client/rest {cores}", file=sys.stderr, flush=True)

            raw_run()
            rates[PEER_COLUMNS[0]] = sum(raw) / 2
            table.append((label, rates, rates[PEER_COLUMNS[4]] / rates[PEER_COLUMNS[0]]))
            notes.append(f"{kind}: the raw client ran at {raw[0]:,.0f} blocks/s before the others and {raw[1]:,.0f} after "
                         f"(its process's start-up, the interpreter's and bench_backfill's imports, included; from its "
                         f"first request to its last, {inside[0]:,.0f} and {inside[1]:,.0f}); this indexer "
                         f"{indexed_rate:,.0f} blocks/s to the last range indexed, before the decode jobs and index "
                         f"builds that end its run, peak worker RSS {rss} MB.")

    print(f"Blocks/s from each run's start to its exit, process start-up included, on the same anvil chains in one run; "
          f"the raw client is the mean of its runs before and after the others, and the indexer's ratio is to it. "
          f"Peers: cryo {CRYO_VERSION}, ethereum-etl {ETHEREUM_ETL_VERSION}.\n")
    print("| chain | " + " | ".join(PEER_COLUMNS) + " |")
    print("|---|" + "---:|" * len(PEER_COLUMNS))
    for label, rates, ratio in table:
        cells = ["not run" if rates[c] is None else rates[c] if isinstance(rates[c], str) else rate_cell(rates[c])
                 for c in PEER_COLUMNS]
        cells[-1] += f" ({ratio:.2f}×)"
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    for note in notes:
        print(f"- {note}")
    print()
    print("Cores busy during each run (CPU seconds over wall seconds): the node / the run's own processes / the rest "
          "(PostgreSQL, mostly).\n")
    print("| chain | run | cores busy: node / client / rest |")
    print("|---|---|---:|")
    for kind, column, cores in cores_rows:
        print(f"| {kind} | {column} | {cores} |")


if __name__ == "__main__":
    main()
