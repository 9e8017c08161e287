"""``oracle``: the records whose true pass rate is nearest 0.5 (simulator-only reference)."""

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection import build_strategy
from verl_ext.selection.oracle import OracleStrategy

TRUE = np.linspace(0.0, 1.0, 21)  # id i has true pass rate i/20


def make_pool(n=21):
    pool = QueryPool(PoolConfig(max_pool_size=n, track_changes=False))
    pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    return pool


def test_picks_nearest_half_vectorised_and_scalar():
    pool = make_pool()
    strat = build_strategy("oracle", true_pass_rate=lambda ids: TRUE[ids], seed=0)
    assert sorted(strat.select(pool, 3, step=0)) == [9, 10, 11]
    assert sorted(strat.select(pool, 2, step=1)) == [8, 12]  # next nearest, the others are in flight
    scalar = OracleStrategy(true_pass_rate=lambda i: float(TRUE[i]), vectorized=False, target=0.0)
    assert scalar.select(make_pool(), 2, step=0) == [0, 1]
    assert scalar.metrics()["select/mean_true_rate"] == pytest.approx(0.025)


def test_needs_a_callable_with_the_right_shape():
    with pytest.raises(ValueError, match="true_pass_rate"):
        build_strategy("oracle")
    bad = OracleStrategy(true_pass_rate=lambda ids: [0.5])
    with pytest.raises(ValueError, match="shape"):
        bad.select(make_pool(), 1, step=0)
