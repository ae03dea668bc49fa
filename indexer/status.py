"""`indexer status`: the queue and the progress, from the database alone, as text or JSON, once
or refreshed every few seconds."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

import psycopg

from . import endpoints, partitions, progress, queue
from .partitions import Partition
from .progress import Progress

# On a terminal, --watch redraws in place: cursor home, clear to the end of the screen.
REDRAW = "\033[H\033[J"


@dataclass(frozen=True)
class Status:
    at: datetime
    counts: queue.Counts
    progress: Progress
    expired_leases_last_hour: int
    failed: list[queue.FailedJob]
    endpoints: tuple[endpoints.EndpointRate, ...] = ()  # RPC endpoints the workers used in the last minute
    partitions: tuple[Partition, ...] = ()  # of the chain tables


def gather(conn: psycopg.Connection, *, failed_limit: int = 20) -> Status:
    return Status(
        at=datetime.now(timezone.utc),
        counts=queue.counts(conn),
        progress=progress.measure(conn),
        expired_leases_last_hour=queue.expired_leases(conn, window_seconds=3600),
        failed=queue.failed_jobs(conn, limit=failed_limit),
        endpoints=tuple(endpoints.summary(conn)),
        partitions=tuple(partitions.partitions(conn)),
    )


def as_json(st: Status) -> dict[str, Any]:
    p = st.progress
    return {
        "at": st.at.isoformat(timespec="seconds"),
        "jobs": {str(status): n for status, n in st.counts.by_status().items()},
        "planned_blocks": p.planned_blocks,
        "indexed_blocks": p.indexed_blocks,
        "remaining_blocks": p.remaining_blocks,
        "percent_done": p.percent_done,
        "blocks_per_second": p.blocks_per_second,
        "speed_window_seconds": p.speed_window_seconds,
        "eta_seconds": p.eta_seconds,
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
    }


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"


def render(st: Status) -> str:
    lines = [f"{status:<8} {n:>10,}" for status, n in st.counts.by_status().items()]
    p = st.progress
    if p.planned_blocks:
        lines.append(f"blocks   {p.indexed_blocks:>10,} of {p.planned_blocks:,} indexed ({p.percent_done:.1f}%)")
        lines.append(f"speed    {p.blocks_per_second:>10,.1f} blocks/s over the last {duration(p.speed_window_seconds)}; "
                     f"ETA {duration(p.eta_seconds)}")
    else:
        lines.append("blocks   nothing planned yet: run `indexer plan --from A --to B`")
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


def _partitions_in(state: str, those: list[Partition], shown: int = 3) -> str:
    """"2 indexed", or "1 filling (blocks 21,000,000..21,999,999)": where they are, unless indexed."""
    if state == partitions.INDEXED:
        return f"{len(those):,} {state}"
    ranges = ", ".join(f"{p.first:,}..{p.last:,}" for p in those[:shown])
    more = f" and {len(those) - shown:,} more" if len(those) > shown else ""
    return f"{len(those):,} {state} (blocks {ranges}{more})"


def show(conn: psycopg.Connection, *, as_json_lines: bool, watch: float | None, stop: threading.Event,
         out: TextIO = sys.stdout) -> None:
    """Prints the status once, or every `watch` seconds until `stop` is set: on a terminal the
    text redraws in place; in a pipe each refresh is one record, stamped with its time."""
    redraw = watch is not None and out.isatty()
    while True:
        st = gather(conn)
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
