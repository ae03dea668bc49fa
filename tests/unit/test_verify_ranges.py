"""verify's arithmetic: runs of block numbers, the blocks a report condemns, what it prints."""

from __future__ import annotations

from indexer.operations.verify import Report, describe, merge_runs, ranges
from indexer.operations.verify_node import NodeReport, Runs, describe_against_node


def test_numbers_become_inclusive_runs():
    assert ranges([]) == []
    assert ranges([4]) == [(4, 4)]
    assert ranges([1, 2, 3, 7, 9, 10]) == [(1, 3), (7, 7), (9, 10)]


def test_runs_from_several_sources_merge_into_one_sorted_stream():
    assert list(merge_runs([(5, 6), (20, 25)], [(7, 7), (9, 10), (22, 30)], [])) == [(5, 7), (9, 10), (20, 30)]
    assert list(merge_runs((), [])) == []


def test_runs_count_everything_and_keep_only_the_first():
    closed = []
    runs = Runs(shown=2, closed=closed.append)
    for n in [1, 2, 3, 7, 9, 10, 12]:
        runs.add(n)
    runs.finish()
    assert (runs.count, runs.kept, runs.more) == (7, [(1, 3), (7, 7)], True)
    assert closed == [(1, 3), (7, 7), (9, 10), (12, 12)]


def test_a_broken_link_condemns_both_of_its_blocks():
    report = Report(missing=1, missing_runs=[(20, 20)], broken_links=[11], wrong_counts=[11, 30])
    assert report.stored_suspects() == [10, 11, 30]
    assert not report.ok
    assert Report().ok and Report().stored_suspects() == []


def test_the_report_prints_each_kind_of_problem_with_its_runs():
    report = Report(missing=4, missing_runs=[(5, 7), (9, 9)], broken_links=[], wrong_counts=[12])
    assert describe(report, 0, 20) == [
        "4 missing blocks: 5..7, 9",
        "1 blocks with wrong transaction or log counts: 12",
    ]
    assert describe(Report(), 0, 1_000) == ["blocks 0..999: all present, linked and complete"]


def test_missing_blocks_beyond_the_runs_shown_are_marked():
    report = Report(missing=29_999_990, missing_runs=[(0, 4), (10, 19)])
    assert describe(report, 0, 30_000_000) == ["29,999,990 missing blocks: 0..4, 10..19, ..."]


def test_blocks_above_the_nodes_head_are_reported_apart_from_orphans():
    report = NodeReport(head=99, compared=90)
    for n in [40, 41, 42]:
        report.orphaned.add(n)
    for n in [100, 101]:
        report.above_head.add(n)
    report.orphaned.finish()
    report.above_head.finish()
    assert not report.ok
    assert describe_against_node(report, 0, 102) == [
        "3 orphaned blocks (stored hash differs from the node's): 40..42",
        "2 stored blocks above the node's head 99, not compared: 100..101",
    ]
    assert describe_against_node(NodeReport(head=99, compared=90), 0, 100) == [
        "blocks 0..99: all 90 stored block(s) have the node's hash"]
