"""``greso``: skip probabilities from zero-variance streaks, adaptive p_easy/p_hard."""

import json

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection import build_strategy
from verl_ext.selection.greso import GresoStrategy


def make_pool(n=40):
    pool = QueryPool(PoolConfig(max_pool_size=n, track_changes=False))
    pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    return pool


def test_streaks_and_keep_probability():
    strat = GresoStrategy(p_easy=0.5, p_hard=0.8, min_keep=0.1)
    strat.observe({0: (8, 8), 1: (0, 8), 2: (4, 8)}, step=0)
    strat.observe({0: (8, 8), 1: (0, 8), 2: (8, 8)}, step=1)
    keep = strat.keep_probability(np.array([0, 1, 2, 3]))
    # p_easy/p_hard moved after each step; streaks: 0 easy x2, 1 hard x2, 2 easy x1, 3 never seen
    assert np.allclose(keep, [max(strat.p_easy ** 2, 0.1), strat.p_hard ** 2, strat.p_easy, 1.0])
    strat.observe({0: (5, 8)}, step=2)  # a mixed group breaks the streak
    assert strat.keep_probability(np.array([0]))[0] == 1.0
    for _ in range(200):
        strat.observe({9: (8, 8)}, step=3)
    assert strat.keep_probability(np.array([9]))[0] == 0.1  # floor


def test_adaptation_moves_toward_target_share():
    strat = GresoStrategy(p_easy=0.5, p_hard=0.5, target_zero_variance=0.25, step_size=0.01)
    strat.observe({i: (8, 8) for i in range(10)}, step=0)  # all easy: easy share 1 > 0.125, hard share 0 < 0.125
    assert np.isclose(strat.p_easy, 0.49) and np.isclose(strat.p_hard, 0.51)
    for _ in range(100):
        strat.observe({0: (0, 8)}, step=1)
    assert strat.p_hard == 0.01 and strat.p_easy == 1.0


def test_select_skips_streaky_prompts_and_fills_when_short():
    counts = np.zeros(40)
    for seed in range(100):
        pool = make_pool()
        strat = build_strategy("greso", seed=seed, p_easy=0.1, step_size=0.0)
        strat.observe({i: (8, 8) for i in range(20)}, step=0)  # 0-19 kept with probability 0.1
        ids = strat.select(pool, 8, step=0)
        assert len(set(ids)) == 8 and all(pool.status(i) == "in_flight" for i in ids)
        counts[ids] += 1
    assert counts[20:].sum() > 10 * counts[:20].sum()
    pool = make_pool(10)
    strat = GresoStrategy(p_easy=0.01, min_keep=0.01, step_size=0.0, seed=1)
    strat.observe({i: (8, 8) for i in range(10)}, step=0)
    assert sorted(strat.select(pool, 10, step=0)) == list(range(10))  # filled from skipped ones
    assert strat.metrics()["select/n_filled_from_skipped"] > 0


def test_config_errors_and_checkpoint():
    with pytest.raises(ValueError, match="hard_threshold"):
        GresoStrategy(hard_threshold=0.99)
    with pytest.raises(ValueError, match="p_easy"):
        GresoStrategy(p_easy=0.0)
    a = GresoStrategy(seed=2)
    a.observe({0: (8, 8), 1: (0, 8)}, step=0)
    b = GresoStrategy()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert (b.p_easy, b.p_hard) == (a.p_easy, a.p_hard)
    assert a.select(make_pool(), 6, 0) == b.select(make_pool(), 6, 0)
