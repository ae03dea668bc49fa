"""A chain on a real anvil whose transactions exercise every kind of internal call, for the trace
tests (issue 26): value-forwarding CALLs, DELEGATECALL, STATICCALL, CREATE, CREATE2, SELFDESTRUCT
(both post-Cancun flavours), caught reverts (reason string and custom error), a failed
transaction, a plain transfer, contract creations and calls nested several frames deep.

    with Anvil() as node:
        chain = build_trace_chain(node)
        for tx in chain.txs: ...         # TraceTx(block, hash, kind, shows)
        chain.tx("deep").hash            # the transaction of one kind

The contracts are compiled by solc-js like indexer.testing.contracts does (cached per machine).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eth_utils import keccak, to_checksum_address

from .anvil import Node
from .contracts import compile, web3_for

SOURCE = """
// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

error Nope(uint256 code);

// Deployed by Hub's constructor: receives ETH, answers views, reverts on demand.
contract Sink {
    uint256 public received;

    // A log from an inner call: the traces' check finds the call that emitted each log.
    event Got(address from, uint256 value);

    receive() external payable { received += msg.value; emit Got(msg.sender, msg.value); }

    function peek(uint256 x) external view returns (uint256) { return x + received; }

    // Writes storage, so that Hub calls it by CALL (a view or pure function goes by STATICCALL).
    function fail(uint256 code) external {
        received += 1;
        if (code == 0) revert("sink says no");
        revert Nope(code);
    }
}

// Run by DELEGATECALL from Hub: its slot 0 is Hub's slot 0.
contract Logic {
    uint256 public stored;

    // Emitted by Hub's account, whose code context a DELEGATECALL runs in.
    event Set(uint256 v);

    // payable: a DELEGATECALL keeps msg.value, and Hub.deep delegates from a frame with value.
    function setStored(uint256 v) external payable returns (uint256) { stored = v; emit Set(v); return v * 2; }
}

// Created by Hub with CREATE and CREATE2; selfdestructs on request.
contract Child {
    uint256 public value;

    constructor(uint256 v) payable { value = v; }

    function destroy(address payable to) external { selfdestruct(to); }
}

contract Hub {
    uint256 public stored;       // slot 0, written by Logic through DELEGATECALL
    Sink public sink;
    Logic public logic;
    Child public lastChild;

    event Caught(string reason, bytes data);

    constructor() { sink = new Sink(); logic = new Logic(); }

    // CALLs carrying value: half to an EOA, the rest to a contract.
    function forward(address payable eoa) external payable {
        uint256 half = msg.value / 2;
        (bool ok,) = eoa.call{value: half}("");
        require(ok, "eoa refused");
        (ok,) = address(sink).call{value: msg.value - half}("");
        require(ok, "sink refused");
    }

    function delegate(uint256 v) public payable returns (uint256) {
        (bool ok, bytes memory out) = address(logic).delegatecall(abi.encodeCall(Logic.setStored, (v)));
        require(ok, "delegate failed");
        return abi.decode(out, (uint256));
    }

    // A view called by a transaction: Sink.peek goes by STATICCALL.
    function look(uint256 x) public view returns (uint256) { return sink.peek(x); }

    // A STATICCALL to a precompile (sha256, at 0x02).
    function hash(bytes calldata data) external returns (bytes32 h) { h = sha256(data); stored = uint256(h); }

    function make(uint256 v) external payable returns (Child c) { c = new Child{value: msg.value}(v); lastChild = c; }

    function make2(bytes32 salt, uint256 v) external payable returns (Child c) {
        c = new Child{salt: salt, value: msg.value}(v);
        lastChild = c;
    }

    // Created and destroyed in one transaction: post-Cancun, the account really goes.
    function makeAndDestroy(uint256 v, address payable to) external payable {
        Child c = new Child{value: msg.value}(v);
        c.destroy(to);
    }

    // A child from an earlier transaction: post-Cancun, SELFDESTRUCT only sends its balance.
    function destroy(Child c, address payable to) external { c.destroy(to); }

    // Two reverted calls, both caught: the transaction succeeds.
    function tryBoth() external returns (string memory reason, bytes memory data) {
        try sink.fail(0) {} catch Error(string memory r) { reason = r; }
        try sink.fail(7) {} catch (bytes memory d) { data = d; }
        emit Caught(reason, data);
    }

    // The whole transaction fails, after an inner call that sent value and succeeded.
    function boom() external payable {
        (bool ok,) = address(sink).call{value: msg.value}("");
        require(ok);
        revert("boom");
    }

    // Calls itself n times, then, n + 1 frames down: value to Sink, a STATICCALL, a DELEGATECALL.
    function deep(uint256 n) external payable returns (uint256) {
        if (n > 0) return this.deep{value: msg.value}(n - 1);
        (bool ok,) = address(sink).call{value: msg.value}("");
        require(ok);
        uint256 seen = look(n);
        return seen + delegate(n + 40);
    }
}
"""

REVERT_REASON = "sink says no"  # Sink.fail(0)'s revert reason, caught by Hub.tryBoth
CUSTOM_ERROR_CODE = 7  # Hub.tryBoth's second call reverts with Nope(7)
NOPE_SELECTOR = "0x" + keccak(text="Nope(uint256)")[:4].hex()
BOOM_REASON = "boom"  # the failed transaction's reason
SALT = "0x" + "5a" * 32
GAS = hex(3_000_000)


@dataclass(frozen=True)
class TraceTx:
    block: int
    hash: str
    kind: str          # a short name, unique in the chain ("forward", "deep", ...)
    shows: str         # what the transaction is meant to show
    ok: bool = True    # whether the transaction itself succeeds (receipt status 1)


@dataclass
class TraceChain:
    """The blocks built (in order), their transactions and the contracts' addresses
    (checksummed: hub, sink, logic, standalone, child (CREATE), child2 (CREATE2), doomed (created
    and destroyed in one transaction))."""
    blocks: list[int] = field(default_factory=list)
    txs: list[TraceTx] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    accounts: list[str] = field(default_factory=list)

    def tx(self, kind: str) -> TraceTx:
        return next(t for t in self.txs if t.kind == kind)

    def in_block(self, block: int) -> list[TraceTx]:
        return [t for t in self.txs if t.block == block]


def create_address(sender: str, nonce: int) -> str:
    """The address CREATE gives: keccak(rlp([sender, nonce]))[12:] (nonce < 2**64)."""
    if nonce == 0:
        encoded_nonce = b"\x80"
    elif nonce < 0x80:
        encoded_nonce = bytes([nonce])
    else:
        raw = nonce.to_bytes((nonce.bit_length() + 7) // 8, "big")
        encoded_nonce = bytes([0x80 + len(raw)]) + raw
    payload = b"\x94" + bytes.fromhex(sender[2:]) + encoded_nonce
    return to_checksum_address(keccak(bytes([0xc0 + len(payload)]) + payload)[12:])


def create2_address(deployer: str, salt: str, init_code: bytes) -> str:
    return to_checksum_address(keccak(b"\xff" + bytes.fromhex(deployer[2:]) + bytes.fromhex(salt[2:])
                                      + keccak(init_code))[12:])


def build_trace_chain(node: Node) -> TraceChain:
    """Compiles and deploys the contracts and mines five blocks of transactions (see the `shows`
    of each), most with several. Mining is manual while it builds (evm_setAutomine false), then
    set back as it was."""
    built = compile({"Trace.sol": SOURCE})
    w3 = web3_for(node)
    hub_abi, hub_code = built["Hub"]
    logic_abi, logic_code = built["Logic"]
    hub_c = w3.eth.contract(abi=hub_abi)
    chain = TraceChain(accounts=list(node.rpc("eth_accounts")))
    a = [to_checksum_address(x) for x in chain.accounts]
    automine = node.rpc("anvil_getAutomine")
    node.rpc("evm_setAutomine", False)
    try:
        pending: list[tuple[str, str, str, bool]] = []

        def send(kind: str, shows: str, tx: dict[str, Any], ok: bool = True) -> str:
            body = {"gas": GAS} | {k: (hex(v) if isinstance(v, int) else v) for k, v in tx.items()}
            tx_hash = node.rpc("eth_sendTransaction", body)
            pending.append((tx_hash, kind, shows, ok))
            return tx_hash

        def mine() -> int:
            node.rpc("evm_mine")
            block = node.head()
            hashes = node.rpc("eth_getBlockByNumber", hex(block), False)["transactions"]
            assert hashes == [p[0] for p in pending], f"block {block} holds {hashes}, not {pending}"
            for tx_hash, kind, shows, ok in pending:
                status = int(node.rpc("eth_getTransactionReceipt", tx_hash)["status"], 16)
                assert status == int(ok), f"{kind} ({tx_hash}) has status {status}"
                chain.txs.append(TraceTx(block, tx_hash, kind, shows, ok))
            pending.clear()
            chain.blocks.append(block)
            return block

        def call(name: str, *args: Any) -> str:
            return hub_c.encode_abi(name, list(args))

        # Block 1: a plain transfer, a creation transaction whose constructor CREATEs two
        # contracts, and a creation with no internal calls.
        hub = create_address(a[1], int(node.rpc("eth_getTransactionCount", a[1], "latest"), 16))
        send("transfer", "plain ETH transfer EOA to EOA: a top-level CALL and nothing inside",
             {"from": a[0], "to": a[9], "value": 10**18})
        send("create_hub", "contract creation transaction whose constructor CREATEs Sink and Logic",
             {"from": a[1], "data": hub_code})
        standalone = create_address(a[2], int(node.rpc("eth_getTransactionCount", a[2], "latest"), 16))
        send("create_plain", "contract creation transaction with no internal calls", {"from": a[2], "data": logic_code})
        mine()
        hub_bound = w3.eth.contract(address=hub, abi=hub_abi)
        sink, logic = hub_bound.functions.sink().call(), hub_bound.functions.logic().call()
        assert w3.eth.get_code(standalone), "the plain creation left no code"

        # Block 2: value forwarded, DELEGATECALL, STATICCALL (to a contract and to a precompile),
        # CREATE with value.
        hub_nonce = int(node.rpc("eth_getTransactionCount", hub, "latest"), 16)  # 3: a contract starts at 1
        child = create_address(hub, hub_nonce)
        send("forward", "CALLs with value from a contract to an EOA (a[8], 1 ETH) and to a contract (Sink's "
             "receive, 1 ETH)", {"from": a[3], "to": hub, "value": 2 * 10**18, "data": call("forward", a[8])})
        send("delegate", "DELEGATECALL into Logic.setStored (writes Hub's storage)",
             {"from": a[4], "to": hub, "data": call("delegate", 21)})
        send("look", "STATICCALL of Sink.peek from a view called by a transaction",
             {"from": a[5], "to": hub, "data": call("look", 5)})
        send("precompile", "STATICCALL to the sha256 precompile (0x02)",
             {"from": a[5], "to": hub, "data": call("hash", b"trace me")})
        send("create", "CREATE of Child by Hub, with value (0.5 ETH) and a constructor argument",
             {"from": a[6], "to": hub, "value": 5 * 10**17, "data": call("make", 11)})
        mine()
        assert w3.eth.get_code(child), "CREATE made no child"

        # Block 3: CREATE2, SELFDESTRUCT of a child created in the same transaction (destroyed)
        # and of the child from block 2 (only its balance moves, post-Cancun).
        child_init = bytes.fromhex(built["Child"][1][2:]) + (12).to_bytes(32, "big")
        child2 = create2_address(hub, SALT, child_init)
        doomed = create_address(hub, hub_nonce + 2)
        send("create2", "CREATE2 of Child by Hub with a salt, with value (0.25 ETH)",
             {"from": a[6], "to": hub, "value": 25 * 10**16, "data": call("make2", bytes.fromhex(SALT[2:]), 12)})
        send("selfdestruct_same_tx", "CREATE of a Child with 0.125 ETH, then its SELFDESTRUCT to a[7] in the "
             "same transaction: the account is destroyed",
             {"from": a[7], "to": hub, "value": 125 * 10**15, "data": call("makeAndDestroy", 13, a[7])})
        send("selfdestruct_later", "SELFDESTRUCT of the Child created in block 2 (0.5 ETH to a[7]): post-Cancun "
             "only its balance moves, the code stays",
             {"from": a[7], "to": hub, "data": call("destroy", child, a[7])})
        mine()
        assert w3.eth.get_code(child2), "CREATE2 made no child"
        assert w3.eth.get_code(child), "post-Cancun, SELFDESTRUCT of an older contract leaves its code"
        assert w3.eth.get_balance(child) == 0
        assert not w3.eth.get_code(doomed), "a contract destroyed in its creating transaction keeps code"

        # Block 4: reverted inner calls caught (reason string, custom error); a failed transaction.
        send("try_catch", f"two inner CALLs that revert, caught by try/catch: Error({REVERT_REASON!r}) and "
             f"the custom error Nope({CUSTOM_ERROR_CODE}); the transaction succeeds",
             {"from": a[3], "to": hub, "data": call("tryBoth")})
        send("failed", f"a top-level transaction that reverts with {BOOM_REASON!r} after an inner CALL with value "
             "(1 wei) that succeeded", {"from": a[4], "to": hub, "value": 1, "data": call("boom")}, ok=False)
        mine()

        # Block 5: nesting: Hub.deep(3) calls itself three times, then the innermost frame sends
        # value to Sink, STATICCALLs it (through look) and DELEGATECALLs Logic. Then a storage
        # slot cleared: a refund.
        send("deep", "nested calls: Hub.deep(3) -> deep(2) -> deep(1) -> deep(0) -> {CALL Sink with value "
             "(7 wei), STATICCALL Sink.peek, DELEGATECALL Logic.setStored}: depth 5 counting the top",
             {"from": a[5], "to": hub, "value": 7, "data": call("deep", 3)})
        send("refund", "DELEGATECALL that clears Hub's slot 0 (set by deep): a gas refund, which the "
             "receipt's gasUsed subtracts", {"from": a[4], "to": hub, "data": call("delegate", 0)})
        mine()
    finally:
        node.rpc("evm_setAutomine", automine)
    chain.addresses = {"hub": hub, "sink": sink, "logic": logic, "standalone": standalone, "child": child,
                       "child2": child2, "doomed": doomed}
    return chain
