"""The block-range payload and how ranges are cut: no database, no node."""

from __future__ import annotations

import pytest

from indexer.base.block_range import JOB_KIND, MAX_BLOCK, BlockRange, check_payload, cut


def test_cut_is_on_the_grid_of_the_chunk_and_covers_every_block_once():
    ranges = cut(7, 35, 10)
    assert ranges == [BlockRange(7, 9), BlockRange(10, 19), BlockRange(20, 29), BlockRange(30, 34)]
    covered = [n for r in ranges for n in range(r.first, r.last + 1)]
    assert covered == list(range(7, 35))


def test_cut_of_an_empty_range_is_empty_and_a_bad_chunk_is_refused():
    assert cut(5, 5, 10) == []
    with pytest.raises(ValueError):
        cut(0, 10, 0)


def test_overlapping_cuts_share_boundaries():
    # A repair of a few blocks inside a planned job gets the planner's boundaries.
    planned = {(r.first, r.last) for r in cut(0, 100, 25)}
    repaired = cut(30, 60, 25)
    assert all(r.first % 25 == 0 or r.first == 30 for r in repaired)
    assert all((r.last + 1) % 25 == 0 or r.last == 59 for r in repaired)
    assert {(r.first, r.last) for r in cut(25, 75, 25)} <= planned


@pytest.mark.parametrize("payload", [{"from": 3, "to": 3}, {"from": 0, "to": 9_999}, {"to": 12, "from": 10},
                                     {"from": 2**63 - 10**4, "to": 2**63 - 2}])
def test_a_payload_round_trips(payload):
    blocks = BlockRange.of(JOB_KIND, payload)
    assert blocks is not None and blocks.payload() == payload
    assert blocks.blocks == payload["to"] - payload["from"] + 1


@pytest.mark.parametrize("kind, payload", [
    (JOB_KIND, {"from": "0", "to": 5}),  # a string is not a block number
    (JOB_KIND, {"from": 1.5, "to": 3}),
    (JOB_KIND, {"from": True, "to": 3}),  # a JSON true is not 1
    (JOB_KIND, {"from": 9, "to": 2}),
    (JOB_KIND, {"from": -1, "to": 2}),
    (JOB_KIND, {"from": 1}),
    (JOB_KIND, {"from": 5.0, "to": 9}),  # PostgreSQL keeps the scale of 5.0: not a whole number either
    (JOB_KIND, {"from": 0, "to": 2**63 - 1}),  # int8range cannot hold a range ending at the bigint maximum
    (JOB_KIND, {"from": 0, "to": 2**64}),
    (JOB_KIND, [1, 2]),
    ("mystery", {"from": 1, "to": 2}),
])
def test_anything_else_is_not_a_block_range(kind, payload):
    assert BlockRange.of(kind, payload) is None


def test_a_range_cannot_be_made_backwards():
    with pytest.raises(ValueError):
        BlockRange(5, 4)


def test_the_last_block_is_one_below_the_bigint_maximum():
    assert MAX_BLOCK == 2**63 - 2
    with pytest.raises(ValueError):
        BlockRange(0, MAX_BLOCK + 1)


@pytest.mark.parametrize("payload", [{"from": "5", "to": "9"}, {"from": 5.0, "to": 9}, {"from": 9, "to": 5},
                                     {"from": 0, "to": 2**63 - 1}, {"from": 5}, "5..9"])
def test_a_range_jobs_payload_is_checked_before_it_is_written(payload):
    with pytest.raises(ValueError, match="payload must be"):
        check_payload(JOB_KIND, payload)
    assert check_payload("mystery", payload) == payload  # other kinds' payloads are their own business
