"""verify's arithmetic: runs of block numbers, the blocks a report condemns, what it prints."""

from __future__ import annotations

from indexer.verify import Report, describe, ranges


def test_numbers_become_inclusive_runs():
    assert ranges([]) == []
    assert ranges([4]) == [(4, 4)]
    assert ranges([1, 2, 3, 7, 9, 10]) == [(1, 3), (7, 7), (9, 10)]


def test_a_broken_link_condemns_both_of_its_blocks():
    report = Report(missing=[20], broken_links=[11], wrong_counts=[11, 30])
    assert report.suspect_blocks() == [10, 11, 20, 30]
    assert not report.ok
    assert Report().ok and Report().suspect_blocks() == []


def test_the_report_prints_each_kind_of_problem_with_its_runs():
    report = Report(missing=[5, 6, 7, 9], broken_links=[], wrong_counts=[12])
    assert describe(report, 0, 20) == [
        "4 missing blocks: 5..7, 9",
        "1 blocks with wrong transaction or log counts: 12",
    ]
    assert describe(Report(), 0, 1_000) == ["blocks 0..999: all present, linked and complete"]
