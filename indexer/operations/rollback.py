"""A reorg met while following the head, rolled back without a person.

A worker whose batch does not link to the stored blocks beside it (`forks.ForkMismatch`) asks
`roll_back` before it defers its job. The blocks around the one at fault, as deep as a rollback
may go on either side of it (INDEXER_MAX_REORG_DEPTH), are compared with the node's canonical
hashes (`verify_node.against_node`); the orphans found are deleted only if the node passes the checks
of a manual repair (`forks.plan_rollback`: the chain the database records, its blocks linked from
the fork point up, the fork point real, the depth within the bound), from every table that holds
rows of a block, and planned again, in one transaction (`verify_node.replan_orphans`). The deferred job
then links and completes.

A refusal is not taken at the node's first word: a node switching forks (or a balancer switching
nodes) may answer an unlinked chain, or a second reorg may land while the worker compares. The
worker compares again, COMPARISONS times in all, COMPARE_AGAIN_SECONDS apart, and only a refusal
met every time halts the following (`follow_state.halt`): nothing is deleted, the head planner plans
nothing more, and `indexer status`, the log and `indexer_follow_halted` say what to run. While
halted, workers meeting the fork only defer their jobs, and the node is not asked again. A node
whose answers changed between the comparison and the checks every time (reorgs still landing,
`forks.Refusal.again`) halts nothing: the job waits, as when the node cannot be asked, and
compares again later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg

from ..base.errors import ChainDataError, IndexerError, redact
from ..base.settings import Settings
from ..chaindata import forks
from ..node.rpc import RpcClient
from ..node.rpc_errors import RpcError
from . import follow_state, verify_node

log = logging.getLogger(__name__)

# The node's answers are compared this many times, this far apart, before a refusal halts the following.
COMPARISONS = 3
COMPARE_AGAIN_SECONDS = 0.5


@dataclass(frozen=True)
class RolledBack:
    """What became of a fork met: `done` True when the job may run again at once (its orphans
    are gone, by this worker or another); False when it must wait (the following is halted, or
    the node could not be asked now)."""

    done: bool
    detail: str


def roll_back(conn: psycopg.Connection, client: RpcClient, mismatch: forks.ForkMismatch, cfg: Settings) -> RolledBack:
    depth = cfg.max_reorg_depth
    current = follow_state.state(conn)
    if current is not None and current.halted_at is not None:
        return RolledBack(False, f"the following is halted ({current.halted_reason}); run `{current.halted_command}`")
    start, end = max(0, mismatch.stored - depth - 1), mismatch.stored + depth + 2
    command = f"indexer verify --from {start} --to {end} --against-node --repair"
    for comparison in range(1, COMPARISONS + 1):
        try:
            report = verify_node.against_node(conn, client, start, end, repair=verify_node.Repair(cfg.chunk, depth))
        except (RpcError, ChainDataError) as exc:  # the node cannot be asked now: the job waits and tries again
            return RolledBack(False, f"cannot roll back now: {redact(str(exc))}")
        except IndexerError as exc:  # a node of another chain: nothing compared, nothing deleted
            refused = forks.Refusal(str(exc))
        else:
            if report.refused is None:
                break
            refused = report.refused
        if comparison < COMPARISONS:
            log.warning("reorg not rolled back yet: %s; nothing deleted, comparing with the node again (%d of %d)",
                        redact(refused.reason), comparison + 1, COMPARISONS)
            time.sleep(COMPARE_AGAIN_SECONDS)
    else:
        if refused.again:  # a reorg still under way: the job waits, as when the node cannot be asked
            return RolledBack(False, f"cannot roll back now: {redact(refused.reason)}")
        if refused.depth is not None:
            command += f" --max-depth {refused.depth}"
        return _refused(conn, mismatch.stored, refused.depth, refused.reason, command)
    if report.rollback is not None and report.repaired_blocks:
        plan = report.rollback
        log.warning("reorg rolled back: %d orphaned block(s) above block %d (depth %d) deleted and planned again",
                    report.repaired_blocks, plan.anchor, plan.depth)
        return RolledBack(True, f"rolled back a reorg of depth {plan.depth} above block {plan.anchor}")
    # No orphan left: another worker rolled this fork back, or the node has moved on again.
    return RolledBack(True, "no orphan left to roll back")


def _refused(conn: psycopg.Connection, at: int, depth: int | None, reason: str, command: str) -> RolledBack:
    reason = redact(reason)
    with conn.transaction():
        if follow_state.halt(conn, reason, command):
            follow_state.record_reorg(conn, anchor=None, first=at, last=at, depth=depth, rolled_back=False, reason=reason)
            log.error("reorg NOT rolled back: %s; nothing deleted, the following is halted: run `%s`", reason, command)
    return RolledBack(False, f"the following is halted: {reason}")
