"""The workers' counts on /metrics while a worker is creating its file: the file exists, empty,
before it is sized, and the scrape in that instant must not fail whole."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from prometheus_client.multiprocess import MultiProcessCollector

from indexer.operations.exporter import WorkerFiles

COUNT_ONE_BLOCK = """
from prometheus_client import Counter
Counter("indexer_test_blocks", "blocks").inc(3)
"""


def test_a_file_created_and_not_yet_sized_is_skipped_and_the_others_are_served(tmp_path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", COUNT_ONE_BLOCK], env=env, check=True)
    (tmp_path / "counter_424242.db").touch()  # a worker between creating its file and sizing it

    with pytest.raises(struct.error):  # what prometheus_client's own collector does with it
        list(MultiProcessCollector(None, path=str(tmp_path)).collect())
    served = {s.name: s.value for m in WorkerFiles(None, path=str(tmp_path)).collect() for s in m.samples}
    assert served["indexer_test_blocks_total"] == 3
