"""How the pool spaces the restarts of workers that keep dying young, and when it finds that
every worker has been dying for long enough to give up (`pool.Restarts`), on a clock of its own."""

from __future__ import annotations

from indexer.operations.pool import MAX_RESTART_DELAY, STABLE_SECONDS, Restarts


def test_a_worker_dying_young_waits_twice_as_long_each_time_up_to_the_cap():
    restarts = Restarts()
    now = 0.0
    delays = []
    for _ in range(9):
        restarts.started_now(0, now)
        now += 1.0
        delays.append(restarts.died(0, 1, now))
        now += delays[-1]
    assert delays == [0.5, 1, 2, 4, 8, 16, 30, 30, 30] and MAX_RESTART_DELAY == 30


def test_a_worker_that_lived_long_is_replaced_at_once_and_its_slot_starts_afresh():
    restarts = Restarts()
    restarts.started_now(0, 0.0)
    assert restarts.died(0, 1, 1.0) == 0.5
    restarts.started_now(0, 2.0)
    restarts.alive(0, 2.0 + STABLE_SECONDS)  # lived long enough: healthy again
    assert restarts.all_dying_for({0}, 2.0 + STABLE_SECONDS) is None
    assert restarts.died(0, -9, 3.0 + STABLE_SECONDS) == 0  # an OOM kill of a healthy worker: at once
    restarts.started_now(0, 3.0 + STABLE_SECONDS)
    assert restarts.died(0, 1, 4.0 + STABLE_SECONDS) == 0.5  # then, dying young, from the start of the backoff


def test_the_pool_gives_up_only_once_every_slot_has_been_dying_young():
    restarts = Restarts()
    for slot in (0, 1):
        restarts.started_now(slot, 0.0)
    restarts.died(0, 1, 1.0)
    assert restarts.all_dying_for({0, 1}, 100.0) is None  # slot 1 works
    restarts.died(1, 1, 5.0)
    assert restarts.all_dying_for({0, 1}, 100.0) == 95.0  # since the last slot began dying
    assert restarts.deaths({0, 1}) == 2
    assert restarts.all_dying_for({0}, 100.0) == 99.0
    assert restarts.all_dying_for(set(), 100.0) is None
