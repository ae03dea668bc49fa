"""`python -m indexer.testing.anvil URL --height N` (how scripts/backfill-local mines its chain):
progress on stderr while a long chain is mined, nothing for a short one."""

from __future__ import annotations

import io
import subprocess
import sys

from indexer.testing.anvil import Anvil, MiningProgress


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def mine(progress: MiningProgress, clock: list[float], blocks_per_second: float, seconds: float,
         step: float) -> None:
    """Reports a steady rate every `step` seconds of a fake clock."""
    while clock[0] < seconds:
        clock[0] += step
        progress(int(blocks_per_second * clock[0]))
    progress.done()


def test_a_chain_mined_within_the_quiet_time_shows_nothing():
    for tty in (False, True):
        clock, out = [0.0], Stream(tty)
        mine(MiningProgress(1_000_000, out, clock=lambda: clock[0]), clock, 400_000, 1.9, 0.1)
        assert out.getvalue() == ""


def test_in_a_log_a_fast_chain_gets_a_line_every_tenth():
    clock, out = [0.0], Stream(False)
    mine(MiningProgress(100_000, out, clock=lambda: clock[0]), clock, 10_000, 10, 0.25)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    # The first after the quiet 2 s, then one per tenth of the chain.
    assert [line.split(" of ")[0] for line in lines] == [f"mining: block {n * 10_000:,}" for n in range(2, 11)]
    assert lines[-1] == "mining: block 100,000 of 100,000 (100%), 10,000 blocks/s"


def test_in_a_log_a_slow_chain_gets_a_line_every_10_seconds():
    clock, out = [0.0], Stream(False)
    mine(MiningProgress(1_000_000, out, clock=lambda: clock[0]), clock, 100, 60, 1)
    heads = [line.split(" of ")[0] for line in out.getvalue().splitlines()]
    assert heads == [f"mining: block {n:,}" for n in (200, 1_200, 2_200, 3_200, 4_200, 5_200)]


def test_on_a_terminal_one_line_is_rewritten_in_place_and_ended_at_the_end():
    clock, out = [0.0], Stream(True)
    mine(MiningProgress(100_000, out, clock=lambda: clock[0]), clock, 10_000, 10, 0.25)
    screen = out.getvalue()
    assert screen.count("\n") == 1 and screen.endswith("\n")
    updates = screen.split("\r\033[K")
    assert updates[0] == "" and len(updates) > 20  # several updates a second
    assert updates[-1] == "mining: block 100,000 of 100,000 (100%), 10,000 blocks/s\n"


def test_the_command_builds_a_short_chain_quietly():
    with Anvil("--no-mining") as node:
        done = subprocess.run([sys.executable, "-m", "indexer.testing.anvil", node.url, "--height", "40"],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert (done.stdout, done.stderr) == (f"chain built at {node.url}: head 40\n", "")
        assert node.head() == 40
