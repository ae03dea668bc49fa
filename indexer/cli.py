"""`indexer` command line: each command calls one function of the library and prints its result
in a line; `main` turns every error into one line and an exit code. The grammar is
`cli_parser.py`'s."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Sequence

import psycopg
import pydantic

from .base import chains, db, settings, signals
from .base.errors import DatabaseUnavailable, IndexerError, Secrets, first_line, redact
from .base.logs import configure as configure_logs
from .base.wording import counted
from .cli_parser import EXIT_USAGE, build_parser
from .jobqueue import queue, retention
from .jobs import planner, reaper

# The commands that need eth-abi, the node's client or the pool import them where they run: every
# command would otherwise pay their half a second of imports at its start (plan, status, migrate).

EXIT_RUNTIME = 1
EXIT_INTERRUPTED = 130  # as a shell reports a command killed by SIGINT


def cmd_migrate(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.chain_url) as conn:
        applied = db.migrate(conn, cfg.chain)
    of = "" if cfg.chain is None else f" to the chain {cfg.chain}"
    print(f"applied {len(applied)} migration(s){of}" + (f": {', '.join(applied)}" if applied else "; schema is up to date"))
    return 0


def cmd_plan(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.chain_url) as conn:
        db.check_schema(conn)  # a database migrated by an older version lacks the partitions' function
        result = planner.plan(conn, args.start, args.end, cfg.chunk, partition_blocks=cfg.partition_blocks,
                              index_now=cfg.query_indexes == "during", traces=args.traces)
    already = result.blocks_already_planned
    print(
        f"planned {counted(result.jobs_added, 'index_traces job' if args.traces else 'index_blocks job')}"
        f" ({counted(result.blocks_added, 'block')}) for"
        f" blocks {args.start:,}..{args.end - 1:,}; {counted(already, 'block')} {'was' if already == 1 else 'were'}"
        " already planned"
    )
    return 0


def cmd_work(cfg: settings.Settings, args: argparse.Namespace) -> int:
    from .operations import pool

    if args.follow and args.drain:
        return _usage_error(args.command, "--follow never ends and --drain ends once the queue is empty: give one of them")
    if args.start is not None and not args.follow:
        return _usage_error(args.command, "--from goes with --follow (a backfill's range is planned by `indexer plan`)")
    return pool.run(cfg, drain=args.drain, follow=args.follow, follow_from=args.start)


def cmd_monitor(cfg: settings.Settings, args: argparse.Namespace) -> int:
    if not cfg.metrics_port:
        raise IndexerError("INDEXER_METRICS_PORT is 0: nothing to serve")
    with db.connect(cfg.chain_url) as conn:  # fail now, clearly, if the database is unreachable
        chain = db.chain_of(conn)
    from .operations import exporter

    stop = threading.Event()
    signals.on_stop(stop.set)
    exporter.serve_database_gauges(cfg.chain_url, chain=chain, host=cfg.metrics_host, port=cfg.metrics_port,
                                  interval=cfg.db_metrics_seconds, stop=stop)
    return 0


def cmd_verify(cfg: settings.Settings, args: argparse.Namespace) -> int:
    from .node.rpc import RpcClient
    from .operations import verify, verify_node

    repair_with_chunk = cfg.chunk if args.repair else None
    if args.max_depth is not None and not (args.against_node and args.repair):
        return _usage_error(args.command, "--max-depth bounds the repair of --against-node: it goes with both"
                            " --against-node and --repair")
    if args.against_node:
        if args.roots:
            return _usage_error(args.command, "--roots checks the stored rows; it cannot go with --against-node")
        client = RpcClient.from_settings(cfg, max_batch=cfg.rpc_batch)
        repair = verify_node.Repair(cfg.chunk, args.max_depth or cfg.max_reorg_depth) if args.repair else None
        with db.connect(cfg.chain_url) as conn:
            ok = verify_node.run_against_node(conn, client, args.start, args.end, repair=repair)
        return 0 if ok else 1
    with db.connect(cfg.chain_url) as conn:
        ok = verify.run(conn, args.start, args.end, repair_with_chunk=repair_with_chunk, roots=args.roots)
    return 0 if ok else 1


def cmd_prune(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.chain_url) as conn:
        dropped = retention.prune(conn, args.older_than)
    print(f"dropped {len(dropped)} month(s) of finished jobs" + (f": {', '.join(dropped)}" if dropped else ""))
    return 0


def cmd_reap(cfg: settings.Settings, args: argparse.Namespace) -> int:
    reaper.run(cfg, every=args.every)
    return 0


def cmd_retry(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.chain_url) as conn:
        n = queue.retry_failed(conn)
    print(f"re-queued {n} failed job(s)")
    return 0


def cmd_status(cfg: settings.Settings, args: argparse.Namespace) -> int:
    from .operations import chains_status, status

    stop = threading.Event()
    signals.on_stop(stop.set)
    with db.connect(cfg.chain_url) as conn:
        # No chain named (by --chain or INDEXER_CHAIN): a line for each chain of a database of
        # several, or the one chain of a database of one, whatever its name.
        every = [] if cfg.chain is not None else chains.registered(conn)
        if len(every) > 1:
            chains_status.show(conn, every, db.complete_chains(conn, every), as_json_lines=args.json, watch=args.watch,
                               stop=stop, lease_seconds=cfg.lease_seconds, out=sys.stdout)
            return 0
        if every:
            chains.use(conn, every[0])
        status.show(conn, as_json_lines=args.json, watch=args.watch, stop=stop, lease_seconds=cfg.lease_seconds)
    return 0


def cmd_abi(cfg: settings.Settings, args: argparse.Namespace) -> int:
    args.command = f"abi {args.abi_command}"  # errors then name the action, as argparse's do
    return ABI_COMMANDS[args.abi_command](cfg, args)


def cmd_abi_add(cfg: settings.Settings, args: argparse.Namespace) -> int:
    from .decoding import abi
    from .decoding.abi_names import short

    new = abi.registration(args.name, args.file, addresses=args.addresses, from_block=args.from_block)
    with db.connect(cfg.chain_url) as conn:
        added = abi.add(conn, new, chunk=cfg.chunk)
    print(f"registered ABI {args.name}: {len(added.tables)} event table(s)")
    for event, table in added.tables:
        print(f"  {short(event.signature)} -> {table}")
    for event in added.anonymous:
        print(f"skipped anonymous {short(event.describe())}: it has no topic0 to find its logs by")
    since = f" from block {args.from_block:,}" if args.from_block else ""
    print(f"planned {added.jobs:,} decode job(s) ({counted(added.blocks, 'block')}) for the blocks indexed so far{since};"
          " blocks indexed later are decoded as they are")
    return 0


def cmd_abi_list(cfg: settings.Settings, args: argparse.Namespace) -> int:
    from .decoding import abi
    from .decoding.abi_names import short

    with db.connect(cfg.chain_url) as conn:
        listed = abi.listing(conn)
    if not listed:
        print("no ABI is registered")
    for entry in listed:
        if entry.dropping:
            print(f"{entry.name}: being dropped, {len(entry.tables)} event table(s) left (`indexer abi drop"
                  f" {entry.name}` finishes a drop that was interrupted)")
            continue
        where = ", ".join("0x" + a.hex() for a in entry.addresses) if entry.addresses else "any address"
        print(f"{entry.name}: {where}, from block {entry.from_block:,}, {len(entry.tables)} event table(s)")
        for signature, table, rows in entry.tables:
            print(f"  {short(signature)} -> {table}: {rows:,} row(s)")
    return 0


def cmd_abi_drop(cfg: settings.Settings, args: argparse.Namespace) -> int:
    from .decoding import abi

    with db.connect(cfg.chain_url) as conn:
        tables = abi.drop(conn, args.name)
    print(f"dropped ABI {args.name} and its {len(tables)} table(s)")
    return 0


ABI_COMMANDS = {"add": cmd_abi_add, "list": cmd_abi_list, "drop": cmd_abi_drop}


COMMANDS = {
    "migrate": cmd_migrate,
    "plan": cmd_plan,
    "work": cmd_work,
    "monitor": cmd_monitor,
    "verify": cmd_verify,
    "prune": cmd_prune,
    "reap": cmd_reap,
    "retry": cmd_retry,
    "status": cmd_status,
    "abi": cmd_abi,
}

# CLI flags that override a setting of the same name.
SETTING_FLAGS = ("database_url", "chain", "rpc_url", "chunk", "max_attempts", "workers", "batch_size", "log_level")


DEFAULT_DATABASE = "INDEXER_DATABASE_URL is not set, and this is its default"

# PostgreSQL's class 53, "insufficient resources" (out of memory, or of shared memory for its lock
# table; disk full; too many connections): the server answered, and says what it lacks.
RESOURCE_ERRORS = (psycopg.errors.InsufficientResources, psycopg.errors.OutOfMemory, psycopg.errors.DiskFull,
                   psycopg.errors.TooManyConnections, psycopg.errors.ConfigurationLimitExceeded)


def _interrupt() -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("plan", "verify") and args.start >= args.end:
        return _usage_error(args.command, f"--from ({args.start}) must be below --to ({args.end}); --to is exclusive (see --help)")
    try:
        cfg = settings.load(**{k: getattr(args, k, None) for k in SETTING_FLAGS})
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        where = "INDEXER_" + "_".join(str(p) for p in err["loc"]).upper()
        message = err["msg"].removeprefix("Value error, ")
        return _usage_error(args.command, f"{where}: {message}")
    try:
        db.check_url(cfg.database_url)
    except ValueError as exc:
        return _usage_error(args.command, f"{'--database-url' if args.database_url else 'INDEXER_DATABASE_URL'}: {exc}")
    configure_logs(cfg.log_level, Secrets.of(cfg))
    # A command that can stop cleanly (work, status, reap, monitor) installs its own handler.
    signals.on_stop(_interrupt)
    # Errors about the database name the one reached (a default URL may reach a cluster that is not the indexer's).
    database = db.where(cfg.database_url)
    default = "database_url" not in cfg.model_fields_set
    try:
        return COMMANDS[args.command](cfg, args)
    except IndexerError as exc:
        hint = f" ({DEFAULT_DATABASE})" if default and isinstance(exc, DatabaseUnavailable) else ""
        print(f"indexer {args.command}: error: {exc}{hint}", file=sys.stderr)
        return exc.exit_code
    except psycopg.errors.UndefinedTable as exc:
        if cfg.chain is not None:  # a chain not migrated yet, or misspelled
            print(f"indexer {args.command}: error: the chain {cfg.chain} in {database} has no tables of the indexer"
                  f" ({first_line(exc)}): run `indexer migrate --chain {cfg.chain}` first, or check the chain's name"
                  " (`indexer status` lists the chains)", file=sys.stderr)
            return EXIT_RUNTIME
        advice = (f"{DEFAULT_DATABASE}: set it to the indexer's database, or run `indexer migrate` to make this"
                  " one the indexer's") if default else "run `indexer migrate` first"
        print(f"indexer {args.command}: error: {database} lacks the indexer's tables ({first_line(exc)}): {advice}",
              file=sys.stderr)
        return EXIT_RUNTIME
    except RESOURCE_ERRORS as exc:
        hint = f" ({' '.join(exc.diag.message_hint.split())})" if exc.diag.message_hint else ""
        print(f"indexer {args.command}: error: the database server is out of resources: {redact(first_line(exc))}"
              f"{redact(hint)}", file=sys.stderr)
        return EXIT_RUNTIME
    except psycopg.OperationalError as exc:
        lost = "" if db.statement_failed(exc) else "lost "  # a lock or statement timeout is not a lost database
        print(f"indexer {args.command}: error: {lost}{database}: {redact(first_line(exc))}", file=sys.stderr)
        return EXIT_RUNTIME
    except psycopg.Error as exc:
        print(f"indexer {args.command}: error: {database}: {redact(first_line(exc))}", file=sys.stderr)
        return EXIT_RUNTIME
    except KeyboardInterrupt:
        print(f"indexer {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _usage_error(command: str, message: str) -> int:
    print(f"indexer {command}: error: {redact(message)}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
