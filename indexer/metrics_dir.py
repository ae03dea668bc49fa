"""The directory where the processes of one `indexer work` pool keep their metric files.

Kept apart from `metrics.py` because it must run before prometheus_client is imported.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Iterator

ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def shared() -> Iterator[str]:
    """A fresh directory, announced to this process and the workers it starts; removed after."""
    path = tempfile.mkdtemp(prefix="indexer-metrics-")
    os.environ[ENV] = path
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
