"""Controlled reinsertion: triggers, rate, free-capacity bound, retirement filters, bulk path."""

import pytest

from verl_ext.pool import PoolConfig, QueryPool, ReinsertionConfig
from verl_ext.selection.frontier import draw_batch


def trained_pool(outcomes, extra_cold=0, **reinsertion):
    """Pool whose records were all trained once with the given (passes, n), plus ``extra_cold`` fresh seeds."""
    reinsertion = {"trigger": "below_batch", **reinsertion}  # the paper's trigger unless a test says otherwise
    pool = QueryPool(PoolConfig(max_pool_size=100, reinsertion=ReinsertionConfig(**reinsertion)), seed=0)
    ids = [pool.add_seed(f"q{i}", "a", "s") for i in range(len(outcomes))]
    draw_batch(pool, len(ids), step=0)
    pool.feedback(dict(zip(ids, outcomes)), step=0)
    for i in range(extra_cold):
        pool.add_seed(f"c{i}", "a", "s")
    return pool, ids


def test_below_batch_trigger_reinserts_everything_oldest_first():
    pool, ids = trained_pool([(1, 4), (2, 4), (3, 4)], extra_cold=2)
    assert pool.reinsert(step=1, batch_size=2) == 0  # 2 available, not below one batch
    assert pool.reinsert(step=1, batch_size=3) == 3
    assert pool.archived_ids() == [] and all(pool.status(i) == "pooled" for i in ids)
    assert pool.ranking_value(ids[1]) == 0.5  # back with its last statistic
    assert pool.metrics()["pool/reinserted"] == 3
    pool._scored.check()


def test_rate_and_always_trigger():
    pool, ids = trained_pool([(1, 4)] * 5, trigger="always", rate=2)
    assert pool.reinsert(step=1, batch_size=1) == 2
    assert pool.archived_ids() == ids[2:]
    assert pool.reinsert(step=2, batch_size=1) == 2
    assert pool.reinsert(step=3, batch_size=1) == 1


def test_never_trigger():
    pool, _ = trained_pool([(1, 4)] * 3, trigger="never")
    assert pool.reinsert(step=1, batch_size=10) == 0 and len(pool.archived_ids()) == 3


def test_reinsertion_never_exceeds_free_capacity():
    pool = QueryPool(PoolConfig(max_pool_size=3, reinsertion=ReinsertionConfig(trigger="always")), seed=0)
    ids = [pool.add_seed(f"q{i}", "a", "s") for i in range(3)]
    draw_batch(pool, 2, step=0)
    pool.feedback({ids[0]: (1, 2), ids[1]: (1, 2)}, step=0)
    pool.add_seed("new", "a", "s")  # live = 2 of 3
    assert pool.reinsert(step=1, batch_size=1) == 1 and pool.archived_ids() == [ids[1]]
    assert pool.reinsert(step=1, batch_size=1) == 0


def test_solved_streak_filter_retires_records():
    pool = QueryPool(PoolConfig(reinsertion=ReinsertionConfig(trigger="always", drop_solved_streak=2)), seed=0)
    a, b, c = (pool.add_seed(f"q{i}", "a", "s") for i in range(3))
    # visit 1: all solved; visit 2: a solved, b failed, c solved partially
    for step, outcome in enumerate([{a: (4, 4), b: (4, 4), c: (4, 4)}, {a: (4, 4), b: (0, 4), c: (3, 4)}]):
        pool.take(list(outcome), step=step)
        pool.feedback(outcome, step=step)
        if step == 0:
            assert pool.reinsert(step=step, batch_size=1) == 3  # one solved visit is not a streak of 2
    assert pool.reinsert(step=2, batch_size=1) == 2
    assert a not in pool and pool.drain_evicted() == [a]
    assert pool.status(b) == "pooled" and pool.status(c) == "pooled"
    assert pool.metrics()["pool/evicted_retired_solved"] == 1


def test_max_visits_filter():
    pool, ids = trained_pool([(1, 4), (2, 4)], trigger="always", max_visits=2)
    assert pool.reinsert(step=1, batch_size=1) == 2
    pool.take([ids[0]], step=2)
    pool.feedback({ids[0]: (1, 4)}, step=2)
    assert pool.reinsert(step=3, batch_size=1) == 0
    assert ids[0] not in pool and pool.counters()["evicted_retired_visits"] == 1


def test_lineage_override_is_used_on_reinsertion():
    pool, ids = trained_pool([(1, 4), (3, 4)])
    pool.set_ranking_value(ids[0], 0.9)
    pool.reinsert(step=1, batch_size=10)
    assert pool._scored.locate(ids[0]) == (0, 900)


@pytest.mark.parametrize("n", [50, 3000])
def test_reinsertion_places_every_record_by_its_value(n):
    pool = QueryPool(PoolConfig(max_pool_size=10_000), seed=0)
    ids = pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    draw_batch(pool, n, step=0)
    pool.feedback({rid: (rid % 9, 8) for rid in ids}, step=0)
    assert pool.reinsert(step=1, batch_size=1) == n
    pool._scored.check()
    assert all(pool._scored.locate(r)[1] == pool._scored.bucket_of_value(pool.ranking_value(r)) for r in ids)


def _archive_child_then_seed(max_pool_size: int, fill_with_children: bool):
    """A full pool whose archive holds a measured child queued before a seed (``always`` trigger)."""
    pool = QueryPool(PoolConfig(max_pool_size=max_pool_size, reinsertion=ReinsertionConfig(trigger="always")), seed=0)
    parent, seed = pool.add_seed("p", "a", "s"), pool.add_seed("s", "a", "s")
    pool.take([parent], step=0)
    pool.feedback({parent: (2, 4)}, step=0)
    assert pool.reinsert(step=0, batch_size=1) == 1
    child = pool.add_child("c", "a", "s", parent_id=parent, difficulty_factor=1.0, step=1)
    pool.take([child, seed], step=1)
    pool.feedback({child: (1, 4), seed: (2, 4)}, step=1)
    assert pool.archived_ids() == [child, seed]
    for i in range(max_pool_size - 1):  # the parent plus these fill the pool
        if fill_with_children:
            pool.add_child(f"c{i}", "a", "s", parent_id=parent, difficulty_factor=1.0, step=2)
        else:
            pool.add_seed(f"q{i}", "a", "s")
    return pool, child, seed


def test_an_archived_child_never_holds_the_seeds_queued_behind_it():
    """A returning child takes the place of the pooled child farthest from the frontier, as a seed does: a child
    at the archive's head that waited for room would keep every seed behind it out, and children would fill the
    pool (the simulator's ``invalid_children`` under ``signal``, docs/sim.md)."""
    pool, child, seed = _archive_child_then_seed(4, fill_with_children=True)
    assert pool.reinsert(step=2, batch_size=1) == 2
    assert pool.archived_ids() == [] and pool.status(seed) == "pooled"
    assert pool.counters()["evicted_capacity_child"] == 2  # one for each return (the seed's may be the child's)
    assert len(pool) == 4
    pool._scored.check()


def test_an_archived_child_with_no_child_to_displace_leaves():
    pool, child, seed = _archive_child_then_seed(3, fill_with_children=False)
    assert pool.reinsert(step=2, batch_size=1) == 0
    assert child not in pool and pool.counters()["evicted_capacity_child"] == 1
    assert pool.archived_ids() == [seed]  # a seed still waits for room: no child left to displace
