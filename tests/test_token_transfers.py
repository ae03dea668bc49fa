"""Token transfers decoded from stored logs: OpenZeppelin's ERC-20, ERC-721 and ERC-1155 tokens
deployed on anvil, indexed and decoded by `indexer work`, compared row for row with what web3.py's
own event decoding makes of the same receipts; real mainnet logs, standard and not, likewise."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import psycopg
import pytest
from web3 import Web3
from web3.logs import DISCARD

from indexer.chaindata import chain, store
from indexer.decoding import token_transfers
from indexer.jobs import partitions, planner
from indexer.node.rpc import RpcClient
from indexer.testing import fixtures
from indexer.testing.anvil import Anvil
from indexer.testing.contracts import compile, deploy, mined
from indexer.testing.replay import ReplayNode
from indexer.testing.work import FAST

from .conftest import run_indexer

FIXTURES = Path(__file__).parent / "fixtures"

TOKENS = """// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;
import "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import "@openzeppelin/contracts/token/ERC721/ERC721.sol";
import "@openzeppelin/contracts/token/ERC1155/ERC1155.sol";

contract Coin is ERC20 {
    constructor() ERC20("Coin", "COIN") {}
    function mint(address to, uint256 amount) external { _mint(to, amount); }
    function burn(address from, uint256 amount) external { _burn(from, amount); }
}

contract Kitty is ERC721 {
    constructor() ERC721("Kitty", "KIT") {}
    function mint(address to, uint256 id) external { _mint(to, id); }
    function burn(uint256 id) external { _burn(id); }
}

contract Items is ERC1155 {
    constructor() ERC1155("") {}
    function mint(address to, uint256[] calldata ids, uint256[] calldata values) external {
        _mintBatch(to, ids, values, "");
    }
    function burn(address from, uint256[] calldata ids, uint256[] calldata values) external {
        _burnBatch(from, ids, values);
    }
}

// As CryptoKitties (2017), before ERC-721 said which arguments are indexed: nothing is.
contract OldKitty {
    event Transfer(address from, address to, uint256 tokenId);
    function transfer(address to, uint256 tokenId) external { emit Transfer(msg.sender, to, tokenId); }
}

// Logs with the standards' signatures that break their shapes: never decoded, never fatal.
contract Odd {
    event Transfer(address indexed from, address to, uint256 value);
    event TransferBatch(address indexed operator, address indexed from, address indexed to, uint256[] ids,
                        uint256[] values);
    function emitOdd() external {
        emit Transfer(msg.sender, address(1), 5);
        emit TransferBatch(msg.sender, msg.sender, address(2), new uint256[](2), new uint256[](1));
    }
}
"""

BIG = 2**256 - 1  # the largest amount a word holds


@pytest.fixture(scope="module")
def tokens():
    """An anvil chain with mints, transfers, burns and batch transfers of every standard, one
    transaction a block; yields the node, the contracts and the receipts."""
    built = compile({"Tokens.sol": TOKENS})
    with Anvil() as node:
        accounts = node.rpc("eth_accounts")[:3]
        a, b, c = (Web3.to_checksum_address(x) for x in accounts)
        contracts = {name: deploy(node, *built[name]) for name in ("Coin", "Kitty", "Items", "OldKitty", "Odd")}
        coin, kitty, items, old, odd = contracts.values()
        calls = [
            (a, coin.functions.mint(a, 10**24)), (a, coin.functions.transfer(b, 12345)),
            (b, coin.functions.transfer(c, 45)), (a, coin.functions.mint(c, BIG - 10**24)),
            (a, coin.functions.burn(a, 10**20)),
            (a, kitty.functions.mint(a, 1)), (a, kitty.functions.mint(b, 2**255 + 7)),
            (a, kitty.functions.transferFrom(a, c, 1)), (b, kitty.functions.burn(2**255 + 7)),
            (a, items.functions.mint(a, [1, 2, 3], [10, 20, 30])), (a, items.functions.mint(b, [9], [99])),
            (a, items.functions.safeTransferFrom(a, b, 2, 5, b"")),
            (a, items.functions.safeBatchTransferFrom(a, c, [1, 3], [4, 6], b"")),
            (b, items.functions.burn(b, [9, 2], [9, 5])),
            (a, old.functions.transfer(b, 1514264)), (a, odd.functions.emitOdd()),
        ]
        receipts = [mined(node, fn.transact({"from": sender})) for sender, fn in calls]
        assert all(r["status"] == 1 for r in receipts)
        yield node, contracts, receipts


def _address(value: str) -> bytes:
    return bytes.fromhex(value[2:])


def expected_rows(contracts: dict[str, Any], receipts: Iterable[Any]) -> set[tuple]:
    """token_transfers rows as web3.py decodes the receipts' logs with each contract's own ABI."""
    rows = set()
    standards = {"Coin": "erc20", "Kitty": "erc721", "Items": "erc1155", "OldKitty": None}
    for receipt in receipts:
        for name, standard in standards.items():
            contract = contracts[name]
            own = dict(receipt, logs=[log for log in receipt["logs"] if log["address"] == contract.address])
            for event in ("Transfer", "TransferSingle", "TransferBatch"):
                if not any(e.get("name") == event for e in contract.abi):
                    continue
                for e in getattr(contract.events, event)().process_receipt(own, errors=DISCARD):
                    args = e["args"]
                    key = (e["blockNumber"], e["logIndex"])
                    head = (standard, _address(e["address"]), _address(args["from"]), _address(args["to"]))
                    tx = bytes(e["transactionHash"])
                    if event == "TransferBatch":
                        rows |= {(*key, i, *head, token_id, value, tx)
                                 for i, (token_id, value) in enumerate(zip(args["ids"], args["values"]))}
                    elif event == "TransferSingle":
                        rows.add((*key, 0, *head, args["id"], args["value"], tx))
                    elif standard == "erc721":
                        rows.add((*key, 0, *head, args["tokenId"], 1, tx))
                    elif standard == "erc20":
                        rows.add((*key, 0, *head, None, args["value"], tx))
                    else:  # the unindexed form: the number is an amount or a token id, the log cannot say
                        rows.add((*key, 0, *head, None, args["tokenId"], tx))
    return rows


def stored_rows(conn: psycopg.Connection) -> set[tuple]:
    return {(n, i, p, s, bytes(t), bytes(f), bytes(to), None if tid is None else int(tid), int(amount), bytes(tx))
            for n, i, p, s, t, f, to, tid, amount, tx in conn.execute(
                "SELECT block_number, log_index, position, standard, token_address, from_address, to_address,"
                " token_id, amount, transaction_hash FROM token_transfers")}


def test_indexed_tokens_decode_to_what_web3_decodes_of_the_same_receipts(db_url, conn, tokens):
    node, contracts, receipts = tokens
    planner.plan(conn, 0, node.head() + 1, 5)
    result = run_indexer("work", "--drain", "--workers", "2", db_url=db_url,
                         env=FAST | {"INDEXER_RPC_URL": node.url})
    assert result.returncode == 0, result.stderr

    expected = expected_rows(contracts, receipts)
    # Every standard, mints from and burns to the zero address, a batch of three, the largest amount.
    assert Counter(row[3] for row in expected) == {"erc20": 5, "erc721": 4, "erc1155": 9, None: 1}
    assert any(row[5] == bytes(20) for row in expected) and any(row[6] == bytes(20) for row in expected)
    assert any(row[8] == BIG - 10**24 for row in expected)
    assert stored_rows(conn) == expected
    # Nothing was left to decode, and the odd logs were skipped, each for its reason.
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    again = token_transfers.decode_range(conn, 0, node.head())
    assert again.skipped == {"transfer: unexpected topics/data length": 1,
                             "transfer batch: ids and values differ in length": 1}
    assert stored_rows(conn) == expected  # and decoding again changes nothing


def store_recorded(conn: psycopg.Connection, name: str) -> int:
    """Stores a recorded block as `indexer work` would, fetched from a node replaying it."""
    with ReplayNode([name]) as node:
        rows = chain.fetch(RpcClient([node.url], max_attempts=1), node.head, node.head, verify_roots=True)
        number = node.head
    partitions.ensure(conn, number, number)
    with conn.transaction():
        store.write(conn, rows)
    return number


def test_a_recorded_mainnet_block_decodes_to_what_web3_decodes(conn):
    """Mainnet block 18,000,000: 141 ERC-20 and 2 ERC-721 transfers among its 291 logs."""
    number = store_recorded(conn, "mainnet-18000000")
    w3 = Web3()
    abi = {standard: [{"type": "event", "name": "Transfer", "anonymous": False, "inputs": [
        {"name": "from", "type": "address", "indexed": True}, {"name": "to", "type": "address", "indexed": True},
        {"name": "value", "type": "uint256", "indexed": standard == "erc721"}]}] for standard in ("erc20", "erc721")}
    expected = set()
    for receipt in fixtures.load("mainnet-18000000")["receipts"]:
        for standard in ("erc20", "erc721"):
            event = w3.eth.contract(abi=abi[standard]).events.Transfer()
            for e in event.process_receipt(receipt, errors=DISCARD):
                a = e["args"]
                ends = (_address(e["address"]), _address(a["from"]), _address(a["to"]))
                amount = (a["value"], 1) if standard == "erc721" else (None, a["value"])
                # Raw JSON, as recorded: web3 leaves the log's own fields as the node's hex.
                expected.add((number, int(e["logIndex"], 16), 0, standard, *ends, *amount,
                              bytes.fromhex(e["transactionHash"][2:])))

    decoded = token_transfers.decode_range(conn, number, number)
    assert Counter(row[3] for row in expected) == {"erc20": 141, "erc721": 2}
    assert (decoded.logs, decoded.transfers, decoded.skipped) == (143, 143, {})
    assert stored_rows(conn) == expected


def test_recorded_logs_of_non_standard_tokens_decode_as_far_as_their_data_allows(conn):
    """Real logs (tests/fixtures/README.md): CryptoKitties' Transfer with nothing indexed, and a
    Transfer with only its sender indexed, which no standard describes."""
    logs = json.loads((FIXTURES / "logs" / "nonstandard-transfer-logs.json").read_text())
    for log in logs:
        partitions.ensure(conn, int(log["blockNumber"], 16), int(log["blockNumber"], 16))
        topics = [bytes.fromhex(t[2:]) for t in log["topics"]] + [None] * (4 - len(log["topics"]))
        conn.execute("INSERT INTO logs (block_number, log_index, transaction_index, transaction_hash, address,"
                     " topic0, topic1, topic2, topic3, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                     (int(log["blockNumber"], 16), int(log["logIndex"], 16), int(log["transactionIndex"], 16),
                      bytes.fromhex(log["transactionHash"][2:]), bytes.fromhex(log["address"][2:]), *topics,
                      bytes.fromhex(log["data"][2:])))
    decoded = token_transfers.decode_range(conn, 0, 2**40)
    assert decoded.skipped == {"transfer: unexpected topics/data length": 1}
    kitty = logs[0]
    assert stored_rows(conn) == {(
        0x7304A0, 0xD, 0, None, bytes.fromhex("06012c8cf97bead5deae237070f9587f8e7a266d"), bytes(20),
        bytes.fromhex("7c00c9f0e7aed440c0c730a9bd9ee4f49de20d5c"), None, 0x171B18,
        bytes.fromhex(kitty["transactionHash"][2:]))}


def test_a_repaired_block_is_decoded_again_as_a_fresh_decode_would(db_url, conn, tokens):
    node, contracts, receipts = tokens
    head = node.head()
    env = FAST | {"INDEXER_RPC_URL": node.url}
    planner.plan(conn, 0, head + 1, 5)
    assert run_indexer("work", "--drain", db_url=db_url, env=env).returncode == 0
    batch = receipts[9]["blockNumber"]  # the mint of a batch of three ERC-1155 tokens
    # The block's stored rows go wrong: a wrong log count for verify to find, a decoded row altered.
    conn.execute("UPDATE blocks SET log_count = log_count + 1 WHERE number = %s", (batch,))
    conn.execute("UPDATE token_transfers SET amount = 0 WHERE block_number = %s", (batch,))

    repaired = run_indexer("verify", "--from", "0", "--to", str(head + 1), "--repair", db_url=db_url)
    assert repaired.stdout.splitlines()[-1] == "repair: planned 1 job(s) for 1 block(s)", repaired.stdout
    # Deleted with the block's other rows: no decoded row outlives the logs it was decoded from.
    assert conn.execute("SELECT count(*) FROM token_transfers WHERE block_number = %s", (batch,)).fetchone() == (0,)

    assert run_indexer("work", "--drain", db_url=db_url, env=env).returncode == 0
    assert stored_rows(conn) == expected_rows(contracts, receipts)
