"""Real contracts for the tests: Solidity compiled by solc-js with OpenZeppelin's contracts
(both from npm, installed into .cache/solc by scripts/install-solc), deployed on anvil.

    built = compile({"Token.sol": SOURCE})          # {name: (abi, bytecode)}
    token = deploy(node, *built["Token"], arg, ...)  # a web3 contract at its new address
    receipt = mined(node, token.functions.f().transact({"from": sender}))

Compiling OpenZeppelin takes solc-js some seconds, so the output is kept in .cache/solc/build,
keyed by the sources and the compiler's settings: the same sources compile once per machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from hexbytes import HexBytes
from web3 import Web3
from web3.contract import Contract
from web3.exceptions import TransactionNotFound

from .anvil import Node
from .waiting import wait_for

# scripts/install-solc puts solc and @openzeppelin/contracts there; scripts/test says where.
SOLC_DIR = Path(os.environ.get("INDEXER_TEST_SOLC") or Path(__file__).resolve().parents[2] / ".cache" / "solc")

# The EVM version anvil runs by default supports every opcode these settings emit.
SETTINGS = {"optimizer": {"enabled": True, "runs": 200}, "evmVersion": "cancun",
            "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object"]}}}

# Runs in node: standard JSON in on stdin, out on stdout; imports read from node_modules, so
# that "@openzeppelin/contracts/..." resolves to the installed package.
_COMPILE_JS = """
const fs = require("fs"), path = require("path");
const modules = path.join(process.argv[1], "node_modules");
const solc = require(path.join(modules, "solc"));
const input = fs.readFileSync(0, "utf8");
function findImports(name) {
    try { return {contents: fs.readFileSync(path.join(modules, name), "utf8")}; }
    catch (e) { return {error: "not found: " + name}; }
}
process.stdout.write(solc.compile(input, {import: findImports}));
"""


class CompileError(Exception):
    pass


def compile(sources: dict[str, str]) -> dict[str, tuple[list[dict[str, Any]], str]]:
    """The contracts defined in `sources` ({file name: Solidity}) as {name: (abi, bytecode)};
    contracts they import are compiled but not returned."""
    request = {"language": "Solidity", "sources": {name: {"content": text} for name, text in sources.items()},
               "settings": SETTINGS}
    text = json.dumps(request, sort_keys=True)
    cached = SOLC_DIR / "build" / f"{hashlib.sha256(text.encode()).hexdigest()}.json"
    if cached.exists():
        output = json.loads(cached.read_text())
    else:
        if not (SOLC_DIR / "node_modules" / "solc").exists():
            raise CompileError(f"solc is not installed in {SOLC_DIR}: run scripts/install-solc")
        done = subprocess.run(["node", "-e", _COMPILE_JS, str(SOLC_DIR)], input=text, capture_output=True,
                              text=True, timeout=600)
        if done.returncode:
            raise CompileError(f"solc-js failed: {done.stderr[-2000:]}")
        output = json.loads(done.stdout)
        errors = [e["formattedMessage"] for e in output.get("errors", []) if e["severity"] == "error"]
        if errors:
            raise CompileError("\n".join(errors))
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")  # renamed: a concurrent reader sees all or nothing
        partial.write_text(json.dumps(output))
        partial.replace(cached)
    return {name: (built["abi"], "0x" + built["evm"]["bytecode"]["object"])
            for file in sources for name, built in output["contracts"].get(file, {}).items()}


def web3_for(node: Node) -> Web3:
    return Web3(Web3.HTTPProvider(node.url, request_kwargs={"timeout": 60}))


def deploy(node: Node, abi: list[dict[str, Any]], bytecode: str, *args: Any) -> Contract:
    """Deploys the contract from the node's first account; returns it, bound to the node, at its
    address, once a block holds it (`mined`)."""
    w3 = web3_for(node)
    data = w3.eth.contract(abi=abi, bytecode=bytecode).constructor(*args).data_in_transaction
    sender = w3.eth.accounts[0]
    tx_hash = w3.eth.send_transaction({"from": sender, "data": data, "gas": 10_000_000})
    receipt = mined(node, tx_hash)
    if receipt["status"] != 1:
        raise RuntimeError(f"deploying failed: {receipt}")
    return w3.eth.contract(address=receipt["contractAddress"], abi=abi)


def mined(node: Node, tx_hash: Any, timeout: float = 60) -> Any:
    """The transaction's receipt, once a block holds it: asked for until `timeout`, since a node
    answers a transaction sent before it has mined it, even before it knows it (anvil under
    load). A node that does not mine by itself (--no-mining) gets a block mined once the
    transaction is pending."""
    w3 = web3_for(node)
    mines_by_itself = node.rpc("anvil_getAutomine")

    def receipt() -> Any:
        try:
            return w3.eth.get_transaction_receipt(tx_hash)
        except TransactionNotFound:
            pass
        if not mines_by_itself:
            try:
                pending = w3.eth.get_transaction(tx_hash)["blockNumber"] is None
            except TransactionNotFound:
                return None
            if pending:
                node.rpc("evm_mine")
        return None

    return wait_for(receipt, f"transaction {Web3.to_hex(HexBytes(tx_hash))} to be mined", timeout)
