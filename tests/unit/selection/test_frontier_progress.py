"""``boundary: progress`` (issue 29): the measured split between the ``signal`` and ``target`` draws.

``DrawProgress`` on hand-made measurements (which arm wins, floors, unknown ids, state), then the draw on real
pools: batch size, distinct available records, the split it logs, and a checkpoint that reproduces the next draw.
"""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import ConfigError, PoolConfig, QueryPool
from verl_ext.pool.progress import SIGNAL, TARGET, DrawProgress
from verl_ext.selection import build_strategy
from verl_ext.selection.frontier import draw_batch


def pool_with(values, seed=0, **cfg):
    pool = QueryPool(PoolConfig(**{"max_pool_size": 10_000, "boundary": "progress", **cfg}), seed=seed)
    pool.add_seeds_bulk([f"q{i}" for i in range(len(values))], ["a"] * len(values), "s", priors=values)
    return pool


def feed(tracker, arm, before, after, n=8, times=30, start=0):
    """``times`` records drawn by ``arm`` that read ``before`` at their last visit and ``after`` now."""
    ids = list(range(start, start + times))
    tracker.note(ids, arm)
    for rid in ids:
        tracker.observe(rid, before, after, n)


def test_target_side_until_both_arms_are_measured():
    tracker = DrawProgress(min_share=0.1, min_count=20)
    assert tracker.choose() == 0.1
    feed(tracker, SIGNAL, 0.5, 8, times=30)  # the signal arm's records moved, the target arm has no re-visits
    assert tracker.choose() == 0.1 and tracker.value(TARGET) is None


def test_the_arm_whose_records_move_gets_the_seats():
    tracker = DrawProgress(min_share=0.1, min_count=20)
    feed(tracker, TARGET, 0.5, 4, start=0)  # 4/8 again: re-trained, did not move
    feed(tracker, SIGNAL, 0.75, 7, start=100)  # 6/8 -> 7/8: still learning
    assert tracker.choose() == pytest.approx(0.9)
    feed(tracker, TARGET, 0.25, 5, times=200, start=1000)  # now the target arm's records move more, with more spread
    assert tracker.choose() == pytest.approx(0.1)
    assert tracker.metrics()["pool/progress_share"] == pytest.approx(0.1)


def test_first_measurements_and_unknown_records_teach_no_progress():
    tracker = DrawProgress()
    tracker.note([1], SIGNAL)
    tracker.observe(1, None, 4, 8)  # never measured before: spread only
    tracker.observe(2, 0.5, 8, 8)  # not drawn by an arm: ignored
    assert tracker.gain(SIGNAL) is None and tracker.spread(SIGNAL) == pytest.approx(1.0)
    assert tracker.spread(TARGET) is None and not tracker.pending


def regression_world(rng, size=4000, n=8):
    """Records with fixed pass rates from Beta(1, 5) (a hard pool, mean 1/6), each measured once: the prior's
    first measurements. Returns the rates and the first groups' pass counts."""
    rates = rng.beta(1.0, 5.0, size)
    return rates, rng.binomial(n, rates)


def test_the_prior_is_fitted_to_first_measurements():
    rng = np.random.default_rng(0)
    tracker = DrawProgress(decay=0.9999)
    rates, first = regression_world(rng)
    for rid, passes in enumerate(first):
        tracker.observe(rid, None, int(passes), 8)
    mean, strength = tracker.prior(8)
    assert mean == pytest.approx(1 / 6, abs=0.02)
    assert strength == pytest.approx(6.0, rel=0.3)  # Beta(1, 5): a + b = 6
    assert tracker.metrics()["pool/progress_prior_mean"] == pytest.approx(mean)


def test_a_draw_near_half_in_a_hard_pool_reads_no_loss_where_nothing_changed():
    """Regression to the mean: records drawn because their last group read near 0.5, in a pool whose rates sit
    near 1/6, read lower at the next visit with nothing learned. The shrunk baseline reads ~0 gain for both
    draws; the raw difference of the two groups reads a loss for the draw near 0.5."""
    rng = np.random.default_rng(1)
    tracker = DrawProgress(decay=0.9999, min_count=0.0)
    rates, first = regression_world(rng)
    for rid, passes in enumerate(first):
        tracker.observe(rid, None, int(passes), 8)
    near_half = [rid for rid, p in enumerate(first) if 3 <= p <= 5]
    weighted = rng.choice(len(rates), size=len(near_half), replace=False,
                          p=(first / 8) * (1 - first / 8) / ((first / 8) * (1 - first / 8)).sum()).tolist()
    tracker.note(near_half, TARGET)
    tracker.note(weighted, SIGNAL)
    raw = {TARGET: [], SIGNAL: []}
    for arm, ids in ((TARGET, near_half), (SIGNAL, weighted)):
        for rid in ids:
            again = int(rng.binomial(8, rates[rid]))  # the same rate: nothing was learned between the visits
            raw[arm].append((again - first[rid]) / 8)
            tracker.observe(rid, first[rid] / 8, again, 8)
    assert len(near_half) > 200
    assert np.mean(raw[TARGET]) < -0.1  # what the unshrunk difference would have read
    for arm in (TARGET, SIGNAL):
        assert abs(tracker.gain(arm)) < 0.04, arm


def test_the_pool_feeds_the_prior_from_its_first_measurements():
    """Cold draws carry no arm, yet their first measurements are the prior (the first batch is all cold)."""
    pool = QueryPool(PoolConfig(max_pool_size=10_000, boundary="progress"), seed=0)
    pool.add_seeds_bulk([f"q{i}" for i in range(64)], ["a"] * 64, "s")
    batch = draw_batch(pool, 16, 0)
    assert pool.num_cold == 48 and not pool.draw_progress.pending
    passes = {rid: i % 9 for i, rid in enumerate(batch)}
    pool.feedback({rid: (p, 8) for rid, p in passes.items()}, 0)
    mean, _ = pool.draw_progress.prior(8)
    assert mean == pytest.approx(np.mean(list(passes.values())) / 8, rel=0.05)
    assert pool.metrics()["pool/progress_prior_mean"] == pytest.approx(mean)


def test_a_state_from_the_logit_measurement_restarts_the_arms():
    tracker = DrawProgress()
    feed(tracker, SIGNAL, 0.5, 8, times=30)
    tracker.note([7], TARGET)
    old = tracker.state_dict()
    del old["first"]
    old["share"] = 0.9
    fresh = DrawProgress()
    fresh.load_state_dict(old)
    assert fresh.pending == {7: TARGET} and fresh.share == 0.9
    assert fresh.gain(SIGNAL) is None and fresh.spread(SIGNAL) is None
    again = DrawProgress()
    again.load_state_dict(tracker.state_dict())
    assert again.state_dict() == tracker.state_dict()


def test_released_records_are_forgotten():
    pool = pool_with([0.5] * 40)
    batch = draw_batch(pool, 8, 0)
    assert set(pool.draw_progress.pending) <= set(batch) and pool.draw_progress.pending
    pool.release(batch)
    assert not pool.draw_progress.pending


@settings(max_examples=60, deadline=None)
@given(before=st.one_of(st.none(), st.floats(0.0, 1.0)), passes=st.integers(0, 16), n=st.integers(1, 16),
       arm=st.sampled_from([TARGET, SIGNAL]), times=st.integers(1, 50))
def test_measurements_stay_finite_and_the_share_is_one_of_two(before, passes, n, arm, times):
    passes = min(passes, n)
    tracker = DrawProgress(min_count=0.0)
    feed(tracker, arm, before, passes, n=n, times=times)
    for name, value in tracker.metrics().items():
        assert math.isfinite(value), name
    for a in (TARGET, SIGNAL):
        value = tracker.value(a)
        assert value is None or value >= 0.0
    assert tracker.choose() in (pytest.approx(0.1), pytest.approx(0.9))


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.floats(0.0, 1.0), min_size=5, max_size=120), k=st.integers(1, 32),
       seed=st.integers(0, 1000), steps=st.integers(1, 6))
def test_batches_are_full_distinct_and_a_checkpoint_replays_the_next_one(values, k, seed, steps):
    pool = pool_with(values, seed=seed, progress_min_count=2.0)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        available = pool.num_available
        batch = draw_batch(pool, k, step)
        assert len(batch) == min(k, available) and len(set(batch)) == len(batch)
        assert all(pool.status(rid) == "in_flight" for rid in batch)
        pool.feedback({rid: (int(rng.integers(0, 9)), 8) for rid in batch}, step)
        pool.reinsert(step, k)
    state = json.loads(json.dumps(pool.state_dict()))
    assert "draw_progress" in state
    twin = QueryPool(PoolConfig(**{"max_pool_size": 10_000, "boundary": "progress", "progress_min_count": 2.0}),
                     seed=seed + 1)
    twin.load_state_dict(state)
    assert twin.draw_progress.state_dict() == pool.draw_progress.state_dict()
    assert draw_batch(twin, k, steps) == draw_batch(pool, k, steps)
    assert twin.metrics() == pool.metrics()


def test_the_split_is_logged_and_other_boundaries_do_not_carry_it():
    pool = pool_with([0.3, 0.5, 0.7] * 20)
    strategy = build_strategy("boundary")
    strategy.select(pool, 16, 0)
    assert strategy.metrics()["select/progress_share"] == pytest.approx(0.1)
    assert pool.metrics()["pool/progress_share"] == pytest.approx(0.1)
    plain = QueryPool(PoolConfig(max_pool_size=100), seed=0)
    assert "draw_progress" not in plain.state_dict()
    assert not any(key.startswith("pool/progress_") for key in plain.metrics())


def test_the_floor_is_validated():
    with pytest.raises(ConfigError, match="progress_min_share"):
        PoolConfig(boundary="progress", progress_min_share=0.6)
    with pytest.raises(ConfigError, match="progress_decay"):
        PoolConfig(progress_decay=1.0)
