"""Finding and signalling the worker processes of an `indexer work` pool."""

from __future__ import annotations

import os
from pathlib import Path


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def descendants(pid: int) -> list[int]:
    kids = children(pid)
    return kids + [d for k in kids for d in descendants(k)]


def workers(pool_pid: int) -> list[int]:
    """The worker processes of a pool: its children (but its fork server and resource tracker,
    both `python -c "from multiprocessing..."`), and the fork server's, which replace the dead."""
    found = []
    for kid in children(pool_pid):
        try:
            command = Path(f"/proc/{kid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"forkserver" in command:
            found += children(kid)
        elif b"from multiprocessing" not in command:
            found.append(kid)
    return found


def signal_quietly(pid: int, sig: int) -> bool:
    """Sends `sig`; False if the process is already gone."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
