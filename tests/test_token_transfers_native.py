"""Token transfers decoded in C (`_native_copy.transfers`, by way of token_transfers.TRANSFER_LOGS)
against DECODE_FIXED, the SQL that defines them: for every shape of log and every value a stored
log can hold, the same rows and the same counts by shape, or a decline that leaves the range to
DECODE_FIXED with nothing written. The recorded and anvil-made tokens of test_token_transfers.py
go through the C path too, as every decode job does where it is built."""

from __future__ import annotations

import random
from collections import Counter
from typing import Iterator

import psycopg
import pytest

from indexer.decoding import token_transfers
from indexer.jobs import partitions

_native_copy = token_transfers._native_copy

TRANSFER, SINGLE, BATCH = token_transfers.TRANSFER, token_transfers.TRANSFER_SINGLE, token_transfers.TRANSFER_BATCH
FIRST, LAST = 1_000, 1_999

INSERT_LOG = """
INSERT INTO logs (block_number, log_index, transaction_index, transaction_hash, address, topic0, topic1, topic2,
                  topic3, data)
VALUES (%s, %s, 0, %s, %s, %s, %s, %s, %s, %s)
"""
ROWS = "SELECT t::text FROM token_transfers t ORDER BY block_number, log_index, position"

# Words at every boundary of the base-10,000 digits, the 32-bit limbs and 10^8, and the ends.
VALUES = [0, 1, 9_999, 10_000, 99_999_999, 10**8, 10**8 + 1, 2**32 - 1, 2**32, 2**64 - 1, 2**64, 10**20, 10**76,
          2**255, 2**256 - 1]


def test_the_c_decoder_is_built() -> None:
    """The suite's machines have a C compiler: decoding in SQL there is a broken build."""
    assert _native_copy is not None, "indexer/chaindata/_native_copy.c is not built: run scripts/setup-venv"


def word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def address_word(address: bytes, padding: bytes = bytes(12)) -> bytes:
    return padding + address


@pytest.fixture
def logs(conn: psycopg.Connection) -> Iterator[list[tuple]]:
    """Logs to insert, each (topic0, topic1, topic2, topic3, data, address, transaction hash),
    in a database with the partitions of blocks FIRST..LAST: the test fills the list and stores
    it (`store`: ten logs a block from FIRST)."""
    partitions.ensure(conn, FIRST, LAST)
    made: list[tuple] = []
    yield made


def store(conn: psycopg.Connection, made: list[tuple]) -> None:
    with conn.cursor() as cur:
        cur.executemany(INSERT_LOG, [(FIRST + i // 10, i % 10, tx, address, *topics, data)
                                     for i, (*topics, data, address, tx) in enumerate(made)])


def decoded_both_ways(conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch) -> tuple[tuple, tuple, bool]:
    """(rows and counts by DECODE_FIXED, the same by the C decoder, whether the C decoder read them)."""
    monkeypatch.setattr(token_transfers, "_native_copy", None)
    by_sql = token_transfers.decode_range(conn, FIRST, LAST)
    in_sql = conn.execute(ROWS).fetchall()
    monkeypatch.setattr(token_transfers, "_native_copy", _native_copy)
    conn.execute(token_transfers.DELETE_RANGE, {"first": FIRST, "last": LAST})
    params = {"first": FIRST, "last": LAST, "transfer": TRANSFER, "single": SINGLE, "batch": BATCH}
    read_in_c = token_transfers._decode_fixed_in_c(conn, params) is not None
    conn.execute(token_transfers.DELETE_RANGE, params)
    by_c = token_transfers.decode_range(conn, FIRST, LAST)
    in_c = conn.execute(ROWS).fetchall()
    return ((in_sql, by_sql.logs, by_sql.transfers, by_sql.skipped), (in_c, by_c.logs, by_c.transfers, by_c.skipped),
            read_in_c)


def every_shape() -> list[tuple]:
    """Each event with each count of topics, each length of data around the ones a shape reads,
    padding right and wrong in each word, and the words' values at their boundaries."""
    a, b, c = bytes.fromhex("11" * 20), bytes.fromhex("22" * 20), bytes.fromhex("33" * 20)
    token, tx = bytes.fromhex("44" * 20), bytes.fromhex("55" * 32)
    bad = [b"\x01" + bytes(11), bytes(11) + b"\x01"]  # padding wrong at either end
    made = []
    for value in VALUES:
        made += [
            (TRANSFER, address_word(a), address_word(b), None, word(value), token, tx),  # erc20
            (TRANSFER, address_word(a), address_word(b), word(value), b"", token, tx),  # erc721
            (TRANSFER, None, None, None, address_word(a) + address_word(b) + word(value), token, tx),  # unindexed
            (SINGLE, address_word(c), address_word(a), address_word(b), word(value) + word(VALUES[-1 - VALUES.index(value)]),
             token, tx),  # erc1155
        ]
    for pad in bad:
        made += [
            (TRANSFER, address_word(a, pad), address_word(b), None, word(5), token, tx),
            (TRANSFER, address_word(a), address_word(b, pad), word(5), b"", token, tx),
            (TRANSFER, None, None, None, address_word(a, pad) + address_word(b) + word(5), token, tx),
            (TRANSFER, None, None, None, address_word(a) + address_word(b, pad) + word(5), token, tx),
            (SINGLE, address_word(c, pad), address_word(a), address_word(b), word(1) + word(2), token, tx),
            (SINGLE, address_word(c), address_word(a), address_word(b, pad), word(1) + word(2), token, tx),
        ]
    topic_sets = [(None, None, None), (address_word(a), None, None), (address_word(a), address_word(b), None),
                  (address_word(a), address_word(b), word(7)),
                  (None, address_word(b), word(7)), (None, None, word(7)), (address_word(a), None, word(7))]
    for event in (TRANSFER, SINGLE, BATCH):
        for topics in topic_sets:
            for length in (0, 1, 31, 32, 33, 63, 64, 65, 95, 96, 97, 128, 300):
                made.append((event, *topics, bytes(range(256))[:length] * 2 if length > 128 else bytes(length),
                             token, tx))
    # Addresses and transaction hashes of other lengths are copied as they are.
    made += [(TRANSFER, address_word(a), address_word(b), None, word(9), address, hash_)
             for address, hash_ in ((b"", tx), (b"\x01", tx), (bytes(32), tx), (token, b""), (token, bytes(31)))]
    return made


def test_every_shape_and_value_decodes_as_decode_fixed_does(conn, logs, monkeypatch):
    logs += every_shape()
    store(conn, logs)
    in_sql, in_c, read_in_c = decoded_both_ways(conn, monkeypatch)
    assert read_in_c
    assert in_c == in_sql
    rows, decoded_logs, transfers, skipped = in_sql
    assert decoded_logs == transfers == len(rows) > 4 * len(VALUES)  # the batches of zero pairs add no row
    assert {"transfer: address with non-zero padding", "transfer single: address with non-zero padding",
            "transfer: unexpected topics/data length", "transfer single: unexpected topics/data length",
            "transfer batch: unexpected topics"} <= set(skipped)
    amounts = {row[0].split(",")[8] for row in rows}
    assert {str(v) for v in VALUES} <= amounts  # every boundary value came out as the number it is


def test_random_logs_decode_as_decode_fixed_does(conn, logs, monkeypatch):
    """Random logs of the three events: random topics (zero-padded or not), lengths and words."""
    rng = random.Random(27)

    def topic() -> bytes:
        return rng.choice([bytes(12) + rng.randbytes(20)] * 4 + [rng.randbytes(32), word(rng.getrandbits(rng.randrange(257)))])

    for _ in range(2_000):
        count = rng.choice([0, 1, 2, 2, 3, 3])
        topics = [topic() if i < count else None for i in range(3)]
        if rng.random() < 0.1:
            topics[rng.randrange(3)] = None  # not in order: never stored by rows.py, decoded all the same
        data = b"".join(rng.choice([bytes(12) + rng.randbytes(20), word(rng.getrandbits(rng.randrange(257)))])
                        for _ in range(rng.choice([0, 1, 2, 3, 4])))
        if rng.random() < 0.1:
            data = rng.randbytes(rng.randrange(200))
        logs.append((rng.choice([TRANSFER, SINGLE, BATCH]), *topics, data,
                     rng.randbytes(rng.choice([20, 20, 0, 32])), rng.randbytes(32)))
    store(conn, logs)
    in_sql, in_c, read_in_c = decoded_both_ways(conn, monkeypatch)
    assert read_in_c
    assert in_c == in_sql
    assert {row[0].split(",")[3] for row in in_sql[0]} == {"erc20", "erc721", "erc1155", ""}  # "": unindexed


@pytest.mark.parametrize("odd", ["short topic1", "long topic3", "long address", "long transaction hash"])
def test_a_log_the_c_decoder_does_not_read_leaves_the_range_to_decode_fixed(conn, logs, monkeypatch, odd):
    """A topic other than 32 bytes (abi_uint256 and the padding read such words their own way)
    or an address or transaction hash over the 32 bytes a record holds: the C decoder declines,
    writes nothing, and DECODE_FIXED decodes the range, these logs and the others."""
    a, b = address_word(bytes.fromhex("11" * 20)), address_word(bytes.fromhex("22" * 20))
    token, tx = bytes(20), bytes(32)
    logs += [(TRANSFER, a, b, None, word(1), token, tx)] * 3
    logs.append({
        "short topic1": (TRANSFER, a[1:], b, None, word(2), token, tx),
        "long topic3": (TRANSFER, a, b, word(3) + b"\x00", b"", token, tx),
        "long address": (TRANSFER, a, b, None, word(4), bytes(33), tx),
        "long transaction hash": (TRANSFER, a, b, None, word(5), token, bytes(33)),
    }[odd])
    store(conn, logs)
    in_sql, in_c, read_in_c = decoded_both_ways(conn, monkeypatch)
    assert not read_in_c
    assert in_c == in_sql
    assert in_sql[1] >= 3


def test_a_range_without_transfer_logs_writes_nothing(conn, logs, monkeypatch):
    logs.append((bytes(32), None, None, None, b"", bytes(20), bytes(32)))  # another event
    store(conn, logs)
    in_sql, in_c, read_in_c = decoded_both_ways(conn, monkeypatch)
    assert read_in_c
    assert in_c == in_sql == ([], 0, 0, Counter())


def record(event: int = 1, fields: tuple = (32, 20, 32, 32, -1, 32)) -> bytes:
    """A record as TRANSFER_LOGS makes it: the given lengths, each field zero bytes."""
    out = (7).to_bytes(8, "big") + (1).to_bytes(4, "big") + bytes([event])
    for i, n in enumerate(fields):
        held = (n if n in (0, 32, 64, 96) else 0) if i == 5 else max(0, min(n, 32))
        out += n.to_bytes(4, "big", signed=True) + bytes(held)
    return out


def test_records_cut_short_or_malformed_are_declined():
    whole = record()
    rows, shapes = _native_copy.transfers(whole)
    assert shapes == {"erc20": 1}
    assert rows.startswith(b"PGCOPY\n\xff\r\n\x00") and rows.endswith(b"\xff\xff")
    for cut in range(1, len(whole)):
        assert _native_copy.transfers(whole[:cut]) is None, cut
    assert _native_copy.transfers(whole + b"\x00") is None
    for event in (0, 4, 255):
        assert _native_copy.transfers(record(event)) is None
    assert _native_copy.transfers(record(fields=(32, 20, 32, 32, -2, 32))) is None  # a length under -1
    assert _native_copy.transfers(record(fields=(32, 20, 32, 32, -1, -1))) is None  # data is NOT NULL
    empty_rows, empty_shapes = _native_copy.transfers(b"")
    assert empty_shapes == {} and empty_rows == b"PGCOPY\n\xff\r\n\x00" + bytes(8) + b"\xff\xff"
    with pytest.raises(TypeError):
        _native_copy.transfers("text")


def test_a_record_string_agg_passed_over_declines_the_c_decoder(conn, logs, monkeypatch):
    """The logs counted and the records decoded must agree: a record lost to a NULL (string_agg
    passes NULLs over; no column of today's schema can make one) leaves the range to DECODE_FIXED."""
    a, b = address_word(bytes.fromhex("11" * 20)), address_word(bytes.fromhex("22" * 20))
    logs += [(TRANSFER, a, b, None, word(i), bytes(20), bytes(32)) for i in range(5)]
    store(conn, logs)
    params = {"first": FIRST, "last": LAST, "transfer": TRANSFER, "single": SINGLE, "batch": BATCH}
    assert token_transfers._decode_fixed_in_c(conn, params) == [("erc20", 5)]
    conn.execute(token_transfers.DELETE_RANGE, params)
    monkeypatch.setattr(token_transfers, "TRANSFER_LOGS",
                        token_transfers.TRANSFER_LOGS.replace("count(*)", "count(*) + 1", 1))
    assert token_transfers._decode_fixed_in_c(conn, params) is None
    assert conn.execute("SELECT count(*) FROM token_transfers").fetchone()[0] == 0
    assert token_transfers.decode_range(conn, FIRST, LAST).transfers == 5


def test_a_failed_decode_leaves_the_range_as_it_was(conn, logs, monkeypatch):
    """On an autocommit connection decode_range is one transaction: the rows the C decoder makes
    cut short, the COPY refuses them, and the range keeps the rows decoded before."""
    a, b = address_word(bytes.fromhex("11" * 20)), address_word(bytes.fromhex("22" * 20))
    logs += [(TRANSFER, a, b, None, word(i), bytes(20), bytes(32)) for i in range(10)]
    store(conn, logs)
    assert token_transfers.decode_range(conn, FIRST, LAST).transfers == 10

    class CutShort:
        @staticmethod
        def transfers(records: bytes):
            rows, shapes = _native_copy.transfers(records)
            return rows[: len(rows) // 2], shapes

    monkeypatch.setattr(token_transfers, "_native_copy", CutShort)
    with pytest.raises(psycopg.errors.BadCopyFileFormat):
        token_transfers.decode_range(conn, FIRST, LAST)
    assert conn.execute("SELECT count(*) FROM token_transfers").fetchone()[0] == 10
