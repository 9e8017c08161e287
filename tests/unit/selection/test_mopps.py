"""``mopps``: discounted Beta posteriors and Thompson selection towards pass rate 0.5."""

import json

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection import build_strategy
from verl_ext.selection.mopps import MoppsStrategy


def make_pool(n=40):
    pool = QueryPool(PoolConfig(max_pool_size=n, track_changes=False))
    pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    return pool


def test_posterior_update_is_the_spec_formula():
    strat = MoppsStrategy(decay=0.5, alpha0=1.0, beta0=2.0)
    strat.observe({3: (6, 8)}, step=0)
    strat.observe({3: (2, 8)}, step=1)
    a, b = strat.posterior(np.array([3, 4]))
    # first: a = .5*1 + .5*1 + 6 = 7, b = .5*2 + .5*2 + 2 = 4; second: a = 3.5 + .5 + 2 = 6, b = 2 + 1 + 6 = 9
    assert a.tolist() == [6.0, 1.0] and b.tolist() == [9.0, 2.0]


def test_selects_candidates_nearest_half_and_respects_ts_ratio():
    hits = 0
    for seed in range(100):
        pool = make_pool()
        strat = build_strategy("mopps", seed=seed, ts_ratio=10.0)  # 10 x 4 = all 40 are candidates
        # ids 0-9 look like p = 0.5 with lots of evidence; the rest are solved or hopeless
        strat.observe({i: (16, 32) for i in range(10)} | {i: (32, 32) for i in range(10, 25)}
                      | {i: (0, 32) for i in range(25, 40)}, step=0)
        ids = strat.select(pool, 4, step=0)
        assert len(set(ids)) == 4 and all(pool.status(i) == "in_flight" for i in ids)
        hits += sum(i < 10 for i in ids)
    assert hits >= 390
    strat = MoppsStrategy(ts_ratio=2.0)
    strat.select(make_pool(), 4, step=0)
    assert strat.metrics()["select/n_candidates"] == 8


def test_config_errors_and_checkpoint():
    for kwargs, field in [({"decay": 1.5}, "decay"), ({"ts_ratio": 0.5}, "ts_ratio"), ({"alpha0": 0}, "alpha0"),
                          ({"target": -0.1}, "target")]:
        with pytest.raises(ValueError, match=field):
            MoppsStrategy(**kwargs)
    a = MoppsStrategy(seed=3)
    a.observe({0: (3, 4), 1: (0, 4)}, step=0)
    b = MoppsStrategy()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert a.select(make_pool(), 5, 0) == b.select(make_pool(), 5, 0)
    assert a.posterior(np.array([0]))[0][0] == b.posterior(np.array([0]))[0][0]
