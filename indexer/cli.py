"""`indexer` command line: parsing only; each command calls one function of the library and
prints its result in a line."""

from __future__ import annotations

import argparse
import re
import sys
import threading
from datetime import timedelta
from importlib import metadata
from typing import Callable, NoReturn, Sequence

import psycopg
import pydantic

from . import abi, abi_parse, db, exporter, planner, pool, queue, reaper, retention, settings, signals, status, verify
from .abi_names import short
from .block_range import MAX_END
from .errors import DatabaseUnavailable, IndexerError, Secrets, first_line, redact
from .logs import configure as configure_logs
from .rpc import RpcClient
from .settings import MAX_CHUNK, MAX_SECONDS, MAX_WORKERS
from .wording import counted

EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # as a shell reports a command killed by SIGINT
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (no usage dump), exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {redact(message)} (see --help)\n")


def _argument(parse: Callable[[str], float], invalid: str, valid: Callable[[float], bool], out_of_range: str):
    """An argparse type: `parse`, then `valid`, each failure one clear message."""

    def convert(text: str):  # type: ignore[no-untyped-def]
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{invalid}: {text!r}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(out_of_range.format(text=repr(text)))
        return value

    return convert


# ASCII digits, grouped by thousands with commas or not (2,000,000 reads better than 2000000).
# Python's int() and float() also take '١٢٣', ' 12 ', '1_000', '+5' and 'inf'.
_DIGITS = re.compile(r"[0-9]+|[0-9]{1,3}(?:,[0-9]{3})+", re.ASCII)
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", re.ASCII)


def _whole_number(text: str) -> int:
    digits = text.removeprefix("-")
    if not _DIGITS.fullmatch(digits):
        raise ValueError(text)
    n = _digits_value(digits)
    return n if digits == text else -n


def _digits_value(digits: str) -> int:
    # Past 25 digits, any number is beyond every bound here; int() would refuse 4,300 of them.
    return int(digits.replace(",", "")) if len(digits) <= 25 else 10**25


def _decimal(text: str) -> float:
    if not _DECIMAL.fullmatch(text.removeprefix("-")):
        raise ValueError(text)
    return float(text)


def block_number(text: str) -> int:
    digits = text.removeprefix("-")
    if not _DIGITS.fullmatch(digits):
        raise argparse.ArgumentTypeError(f"not a block number: {text!r}")
    if digits != text:
        raise argparse.ArgumentTypeError(f"block numbers cannot be negative: {text!r}")
    n = _digits_value(digits)
    if n > MAX_END:
        raise argparse.ArgumentTypeError(
            f"block numbers are at most {MAX_END:,} (PostgreSQL's bigint; --to is exclusive), got {text!r}")
    return n


chunk_size = _argument(_whole_number, "not a whole number of blocks", lambda v: 0 < v <= MAX_CHUNK,
                       f"must be between 1 and {MAX_CHUNK:,} blocks, got {{text}}")
worker_count = _argument(_whole_number, "not a whole number", lambda v: 0 < v <= MAX_WORKERS,
                         f"must be between 1 and {MAX_WORKERS}, got {{text}}")
positive_int = _argument(_whole_number, "not a whole number", lambda v: v > 0, "must be at least 1, got {text}")
positive_seconds = _argument(_decimal, "not a number of seconds", lambda v: 0 < v <= MAX_SECONDS,
                             f"must be more than 0 and at most {MAX_SECONDS:.0f} seconds, got {{text}}")


def retention_age(text: str) -> timedelta:
    try:
        return retention.parse_retention(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> Parser:
    common = Parser(add_help=False)
    common.add_argument("--database-url", metavar="URL", help="overrides INDEXER_DATABASE_URL")
    common.add_argument("--log-level", choices=LOG_LEVELS, help="overrides INDEXER_LOG_LEVEL (default INFO)")

    parser = Parser(prog="indexer", description="Backfill EVM chain data into Postgres, coordinated by SKIP LOCKED.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {metadata.version('skiplock-indexer')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser(
        "migrate",
        parents=[common],
        help="create or upgrade the schema (safe to run concurrently)",
        description="Create the indexer's tables in the database INDEXER_DATABASE_URL names, or apply the "
        "migrations it lacks, each in its own transaction, and list those applied. Safe to run concurrently: "
        "a second run waits for the first, then finds nothing to do.",
    )

    p = commands.add_parser(
        "plan",
        parents=[common],
        help="split a block range into jobs",
        description="Split blocks [--from, --to) into jobs of --chunk blocks. --to is exclusive: "
        "`--from 0 --to 2000000` plans blocks 0..1,999,999 as 200 jobs {\"from\": g, \"to\": g+9999}. "
        "Blocks already covered by a job (in any state, or archived) are skipped. One plan makes at most "
        f"{planner.MAX_JOBS:,} jobs; block numbers go up to {MAX_END:,}.",
    )
    p.add_argument("--from", dest="start", type=block_number, required=True, metavar="BLOCK", help="first block (inclusive)")
    p.add_argument("--to", dest="end", type=block_number, required=True, metavar="BLOCK", help="end block (exclusive)")
    p.add_argument("--chunk", type=chunk_size, metavar="BLOCKS", help="blocks per job (default 10000; INDEXER_CHUNK)")
    p.add_argument("--traces", action="store_true",
                   help="plan index_traces jobs instead: every call of every transaction of the range, from the"
                   " node's tracers, checked against the stored transactions (for a range indexed already, or"
                   " planned; INDEXER_TRACES=true gives every range indexed its traces)")

    p = commands.add_parser(
        "work",
        parents=[common],
        help="run a pool of workers that index the planned jobs (--follow: and the chain's new blocks)",
        description="Claim jobs, fetch their blocks, transactions, receipts and logs over JSON-RPC, "
        "and write them to Postgres. Runs the reaper too. With --follow, the pool also keeps planning the new "
        "blocks as the chain grows, forever, and rolls back the reorgs it meets (at most INDEXER_MAX_REORG_DEPTH "
        "deep). SIGTERM/SIGINT gives running jobs back and exits 0.",
    )
    p.add_argument("--rpc-url", metavar="URL[,URL...]", help="overrides INDEXER_RPC_URL; several for failover")
    p.add_argument("--workers", type=worker_count, metavar="N",
                   help=f"worker processes, at most {MAX_WORKERS} (default: CPU count; INDEXER_WORKERS)")
    p.add_argument("--batch-size", type=positive_int, metavar="BLOCKS", help="blocks per write (default 100; INDEXER_BATCH_SIZE)")
    p.add_argument("--drain", action="store_true",
                   help="exit when no job is pending or running (exit 1 if any failed), or exit 3 once the only "
                   "jobs left start beyond the safe head, saying which blocks wait for the chain to grow")
    p.add_argument("--follow", action="store_true",
                   help="index what is planned, then keep planning the chain's new blocks up to its safe head, "
                   "forever (one pool of the fleet plans; every pool may be started so)")
    p.add_argument("--from", dest="start", type=block_number, metavar="BLOCK",
                   help="with --follow: the first block to follow from, where nothing above it is planned yet "
                   "(default: the block above the highest planned)")

    commands.add_parser(
        "monitor",
        parents=[common],
        help="serve the queue and database health gauges on /metrics",
        description="Serve the database-wide gauges alone (INDEXER_METRICS_PORT), for deployments "
        "that run them apart from the workers (then set INDEXER_DB_METRICS=false for `indexer work`).",
    )

    p = commands.add_parser(
        "verify",
        parents=[common],
        help="find missing blocks, broken parent links and wrong counts; --repair plans them again",
        description="Check blocks [--from, --to) (--to is exclusive). Exit code 0 only when all is well.",
    )
    p.add_argument("--from", dest="start", type=block_number, required=True, metavar="BLOCK")
    p.add_argument("--to", dest="end", type=block_number, required=True, metavar="BLOCK")
    p.add_argument("--roots", action="store_true",
                   help="also recompute every stored block's transactions, receipts and withdrawals roots from its"
                   " rows, proving nothing is missing or altered")
    p.add_argument("--against-node", action="store_true",
                   help="instead, compare every stored block's hash with the node's canonical one (finds the"
                   " orphans a reorg below the stored blocks left, which link to each other)")
    p.add_argument("--rpc-url", metavar="URL[,URL...]", help="with --against-node: overrides INDEXER_RPC_URL")
    p.add_argument("--repair", action="store_true",
                   help="delete the suspect (or orphaned) blocks' rows and plan jobs for exactly them, in one"
                   " transaction; with --against-node, only once the node is checked: it serves the database's"
                   " chain, its blocks link to each other and to the stored block below the orphans, and the"
                   " orphans are at most --max-depth blocks deep (otherwise one line, exit 1, nothing deleted)")
    p.add_argument("--max-depth", type=positive_int, metavar="BLOCKS",
                   help="with --against-node --repair: the deepest reorg repaired, from the highest orphan down to"
                   f" the stored block the node agrees with (default {settings.DEFAULT_MAX_REORG_DEPTH};"
                   " INDEXER_MAX_REORG_DEPTH)")

    p = commands.add_parser(
        "prune",
        parents=[common],
        help="drop the months of finished jobs older than a retention",
        description="Detach (CONCURRENTLY) and drop the monthly partitions of jobs_history whose "
        "whole month is older than --older-than. Never deletes rows one by one.",
    )
    p.add_argument("--older-than", type=retention_age, required=True, metavar="AGE", help="e.g. 30d or 12h")

    p = commands.add_parser(
        "reap",
        parents=[common],
        help="take back expired leases (one pass)",
        description="Take back the jobs whose worker stopped renewing its lease (it crashed, stalled or lost the "
        "database): each goes back to pending with backoff, or to failed once out of attempts. `indexer work` "
        "runs the same pass every INDEXER_REAP_SECONDS; this runs it once, or every --every seconds.",
    )
    p.add_argument("--every", type=positive_seconds, metavar="SECONDS", help="repeat every SECONDS until stopped")
    p.add_argument("--max-attempts", type=positive_int, metavar="N", help="overrides INDEXER_MAX_ATTEMPTS")

    p = commands.add_parser(
        "retry",
        parents=[common],
        help="re-queue failed jobs",
        description="Put every failed job back to pending with its attempts reset; its last error stays until it "
        "runs again. Until then a failed job's blocks count neither as indexed nor as left to do.",
    )
    p.add_argument("--failed", action="store_true", required=True, help="re-queue every failed job")

    p = commands.add_parser(
        "status",
        parents=[common],
        help="progress, speed, ETA, and what went wrong",
        description="From the database alone: the jobs of each kind by status (index_blocks: the planned block "
        "ranges and the parts idle workers split off running ones; decode_logs: one per indexed range, decoding "
        "its stored logs; index_partition: one per partition of the chain tables whose blocks are all in, "
        "building its query indexes), blocks indexed of planned, the speed (over the last 5 minutes, or over "
        "the time the indexing ran once it has ended), the ETA or the block that jobs wait for the chain to "
        "reach, the partitions, the oldest pending job's wait, expired leases, the RPC endpoints' rates and the "
        "failed jobs with their last error. Once a pool has followed the chain's head (work --follow): the "
        "node's head, the pool that plans, the blocks indexed and decoded through, the lag in blocks and seconds "
        "and the last reorg; a halted following comes first, with the command that lets it go on.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (one per refresh with --watch)")
    p.add_argument("--watch", type=positive_seconds, nargs="?", const=2.0, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until stopped")

    p = commands.add_parser(
        "abi",
        help="decode any contract's events from the stored logs into a table per event",
        description="Register a contract's ABI; each of its events gets a table, filled by decode_logs jobs from "
        "the stored logs (never the node): for the blocks indexed so far when the ABI is added, then for each "
        "range as it is indexed.",
    )
    actions = p.add_subparsers(dest="abi_command", required=True, metavar="ACTION")
    a = actions.add_parser(
        "add",
        parents=[common],
        help="register an ABI, create its event tables and plan the decoding of the blocks indexed so far",
        description="Register the ABI in FILE (a JSON list of entries, or a compiler's or explorer's artifact with"
        " an \"abi\" list) as NAME: each non-anonymous event gets a table abi_NAME_EVENT, and decode_logs jobs"
        " are planned for every block indexed so far at or above --from-block, all in one transaction. An ABI has"
        f" at most {abi_parse.MAX_EVENTS} events of at most {abi_parse.MAX_PARAMS} parameters each.",
    )
    a.add_argument("name", metavar="NAME", help="a lower-case letter, then up to 30 lower-case letters, digits or _")
    a.add_argument("file", metavar="FILE", help="the ABI, as JSON")
    a.add_argument("--address", dest="addresses", action="append", default=[], metavar="ADDRESS",
                   help="decode only this contract's logs (repeat for several; default: any contract's)")
    a.add_argument("--from-block", type=block_number, default=0, metavar="BLOCK",
                   help="decode only logs of this block and above (default 0)")
    a.add_argument("--chunk", type=chunk_size, metavar="BLOCKS",
                   help="blocks per decode job (default 10000; INDEXER_CHUNK)")
    actions.add_parser("list", parents=[common], help="the ABIs registered, their tables and rows decoded so far",
                       description="List the registered ABIs: each one's addresses, first block and event tables, "
                       "with the rows decoded into each so far.")
    a = actions.add_parser("drop", parents=[common],
                           help="stop decoding an ABI, then drop its tables and its registration",
                           description="Stop decoding the ABI registered as NAME (waiting only for the decode windows"
                           " in flight), then drop its event tables and its registration, a bounded number of tables"
                           " per transaction. Run it again to finish a drop that was interrupted.")
    a.add_argument("name", metavar="NAME")
    return parser


def cmd_migrate(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.database_url) as conn:
        applied = db.migrate(conn)
    print(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else "; schema is up to date"))
    return 0


def cmd_plan(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.database_url) as conn:
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
    if args.follow and args.drain:
        return _usage_error(args.command, "--follow never ends and --drain ends once the queue is empty: give one of them")
    if args.start is not None and not args.follow:
        return _usage_error(args.command, "--from goes with --follow (a backfill's range is planned by `indexer plan`)")
    return pool.run(cfg, drain=args.drain, follow=args.follow, follow_from=args.start)


def cmd_monitor(cfg: settings.Settings, args: argparse.Namespace) -> int:
    if not cfg.metrics_port:
        raise IndexerError("INDEXER_METRICS_PORT is 0: nothing to serve")
    with db.connect(cfg.database_url):  # fail now, clearly, if the database is unreachable
        pass
    stop = threading.Event()
    signals.on_stop(stop.set)
    exporter.serve_database_gauges(cfg.database_url, host=cfg.metrics_host, port=cfg.metrics_port,
                                  interval=cfg.db_metrics_seconds, stop=stop)
    return 0


def cmd_verify(cfg: settings.Settings, args: argparse.Namespace) -> int:
    repair_with_chunk = cfg.chunk if args.repair else None
    if args.max_depth is not None and not (args.against_node and args.repair):
        return _usage_error(args.command, "--max-depth bounds the repair of --against-node: it goes with both"
                            " --against-node and --repair")
    if args.against_node:
        if args.roots:
            return _usage_error(args.command, "--roots checks the stored rows; it cannot go with --against-node")
        client = RpcClient(cfg.rpc_urls, timeout=cfg.rpc_timeout, max_attempts=cfg.rpc_max_attempts,
                           max_batch=cfg.rpc_batch)
        repair = verify.Repair(cfg.chunk, args.max_depth or cfg.max_reorg_depth) if args.repair else None
        with db.connect(cfg.database_url) as conn:
            ok = verify.run_against_node(conn, client, args.start, args.end, repair=repair)
        return 0 if ok else 1
    with db.connect(cfg.database_url) as conn:
        ok = verify.run(conn, args.start, args.end, repair_with_chunk=repair_with_chunk, roots=args.roots)
    return 0 if ok else 1


def cmd_prune(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.database_url) as conn:
        dropped = retention.prune(conn, args.older_than)
    print(f"dropped {len(dropped)} month(s) of finished jobs" + (f": {', '.join(dropped)}" if dropped else ""))
    return 0


def cmd_reap(cfg: settings.Settings, args: argparse.Namespace) -> int:
    reaper.run(cfg, every=args.every)
    return 0


def cmd_retry(cfg: settings.Settings, args: argparse.Namespace) -> int:
    with db.connect(cfg.database_url) as conn:
        n = queue.retry_failed(conn)
    print(f"re-queued {n} failed job(s)")
    return 0


def cmd_status(cfg: settings.Settings, args: argparse.Namespace) -> int:
    stop = threading.Event()
    signals.on_stop(stop.set)
    with db.connect(cfg.database_url) as conn:
        status.show(conn, as_json_lines=args.json, watch=args.watch, stop=stop, lease_seconds=cfg.lease_seconds)
    return 0


def cmd_abi(cfg: settings.Settings, args: argparse.Namespace) -> int:
    args.command = f"abi {args.abi_command}"  # errors then name the action, as argparse's do
    return ABI_COMMANDS[args.abi_command](cfg, args)


def cmd_abi_add(cfg: settings.Settings, args: argparse.Namespace) -> int:
    new = abi.registration(args.name, args.file, addresses=args.addresses, from_block=args.from_block)
    with db.connect(cfg.database_url) as conn:
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
    with db.connect(cfg.database_url) as conn:
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
    with db.connect(cfg.database_url) as conn:
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
SETTING_FLAGS = ("database_url", "rpc_url", "chunk", "max_attempts", "workers", "batch_size", "log_level")


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
