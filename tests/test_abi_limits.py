"""What a large ABI costs, against a real PostgreSQL and anvil (indexer/decoding/abi.py): an ABI at the
bounds is added, decoded, listed and dropped; one past them is refused before anything is
written; a drop takes a bounded share of the server's lock table a transaction, waits for the
decode windows in flight and never for the queue, and finishes when run again after an
interruption; and what the server runs out of is said as such."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eth_utils import keccak

from indexer.base.block_range import DECODE_LOGS
from indexer.decoding import abi, abi_bounds, abi_decode
from indexer.jobqueue import queue
from indexer.testing.anvil import EMITTER_INIT, Anvil
from indexer.testing.cluster import OwnPostgres
from indexer.testing.contracts import mined
from indexer.testing.waiting import wait_for

from .conftest import run_indexer

SIGNATURE = "Event{n}(address,uint256,uint256)"


def events_abi(path: Path, count: int, prefix: str = "Event") -> Path:
    """An ABI of `count` events, `<prefix><n>(address indexed who, uint256 topic, uint256 amount)`."""
    entries = [{"type": "event", "name": f"{prefix}{n}", "anonymous": False,
                "inputs": [{"name": "who", "type": "address", "indexed": True},
                           {"name": "topic", "type": "uint256", "indexed": False},
                           {"name": "amount", "type": "uint256", "indexed": False}]}
               for n in range(count)]
    path.write_text(json.dumps(entries))
    return path


def emit(node: Anvil, signatures: list[str]) -> tuple[str, list[Any]]:
    """Deploys the test kit's emitter and calls it once per signature: each call logs topic0 =
    the signature's hash, topic1 = the caller, data = the call's data (the same hash, then the
    call's number from 1), which the events of `events_abi` decode. Returns the emitter and the
    receipts."""
    accounts = node.rpc("eth_accounts")
    emitter = mined(node, node.rpc("eth_sendTransaction", {"from": accounts[0], "data": EMITTER_INIT,
                                                           "gas": hex(200_000)}))["contractAddress"]
    receipts = []
    for n, signature in enumerate(signatures, start=1):
        data = "0x" + keccak(text=signature).hex() + f"{n:064x}"
        receipts.append(mined(node, node.rpc("eth_sendTransaction", {"from": accounts[1], "to": emitter, "data": data,
                                                                      "gas": hex(100_000)})))
    return emitter, receipts


def event_tables(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'abi\\_%%' AND tablename <> 'abi_events'"
                        ).fetchone()[0]


def registry(conn: psycopg.Connection) -> tuple[int, int]:
    return conn.execute("SELECT (SELECT count(*) FROM abis), (SELECT count(*) FROM abi_events)").fetchone()


def test_an_abi_at_the_bound_is_added_decoded_listed_and_dropped(db_url, conn, tmp_path, work):
    path = events_abi(tmp_path / "bound.json", abi_bounds.MAX_EVENTS)
    chosen = [0, abi_bounds.MAX_EVENTS // 2, abi_bounds.MAX_EVENTS - 1]
    with Anvil() as node:
        emitter, receipts = emit(node, [SIGNATURE.format(n=n) for n in chosen])
        added = run_indexer("abi", "add", "bound", str(path), db_url=db_url)
        assert added.returncode == 0, added.stderr
        assert added.stdout.startswith(f"registered ABI bound: {abi_bounds.MAX_EVENTS} event table(s)\n")
        assert run_indexer("plan", "--from", "0", "--to", str(node.head() + 1), "--chunk", "2",
                           db_url=db_url).returncode == 0
        assert work(db_url, node.url, "--workers", "2", "--drain").wait() == 0
        sender = bytes.fromhex(node.rpc("eth_accounts")[1][2:])

    for number, (n, receipt) in enumerate(zip(chosen, receipts), start=1):
        (log,) = receipt["logs"][:1]
        assert conn.execute(f"SELECT block_number, log_index, address, who, topic, amount FROM abi_bound_event{n}"
                            ).fetchall() == [
            (receipt["blockNumber"], log["logIndex"], bytes.fromhex(emitter[2:]), sender,
             int.from_bytes(keccak(text=SIGNATURE.format(n=n))), number)]
    listed = run_indexer("abi", "list", db_url=db_url).stdout.splitlines()
    assert listed[0] == f"bound: any address, from block 0, {abi_bounds.MAX_EVENTS} event table(s)"
    assert len(listed) == 1 + abi_bounds.MAX_EVENTS
    assert {f"  {SIGNATURE.format(n=n)} -> abi_bound_event{n}: 1 row(s)" for n in chosen} <= set(listed)

    dropped = run_indexer("abi", "drop", "bound", db_url=db_url)
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stdout == f"dropped ABI bound and its {abi_bounds.MAX_EVENTS} table(s)\n"
    assert event_tables(conn) == 0 and registry(conn) == (0, 0)
    assert run_indexer("abi", "list", db_url=db_url).stdout == "no ABI is registered\n"


def deep_tuple(depth: int) -> dict[str, Any]:
    item: dict[str, Any] = {"name": "x", "type": "uint256"}
    for _ in range(depth):
        item = {"name": "t", "type": "tuple", "components": [item]}
    return item


def one_event(*inputs: dict[str, Any], name: str = "E") -> list[dict[str, Any]]:
    return [{"type": "event", "name": name, "inputs": list(inputs)}]


@pytest.mark.parametrize("document, message", [
    ([{"type": "event", "name": f"E{n}", "inputs": []} for n in range(abi_bounds.MAX_EVENTS + 1)],
     f"the ABI has {abi_bounds.MAX_EVENTS + 1} events; at most {abi_bounds.MAX_EVENTS} are allowed"),
    (one_event(*[{"name": f"a{n}", "type": "uint8"} for n in range(abi_bounds.MAX_PARAMS + 1)]),
     f"has {abi_bounds.MAX_PARAMS + 1} parameters; at most {abi_bounds.MAX_PARAMS} are allowed"),
    (one_event({"name": "a", "type": "uint256" + "[]" * 5000}),
     f"[][]… (10,007 characters)' has more than {abi_bounds.MAX_DIMENSIONS} array dimensions"),
    (one_event({"name": "a", "type": "uint256[99999999999999999999]"}),
     f"'uint256[99999999999999999999]' has fixed-size arrays of more than {abi_bounds.MAX_STATIC_WORDS:,} words in all"),
    (one_event(deep_tuple(abi_bounds.MAX_DEPTH + 1)), f"tuples nested more than {abi_bounds.MAX_DEPTH} deep"),
], ids=["events", "parameters", "dimensions", "array size", "nesting"])
def test_an_abi_past_a_bound_is_refused_with_one_line_and_nothing_written(db_url, conn, tmp_path, document,
                                                                          message):
    path = tmp_path / "abi.json"
    path.write_text(json.dumps(document))
    result = run_indexer("abi", "add", "past", str(path), db_url=db_url)
    assert result.returncode == 2, result
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.stderr[:2000]
    assert result.stderr.startswith("indexer abi add: error: ") and message in result.stderr, result.stderr[:2000]
    assert registry(conn) == (0, 0) and event_tables(conn) == 0


def test_long_names_are_printed_shortened(db_url, conn, tmp_path):
    name = "Transfer" + "X" * 10_000
    path = tmp_path / "long.json"
    path.write_text(json.dumps([
        {"type": "event", "name": name, "inputs": [{"name": "who" * 3000, "type": "address", "indexed": True}]},
        {"type": "event", "name": name, "anonymous": True, "inputs": []}]))
    added = run_indexer("abi", "add", "long", str(path), db_url=db_url)
    assert added.returncode == 0, added.stderr[:2000]
    listed = run_indexer("abi", "list", db_url=db_url)
    shown = f"… ({len(name) + len('(address)'):,} characters)"
    (table,) = conn.execute("SELECT table_name FROM abi_events").fetchone()
    assert f"  Transfer{'X' * 71}{shown} -> {table}" in added.stdout.splitlines()
    assert f"  Transfer{'X' * 71}{shown} -> {table}: 0 row(s)" in listed.stdout.splitlines()
    assert "skipped anonymous event TransferXXX" in added.stdout
    for output in (added.stdout, listed.stdout):
        assert max(map(len, output.splitlines())) < 200, output[:2000]

    path.write_text(json.dumps([{"type": "event", "name": name, "inputs": [{"name": "a", "type": "uint7"}]}]))
    refused = run_indexer("abi", "add", "bad", str(path), db_url=db_url)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert "not a type eth-abi can decode: 'uint7'" in refused.stderr and len(refused.stderr) < 300, refused.stderr
    refused = run_indexer("abi", "drop", "n" * 10_000, db_url=db_url)
    assert refused.returncode == 2 and len(refused.stderr) < 300, refused.stderr[:2000]
    assert refused.stderr.startswith("indexer abi drop: error: not an ABI name: 'nnnn")


def decode_jobs(conn: psycopg.Connection, status: str) -> int:
    return conn.execute("SELECT count(*) FROM jobs WHERE kind = %s AND status = %s", (DECODE_LOGS, status)
                        ).fetchone()[0]


def done_decode_jobs(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM jobs_history WHERE kind = %s", (DECODE_LOGS,)).fetchone()[0]


def test_a_drop_waits_for_the_decode_windows_in_flight_not_for_the_queue(db_url, conn, tmp_path, chain_node, work):
    # Every decode window deletes its range from each registered table: with 500 of them, a
    # window takes a sizeable fraction of a second, and three workers' windows overlap.
    many = events_abi(tmp_path / "many.json", abi_bounds.MAX_EVENTS)
    assert run_indexer("abi", "add", "many", str(many), db_url=db_url).returncode == 0
    few = events_abi(tmp_path / "few.json", 2, prefix="Other")
    assert run_indexer("abi", "add", "few", str(few), db_url=db_url).returncode == 0
    queue.enqueue(conn, DECODE_LOGS, [{"from": n, "to": n} for n in range(300)])
    work(db_url, chain_node.url, "--workers", "3")
    wait_for(lambda: done_decode_jobs(conn) >= 3, "the workers to decode")

    dropped = run_indexer("abi", "drop", "few", db_url=db_url, timeout=600)
    assert dropped.returncode == 0, dropped.stderr
    assert decode_jobs(conn, "pending") > 0  # it returned while the decoding goes on
    assert conn.execute("SELECT count(*) FROM abi_events WHERE abi_name = 'few'").fetchone() == (0,)


def test_an_interrupted_drop_leaves_the_abi_undecoded_and_is_finished_by_running_it_again(db_url, conn, tmp_path):
    count = abi.DROP_BATCH + abi.DROP_BATCH // 2
    path = events_abi(tmp_path / "abi.json", count)
    assert run_indexer("abi", "add", "half", str(path), db_url=db_url).returncode == 0
    tables = sorted(t for (t,) in conn.execute("SELECT table_name FROM abi_events"))

    # A reader of the last table (in the drop's order) holds the second transaction's drop up,
    # until a lock timeout ends the drop: the first transaction's tables are gone.
    with psycopg.connect(db_url) as reader:
        reader.execute(f"LOCK TABLE {tables[-1]} IN ACCESS SHARE MODE")
        stopped = run_indexer("abi", "drop", "half", db_url=db_url, env={"PGOPTIONS": "-c lock_timeout=1s"})
    assert stopped.returncode == 1 and "canceling statement due to lock timeout" in stopped.stderr, stopped.stderr
    left = sorted(t for (t,) in conn.execute("SELECT table_name FROM abi_events"))
    assert left == tables[abi.DROP_BATCH:]
    assert conn.execute("SELECT count(*) FROM unnest(%s::text[]) t WHERE to_regclass(t) IS NOT NULL",
                        (tables,)).fetchone() == (len(left),)

    # Meanwhile the ABI is not decoded, listed as being dropped, and its name not taken again.
    assert abi_decode.registered(conn) == []
    assert run_indexer("abi", "list", db_url=db_url).stdout == (
        f"half: being dropped, {len(left)} event table(s) left (`indexer abi drop half` finishes a drop that was"
        " interrupted)\n")
    again = run_indexer("abi", "add", "half", str(path), db_url=db_url)
    assert again.returncode == 2
    assert again.stderr == ("indexer abi add: error: the ABI named half is being dropped (`indexer abi drop half`"
                            " finishes a drop that was interrupted)\n")

    finished = run_indexer("abi", "drop", "half", db_url=db_url)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout == f"dropped ABI half and its {len(left)} table(s)\n"
    assert event_tables(conn) == 0 and registry(conn) == (0, 0)
    assert run_indexer("abi", "add", "half", str(path), db_url=db_url).returncode == 0


def test_a_listing_counts_table_by_table_and_meets_a_drop_under_way(db_url, conn, tmp_path):
    path = events_abi(tmp_path / "abi.json", 3)
    assert run_indexer("abi", "add", "kept", str(path), db_url=db_url).returncode == 0
    assert run_indexer("abi", "add", "going", str(path), db_url=db_url).returncode == 0
    # As a drop that began after the listing read the registry drops a table before it is counted:
    conn.execute("DROP TABLE abi_going_event1")
    listed = abi.listing(conn)
    assert [(entry.name, entry.dropping) for entry in listed] == [("going", True), ("kept", False)]
    assert [rows for _, _, rows in listed[1].tables] == [0, 0, 0]


def restart(pg: OwnPostgres, *settings: str) -> None:
    """Stops the server and starts it again with pg-start's options, then `settings` over them."""
    pg.pg_ctl("stop")
    options = shlex.split((Path(pg.data) / "postmaster.opts").read_text())[1:]  # after the binary
    pg.pg_ctl("start", "-o", shlex.join([*options, *(f"-c{s}" for s in settings)]))


def test_a_large_abi_is_dropped_in_transactions_the_lock_table_holds(own_postgres, tmp_path):
    url = own_postgres.url
    assert run_indexer("migrate", db_url=url).returncode == 0
    path = events_abi(tmp_path / "bound.json", abi_bounds.MAX_EVENTS)
    assert run_indexer("abi", "add", "bound", str(path), db_url=url).returncode == 0

    # A server whose lock table holds some 1,900 locks (measured: 10 a connection, for 50 of
    # them and its own processes, and what its shared memory has to spare): adding as large an
    # ABI takes about 3,000, dropping it at once 3,500, a transaction of the drop 700.
    restart(own_postgres, "max_connections=50", "max_locks_per_transaction=10")
    refused = run_indexer("abi", "add", "again", str(path), db_url=url)
    assert refused.returncode == 1
    assert refused.stderr == ("indexer abi add: error: the database server is out of resources: out of shared"
                              " memory (You might need to increase max_locks_per_transaction.)\n")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM abi_events").fetchone() == (abi_bounds.MAX_EVENTS,)
        assert event_tables(conn) == abi_bounds.MAX_EVENTS  # nothing of `again`

        dropped = run_indexer("abi", "drop", "bound", db_url=url)
        assert dropped.returncode == 0, dropped.stderr
        assert dropped.stdout == f"dropped ABI bound and its {abi_bounds.MAX_EVENTS} table(s)\n"
        assert event_tables(conn) == 0 and registry(conn) == (0, 0)
