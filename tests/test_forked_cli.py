"""The tests' `indexer` commands are forked from a process that has imported the command line
(`indexer.testing.forked_cli`): what a forked command says and how it exits must be what the
console script, exec'd, says and does."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from indexer.testing import forked_cli
from indexer.testing.anvil import free_port
from indexer.testing.work import INDEXER

from indexer.testing.waiting import wait_for


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


def test_a_command_with_a_pythonpath_of_its_own_is_refused(tmp_path):
    with pytest.raises(ValueError, match="PYTHONPATH"):
        forked_cli.run([INDEXER, "--version"], env=clean_env(PYTHONPATH=str(tmp_path)), cwd=str(tmp_path), timeout=10)
