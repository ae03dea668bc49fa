"""`indexer work` pools run as a user would run them, each in a directory of its own that is
removed when it is closed: the pool's output is a log file there, and the pool's temporary files
(its metrics directory, multiprocessing's sockets) go there too by TMPDIR, so that nothing is
left in /tmp even when a test kills the pool with SIGKILL and its own clean-up never runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import psycopg
import requests

from . import forked_cli
from .processes import in_process_group, kill_all, with_environment

INDEXER = str(Path(sys.executable).with_name("indexer"))

# Short leases and waits so that reaping and retries happen within seconds.
FAST = {
    "INDEXER_USE_FINALIZED": "false",
    "INDEXER_CONFIRMATIONS": "0",
    "INDEXER_POLL_SECONDS": "0.5",
    "INDEXER_REAP_SECONDS": "0.3",
    "INDEXER_BACKOFF_BASE_SECONDS": "0.05",
    "INDEXER_DEFER_SECONDS": "0.5",
    "INDEXER_METRICS_PORT": "0",
}


class Work:
    """An `indexer work` process with FAST settings (overridden by `env`), its stdout and stderr
    in one file; exec'd as a user would start it, or with `forked`, forked from a process that
    has imported the command line already (`forked_cli`: the tests' pools)."""

    def __init__(self, db_url: str, rpc_url: str, *args: str, forked: bool = False, **env: str) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="indexer-work-")
        self.log = Path(self.dir.name) / "work.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
        full_env |= FAST | {"INDEXER_DATABASE_URL": db_url, "INDEXER_RPC_URL": rpc_url} | env
        full_env["TMPDIR"] = self.dir.name
        with self.log.open("w") as out:
            if forked:
                self.proc: subprocess.Popen[bytes] | forked_cli.Forked = forked_cli.Forked(
                    [INDEXER, "work", *args], env=full_env, cwd=os.getcwd(), stdout=out.fileno(), stderr=out.fileno())
            else:
                self.proc = subprocess.Popen([INDEXER, "work", *args], env=full_env, stdout=out,
                                             stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"indexer work did not finish in {timeout} s:\n{self.output()[-3000:]}") from None

    def kill(self) -> None:
        """SIGTERM, as an operator would stop it; SIGKILL if it is still there 20 s later."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def close(self) -> None:
        """Stops the pool, kills whatever of it is left (workers orphaned by a pool killed with
        SIGKILL included: they carry its TMPDIR), and removes its files."""
        self.kill()
        left = with_environment(f"TMPDIR={self.dir.name}")
        if isinstance(self.proc, forked_cli.Forked):  # its own forks show the server's environment in /proc
            left += in_process_group(self.proc.pid)
        kill_all(left)
        self.dir.cleanup()

    def __enter__(self) -> "Work":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Pools:
    """The pools one test starts, forked (`Work`), all closed by one `close()` (the `work`
    fixture)."""

    def __init__(self) -> None:
        self.stack = ExitStack()

    def start(self, db_url: str, rpc_url: str, *args: str, **env: str) -> Work:
        return self.stack.enter_context(Work(db_url, rpc_url, *args, forked=True, **env))

    def close(self) -> None:
        self.stack.close()  # every pool, even when closing one of them fails

    def __enter__(self) -> "Pools":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def running_job(conn: psycopg.Connection, past_first: bool = True) -> tuple[int, int] | None:
    """(id, pid of its worker) of a running job that has committed at least one batch."""
    row = conn.execute(
        "SELECT id, locked_by FROM jobs WHERE status = 'running'"
        + (" AND cursor > (payload->>'from')::bigint" if past_first else "") + " ORDER BY id LIMIT 1"
    ).fetchone()
    return (row[0], int(row[1].rsplit(":", 1)[1])) if row else None


def pool_metric(port: int, name: str) -> float | None:
    """A sample of a pool's /metrics, or None while it is not served."""
    try:
        page = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except requests.ConnectionError:
        return None
    found = re.search(rf'^{name}{{chain="[a-z0-9_]+"}} (\S+)$', page, re.M)
    return float(found[1]) if found else None
