"""The frontier (issue 10): ``target`` boundary in every pool shape, random ties without starvation, the child cap,
farthest-first eviction that keeps the seed set, the uncertain child prior and the learned child penalty."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import PoolConfig, QueryPool, ReinsertionConfig
from verl_ext.pool.calibration import ChildCalibration
from verl_ext.pool.estimators import child_prior
from verl_ext.selection.frontier import draw_batch


def pool_with(values, seed=0, **cfg):
    pool = QueryPool(PoolConfig(**{"max_pool_size": 10_000, **cfg}), seed=seed)
    pool.add_seeds_bulk([f"q{i}" for i in range(len(values))], ["a"] * len(values), "s", priors=values)
    return pool


@pytest.mark.parametrize("shape", ["mostly_solved", "mostly_hopeless"])
def test_target_finds_the_thin_frontier_where_the_median_does_not(shape):
    # 90 records at an extreme, 10 near 0.5: the median sits on the extreme, the target on the frontier.
    extreme = 1.0 if shape == "mostly_solved" else 0.0
    values = [extreme] * 90 + [0.4 + 0.02 * i for i in range(10)]
    frontier = set(range(90, 100))
    assert set(draw_batch(pool_with(values), 10, step=0)) == frontier
    median = draw_batch(pool_with(values, **PoolConfig.paper().to_dict() | {"max_pool_size": 10_000}), 10, step=0)
    assert not set(median) & frontier


@settings(max_examples=20, deadline=None)
@given(n=st.integers(20, 300), k=st.integers(1, 16), seed=st.integers(0, 50), value=st.sampled_from([0.0, 0.5, 1.0]))
def test_equal_values_cover_the_whole_pool(n, k, seed, value):
    """No id starvation: with every record tied, repeated draws (records returned after each step) reach all."""
    pool = pool_with([value] * n, seed=seed)
    seen: set[int] = set()
    for step in range(40 * n // k + 40):
        batch = draw_batch(pool, k, step)
        seen.update(batch)
        pool.release(batch)
        if len(seen) == n:
            break
    assert len(seen) == n


def test_ties_are_drawn_at_random_not_by_id():
    firsts = {tuple(sorted(draw_batch(pool_with([0.5] * 100, seed=s), 5, 0))) for s in range(10)}
    assert len(firsts) == 10 and (0, 1, 2, 3, 4) not in firsts


def test_candidate_ratio_draws_from_a_wider_band():
    values = [i / 100 for i in range(101)]
    near = draw_batch(pool_with(values), 4, 0)
    assert all(abs(values[i] - 0.5) <= 0.021 for i in near)
    wide = set()
    for s in range(20):
        wide.update(draw_batch(pool_with(values, seed=s, candidate_ratio=4.0), 4, 0))
    assert max(abs(values[i] - 0.5) for i in wide) > 0.021 and all(abs(values[i] - 0.5) <= 0.081 for i in wide)


def children_of(pool, parent, count, factor=1.0):
    return [pool.add_child(f"c{parent}-{j}", "a", "s", parent, factor, step=0) for j in range(count)]


def test_child_cap_keeps_seeds_in_the_batch():
    pool = pool_with([0.5] * 4 + [0.2] * 20, max_child_fraction=0.25, child_distance_penalty=0.0)
    kids = children_of(pool, 0, 12)  # priors 0.5: nearer the target than the 0.2 seeds
    batch = draw_batch(pool, 8, step=0)
    n_kids = len(set(batch) & set(kids))
    assert n_kids == 2 and len(batch) == 8
    assert pool.counters()["sampled_children"] == 2


def test_child_penalty_prefers_measured_seeds():
    pool = pool_with([0.5] * 4 + [0.35] * 4, max_child_fraction=1.0, child_distance_penalty=0.2)
    kids = children_of(pool, 0, 4)
    assert not set(draw_batch(pool, 8, step=0)) & set(kids)  # seeds at distance 0.15 beat children at 0 + 0.2


def test_unmeasured_child_prior_is_uncertain_not_a_copy():
    pool = pool_with([0.0])
    child = children_of(pool, 0, 1)[0]
    assert pool.get(child).prior == 0.0  # the paper's rule, kept on the record
    assert pool.base_value(child) == pytest.approx(child_prior(0.0, 2.0)) == pytest.approx(0.25)
    paper = QueryPool(PoolConfig.paper(), seed=0)
    paper.add_seeds_bulk(["q"], ["a"], "s", priors=[0.0])
    assert paper.base_value(children_of(paper, 0, 1)[0]) == 0.0


def test_farthest_eviction_removes_children_before_seeds():
    pool = pool_with([0.1, 0.5, 0.95], max_pool_size=5)
    a, b = children_of(pool, 1, 2)  # priors 0.5
    far = pool.add_child("far", "a", "s", 2, 0.75, step=0)  # easy parent, easier child: farthest from 0.5
    assert far not in pool and a in pool and b in pool  # the farthest *child* went, not seed 0 or 2
    assert pool.counters()["evicted_capacity_child"] == 1 and pool.counters()["evicted_capacity_seed"] == 0
    pool.add_seed("cold", "a", "s")  # room for a cold record: again a child goes, not a seed
    assert {0, 1, 2} <= set(pool.available_ids().tolist()) and pool.counters()["evicted_capacity_child"] == 2


def test_archived_seed_displaces_a_child_on_reinsertion():
    pool = pool_with([0.5, 0.5], max_pool_size=4, max_child_fraction=1.0, child_distance_penalty=0.0,
                     reinsertion=ReinsertionConfig(trigger="always"))
    pool.take([0], step=0)
    pool.feedback({0: (4, 8)}, step=0)  # seed 0 in the archive: live = 1 seed
    kids = children_of(pool, 1, 3)  # pool full of seed 1 + 3 children
    assert pool.reinsert(step=0, batch_size=1) == 1
    assert pool.status(0) == "pooled" and sum(k in pool for k in kids) == 2


def test_cold_fraction_interleaves_measured_records():
    pool = pool_with([0.5] * 10, cold_fraction=0.25)
    cold = [pool.add_seed(f"c{i}", "a", "s") for i in range(10)]
    batch = draw_batch(pool, 8, step=0)
    assert len(set(batch) & set(cold)) == 2
    only_cold = QueryPool(PoolConfig(cold_fraction=0.25), seed=0)
    ids = [only_cold.add_seed(f"c{i}", "a", "s") for i in range(10)]
    assert draw_batch(only_cold, 8, step=0) == ids[:8]  # nothing scored yet: cold fills the batch


def test_calibration_learns_the_unsolvable_share():
    rng = np.random.default_rng(0)
    cal = ChildCalibration()
    assert cal.frontier_penalty() == 0.0
    for _ in range(2000):
        p = rng.uniform(0.2, 0.8)
        bad = rng.random() < 0.35
        cal.observe(p, 0 if bad else int(rng.binomial(8, p)), 8)
    assert cal.invalid_rate == pytest.approx(0.35, abs=0.1)
    assert 0.3 < cal.frontier_penalty() < 0.45
    good = ChildCalibration()
    for _ in range(2000):
        p = rng.uniform(0.2, 0.8)
        good.observe(p, int(rng.binomial(8, p)), 8)
    assert good.invalid_rate < 0.05 and good.frontier_penalty() < 0.16
    again = ChildCalibration()
    again.load_state_dict(cal.state_dict())
    assert again.invalid_rate == cal.invalid_rate


def test_pool_feeds_first_measurements_of_children_to_the_calibration():
    pool = pool_with([0.5] * 4, max_child_fraction=1.0)
    kids = children_of(pool, 0, 30)
    pool.take(kids, step=0)
    pool.feedback({k: (0, 8) for k in kids}, step=0)  # every child all-wrong where 0.5 was expected
    assert pool.child_calibration.invalid_rate > 0.5
    assert pool.metrics()["pool/child_penalty"] > 0.4


def test_undrained_evicted_feed_stays_bounded():
    pool = QueryPool(PoolConfig(max_pool_size=10, track_changes=True, max_child_fraction=1.0), seed=0)
    pool.add_seeds_bulk(["q"] * 10, ["a"] * 10, "s", priors=[0.5] * 10)
    for j in range(10_000):  # every child into a full pool evicts one record
        pool.add_child(f"c{j}", "a", "s", 0, 1.0, step=0)
    assert len(pool._evicted_pending) <= 4096
    assert pool.counters()["feed_dropped_evicted"] > 0 and pool.metrics()["pool/evicted"] == 10_000


# ------------------------------------------------------------------ boundary: signal (weight v(1-v), no hard edge)
def test_signal_draws_in_proportion_to_v_times_one_minus_v():
    """0.85 comes about half as often as 0.5 (0.1275 / 0.25), 0.25 three quarters; exact 0/1 records sit in the
    end buckets (weight ~0.0005) and are all but never drawn."""
    from verl_ext.pool.buckets import ValueBuckets
    from verl_ext.selection.frontier.draw import signal_draw

    values = {0.0: [], 0.25: [], 0.5: [], 0.85: [], 1.0: []}
    buckets, rid = ValueBuckets(1000, 2), 0
    for v, ids in values.items():
        for _ in range(500):
            buckets.insert(rid, v)
            ids.append(rid)
            rid += 1
    rng = np.random.default_rng(0)
    counts = dict.fromkeys(values, 0)
    of = {i: v for v, ids in values.items() for i in ids}
    for _ in range(400):
        batch = signal_draw(buckets, 16, rng)
        assert len(set(batch)) == 16
        for i in batch:
            counts[of[i]] += 1
    assert 0.43 < counts[0.85] / counts[0.5] < 0.60 and 0.66 < counts[0.25] / counts[0.5] < 0.84
    assert counts[0.0] + counts[1.0] < 0.01 * sum(counts.values())


def test_signal_takes_every_record_left_when_asked_for_more():
    from verl_ext.pool.buckets import ValueBuckets
    from verl_ext.selection.frontier.draw import signal_draw

    buckets = ValueBuckets(100, 2)
    for i, v in enumerate([0.3, 0.3, 0.6, 0.9, 0.0]):
        buckets.insert(i, v)
    got = signal_draw(buckets, 10, np.random.default_rng(1))
    assert sorted(got) == [0, 1, 2, 3, 4]  # the 0.0 record is in bucket 0: weight 0.0025, still drawable


def test_signal_respects_the_child_budget_and_weight():
    from verl_ext.pool.buckets import CHILD_GROUP, ValueBuckets
    from verl_ext.selection.frontier.draw import signal_draw

    buckets = ValueBuckets(100, 2)
    for i in range(50):
        buckets.insert(i, 0.5)
        buckets.insert(100 + i, 0.5, group=CHILD_GROUP)
    rng = np.random.default_rng(2)
    for _ in range(50):
        assert sum(1 for i in signal_draw(buckets, 20, rng, child_budget=3) if i >= 100) <= 3
    # children expected solvable 60 % of the time weigh 0.6 of a seed at the same estimate: 0.6 / 1.6 of draws
    kids = sum(1 for _ in range(200) for i in signal_draw(buckets, 4, rng, child_weight=0.6) if i >= 100)
    assert 0.31 < kids / 800 < 0.44
    assert not any(i >= 100 for i in signal_draw(buckets, 60, rng, child_weight=0.0))


def test_signal_child_weight_follows_the_calibration_or_the_set_penalty():
    from verl_ext.selection.frontier.policy import _child_weight

    pool = pool_with([0.5] * 4)
    assert _child_weight(pool) == 1.0  # no evidence yet: no discount
    for _ in range(40):
        pool.child_calibration.observe(0.5, 0, 4)  # all-wrong far more often than 0.5^4 predicts
    assert 0.0 < _child_weight(pool) == 1.0 - pool.child_calibration.invalid_rate < 0.5
    assert _child_weight(pool_with([0.5], child_distance_penalty=0.3)) == pytest.approx(0.8)


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.7, 0.95, 1.0]), min_size=1, max_size=80),
       k=st.integers(1, 40), seed=st.integers(0, 100))
def test_signal_batches_are_full_distinct_and_seeded(values, k, seed):
    """Through ``draw_batch``: never short while records are left (zero-weight ones fill the last seats), never a
    repeated id, and the same seed gives the same batch."""
    a = draw_batch(pool_with(values, seed=seed, boundary="signal"), k, step=0)
    b = draw_batch(pool_with(values, seed=seed, boundary="signal"), k, step=0)
    assert a == b and len(set(a)) == len(a) == min(k, len(values))


def test_signal_keeps_drawing_records_past_the_band():
    """What ``target`` never does once the band is full: draw records at 0.85."""
    values = [0.5] * 200 + [0.85] * 200
    target, signal = set(), set()
    for s in range(10):
        target.update(draw_batch(pool_with(values, seed=s), 16, 0))
        signal.update(draw_batch(pool_with(values, seed=s, boundary="signal"), 16, 0))
    assert not target & set(range(200, 400)) and len(signal & set(range(200, 400))) > 20


def test_signal_share_splits_the_seats_between_weight_and_target():
    """``signal_share=0.5``: half the frontier seats by weight (some land on 0.85), half nearest 0.5; share 0
    is exactly ``target`` (same batch, same RNG use)."""
    values = [0.5] * 200 + [0.85] * 200
    far = [len(set(draw_batch(pool_with(values, seed=s, boundary="signal", signal_share=0.5, cold_fraction=0.0),
                              16, 0)) & set(range(200, 400))) for s in range(20)]
    assert 0 < max(far) <= 8 and sum(far) > 20
    for s in range(5):
        assert (draw_batch(pool_with(values, seed=s, boundary="signal", signal_share=0.0), 16, 0)
                == draw_batch(pool_with(values, seed=s), 16, 0))


def _buckets(values, children=()):
    """Seeds ``0..len(values)-1`` at ``values``; ``children``: (id, value) in the child group."""
    from verl_ext.pool.buckets import CHILD_GROUP, SEED_GROUP, ValueBuckets
    b = ValueBuckets(resolution=100, groups=2)
    for i, v in enumerate(values):
        b.insert(i, v, SEED_GROUP)
    for i, v in children:
        b.insert(i, v, CHILD_GROUP)
    return b


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(0, 1), min_size=1, max_size=60), visits=st.lists(st.integers(0, 8), min_size=60,
       max_size=60), m=st.integers(0, 70), p=st.sampled_from([0.0, 0.03, 0.1, 0.5]), seed=st.integers(0, 20))
def test_revisit_shift_takes_the_nearest_by_distance_plus_penalty(values, visits, m, p, seed):
    """The shifted walk returns min(m, n) distinct ids, and no record left out counts nearer than one taken."""
    from verl_ext.selection.frontier.draw import nearest
    b = _buckets(values)
    centre = b.bucket_of_value(0.5)

    def shift(rid):
        return round(p * visits[rid] * 100)

    out = nearest(b, centre, m, np.random.default_rng(seed), seed_shift=shift)
    assert len(out) == len(set(out)) == min(m, len(values))
    eff = {i: abs(b.bucket_of_value(v) - centre) + shift(i) for i, v in enumerate(values)}
    if out and len(out) < len(values):
        assert max(eff[i] for i in out) <= min(eff[i] for i in set(range(len(values))) - set(out))


def test_revisit_shift_moves_seeds_not_children_and_keeps_the_child_budget():
    from verl_ext.selection.frontier.draw import nearest
    # seeds 0-3 at 0.5 trained 5 times, seeds 4-7 at 0.6 fresh; children 8-11 at 0.5
    b = _buckets([0.5] * 4 + [0.6] * 4, children=[(j, 0.5) for j in range(8, 12)])
    visits = {i: (5 if i < 4 else 0) for i in range(12)}
    out = nearest(b, 50, 8, np.random.default_rng(0), seed_shift=lambda rid: round(0.05 * visits[rid] * 100))
    assert set(out) == set(range(4, 12))  # the trained seeds count 25 buckets farther: everything else first
    out = nearest(b, 50, 8, np.random.default_rng(0), child_budget=1,
                  seed_shift=lambda rid: round(0.05 * visits[rid] * 100))
    assert sum(1 for i in out if i >= 8) == 1 and len(out) == 8  # the budget holds; trained seeds fill the rest
    with pytest.raises(ValueError, match="exclude"):
        nearest(b, 50, 8, np.random.default_rng(0), exclude={1}, seed_shift=lambda rid: 0)


def test_revisit_penalty_spreads_the_target_draw_over_fresh_seeds():
    """Every seed measured at 0.5; half of them trained three times more: with the penalty the draw takes the
    others, without it the trained half is as likely as the rest."""
    def trained(**cfg):
        pool = pool_with([0.5] * 40, exploration="fixed", cold_fraction=0.0, **cfg)
        for step in range(3):
            ids = list(range(20))
            pool.withdraw(ids)
            pool.hand_out(ids, step)
            pool.feedback({r: (4, 8) for r in ids}, step)
            pool.reinsert(step, 20)
        return pool

    assert set(draw_batch(trained(revisit_penalty=0.05), 20, step=3)) == set(range(20, 40))
    assert set(draw_batch(trained(), 20, step=3)) & set(range(20))
