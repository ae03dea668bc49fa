"""The request and batch durations a remote provider takes (seconds, up to the client's 30 s
timeout) fall in buckets of their own, so that a dashboard's quantiles read them."""

from __future__ import annotations

from indexer.base.metrics import Counted


def bucket_counts(histogram) -> dict[str, float]:
    return {s.labels["le"]: s.value for metric in histogram.collect() for s in metric.samples
            if s.name.endswith("_bucket")}


def test_a_four_second_batch_and_a_25_second_request_are_told_apart_from_2_5_seconds():
    counted = Counted()
    counted.fetch_seconds.observe(4.0)
    counted.rpc_seconds.labels("node", "eth_getBlockByNumber").observe(25.0)
    fetch = bucket_counts(counted.fetch_seconds)
    assert (fetch["2.5"], fetch["5.0"]) == (0, 1)
    rpc = bucket_counts(counted.rpc_seconds)
    assert (rpc["10.0"], rpc["30.0"]) == (0, 1)
