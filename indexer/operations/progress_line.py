"""The pool's progress line: what its workers have done, counted in shared memory by every
worker (`Counters`), and the line printed from it (`Progress`): rewritten in place on a
terminal, an occasional log line otherwise.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
import time

from ..base.wording import counted

log = logging.getLogger(__name__)

PROGRESS_EVERY_TTY = 1.0
PROGRESS_EVERY_LOG = 60.0


class Counters:
    """What the workers have done, for the progress line: shared memory, written by every worker."""

    def __init__(self, ctx: multiprocessing.context.BaseContext) -> None:
        self.blocks = ctx.Value("q", 0)
        self.jobs = ctx.Value("q", 0)
        self.safe_head = ctx.Value("q", -1)  # the highest a draining worker stopped at

    def add(self, blocks: int = 0, jobs: int = 0) -> None:
        if blocks:
            with self.blocks.get_lock():
                self.blocks.value += blocks
        if jobs:
            with self.jobs.get_lock():
                self.jobs.value += jobs

    def drained_to(self, safe_head: int) -> None:
        with self.safe_head.get_lock():
            self.safe_head.value = max(self.safe_head.value, safe_head)


class Progress:
    """A line that rewrites itself on a terminal; an occasional log line otherwise."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self.tty = sys.stderr.isatty()
        self.started = self.last = time.monotonic()
        self.last_blocks = 0

    def maybe_print(self) -> None:
        now = time.monotonic()
        if now - self.last < (PROGRESS_EVERY_TTY if self.tty else PROGRESS_EVERY_LOG):
            return
        blocks, jobs = self.counters.blocks.value, self.counters.jobs.value
        rate = (blocks - self.last_blocks) / (now - self.last)
        self.last, self.last_blocks = now, blocks
        line = f"{counted(jobs, 'job')} done, {counted(blocks, 'block')} indexed, {rate:,.0f} blocks/s"
        if self.tty:
            sys.stderr.write(f"\r\033[K{line}")
            sys.stderr.flush()
        else:
            log.info(line)

    def done(self) -> None:
        blocks, jobs = self.counters.blocks.value, self.counters.jobs.value
        elapsed = time.monotonic() - self.started
        if self.tty:
            sys.stderr.write("\n")
        log.info("%s done, %s indexed in %.1f s", counted(jobs, "job"), counted(blocks, "block"), elapsed)
