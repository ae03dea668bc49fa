"""The mainnet-shaped node (`mainnet_node.py`) served over HTTP in a process of its own:
`python -m indexer.testing.mainnet_server` (or `scripts/mainnet_node`) prints its URL once it
serves and stops on SIGTERM or Ctrl-C; `NodeProcess` starts one for a benchmark or a test, so
that the node's CPU time is its own.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from typing import NoReturn

from .mainnet_node import MainnetNode


class NodeProcess:
    """`scripts/mainnet_node` run in a process of its own (so that its CPU time is its own), with
    every block precomputed before it answers (with `traces`, every call tree built too):
    `url`, `proc`, `first`, `last`."""

    def __init__(self, first: int, blocks: int, *, templates: int = 64, precompute: bool = True,
                 traces: bool = False) -> None:
        self.first, self.last = first, first + blocks - 1
        args = ["--first", str(first), "--blocks", str(blocks), "--port", "0", "--templates", str(templates)]
        self.proc = subprocess.Popen([sys.executable, "-m", "indexer.testing.mainnet_server", *args,
                                      *(["--precompute"] if precompute else []), *(["--traces"] if traces else [])],
                                     stdout=subprocess.PIPE, text=True)
        self.url = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not self.url:
            self.close()
            raise RuntimeError(f"the mainnet-shaped node exited with {self.proc.returncode} before serving")

    def head(self) -> int:
        return self.last

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> "NodeProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Arguments(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv: list[str] | None = None) -> None:
    ap = _Arguments(prog="mainnet_node", description=__doc__.split("\n\n")[0])
    ap.add_argument("--first", type=int, default=18_000_000, help="height of the first block (default 18000000)")
    ap.add_argument("--blocks", type=int, default=10_000, help="how many blocks (default 10000)")
    ap.add_argument("--port", type=int, default=8545, help="port on 127.0.0.1 (0: a free one; default 8545)")
    ap.add_argument("--templates", type=int, default=64, help="distinct pre-built blocks per era (default 64)")
    ap.add_argument("--precompute", action="store_true",
                    help="compute every block's hashes before serving (about 4 ms a dense block), so that serving costs"
                         " only filling them in")
    ap.add_argument("--traces", action="store_true",
                    help="build every template's call trees before serving (else the first block traced of each era"
                    " builds them)")
    args = ap.parse_args(argv)
    if args.first < 0:
        ap.error(f"--first must be 0 or more, not {args.first}")
    if args.blocks < 1:
        ap.error(f"--blocks must be at least 1, not {args.blocks}")
    if not 0 <= args.port <= 65535:
        ap.error(f"--port must be 0..65535, not {args.port}")
    if args.templates < 1:
        ap.error(f"--templates must be at least 1, not {args.templates}")
    try:
        node = MainnetNode(args.first, args.first + args.blocks - 1, templates=args.templates, port=args.port)
    except OSError as exc:
        ap.exit(1, f"mainnet_node: error: cannot listen on port {args.port}: {exc.strerror}\n")
    # Built before the URL is printed, so that nothing measured afterwards pays for it.
    node.template(args.first)
    node.template(args.first + args.blocks - 1)
    if args.precompute:
        node.precompute()
    if args.traces:
        node.prepare_traces()
    print(node.url, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    node.close()


if __name__ == "__main__":
    main(sys.argv[1:])
