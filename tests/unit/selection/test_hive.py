"""``hive``: history utility on one comparable scale, online verification, sticky pruning, fill order, metrics,
checkpoint."""

import json

import numpy as np
import pytest

from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.selection import build_strategy
from verl_ext.selection.hive import HiveStrategy, RunningRank


def make_pool(n=20):
    pool = QueryPool(PoolConfig(max_pool_size=n, track_changes=False, reinsertion={"trigger": "always"}))
    pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    return pool


def train(pool, strat, ids, step, result=(4, 8)):
    """Feed the step's outcome back to pool and strategy and put the records back (reinsertion "always")."""
    pool.feedback({i: result for i in ids}, step)
    strat.observe({i: result for i in ids}, step)
    pool.reinsert(step, len(ids))


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
    assert strat.metrics()["select/verified"] == 0.0 and strat.metrics()["hive/prune_rate"] == 0.0


def test_running_rank_is_a_bounded_percentile():
    ref = RunningRank(4)
    assert np.isnan(ref.rank(np.array([1.0]))).all()
    ref.add(np.array([9.0, 1.0, 2.0, 3.0, 4.0]))  # the oldest (9.0) falls out of the window
    assert np.allclose(ref.rank(np.array([0.0, 2.0, 2.5, 5.0, np.nan])), [0.0, 0.375, 0.5, 1.0, np.nan],
                       equal_nan=True)


def test_each_entropy_is_ranked_against_its_own_source():
    """Response entropies (~0.1-0.3 nats) and prompt entropies (~5 nats) never share a normaliser: a record's
    entropy term is its rank among measurements of the same kind, and an unseen record keeps the optimistic h0."""
    s = HiveStrategy(entropy_weight=1.0, h0=1.0)
    s.observe_response_entropy({1: 0.1, 2: 0.2, 3: 0.3}, step=0)
    s.prompt_entropy = lambda ids: {i: 4.0 + 0.1 * i for i in ids}
    s._verify(np.array([10, 11, 12]), np.array([0, 1, 2]), step=0)  # ids 10-12: verified, never trained
    h = s.normalised_entropy(np.array([1, 2, 3, 10, 11, 12, 99]))
    assert np.allclose(h, [1 / 6, 0.5, 5 / 6, 1 / 6, 0.5, 5 / 6, 1.0])
    # with one shared max (the old rule) ids 10-12 scored ~0.96-1.0 and id 3 0.06
    s.observe({i: (4, 8) for i in (3, 12)}, step=0)
    u = s.utility(np.array([3, 12, 99]))
    assert u[0] == pytest.approx(u[1]) and u[2] > u[1]  # never seen outranks verified-but-untrained


def test_collapsed_candidates_are_pruned_and_the_batch_is_filled_from_below():
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
    train(pool, strat, first, 1)
    for i in range(4):
        entropy[i] = 0.1  # all four fell together: the policy as a whole, not a collapse
    second = strat.select(pool, 2, step=2)
    assert set(second) <= {0, 1, 2, 3} and strat.metrics()["hive/collapsed"] == 0
    train(pool, strat, second, 2)
    entropy[0] = entropy[1] = 0.01  # collapsed against their peers (median 0.055) and their own history
    chosen = strat.select(pool, 2, step=3)
    assert set(chosen) == {2, 3}
    m = strat.metrics()
    assert m["select/frac_pruned"] == 0.5 and m["hive/collapsed"] == m["hive/pruned"] == 2
    assert m["hive/collapse_rate"] == 0.5

    window = build_strategy("hive", prompt_entropy=probe, candidate_ratio=2.0, prune_quantile=0.0,
                            collapse_ratio=0.5, prune_reference="window", seed=0)
    for i in range(20):
        entropy[i] = 1.0
    window.observe({i: (4, 8) for i in range(4)} | {i: (1, 8) for i in range(4, 20)}, step=0)
    pool = make_pool()
    train(pool, window, window.select(pool, 2, step=1), 1)
    for i in range(4):
        entropy[i] = 0.1
    chosen = window.select(pool, 2, step=2)  # the window rule reads the raw fall as a collapse of every candidate
    assert not set(chosen) & {0, 1, 2, 3} and window.metrics()["select/frac_from_rest"] == 1.0
    assert window.metrics()["hive/collapsed"] == 4


def test_pruning_sticks_until_a_later_verification_clears_it():
    entropy = {i: 1.0 + 0.01 * i for i in range(40)}
    entropy[0] = 0.01  # the lowest prompt entropy: pruned by the quantile rule
    s = HiveStrategy(prompt_entropy=lambda ids: {i: entropy[i] for i in ids}, candidate_ratio=2.0,
                     prune_quantile=0.1, reverify_after=3, entropy_weight=0.0, seed=0)
    s.observe({0: (4, 8)} | {i: (1, 8) for i in range(1, 40)}, step=0)  # id 0 has by far the best utility
    pool = make_pool(40)
    assert 0 not in s.select(pool, 4, step=1) and s.pruned(np.array([0]))[0]
    pool.release(pool.in_flight_ids())
    for step in (2, 3):  # still the most useful record, but blocked: neither measured nor selected
        assert 0 not in s.select(pool, 4, step=step)
        assert s.pruned(np.array([0]))[0] and s.metrics()["hive/blocked"] >= 1.0  # the bottom tenth of each step joins it
        pool.release(pool.in_flight_ids())
    entropy[0] = 2.0  # the policy is uncertain about it again
    assert 0 in s.select(pool, 4, step=4)  # due: a candidate again, measured, cleared, selected
    m = s.metrics()
    assert m["hive/cleared"] == 1.0 and not s.pruned(np.array([0]))[0]


def test_a_record_that_fails_its_reverification_is_pruned_again():
    s = HiveStrategy(prompt_entropy=lambda ids: {i: 0.01 if i == 0 else 1.0 + 0.01 * i for i in ids},
                     candidate_ratio=2.0, prune_quantile=0.1, reverify_after=2, entropy_weight=0.0, seed=0)
    s.observe({0: (4, 8)} | {i: (1, 8) for i in range(1, 40)}, step=0)
    pool = make_pool(40)
    for step in (1, 3):
        assert 0 not in s.select(pool, 4, step=step)
        pool.release(pool.in_flight_ids())
    assert s.stats.get("pruned_at", np.array([0]))[0] == 3.0  # the clock restarted


def test_a_policy_wide_entropy_decline_does_not_raise_the_prune_rate():
    """A real policy's prompt entropy falls as a whole while it trains. Ranked among the same verification's
    candidates (the default), pruning stays at ``prune_quantile``; ranked against a window of older measurements,
    every candidate looks low and most are pruned (what the CPU comparison showed: 0.1 -> 0.4-0.5)."""
    rates = {}
    for reference in ("candidates", "window"):
        scale = {"now": 1.0}
        rng = np.random.default_rng(0)
        base = rng.uniform(0.5, 1.5, size=400)
        s = HiveStrategy(prompt_entropy=lambda ids: {i: scale["now"] * base[i] for i in ids}, candidate_ratio=2.0,
                         prune_quantile=0.1, prune_reference=reference, reverify_after=100, seed=0)
        pool = make_pool(400)
        pruned = verified = 0
        for step in range(8):
            scale["now"] = 0.85 ** step  # the whole distribution shifts down every step
            chosen = s.select(pool, 16, step=step)
            m = s.metrics()
            if step >= 4:
                pruned, verified = pruned + m["hive/pruned"], verified + m["hive/verified"]
            train(pool, s, chosen, step)
        rates[reference] = pruned / verified
    assert rates["candidates"] == pytest.approx(3 / 32)  # ranks below 0.1 among 32: the bottom 3
    assert rates["window"] > 3 * rates["candidates"]


def test_a_small_pool_measures_pruned_records_early_and_fills_with_them_last():
    s = HiveStrategy(prompt_entropy=lambda ids: {i: float(i) for i in ids}, candidate_ratio=1.0,
                     prune_quantile=0.5, seed=1)
    pool = make_pool(4)
    assert sorted(s.select(pool, 4, step=0)) == [0, 1, 2, 3]  # pruned ones fill the batch last
    m = s.metrics()
    assert m["select/frac_pruned"] == 0.5 and m["hive/pruned_selected"] == 2 and m["hive/frac_pruned_selected"] == 0.5
    pool.release(pool.in_flight_ids())
    s.select(pool, 4, step=1)  # 2 eligible < 4 candidates: the 2 blocked ones are measured again
    assert s.metrics()["hive/verified"] == 4.0


def test_hive_metrics_add_up_the_steps_selections():
    s = HiveStrategy(prompt_entropy=lambda ids: {i: 1.0 + i for i in ids}, candidate_ratio=2.0, seed=0)
    pool = make_pool(40)
    s.select(pool, 4, step=1)
    s.select(pool, 4, step=1)  # a DAPO refill in the same step
    m = s.metrics()
    assert m["hive/verified"] == 16.0 and m["select/verified"] == 8.0
    assert m["hive/prune_rate"] == m["hive/pruned"] / 16.0 > 0
    s.select(pool, 4, step=2)
    assert s.metrics()["hive/verified"] == 8.0


def test_errors_and_checkpoint():
    with pytest.raises(ValueError, match="candidate_ratio"):
        HiveStrategy(candidate_ratio=0.5)
    with pytest.raises(ValueError, match="prompt_entropy"):
        HiveStrategy(prompt_entropy=3)
    for bad in ({"reverify_after": 0}, {"norm_window": 0}, {"reverify_after": 1.5}, {"prune_reference": "x"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            HiveStrategy(**bad)
    with pytest.raises(ValueError, match="no value"):
        HiveStrategy(prompt_entropy=lambda ids: {}).select(make_pool(), 2, step=0)
    with pytest.raises(ValueError, match="non-negative"):
        HiveStrategy(prompt_entropy=lambda ids: {i: -1.0 for i in ids}).select(make_pool(), 2, step=0)
    probe = lambda ids: {i: 0.5 + 0.01 * i for i in ids}  # noqa: E731
    a = HiveStrategy(prompt_entropy=probe, seed=5)
    a.observe({0: (3, 8), 1: (8, 8)}, step=0)
    a.observe_response_entropy({0: 0.3, 1: 0.1}, step=0)
    a.select(make_pool(), 3, step=0)
    assert a.pruned(np.arange(20)).any()
    b = HiveStrategy(prompt_entropy=probe)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert np.array_equal(a.pruned(np.arange(20)), b.pruned(np.arange(20)))
    assert np.allclose(a.utility(np.arange(20)), b.utility(np.arange(20)))
    assert a.select(make_pool(), 5, 1) == b.select(make_pool(), 5, 1)
    state = a.state_dict()
    state["hive"]["version"] = 99
    with pytest.raises(ValueError, match="version"):
        HiveStrategy().load_state_dict(state)


def test_response_entropy_history_drives_the_utility_and_old_states_load():
    s = HiveStrategy(entropy_weight=1.0, seed=0)
    s.observe({1: (4, 8), 2: (4, 8)}, step=0)
    s.observe_response_entropy({1: 0.2, 2: 1.0}, step=0)
    u = s.utility(np.array([1, 2]))
    assert u[1] > u[0]  # record 2's responses were more uncertain
    state = s.state_dict()
    for col in ("resp_sum", "resp_weight", "pruned_at"):  # a checkpoint from before these columns
        del state["stats"]["columns"][col]
    del state["hive"]  # and before the reference windows
    again = HiveStrategy(entropy_weight=1.0, seed=0)
    again.load_state_dict(state)
    assert np.isnan(again.response_entropy(np.array([1]))[0]) and not again.pruned(np.array([1, 2])).any()


def test_prompt_entropy_history_on_another_scale_restarts_on_resume():
    """A checkpoint whose stored prompt entropies are raw (version 2, or the window rule) does not feed raw nats
    into the relative collapse rule: that history restarts, the rest of the state loads."""
    probe = lambda ids: {i: 0.4 + 0.01 * i for i in ids}  # noqa: E731
    raw = HiveStrategy(prompt_entropy=probe, prune_reference="window", seed=1)
    raw.observe({0: (3, 8), 1: (5, 8)}, step=0)
    raw.select(make_pool(), 4, step=0)
    state = json.loads(json.dumps(raw.state_dict()))
    assert state["hive"]["prompt_scale"] == "raw"
    measured = np.arange(20)[~np.isnan(raw.history_entropy(np.arange(20)))]
    assert len(measured)
    same = HiveStrategy(prompt_entropy=probe, prune_reference="window")
    same.load_state_dict(state)
    assert np.allclose(same.history_entropy(measured), raw.history_entropy(measured))
    version2 = {**state, "hive": {k: v for k, v in state["hive"].items() if k != "prompt_scale"} | {"version": 2}}
    for old in (state, version2):
        rel = HiveStrategy(prompt_entropy=probe)  # prune_reference: candidates stores relative readings
        rel.load_state_dict(old)
        assert np.isnan(rel.history_entropy(measured)).all() and len(rel.ref_prompt) == 0
        assert np.allclose(rel.pass_rate(np.array([0, 1])), raw.pass_rate(np.array([0, 1])))
        assert np.array_equal(rel.pruned(np.arange(20)), raw.pruned(np.arange(20)))
