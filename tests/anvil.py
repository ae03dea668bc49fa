"""A real anvil node on a free loopback port, and a chain with transfers, contract calls and logs."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import orjson
import requests

# scripts/install-anvil puts it in .cache; scripts/test says where in INDEXER_TEST_ANVIL.
_CACHED = Path(__file__).resolve().parent.parent / ".cache" / "anvil" / "node_modules" / ".bin" / "anvil"
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


def build_chain(node: Node, *, busy_blocks: int, empty_every: int = 3, txs_per_block: int = 6, seed: int = 7) -> None:
    """Mines a chain with value transfers (legacy and EIP-1559), contract creations, calls that
    emit logs, and reverted calls. The node must run with `--no-mining`."""
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


def build_to_height(node: Node, height: int, busy_blocks: int = 200) -> None:
    """Some blocks with transactions and logs, then empty blocks up to `height`."""
    build_chain(node, busy_blocks=min(busy_blocks, height // 2), empty_every=0)
    if node.head() < height:
        node.mine(height - node.head())


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Build a development chain on a running anvil started with --no-mining.")
    ap.add_argument("url")
    ap.add_argument("--height", type=int, required=True)
    args = ap.parse_args()
    node = Node(args.url)
    node.wait_until_up()
    build_to_height(node, args.height)
    print(f"chain built at {args.url}: head {node.head():,}")
