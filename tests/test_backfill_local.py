"""`scripts/backfill-local --keep`: what it leaves running can be used from another shell with the
lines it prints, and stopped with the command it prints. `--follow`: the blocks the chain mines
after the backfill are indexed, until Ctrl-C, after which it stops what it started."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import psycopg
import pytest

from indexer.testing.cluster import REPO
from indexer.testing.waiting import wait_for


def test_keep_prints_what_another_shell_exports_to_use_what_it_left_running():
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    result = subprocess.run([str(REPO / "scripts" / "backfill-local"), "--to", "40", "--workers", "1", "--keep"],
                            env=env, capture_output=True, text=True, timeout=600)
    stop = next((line.removeprefix("stop them with: ") for line in result.stdout.splitlines()
                 if line.startswith("stop them with: ")), None)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        exports = [line.strip() for line in result.stdout.splitlines() if line.startswith("  export ")]
        assert [line.split("=")[0] for line in exports] == [
            "export INDEXER_DATABASE_URL", "export INDEXER_RPC_URL", "export INDEXER_METRICS_PORT", "export PATH"]
        # Another shell: none of this one's variables, `indexer` not on its PATH.
        shell = {"HOME": env.get("HOME", "/"), "PATH": "/usr/bin:/bin"}
        script = "\n".join([*exports, "indexer status --json"])
        status = subprocess.run(["bash", "-c", script], env=shell, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        record = json.loads(status.stdout)
        assert (record["planned_blocks"], record["indexed_blocks"], record["failed_jobs"]) == (40, 40, [])
    finally:
        assert stop is not None, result.stdout + result.stderr
        subprocess.run(["bash", "-c", stop], check=True, timeout=120)


def at_the_keyboard() -> None:
    """The script started as from a terminal, Ctrl-C delivered: a command run in the background
    by a shell without job control (as CI may run the suite) starts with SIGINT ignored, and bash
    can neither trap nor reset a signal ignored on entry."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_follow_indexes_the_blocks_mined_after_the_backfill_until_ctrl_c(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    out = tmp_path / "backfill-local.out"
    with out.open("w") as log:
        script = subprocess.Popen([str(REPO / "scripts" / "backfill-local"), "--to", "40", "--workers", "1", "--follow",
                                   "--block-time", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  preexec_fn=at_the_keyboard)
    try:
        def database() -> str | None:
            found = re.search(r"^postgres: (\S+)$", out.read_text(), re.MULTILINE)
            return found and found[1]

        url = wait_for(lambda: database() or script.poll() is not None, "the script's PostgreSQL", timeout=300)
        assert isinstance(url, str), out.read_text()

        def indexed_after_the_backfill() -> bool:
            try:
                with psycopg.connect(url, connect_timeout=5) as conn:
                    return conn.execute("SELECT count(*) FROM blocks WHERE number >= 40").fetchone()[0] >= 3
            except psycopg.Error:  # not migrated yet
                return False

        wait_for(lambda: indexed_after_the_backfill() or script.poll() is not None,
                 "3 blocks mined after the backfill indexed", timeout=300)
        assert script.poll() is None, out.read_text()
        with psycopg.connect(url) as conn:
            (backfilled,) = conn.execute("SELECT count(*) FROM blocks WHERE number < 40").fetchone()
        assert backfilled == 40
    finally:
        if script.poll() is None:
            script.send_signal(signal.SIGINT)
        try:
            code = script.wait(120)
        except subprocess.TimeoutExpired:
            script.kill()
            raise
    output = out.read_text()
    assert code == 130, output
    assert "following the chain's head" in output and "blocks " in output  # then `indexer status`
    # Everything it started is stopped: its PostgreSQL is gone.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=5).close()
