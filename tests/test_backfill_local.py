"""`scripts/backfill-local --keep`: what it leaves running can be used from another shell with the
lines it prints, and stopped with the command it prints."""

from __future__ import annotations

import json
import os
import subprocess

from indexer.testing.cluster import REPO


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
