"""Finding, signalling and killing the processes of an `indexer work` pool."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable


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



def with_environment(entry: str) -> list[int]:
    """The processes whose environment holds `entry` ("NAME=value"), orphans included: children
    inherit it, and so do the children of multiprocessing's fork server. (What /proc shows is the
    environment a process was exec'd with: a process forked without exec shows its parent's;
    see `in_process_group`.)"""
    needle = entry.encode()
    return _every_process(lambda pid: needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))


def in_process_group(group: int) -> list[int]:
    """The processes of process group `group`, orphans included: a forked command's
    (`forked_cli`), which is its own group, and its children's."""
    return _every_process(lambda pid: int(stat(pid)[2]) == group)


def _every_process(test: Callable[[int], bool]) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if test(int(proc.name)):
                    found.append(int(proc.name))
            except OSError:  # gone, or not ours to read
                continue
    return found


TICK = os.sysconf("SC_CLK_TCK")


def stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command's name (which may hold spaces and
    parentheses): [1] is the parent's pid, [2] its process group, [11] and [12] the user and
    system CPU time in clock ticks, [19] the start time. Raises FileNotFoundError once the
    process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int, fields: list[str] | None = None) -> float:
    """The CPU time the process has spent (user and system), from `fields` if read already."""
    fields = fields or stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICK


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot), to tell it from a later one given the
    same pid; None if it is gone."""
    try:
        return int(stat(pid)[19])
    except FileNotFoundError:
        return None


def kill_all(pids: list[int], timeout: float = 10) -> None:
    """SIGKILL to each process, then waits until they are gone. A pid that has meanwhile been
    given to another process is left alone."""
    started = {pid: start_time(pid) for pid in pids}
    for pid, when in started.items():
        if when is not None and start_time(pid) == when:
            signal_quietly(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(alive(pid, when) for pid, when in started.items()) and time.monotonic() < deadline:
        time.sleep(0.02)


def alive(pid: int, started: int | None) -> bool:
    """Running, not a zombie waiting for its parent, and not another process with its pid."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return started is not None and start_time(pid) == started and state != "Z"
