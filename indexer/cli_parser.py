"""The `indexer` command line's grammar: every command, flag and help text (`build_parser`), and
the parsing of its values (block numbers with or without thousands separators, durations such
as 30d), each refused with one line and exit 2.
"""

from __future__ import annotations

import argparse
import re
from datetime import timedelta
from importlib import metadata
from typing import Callable, NoReturn


from .base import settings
from .base.block_range import MAX_END
from .base.errors import redact
from .base.settings import DEFAULT_BATCH_SIZE, MAX_CHUNK, MAX_SECONDS, MAX_WORKERS
from .decoding import abi_bounds
from .jobqueue import retention
from .jobs import planner

EXIT_USAGE = 2
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
    common.add_argument("--chain", metavar="NAME",
                        help="the chain to work on, the schema holding it; overrides INDEXER_CHAIN (default public)")
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
    p.add_argument("--batch-size", type=positive_int, metavar="BLOCKS",
                   help=f"blocks per write (default {DEFAULT_BATCH_SIZE}; INDEXER_BATCH_SIZE)")
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
        "and the last reorg; a halted following comes first, with the command that lets it go on. In a database "
        "of several chains, with no chain named (--chain or INDEXER_CHAIN): one line per chain.",
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
        f" at most {abi_bounds.MAX_EVENTS} events of at most {abi_bounds.MAX_PARAMS} parameters each.",
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
