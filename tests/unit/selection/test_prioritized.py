"""``prioritized``: Kimi k1.5 PS weights, draws without replacement, running mean, checkpoint."""

import json

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection import build_strategy
from verl_ext.selection.prioritized import PrioritizedStrategy


def make_pool(n=20):
    pool = QueryPool(PoolConfig(max_pool_size=max(n, 1), track_changes=False))
    pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    return pool


def test_weight_formula_and_running_mean():
    strat = PrioritizedStrategy(eps=0.1, temperature=1.0, s0=0.0)
    strat.observe({1: (2, 4), 2: (4, 4)}, step=0)
    strat.observe({1: (4, 4)}, step=1)
    ids = np.array([1, 2, 3])
    assert strat.success_rate(ids).tolist() == [0.75, 1.0, 0.0]  # mean of 0.5 and 1.0; unseen -> s0
    assert np.allclose(strat.weights(ids), [0.35, 0.1, 1.1])
    hot = PrioritizedStrategy(temperature=0.5, s0=0.5)
    assert np.isclose(hot.weights(np.array([9]))[0], 0.6 ** 2)


def test_select_prefers_unsolved_prompts_without_replacement():
    counts = np.zeros(20)
    for seed in range(300):
        pool = make_pool()
        strat = build_strategy("prioritized", seed=seed)
        strat.observe({i: (4, 4) for i in range(10)}, step=0)  # ids 0-9 solved: weight 0.1 vs 1.1
        ids = strat.select(pool, 5, step=0)
        assert len(set(ids)) == 5 and all(pool.status(i) == "in_flight" for i in ids)
        counts[ids] += 1
    assert counts[10:].sum() > 8 * counts[:10].sum()
    assert counts[:10].sum() > 0  # eps keeps solved prompts in play


def test_small_pool_bad_k_and_config_errors():
    pool = make_pool(3)
    strat = PrioritizedStrategy()
    assert sorted(strat.select(pool, 10, step=0)) == [0, 1, 2]
    assert strat.select(pool, 2, step=1) == []
    with pytest.raises(ValueError, match="k must be"):
        strat.select(pool, -1, step=0)
    with pytest.raises(ValueError, match="temperature"):
        PrioritizedStrategy(temperature=0)
    with pytest.raises(ValueError, match="s0"):
        PrioritizedStrategy(s0=1.5)
    with pytest.raises(ValueError, match="weight 0"):
        PrioritizedStrategy(eps=0.0, s0=1.0)
    with pytest.raises(ValueError, match="seed"):
        PrioritizedStrategy(seed=-1)


def test_checkpoint_resumes_the_same_next_batch():
    a = PrioritizedStrategy(seed=4)
    pool_a, pool_b = make_pool(), make_pool()
    ids = a.select(pool_a, 4, 0)
    pool_a.feedback({i: (1, 4) for i in ids}, 0)
    a.observe({i: (1, 4) for i in ids}, 0)
    pool_b.take(ids, 0)
    pool_b.feedback({i: (1, 4) for i in ids}, 0)
    b = PrioritizedStrategy(seed=0)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert a.select(pool_a, 4, 1) == b.select(pool_b, 4, 1)
    assert a.metrics()["select/n_selected"] == 4
