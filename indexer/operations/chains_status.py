"""`indexer status` over every chain of the database, when no chain is named and it holds several:
one line per chain (or one JSON record), from the same figures as a chain's own status, which
`indexer status --chain NAME` shows in full."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Any, TextIO

import psycopg

from ..base import chains
from ..base.states import JobStatus
from ..chaindata import store
from . import status


def line(chain: str, chain_id: int | None, st: status.Status) -> str:
    jobs = st.by_status()
    p = st.progress
    blocks = (f"{p.indexed_blocks:,} of {p.planned_blocks:,} blocks indexed ({p.percent_done:.1f}%)"
              if p.planned_blocks else "nothing planned yet")
    following = ""
    if st.following is not None and st.following.state.halted_at is not None:
        following = "; following HALTED (`indexer status --chain " + chain + "` says why)"
    elif st.following is not None:
        following = "; following the head"
    failed = f", {jobs[JobStatus.FAILED]:,} failed" if jobs[JobStatus.FAILED] else ""
    return (f"{chain} (chain id {'not yet known' if chain_id is None else chain_id}): {blocks}; jobs"
            f" {jobs[JobStatus.PENDING]:,} pending, {jobs[JobStatus.RUNNING]:,} running,"
            f" {jobs[JobStatus.DONE]:,} done{failed}{following}")


def record(chain: str, chain_id: int | None, st: status.Status) -> dict[str, Any]:
    return {"chain": chain, "chain_id": chain_id, **status.as_json(st)}


def unmigrated(chain: str) -> str:
    """The line of a chain whose schema lacks this version's migrations (being migrated, or a
    migration that failed or was interrupted): its tables cannot be read as this version's."""
    return f"{chain}: lacks migrations of this version: run `indexer migrate --chain {chain}`"


def gather(conn: psycopg.Connection, names: list[str], complete: list[str], *, lease_seconds: float
           ) -> list[tuple[str, int | None, status.Status | None]]:
    found: list[tuple[str, int | None, status.Status | None]] = []
    for chain in names:
        if chain not in complete:
            found.append((chain, None, None))
            continue
        chains.use(conn, chain)
        found.append((chain, store.recorded_chain_id(conn), status.gather(conn, lease_seconds=lease_seconds)))
    return found


def show(conn: psycopg.Connection, names: list[str], complete: list[str], *, as_json_lines: bool,
         watch: float | None, stop: threading.Event, lease_seconds: float, out: TextIO) -> None:
    """One line (or JSON record) per chain, once or every `watch` seconds until `stop` is set."""
    while True:
        found = gather(conn, names, complete, lease_seconds=lease_seconds)
        if as_json_lines:
            text = "\n".join(json.dumps(record(*each) if each[2] else {"chain": each[0], "migrated": False})
                             for each in found)
        else:
            text = "\n".join(line(*each) if each[2] else unmigrated(each[0]) for each in found)
            if watch is not None:
                text = f"--- {datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} UTC\n{text}"
        print(text, file=out, flush=True)
        if watch is None or stop.wait(watch):
            return
