"""``hive``: history utility, online entropy verification, fill order, checkpoint."""

import json

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection import build_strategy
from verl_ext.selection.hive import HiveStrategy


def make_pool(n=20):
    pool = QueryPool(PoolConfig(max_pool_size=n, track_changes=False, reinsertion={"trigger": "always"}))
    pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    return pool


def test_history_utility_prefers_the_learning_edge():
    strat = HiveStrategy(decay=0.5, entropy_weight=0.0)
    strat.observe({0: (8, 8), 1: (4, 8), 2: (0, 8)}, step=0)
    strat.observe({0: (0, 8)}, step=1)
    # id 0: (0.5*1 + 0) / (0.5 + 1) = 1/3 -> recency weighted
    assert np.allclose(strat.pass_rate(np.array([0, 1, 2, 3])), [1 / 3, 0.5, 0.0, 0.5])
    assert np.allclose(strat.utility(np.array([1, 2])), [1.0, 0.0])
    pool = make_pool()
    strat.observe({i: (0, 8) for i in range(3, 20)}, step=2)
    assert sorted(strat.select(pool, 2, step=3)) == [0, 1]  # history only (no probe)
    assert strat.metrics()["select/verified"] == 0.0


def test_online_verification_prunes_collapsed_and_low_entropy_candidates():
    entropy = {i: 1.0 for i in range(20)}
    probe_calls = []

    def probe(ids):
        probe_calls.append(list(ids))
        return {i: entropy[i] for i in ids}

    strat = build_strategy("hive", prompt_entropy=probe, candidate_ratio=2.0, prune_quantile=0.0,
                           collapse_ratio=0.5, seed=0)
    strat.observe({i: (4, 8) for i in range(4)} | {i: (1, 8) for i in range(4, 20)}, step=0)
    pool = make_pool()
    first = strat.select(pool, 2, step=1)  # candidates: ids 0-3 (utility 1); history entropy recorded
    assert set(first) <= {0, 1, 2, 3} and len(probe_calls[0]) == 4
    pool.feedback({i: (4, 8) for i in first}, 1)
    strat.observe({i: (4, 8) for i in first}, step=1)
    pool.reinsert(1, 2)
    for i in range(4):
        entropy[i] = 0.1  # collapsed relative to its history of 1.0
    chosen = strat.select(pool, 2, step=2)
    assert not set(chosen) & {0, 1, 2, 3}  # all candidates pruned: filled from the records ranked below
    m = strat.metrics()
    assert m["select/frac_pruned"] == 1.0 and m["select/frac_from_rest"] == 1.0


def test_quantile_prune_and_fallback_to_pruned_when_pool_is_small():
    strat = HiveStrategy(prompt_entropy=lambda ids: {i: float(i) for i in ids}, candidate_ratio=1.0,
                         prune_quantile=0.5, seed=1)
    pool = make_pool(4)
    assert sorted(strat.select(pool, 4, step=0)) == [0, 1, 2, 3]  # pruned ones fill the batch last
    assert strat.metrics()["select/frac_pruned"] == 0.5


def test_errors_and_checkpoint():
    with pytest.raises(ValueError, match="candidate_ratio"):
        HiveStrategy(candidate_ratio=0.5)
    with pytest.raises(ValueError, match="prompt_entropy"):
        HiveStrategy(prompt_entropy=3)
    with pytest.raises(ValueError, match="no value"):
        HiveStrategy(prompt_entropy=lambda ids: {}).select(make_pool(), 2, step=0)
    with pytest.raises(ValueError, match="non-negative"):
        HiveStrategy(prompt_entropy=lambda ids: {i: -1.0 for i in ids}).select(make_pool(), 2, step=0)
    probe = lambda ids: {i: 0.5 + 0.01 * i for i in ids}  # noqa: E731
    a = HiveStrategy(prompt_entropy=probe, seed=5)
    a.observe({0: (3, 8), 1: (8, 8)}, step=0)
    a.select(make_pool(), 3, step=0)
    b = HiveStrategy(prompt_entropy=probe)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert a.select(make_pool(), 5, 1) == b.select(make_pool(), 5, 1)


def test_response_entropy_history_drives_the_utility_and_old_states_load():
    from verl_ext.selection.hive import HiveStrategy
    import numpy as np

    s = HiveStrategy(entropy_weight=1.0, seed=0)
    s.observe({1: (4, 8), 2: (4, 8)}, step=0)
    s._record_entropy(np.array([1, 2]), np.array([1.0, 1.0]))
    before = s.utility(np.array([1, 2]))
    assert before[0] == before[1]
    s.observe_response_entropy({1: 0.2, 2: 1.0}, step=0)
    after = s.utility(np.array([1, 2]))
    assert after[1] > after[0]  # record 2's responses were more uncertain
    state = s.state_dict()
    for col in ("resp_sum", "resp_weight"):  # a checkpoint from before the response-entropy column
        del state["stats"]["columns"][col]
    again = HiveStrategy(entropy_weight=1.0, seed=0)
    again.load_state_dict(state)
    assert np.isnan(again.response_entropy(np.array([1]))[0])
