"""Finding and signalling the worker processes of an `indexer work` pool."""

from __future__ import annotations

import os
import subprocess


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def signal_quietly(pid: int, sig: int) -> bool:
    """Sends `sig`; False if the process is already gone."""
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False
