"""`indexer status`: the queue and the progress, from the database alone, as text or JSON, once
or refreshed every few seconds.

Jobs are counted by kind as well as by status: a plan makes `index_blocks` jobs, but the queue
also holds the `decode_logs` job each indexed range enqueues, its `index_traces` job with traces
on (or planned by `plan --traces`), the `index_partition` job of each
partition whose blocks are all in, and the parts idle workers split off running `index_blocks`
jobs; a total alone would not say why "planned 2 jobs" ends with "done 7"."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TextIO

import psycopg

from ..base.block_range import DECODE_LOGS, INDEX_PARTITION, INDEX_TRACES, JOB_KIND
from ..base.states import JobStatus
from ..base.wording import counted
from ..jobqueue import progress, queue_counts
from ..jobqueue.progress import Progress
from ..jobs import partitions
from ..jobs.partitions import Partition
from ..node import endpoints
from . import follow_state

# On a terminal, --watch redraws in place: cursor home, clear to the end of the screen.
REDRAW = "\033[H\033[J"

# Jobs by kind and status, the finished ones (archived in jobs_history) as done.
JOBS_BY_KIND = f"""
SELECT kind, status, count(*) FROM jobs GROUP BY 1, 2
UNION ALL
SELECT kind, status, count(*) FROM jobs_history WHERE status = '{JobStatus.DONE}' GROUP BY 1, 2
"""

# The kinds in the order work flows through them; any other kind follows, by name.
KIND_ORDER = (JOB_KIND, DECODE_LOGS, INDEX_TRACES, INDEX_PARTITION)
STATUSES = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.DONE, JobStatus.FAILED)

ByKind = dict[str, dict[JobStatus, int]]


@dataclass(frozen=True)
class Following:
    """Where the following of the chain's head stands."""

    state: follow_state.State
    through: follow_state.Through
    lag_seconds: float | None  # the time of the node's head minus that of the highest block indexed without a gap
    last_reorg: follow_state.Reorg | None
    lease_seconds: float  # a planner silent for longer is no planner

    @property
    def lag_blocks(self) -> int | None:
        return None if self.state.head is None else max(0, self.state.head - self.through.indexed)

    def planner(self, at: datetime) -> str | None:
        """The pool that plans, None when the last one has been silent for more than a lease."""
        polled = self.state.polled_at
        if polled is None or (at - polled).total_seconds() > self.lease_seconds:
            return None
        return self.state.planner


def following(conn: psycopg.Connection, lease_seconds: float) -> Following | None:
    """None where no pool has followed the head."""
    state = follow_state.state(conn)
    if state is None:
        return None
    through = follow_state.progress(conn)
    lag = None if state.head is None else through.lag_seconds(conn, follow_state.Head(state.head, state.head_timestamp))
    return Following(state, through, lag, follow_state.last_reorg(conn), lease_seconds)


@dataclass(frozen=True)
class Status:
    at: datetime
    counts: queue_counts.Counts
    progress: Progress
    expired_leases_last_hour: int
    failed: list[queue_counts.FailedJob]
    endpoints: tuple[endpoints.EndpointRate, ...] = ()  # RPC endpoints the workers used in the last minute
    partitions: tuple[Partition, ...] = ()  # of the chain tables
    by_kind: ByKind = field(default_factory=dict)  # jobs of each kind by status, the kinds in KIND_ORDER
    following: Following | None = None  # of the chain's head, once a pool has followed it

    def by_status(self) -> dict[JobStatus, int]:
        """All kinds' jobs by status."""
        return {status: sum(n[status] for n in self.by_kind.values()) for status in STATUSES}


def jobs_by_kind(conn: psycopg.Connection) -> ByKind:
    found: ByKind = {}
    for kind, status, n in conn.execute(JOBS_BY_KIND):
        found.setdefault(kind, dict.fromkeys(STATUSES, 0))[JobStatus(status)] += n
    order = {kind: i for i, kind in enumerate(KIND_ORDER)}
    return {kind: found[kind] for kind in sorted(found, key=lambda k: (order.get(k, len(order)), k))}


def gather(conn: psycopg.Connection, *, lease_seconds: float, failed_limit: int = 20) -> Status:
    return Status(
        at=datetime.now(timezone.utc),
        counts=queue_counts.counts(conn),
        progress=progress.measure(conn),
        expired_leases_last_hour=queue_counts.expired_leases(conn, window_seconds=3600),
        failed=queue_counts.failed_jobs(conn, limit=failed_limit),
        endpoints=tuple(endpoints.summary(conn)),
        partitions=tuple(partitions.partitions(conn)),
        by_kind=jobs_by_kind(conn),
        following=following(conn, lease_seconds),
    )


def as_json(st: Status) -> dict[str, Any]:
    p = st.progress
    return {
        "at": st.at.isoformat(timespec="seconds"),
        "jobs": {str(status): n for status, n in st.by_status().items()},
        "jobs_by_kind": {kind: {str(status): n for status, n in counts.items()} for kind, counts in st.by_kind.items()},
        "planned_blocks": p.planned_blocks,
        "indexed_blocks": p.indexed_blocks,
        "remaining_blocks": p.remaining_blocks,
        "percent_done": p.percent_done,
        "blocks_per_second": p.blocks_per_second,
        "speed_window_seconds": p.speed_window_seconds,
        "eta_seconds": p.eta_seconds,
        "waiting_for_block": p.waiting_for_block,
        "indexing_ended_at": None if p.ended_at is None else p.ended_at.isoformat(timespec="seconds"),
        "oldest_pending_age_seconds": st.counts.oldest_pending_age_seconds,
        "expired_leases_last_hour": st.expired_leases_last_hour,
        "failed_jobs": [
            {"id": f.id, "kind": f.kind, "payload": f.payload, "attempts": f.attempts, "last_error": f.last_error}
            for f in st.failed
        ],
        "rpc_endpoints": [
            {"endpoint": e.endpoint, "workers": e.workers, "calls_per_second": e.calls_per_second,
             "unlimited_workers": e.unlimited_workers, "unsupported": e.unsupported}
            for e in st.endpoints
        ],
        "partitions": [
            {"first_block": p.first, "last_block": p.last, "state": p.state,
             "indexed_at": None if p.indexed_at is None else p.indexed_at.isoformat(timespec="seconds")}
            for p in st.partitions
        ],
        "following": None if st.following is None else _following_json(st.following, st.at),
    }


def _following_json(f: Following, at: datetime) -> dict[str, Any]:
    state, reorg = f.state, f.last_reorg
    return {
        "head": state.head,
        "head_timestamp": _iso(state.head_timestamp),
        "head_seen_at": _iso(state.head_seen_at),  # when the node last answered the planner
        "safe_head": state.safe_head,
        "planned_through": state.planned_through,
        "polled_at": _iso(state.polled_at),
        "polled_seconds_ago": _ago(state.polled_at, at),
        "planner": f.planner(at),  # null: no pool has polled within a lease
        "last_planner": state.planner,
        "indexed_through": f.through.indexed,
        "decoded_through": f.through.decoded,
        "lag_blocks": f.lag_blocks,
        "lag_seconds": f.lag_seconds,
        "last_reorg": None if reorg is None else {
            "detected_at": _iso(reorg.detected_at), "first_block": reorg.first, "last_block": reorg.last,
            "depth": reorg.depth, "anchor": reorg.anchor, "rolled_back": reorg.rolled_back, "reason": reorg.reason},
        "halted": None if state.halted_at is None else {
            "at": _iso(state.halted_at), "reason": state.halted_reason, "command": state.halted_command},
    }


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat(timespec="seconds")


def _ago(then: datetime | None, at: datetime) -> float | None:
    return None if then is None else max(0.0, (at - then).total_seconds())


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 10:  # "2.6 s": a short backfill's time, to the tenth
        return f"{seconds:.1f}".removesuffix(".0") + " s"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"


def render(st: Status) -> str:
    lines = _halted(st)
    lines += _jobs_table(st.by_kind)
    p = st.progress
    if p.planned_blocks:
        lines.append(f"blocks   {p.indexed_blocks:>10,} of {p.planned_blocks:,} indexed ({p.percent_done:.1f}%)")
        halted = st.following is not None and st.following.state.halted_at is not None
        lines.append(f"speed    {p.blocks_per_second:>10,.1f} blocks/s {_speed_span(st)}; {_what_is_left(p, halted)}")
    else:
        lines.append("blocks   nothing planned yet: run `indexer plan --from A --to B`")
    if st.following is not None:
        lines += _following_lines(st.following, st.at)
    if st.partitions:
        by_state = {state: [p for p in st.partitions if p.state == state] for state in partitions.STATES}
        lines.append(f"partitions {len(st.partitions):,} of the chain tables: "
                     + ", ".join(_partitions_in(state, those) for state, those in by_state.items() if those))
    age = st.counts.oldest_pending_age_seconds
    lines.append(f"oldest pending job waiting: {'none' if age is None else f'{age:.1f} s'}")
    lines.append(f"expired leases in the last hour: {st.expired_leases_last_hour}")
    for e in st.endpoints:
        rate = "no rate limit in force" if e.calls_per_second is None else f"{e.calls_per_second:,.1f} calls/s allowed"
        lacks = f"; lacks {', '.join(e.unsupported)}" if e.unsupported else ""
        lines.append(f"rpc      {e.endpoint}: {rate} ({e.workers} worker(s)){lacks}")
    for f in st.failed:
        lines.append(f"failed job {f.id} {json.dumps(f.payload)} after {f.attempts} attempt(s): {f.last_error}")
    return "\n".join(lines)


def _halted(st: Status) -> list[str]:
    """First, where nobody can miss it: a halted following and what to run."""
    state = None if st.following is None else st.following.state
    if state is None or state.halted_at is None:
        return []
    return [f"FOLLOWING HALTED {duration(_ago(state.halted_at, st.at))} ago: {state.halted_reason}",
            f"  nothing more is planned until a repair; run: {state.halted_command}",
            "  (it exits 1, having found the orphans; its line `repair: deleted ...` and this line gone say it worked)"]


def _following_lines(f: Following, at: datetime) -> list[str]:
    state = f.state
    if state.head is None:
        head = "not seen yet: the planner has had no answer from the node"
    else:
        mined = "" if state.head_timestamp is None else f", mined {duration(_ago(state.head_timestamp, at))} ago"
        head = f"block {state.head:,} of the node{mined}, seen {duration(_ago(state.head_seen_at, at))} ago"
    planner = f.planner(at)
    if planner is None:
        last = "none has polled yet" if state.polled_at is None else \
            f"the last one, {state.planner}, has been silent for {duration(_ago(state.polled_at, at))}," \
            f" more than a lease ({duration(f.lease_seconds)})"
        planner = f"none: {last}; nothing new is planned: is an `indexer work --follow` running?"
    lag = "unknown: the node's head not seen yet" if f.lag_blocks is None else \
        counted(f.lag_blocks, "block") + ("" if f.lag_seconds is None else f", {duration(f.lag_seconds)}") + \
        " behind the node's head"
    lines = [f"head     {head}",
             f"planner  {planner}",
             f"through  indexed to block {f.through.indexed:,}, decoded to block {f.through.decoded:,}",
             f"lag      {lag}"]
    if f.last_reorg is not None:
        lines.append(f"reorg    {_reorg(f.last_reorg, at)}")
    return lines


def _reorg(r: follow_state.Reorg, at: datetime) -> str:
    """"the last one 3 min 12 s ago: blocks 14..15, 2 blocks deep, rolled back"; a refused one
    names the block a worker met it at, and the reason."""
    blocks = "" if r.first is None else \
        f"block {r.first:,}, " if r.first == r.last else f"blocks {r.first:,}..{r.last:,}, "
    depth = "of unknown depth" if r.depth is None else counted(r.depth, "block") + " deep"
    outcome = "rolled back" if r.rolled_back else f"refused ({r.reason})"
    return f"the last one {duration(_ago(r.detected_at, at))} ago: {blocks}{depth}, {outcome}"


def _jobs_table(by_kind: ByKind) -> list[str]:
    """A row of counts by status per kind, and their total when there are several kinds."""
    rows = [(kind, counts) for kind, counts in by_kind.items()]
    if len(rows) > 1:
        rows.append(("all kinds", {s: sum(counts[s] for counts in by_kind.values()) for s in STATUSES}))
    width = max([len("jobs"), *(len(kind) for kind, _ in rows)])
    lines = [f"{'jobs':<{width}} " + " ".join(f"{s:>10}" for s in STATUSES)]
    lines += [f"{kind:<{width}} " + " ".join(f"{counts[s]:>10,}" for s in STATUSES) for kind, counts in rows]
    return lines


def _speed_span(st: Status) -> str:
    """Over what time the speed was measured: the last few minutes, or the time the indexing ran
    until it ended (when the workers have no block left that they can index)."""
    p = st.progress
    if p.ended_at is None:
        return f"over the last {duration(p.speed_window_seconds)}"
    over = "its last" if p.speed_window_seconds >= progress.SPEED_WINDOW_SECONDS else "the"
    ago = max(0.0, (st.at - p.ended_at).total_seconds())
    return f"over {over} {duration(p.speed_window_seconds)} of indexing, which ended {duration(ago)} ago"


def _what_is_left(p: Progress, halted: bool) -> str:
    """The ETA of the blocks the workers can index now, and the block the rest waits for: the
    chain's, or, while the following is halted, the repair of the fork its workers met there
    (they put such a job back as they do one past the safe head)."""
    why = "the following is halted: see the first line" if halted else "past the chain's safe head"
    waits = f"waiting for block {p.waiting_for_block:,} ({why})" if p.waiting_for_block is not None else ""
    if not p.remaining_blocks:
        return "every planned block is indexed" if p.indexed_blocks == p.planned_blocks else \
            "nothing left to run: the failed jobs' blocks wait for `indexer retry --failed`"
    if p.remaining_blocks == p.waiting_blocks:
        return waits
    eta = f"ETA {duration(p.eta_seconds)}"
    return f"{eta}, then {waits}" if waits else eta


def _partitions_in(state: str, those: list[Partition], shown: int = 3) -> str:
    """"2 indexed", or "1 filling (blocks 21,000,000..21,999,999)": where they are, unless indexed."""
    if state == partitions.INDEXED:
        return f"{len(those):,} {state}"
    ranges = ", ".join(f"{p.first:,}..{p.last:,}" for p in those[:shown])
    more = f" and {len(those) - shown:,} more" if len(those) > shown else ""
    return f"{len(those):,} {state} (blocks {ranges}{more})"


def show(conn: psycopg.Connection, *, as_json_lines: bool, watch: float | None, stop: threading.Event,
         lease_seconds: float, out: TextIO = sys.stdout) -> None:
    """Prints the status once, or every `watch` seconds until `stop` is set: on a terminal the
    text redraws in place; in a pipe each refresh is one record, stamped with its time. A head
    planner silent for more than `lease_seconds` is reported as none."""
    redraw = watch is not None and out.isatty()
    while True:
        st = gather(conn, lease_seconds=lease_seconds)
        if as_json_lines:
            text = json.dumps(as_json(st))
        elif redraw:
            text = REDRAW + render(st)
        elif watch is not None:
            text = f"--- {st.at:%Y-%m-%d %H:%M:%S} UTC\n{render(st)}"
        else:
            text = render(st)
        print(text, file=out, flush=True)
        if watch is None or stop.wait(watch):
            return
