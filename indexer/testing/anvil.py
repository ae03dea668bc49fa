"""A real anvil node on a free loopback port, a chain with transfers, contract calls and logs, and
progress on stderr while a long one is mined (`python -m indexer.testing.anvil URL --height N`)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, TextIO

import orjson
import requests

# scripts/install-anvil puts it in .cache; scripts/test says where in INDEXER_TEST_ANVIL.
_CACHED = Path(__file__).resolve().parents[2] / ".cache" / "anvil" / "node_modules" / ".bin" / "anvil"
ANVIL = os.environ.get("INDEXER_TEST_ANVIL") or (str(_CACHED) if _CACHED.exists() else "anvil")

# Init code that returns the 21-byte runtime below. The runtime copies its calldata to memory
# and emits LOG2(data = calldata, topic0 = first calldata word, topic1 = caller), then
# LOG1(data = first calldata word, topic0 = callvalue).
EMITTER_INIT = "0x6015600c60003960156000f3" + "36600060003733600051366000a23460206000a100"
# Runtime 0x60006000fd: REVERT(0, 0), for failed transactions (receipt status 0).
REVERTER_INIT = "0x6005600c60003960056000f3" + "60006000fd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """A JSON-RPC node at `url` (anvil's own methods included)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def wait_until_up(self, timeout: float = 30, alive: Callable[[], bool] = lambda: True) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.rpc("eth_chainId")
                return
            except requests.ConnectionError:
                if not alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"no node answers at {self.url}") from None
                time.sleep(0.05)

    def rpc(self, method: str, *params: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)}
        answer = orjson.loads(requests.post(self.url, data=orjson.dumps(body), timeout=60,
                                            headers={"Content-Type": "application/json"}).content)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def head(self) -> int:
        return int(self.rpc("eth_blockNumber"), 16)

    def mine(self, blocks: int = 1) -> None:
        self.rpc("anvil_mine", hex(blocks), "0x1")

    def reorg(self, depth: int) -> None:
        """Replaces the top `depth` blocks with as many others, as a reorg does: same height, new
        hashes, and a transfer in every other new block, so that the fork's contents differ too.
        anvil refuses it when started with --prune-history ("Required data unavailable")."""
        accounts = self.rpc("eth_accounts")
        transfers = [[{"from": accounts[i % len(accounts)], "to": accounts[(i + 1) % len(accounts)],
                       "value": hex(i + 1)}, i] for i in range(0, depth, 2)]
        self.rpc("anvil_reorg", depth, transfers)

    def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        """The calls in one JSON-RPC batch; their results in order."""
        body = [{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls)]
        answers = orjson.loads(requests.post(self.url, data=orjson.dumps(body), timeout=120,
                                             headers={"Content-Type": "application/json"}).content)
        errors = [a["error"] for a in answers if "error" in a]
        if errors:
            raise RuntimeError(f"{calls[0][0]}: {errors[0]}")
        return [a["result"] for a in sorted(answers, key=lambda a: a["id"])]



class Anvil(Node):
    """anvil started on a free loopback port; stopped on exit."""

    def __init__(self, *args: str, chain_id: int = 31337) -> None:
        self.port = free_port()
        super().__init__(f"http://127.0.0.1:{self.port}")
        self.proc = subprocess.Popen(
            [ANVIL, "--host", "127.0.0.1", "--port", str(self.port), "--chain-id", str(chain_id), "--silent", *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            self.wait_until_up(alive=lambda: self.proc.poll() is None)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"anvil did not start: {self.proc.stderr.read().decode()[:500]}") from None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "Anvil":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# anvil assigns nonces to the calls of one JSON-RPC batch concurrently: past about a hundred
# sends from its ten accounts in one batch, two get the same nonce ("replacement transaction
# underpriced"). A block's transactions go in batches of this many.
SENDS_PER_BATCH = 100


def build_dense(node: Node, blocks: int, txs: int) -> None:
    """The benchmarks' dense chain: `blocks` blocks of `txs` transactions, every other one a call
    of a contract that emits two logs, the others plain transfers (on a node started with
    --no-mining)."""
    accounts = node.rpc("eth_accounts")
    node.rpc("eth_sendTransaction", {"from": accounts[0], "data": EMITTER_INIT, "gas": hex(200_000)})
    node.rpc("evm_mine")
    emitter = node.rpc("eth_getBlockReceipts", "latest")[0]["contractAddress"]
    for b in range(blocks):
        for start in range(0, txs, SENDS_PER_BATCH):
            calls = []
            for i in range(start, min(txs, start + SENDS_PER_BATCH)):
                tx = {"from": accounts[i % len(accounts)], "gas": hex(100_000)}
                if i % 2:
                    tx |= {"to": accounts[(i + b) % len(accounts)], "value": hex(i + 1)}
                else:
                    tx |= {"to": emitter, "data": "0x" + f"{b:064x}{i:064x}"}
                calls.append(("eth_sendTransaction", [tx]))
            node.batch(calls)
        node.rpc("evm_mine")


def build_chain(node: Node, *, busy_blocks: int, empty_every: int = 3, txs_per_block: int = 6, seed: int = 7,
                progress: Callable[[int], None] | None = None) -> None:
    """Mines a chain with value transfers (legacy and EIP-1559), contract creations, calls that
    emit logs, and reverted calls. The node must run with `--no-mining`. `progress` is given the
    head after each block with transactions."""
    rnd = random.Random(seed)
    accounts = node.rpc("eth_accounts")
    node.rpc("eth_sendTransaction", {"from": accounts[0], "data": EMITTER_INIT, "gas": hex(200_000)})
    node.rpc("eth_sendTransaction", {"from": accounts[1], "data": REVERTER_INIT, "gas": hex(200_000)})
    node.rpc("evm_mine")
    receipts = node.rpc("eth_getBlockReceipts", "latest")
    emitter, reverter = (r["contractAddress"] for r in receipts)
    for b in range(busy_blocks):
        for i in range(txs_per_block):
            sender = accounts[(b + i) % len(accounts)]
            kind = rnd.choice(["transfer", "legacy", "call", "call", "revert"])
            tx: dict[str, Any] = {"from": sender, "gas": hex(120_000)}
            if kind in ("transfer", "legacy"):
                tx |= {"to": accounts[rnd.randrange(len(accounts))], "value": hex(rnd.randrange(1, 10**18))}
                if kind == "legacy":
                    tx["gasPrice"] = hex(3 * 10**9)
            elif kind == "call":
                words = rnd.randrange(1, 4)
                tx |= {"to": emitter, "value": hex(rnd.randrange(0, 1000)),
                       "data": "0x" + "".join(f"{rnd.getrandbits(256):064x}" for _ in range(words))}
            else:
                tx |= {"to": reverter}
            node.rpc("eth_sendTransaction", tx)
        node.rpc("evm_mine")
        if empty_every and b % empty_every == 0:
            node.mine(2)
        if progress:
            progress(node.head())


def build_to_height(node: Node, height: int, busy_blocks: int = 200,
                    progress: Callable[[int], None] | None = None) -> None:
    """Some blocks with transactions and logs, then empty blocks up to `height`. Empty blocks are
    mined a fraction of a second's worth at a time, so that `progress` (given the head) moves."""
    build_chain(node, busy_blocks=min(busy_blocks, height // 2), empty_every=0, progress=progress)
    head, step = node.head(), 1000
    while head < height:
        blocks = min(step, height - head)
        began = time.monotonic()
        node.mine(blocks)
        took = time.monotonic() - began
        # anvil mines some 40,000 empty blocks a second with --prune-history, 1,000 without.
        step = max(100, min(200_000, int(blocks * 0.25 / max(took, 1e-3))))
        head += blocks
        if progress:
            progress(head)


class MiningProgress:
    """Mining progress on stderr for a long chain: on a terminal one line rewritten in place,
    otherwise a line every `every` seconds or every tenth of the chain. A chain mined within
    `quiet` seconds shows nothing."""

    def __init__(self, height: int, stream: TextIO | None = None, *, quiet: float = 2.0, every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.height = height
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty()
        self.quiet, self.every, self.clock = quiet, every, clock
        self.started = clock()
        self.shown_at: float | None = None  # when a line was last written
        self.shown_tenth = 0
        self.head = 0

    def __call__(self, head: int) -> None:
        self.head = head
        now = self.clock()
        elapsed = now - self.started
        if elapsed < self.quiet:
            return
        tenth = min(10, head * 10 // max(self.height, 1))
        if self.tty:
            due = self.shown_at is None or now - self.shown_at >= 0.2  # a few rewrites a second
        else:
            due = self.shown_at is None or now - self.shown_at >= self.every or tenth > self.shown_tenth
        if due:
            self._show(now)
            self.shown_tenth = tenth

    def _show(self, now: float) -> None:
        elapsed = now - self.started
        line = (f"mining: block {self.head:,} of {self.height:,} ({100 * self.head / max(self.height, 1):.0f}%),"
                f" {self.head / max(elapsed, 1e-9):,.0f} blocks/s")
        self.stream.write(f"\r\033[K{line}" if self.tty else f"{line}\n")
        self.stream.flush()
        self.shown_at = now

    def done(self) -> None:
        """Ends the line on a terminal, at the final head, if anything was shown."""
        if self.tty and self.shown_at is not None:
            self._show(self.clock())
            self.stream.write("\n")
            self.stream.flush()


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Build a development chain on a running anvil started with --no-mining.")
    ap.add_argument("url")
    ap.add_argument("--height", type=int, required=True)
    args = ap.parse_args()
    node = Node(args.url)
    node.wait_until_up()
    progress = MiningProgress(args.height)
    try:
        build_to_height(node, args.height, progress=progress)
    except KeyboardInterrupt:
        sys.exit(130)  # interrupted: the caller stops the node; no traceback
    progress.done()
    print(f"chain built at {args.url}: head {node.head():,}")
