"""The tests' `indexer` commands are forked from a process that has imported the command line
(`indexer.testing.forked_cli`): what a forked command says and how it exits must be what the
console script, exec'd, says and does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import psycopg
import pytest

from indexer.testing import forked_cli
from indexer.testing.anvil import free_port
from indexer.testing.processes import alive, start_time, workers
from indexer.testing.waiting import wait_for
from indexer.testing.work import INDEXER, Work


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}, **extra}


@pytest.mark.parametrize("args, env", [
    (["--version"], {}),
    (["plan", "--from", "5", "--to", "5"], {}),  # a usage error, exit 2
    (["status"], {"INDEXER_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}),  # the database is down
    (["status"], {"INDEXER_BATCH_SIZE": "many"}),  # a setting that is not a number
])
def test_a_forked_command_says_and_exits_as_the_console_script(args, env, tmp_path):
    exec_d = subprocess.run([INDEXER, *args], env=clean_env(**env), cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    forked = forked_cli.run([INDEXER, *args], env=clean_env(**env), cwd=str(tmp_path), timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (exec_d.returncode, exec_d.stdout, exec_d.stderr)
    assert exec_d.stdout or exec_d.stderr


def monitor_env(db_url: str) -> dict[str, str]:
    """`indexer monitor` of a reachable database serves its gauges until it is stopped."""
    return clean_env(INDEXER_DATABASE_URL=db_url, INDEXER_METRICS_PORT=str(free_port()))


def test_a_command_past_its_timeout_is_killed_and_said_so(db_url, tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        forked_cli.run([INDEXER, "monitor"], env=monitor_env(db_url), cwd=str(tmp_path), timeout=2)


def test_a_forked_pool_runs_in_its_directory_is_signalled_and_its_end_reported(db_url, tmp_path):
    with (tmp_path / "out").open("w") as out:
        proc = forked_cli.Forked([INDEXER, "monitor"], env=monitor_env(db_url), cwd=str(tmp_path),
                                 stdout=out.fileno(), stderr=out.fileno())
    cwd = Path(f"/proc/{proc.pid}/cwd")
    assert wait_for(lambda: cwd.resolve() == tmp_path.resolve(), "the command to enter its directory")
    assert proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL and proc.poll() == -signal.SIGKILL


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signalled_command_ends_as_the_exec_d_one(db_url, tmp_path, sig):
    ends = []
    for start in ("exec", "fork"):
        port = free_port()
        env = clean_env(INDEXER_DATABASE_URL=db_url, INDEXER_METRICS_PORT=str(port))
        with (tmp_path / start).open("w") as out:
            proc = subprocess.Popen([INDEXER, "monitor"], env=env, stdout=out, stderr=out) if start == "exec" else \
                forked_cli.Forked([INDEXER, "monitor"], env=env, cwd=str(tmp_path), stdout=out.fileno(),
                                  stderr=out.fileno())
        wait_for(lambda: "serving /metrics" in (tmp_path / start).read_text(), "the monitor to serve")
        proc.send_signal(sig)
        said = re.sub(r"\d+", "N", (tmp_path / start).read_text())  # times, pids and ports aside
        ends.append((proc.wait(30), said))
    assert ends[0] == ends[1]


def listening(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND state = 'idle' AND query LIKE 'LISTEN %'").fetchone()[0]


def test_a_forked_pool_killed_leaves_workers_that_closing_it_ends(conn, db_url, chain_node):
    # A worker sees its pool gone (and stops by itself) at the top of its loop: once both listen,
    # the next look is a poll interval away, here 300 s.
    with Work(db_url, chain_node.url, "--workers", "2", forked=True, INDEXER_POLL_SECONDS="300") as pool:
        left = wait_for(lambda: len(w := workers(pool.proc.pid)) == 2 and w, "the pool's two workers")
        started = [start_time(pid) for pid in left]
        wait_for(lambda: listening(conn) == 2, "both workers to wait for a NOTIFY")
        pool.proc.kill()
        assert pool.proc.wait(30) == -signal.SIGKILL
        assert all(alive(pid, when) for pid, when in zip(left, started))  # orphans, still there
    assert not any(alive(pid, when) for pid, when in zip(left, started))  # ended by closing it


def test_what_subprocess_refuses_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        forked_cli.run([INDEXER, "--version"], env=clean_env(), cwd=str(tmp_path / "missing"), timeout=10)
    with pytest.raises(ValueError):
        forked_cli.run([INDEXER, "--version"], env=clean_env(**{"A=B": "1"}), cwd=str(tmp_path), timeout=10)


@pytest.mark.parametrize("name", ["PYTHONPATH", "LANG", "PYTHONHASHSEED"])
def test_a_command_whose_interpreter_would_start_differently_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match=name):
        forked_cli.run([INDEXER, "--version"], env=clean_env(**{name: "7"}), cwd=str(tmp_path), timeout=10)
