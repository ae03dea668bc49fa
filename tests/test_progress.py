"""The progress line of `indexer work`: rewritten in place on a terminal, seldom in a log."""

from __future__ import annotations

import os
import pty
import subprocess

from indexer.base.block_range import JOB_KIND, cut
from indexer.jobqueue import queue
from indexer.jobs import planner
from indexer.testing.faultproxy import FaultProxy
from indexer.testing.work import FAST, INDEXER


def test_progress_is_a_line_rewritten_on_a_terminal_and_quiet_in_logs(db_url, conn, chain_node, work):
    head = chain_node.head()
    planner.plan(conn, 0, head + 1, 4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INDEXER_")}
    env |= FAST | {"INDEXER_DATABASE_URL": db_url}
    master, slave = pty.openpty()
    with FaultProxy(chain_node.url, delay=0.1) as slow:
        env["INDEXER_RPC_URL"] = slow.url
        proc = subprocess.Popen([INDEXER, "work", "--drain", "--workers", "1", "--batch-size", "1"],
                                env=env, stdout=slave, stderr=slave)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal closed: the process is gone
                break
            if not data:
                break
            chunks.append(data)
        assert proc.wait(60) == 0
    os.close(master)
    screen = b"".join(chunks).decode()
    updates = screen.count("\r\x1b[K")
    assert updates >= 2, screen
    assert " blocks indexed, " in screen and " blocks/s" in screen

    queue.enqueue(conn, JOB_KIND, [r.payload() for r in cut(0, head + 1, 4)])  # the same range once more
    with FaultProxy(chain_node.url, delay=0.05) as slow:
        w = work(db_url, slow.url, "--drain", "--workers", "1", "--batch-size", "1")
        assert w.wait() == 0
    assert "\r" not in w.output()
    assert w.output().count(" blocks/s") == 0  # no progress line more often than once a minute
