"""``boundary`` and ``uniform`` strategies on real pools."""

import collections

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection import BoundaryStrategy, UniformStrategy
from verl_ext.selection.frontier import draw_batch


def make_pool(n_scored=20, n_cold=0, seed=0):
    pool = QueryPool(PoolConfig(), seed=seed)
    pool.add_seeds_bulk([f"q{i}" for i in range(n_scored)], ["a"] * n_scored, "s",
                        priors=list(np.linspace(0.0, 1.0, n_scored)))
    cold = [pool.add_seed(f"c{i}", "a", "s") for i in range(n_cold)]
    return pool, cold


def test_boundary_delegates_to_pool_sampling():
    pool, cold = make_pool(n_scored=10, n_cold=2)
    twin, _ = make_pool(n_scored=10, n_cold=2)
    strat = BoundaryStrategy()
    ids = strat.select(pool, 4, step=0)
    assert ids == draw_batch(twin, 4, step=0) and ids[:1] == cold[:1]  # cold_fraction 0.25: one cold record of four
    assert all(pool.status(i) == "in_flight" for i in ids)
    m = strat.metrics()
    assert m["select/n_selected"] == 4 and m["select/frac_cold"] == 0.25 and m["select/frac_boundary"] == 0.75
    strat.observe({i: (1, 2) for i in ids}, step=0)  # no state to learn; must accept the call


def test_uniform_ignores_cold_priority_and_covers_everything():
    counts = collections.Counter()
    for seed in range(200):
        pool, cold = make_pool(n_scored=8, n_cold=2)
        ids = UniformStrategy(seed=seed).select(pool, 2, step=0)
        assert len(set(ids)) == 2 and all(pool.status(i) == "in_flight" for i in ids)
        counts.update(ids)
    assert set(counts) == set(range(8)) | set(cold)
    # 400 draws over 10 ids: each expected 40; a cold-first policy would give the cold ones 200
    assert max(counts.values()) < 70


def test_uniform_handles_small_pools_and_bad_k():
    pool, _ = make_pool(n_scored=3)
    strat = UniformStrategy(seed=1)
    assert sorted(strat.select(pool, 10, step=0)) == [0, 1, 2]
    assert strat.select(pool, 5, step=1) == [] and strat.metrics()["select/n_selected"] == 0
    with pytest.raises(ValueError):
        strat.select(pool, -1, step=0)


def test_uniform_is_reproducible_and_checkpointable():
    pool_a, _ = make_pool(n_scored=50)
    pool_b, _ = make_pool(n_scored=50)
    a, b = UniformStrategy(seed=7), UniformStrategy(seed=7)
    assert a.select(pool_a, 5, 0) == b.select(pool_b, 5, 0)
    state = a.state_dict()
    c = UniformStrategy(seed=0)
    c.load_state_dict(state)
    assert a.select(pool_a, 5, 1) == c.select(pool_b, 5, 1)
