"""The shared statistics table and draws behind the stateful strategies (``verl_ext.selection.table``)."""

import json

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection.table import IdStats, top_k, weighted_without_replacement


def test_table_defaults_ensure_and_roundtrip():
    t = IdStats({"a": 0.5, "b": 0.0})
    ids = np.array([7, 3, 100])
    assert t.get("a", ids).tolist() == [0.5, 0.5, 0.5] and len(t) == 0
    rows = t.ensure(ids)
    t.column("b")[rows] = [1.0, 2.0, 3.0]
    assert t.get("b", np.array([3, 7, 100, 5])).tolist() == [2.0, 1.0, 3.0, 0.0]
    assert t.has(np.array([3, 5])).tolist() == [True, False]
    t.ensure(np.array([5, 3]))  # existing rows are kept, new ones appear in order
    assert t.get("b", np.array([3, 5])).tolist() == [2.0, 0.0]
    clone = IdStats({"a": 0.5, "b": 0.0})
    clone.load_state_dict(json.loads(json.dumps(t.state_dict())))
    assert clone.get("b", np.array([3, 5, 7, 100])).tolist() == [2.0, 0.0, 1.0, 3.0]
    with pytest.raises(ValueError, match="columns"):
        IdStats({"a": 0.0}).load_state_dict(t.state_dict())


def test_table_prunes_records_the_pool_no_longer_holds():
    t = IdStats({"x": 0.0})
    t.ensure(np.arange(3000))
    pool = QueryPool(PoolConfig(max_pool_size=10, track_changes=False))
    pool.add_seeds_bulk([f"q{i}" for i in range(10)], ["a"] * 10, "s", record_ids=list(range(10)))
    assert t.maybe_prune(pool) == 2990 and len(t) == 10
    assert t.maybe_prune(pool) == 0


def test_top_k_breaks_ties_at_random_and_orders_best_first():
    rng = np.random.default_rng(0)
    scores = np.array([1.0, 3.0, 3.0, 3.0, 0.0, 2.0])
    firsts = set()
    for _ in range(50):
        pos = top_k(scores, 2, rng)
        assert set(pos) <= {1, 2, 3}
        firsts.add(int(pos[0]))
    assert firsts == {1, 2, 3}
    assert top_k(scores, 10, rng)[-2:].tolist() == [0, 4]
    assert top_k(scores, 0, rng).tolist() == []


def test_weighted_draws_follow_the_weights():
    rng = np.random.default_rng(1)
    w = np.array([1.0, 3.0, 0.0])
    firsts = np.bincount([weighted_without_replacement(w, 1, rng)[0] for _ in range(4000)], minlength=3)
    assert firsts[2] == 0 and abs(firsts[1] / 4000 - 0.75) < 0.03
    assert sorted(weighted_without_replacement(w, 3, rng).tolist()) == [0, 1, 2]
