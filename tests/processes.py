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
    """The worker processes of a pool: the children of its multiprocessing fork server."""
    for kid in children(pool_pid):
        try:
            if b"forkserver" in Path(f"/proc/{kid}/cmdline").read_bytes():
                return children(kid)
        except FileNotFoundError:
            pass
    return []


def signal_quietly(pid: int, sig: int) -> bool:
    """Sends `sig`; False if the process is already gone."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
