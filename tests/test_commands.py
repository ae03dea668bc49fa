"""`indexer reap`, `retry` and `work` as a user runs them (`status` is in test_status.py)."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.anvil import free_port
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.work import INDEXER

from .conftest import run_indexer


def expire_all(conn) -> None:
    conn.execute("UPDATE jobs SET locked_until = now() - interval '1 second' WHERE status = 'running'")


def test_reap_takes_back_expired_leases_once(db_url, conn):
    planner.plan(conn, 0, 30, 10)
    queue.claim(conn, "w", lease_seconds=60, limit=2)
    conn.execute("UPDATE jobs SET attempts = 5 WHERE id = (SELECT min(id) FROM jobs)")
    expire_all(conn)
    result = run_indexer("reap", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "reaped 2 expired lease(s); 1 job(s) out of attempts marked failed"
    assert conn.execute("SELECT status, count(*) FROM jobs GROUP BY 1 ORDER BY 1").fetchall() == [
        ("failed", 1), ("pending", 2)]


def test_reap_every_loops_until_stopped(db_url, conn):
    planner.plan(conn, 0, 10, 10)
    proc = subprocess.Popen([INDEXER, "reap", "--every", "0.2"], env={"INDEXER_DATABASE_URL": db_url},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        queue.claim(conn, "w", lease_seconds=60)
        expire_all(conn)
        deadline = time.monotonic() + 30
        while conn.execute("SELECT status FROM jobs").fetchone()[0] != "pending":
            assert time.monotonic() < deadline, "the looping reaper never took the lease back"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "reaped 1 expired lease(s)" in out


def test_retry_failed_requeues_them(db_url, conn):
    planner.plan(conn, 0, 20, 10)
    for job in queue.claim(conn, "w", lease_seconds=60, limit=2):
        queue.give_back(conn, job, "node exploded", max_attempts=1, backoff_base=30)
    result = run_indexer("retry", "--failed", db_url=db_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "re-queued 2 failed job(s)"
    assert conn.execute("SELECT status, attempts, last_error FROM jobs").fetchall() == [
        ("pending", 0, "node exploded")] * 2


def test_retry_needs_to_be_told_what(db_url):
    result = run_indexer("retry", db_url=db_url)
    assert result.returncode == 2
    assert "--failed" in result.stderr


def test_work_refuses_an_rpc_url_that_is_not_a_url(db_url, conn):
    planner.plan(conn, 0, 10, 10)
    result = run_indexer("work", "--drain", "--rpc-url", "localhost 8545 please", db_url=db_url)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "indexer work: error: INDEXER_RPC_URL: not an http(s) URL: 'localhost'"]


def test_work_with_the_node_down_is_one_line_without_the_api_key(db_url, conn):
    planner.plan(conn, 0, 10, 10)
    url = f"http://127.0.0.1:{free_port()}/v2/SECRETKEY123"
    result = run_indexer("work", "--drain", db_url=db_url, env={"INDEXER_RPC_URL": url, "INDEXER_RPC_MAX_ATTEMPTS": "2",
                                                                 "INDEXER_LOG_LEVEL": "WARNING"})
    assert result.returncode == 1
    assert "SECRETKEY123" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("indexer work: error: eth_chainId failed after 2 attempts; last: http://127.0.0.1:")
    assert last.endswith("connection refused; is a node running at " + url.removesuffix("/v2/SECRETKEY123")
                         + "? (INDEXER_RPC_URL)")
    assert conn.execute("SELECT status, attempts FROM jobs").fetchall() == [("pending", 0)]


def test_work_against_a_node_answering_html_fails_clearly(db_url, conn, chain_node):
    planner.plan(conn, 0, 10, 10)
    with FaultProxy(chain_node.url, rate=1.0, faults=("html",)) as proxy:
        result = run_indexer("work", "--drain", db_url=db_url, env={"INDEXER_RPC_URL": proxy.url,
                                                                     "INDEXER_RPC_MAX_ATTEMPTS": "2"})
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("indexer work: error: eth_chainId failed after 2 attempts; last: ")
    assert "answer is not JSON: b'<html><body>502 Bad Gateway" in last
    assert conn.execute("SELECT count(*) FROM blocks").fetchone()[0] == 0


def test_a_database_password_never_shows_in_output(db_url, conn, chain_node):
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(db_url)
    # The test server trusts local connections, so any password connects: it must still not show.
    url = f"postgresql://{parts['user']}:HUNTER2SECRET@{parts['host']}:{parts['port']}/{parts['dbname']}"
    planner.plan(conn, 0, 5, 10)
    outputs = [run_indexer(*cmd, env={"INDEXER_DATABASE_URL": url, "INDEXER_RPC_URL": chain_node.url,
                                       "INDEXER_USE_FINALIZED": "false", "INDEXER_CONFIRMATIONS": "0"})
               for cmd in (["status"], ["status", "--json"], ["work", "--drain", "--log-level", "DEBUG"], ["reap"],
                           ["verify", "--from", "0", "--to", "5"])]
    assert [r.returncode for r in outputs] == [0, 0, 0, 0, 0]
    assert not any("HUNTER2SECRET" in r.stdout + r.stderr for r in outputs)


def test_version_is_the_package_s():
    import tomllib

    from indexer.testing.cluster import REPO

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    result = run_indexer("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"indexer {version}\n", "")


def test_every_command_s_help_describes_it():
    import argparse

    from indexer.cli_parser import build_parser

    def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found = []
        for name, child in sub.choices.items():
            nested = any(isinstance(a, argparse._SubParsersAction) for a in child._actions)
            found += commands(child, (*prefix, name)) if nested else [(*prefix, name)]
        return found

    every = commands(build_parser())
    assert ("status",) in every and ("abi", "drop") in every
    # One process shows the real command's help; the rest are asked of the parser in this one (a
    # process per command cost 20 s of the suite).
    assert run_indexer("status", "--help").stdout == help_of(("status",))
    for command in every:
        text = help_of(command)
        # usage: ..., then a paragraph saying what the command does, then the options.
        between = text.split("\n\n")[1]
        assert not between.startswith(("options:", "positional arguments:")), (command, text)
        assert len(between.split()) >= 8, (command, between)


def help_of(command: tuple[str, ...]) -> str:
    """What `indexer COMMAND --help` prints, from the parser in this process, at the width a
    process with no terminal uses."""
    import contextlib
    import io

    from indexer.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0, command
    return out.getvalue()


def test_plan_counts_read_in_the_singular_and_the_plural(db_url):
    one = run_indexer("plan", "--from", "0", "--to", "1", "--chunk", "1", db_url=db_url)
    assert one.stdout == "planned 1 index_blocks job (1 block) for blocks 0..0; 0 blocks were already planned\n"
    more = run_indexer("plan", "--from", "0", "--to", "3", "--chunk", "1", db_url=db_url)
    assert more.stdout == "planned 2 index_blocks jobs (2 blocks) for blocks 0..2; 1 block was already planned\n"
