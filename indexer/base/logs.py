"""Logging set-up for every process: one handler on the root logger whose every line, whichever
logger wrote it, has the configured secrets scrubbed.

At DEBUG, urllib3 logs each request's path and query (where RPC API keys live), and any library
may put a URL into a message, its arguments or an exception's text; scrubbing the finished line
catches all of them, at every level, without knowing which logger wrote what.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from .errors import Secrets

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ScrubbingFormatter(logging.Formatter):
    def __init__(self, fmt: str, secrets: Secrets) -> None:
        super().__init__(fmt)
        self.secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return self.secrets.scrub(super().format(record))


def configure(level: str, secrets: Secrets, fmt: str = FORMAT, stream: TextIO | None = None) -> None:
    """Logs `level` and above to `stream` (stderr) in `fmt`, every line scrubbed of `secrets`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(ScrubbingFormatter(fmt, secrets))
    # force: a handler installed before (by a library, or inherited from a parent process) would
    # print lines unscrubbed.
    logging.basicConfig(level=level, handlers=[handler], force=True)
