"""`claims.keeping_leases`: how a worker waits on a slow node (a batch's fetch, a window's
traces) without losing its jobs to the reaper, and without holding up a stop."""

import threading
from concurrent.futures import Future

import pytest

from indexer.jobqueue.claims import Stopping, keeping_leases


def test_a_long_wait_keeps_the_leases_then_returns_the_result():
    future: Future[str] = Future()
    kept = []

    def keep_alive() -> None:  # the node answers after the leases were kept once
        kept.append(True)
        future.set_result("traces")

    assert keeping_leases(future, keep_alive=keep_alive, lease_seconds=0.3, stop=threading.Event()) == "traces"
    assert kept == [True]


def test_a_stop_ends_the_wait_though_the_node_has_not_answered():
    stop = threading.Event()
    stop.set()
    with pytest.raises(Stopping):
        keeping_leases(Future(), keep_alive=lambda: None, lease_seconds=60, stop=stop)


def test_the_work_s_error_is_raised_in_the_waiting_thread():
    future: Future[str] = Future()
    future.set_exception(ValueError("malformed answer"))
    with pytest.raises(ValueError, match="malformed answer"):
        keeping_leases(future, keep_alive=lambda: None, lease_seconds=60, stop=threading.Event())
