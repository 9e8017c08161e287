"""Exploration of never-measured records (issue 23): the greedy (default) and adaptive cold shares, the re-visit
bound, the coverage metrics, and their checkpoints."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import ConfigError, PoolConfig, QueryPool
from verl_ext.pool.coverage import ColdYield, SelectionWindow
from verl_ext.selection.frontier import adaptive_cold_share, cold_share, draw_batch, greedy_cold_share


def cold_pool(n=200, seed=0, **cfg):
    pool = QueryPool(PoolConfig(**{"max_pool_size": 10_000, **cfg}), seed=seed)
    pool.add_seeds_bulk([f"q{i}" for i in range(n)], ["a"] * n, "s")
    return pool


def train(pool, k, step, passes=4, n=8):
    ids = draw_batch(pool, k, step)
    pool.feedback({r: (passes, n) for r in ids}, step)
    pool.reinsert(step, k)
    return ids


@given(frontier=st.integers(0, 10_000), k=st.integers(1, 512), batches=st.floats(0, 100),
       floor=st.floats(0, 1))
def test_adaptive_share_stays_in_floor_one_and_falls_with_the_frontier(frontier, k, batches, floor):
    share = adaptive_cold_share(frontier, k, batches, floor)
    assert floor <= share <= 1.0
    assert adaptive_cold_share(frontier + k, k, batches, floor) <= share
    if frontier >= batches * k:
        assert share == floor


def test_adaptive_explores_while_the_frontier_is_thin_and_falls_to_the_floor():
    pool = cold_pool(400, exploration="adaptive", frontier_batches=2.0)
    k = 16
    assert cold_share(pool, k) == 1.0  # nothing measured: every seat explores
    train(pool, k, 0)  # 16 records measured at 4/8: all in the frontier band
    assert pool.frontier_size() == 16 and cold_share(pool, k) == pytest.approx(1 - 16 / 32)
    batch = draw_batch(pool, k, 1)
    assert sum(pool.get(r).stat is None for r in batch) == 8
    pool.feedback({r: (4, 8) for r in batch}, 1)
    pool.reinsert(1, k)
    assert pool.frontier_size() == 24 and cold_share(pool, k) == pytest.approx(0.25)  # the floor (cold_fraction)
    for step in range(2, 6):
        train(pool, k, step)
    assert cold_share(pool, k) == 0.25 and pool.metrics()["pool/cold_share_drawn"] == 0.25


def test_fixed_mode_keeps_cold_fraction_and_paper_is_unchanged():
    pool = cold_pool(400, exploration="fixed", cold_fraction=0.25)
    train(pool, 16, 0)
    assert cold_share(pool, 16) == 0.25
    assert sum(pool.get(r).stat is None for r in draw_batch(pool, 16, 1)) == 4
    paper = PoolConfig.paper()
    assert paper.cold_fraction == 1.0 and paper.exploration == PoolConfig().exploration
    assert PoolConfig().exploration == "greedy"  # issue 23: ties or wins everywhere in the simulator (docs/pool.md)


@given(better=st.integers(0, 10_000), k=st.integers(0, 512), floor=st.floats(0, 1))
def test_greedy_share_stays_in_floor_one_falls_with_better_picks_and_is_the_floor_when_they_fill_the_batch(
        better, k, floor):
    share = greedy_cold_share(better, k, floor)
    assert floor <= share <= 1.0
    assert greedy_cold_share(better + 1, k, floor) <= share
    if better >= (1.0 - floor) * k:  # the frontier fills every seat the floor leaves with better-than-cold picks
        assert share == pytest.approx(floor)
    if k and better < (1.0 - floor) * k:  # exactly the seats the frontier cannot fill that way go cold
        assert share == pytest.approx(1.0 - better / k)


@given(xs=st.lists(st.floats(0, 0.5), min_size=1, max_size=60), decay=st.floats(0, 0.999))
def test_cold_yield_is_a_discounted_mean_and_round_trips(xs, decay):
    y = ColdYield(decay)
    assert y.mean() is None
    for x in xs:
        y.observe(x)
    assert min(xs) - 1e-12 <= y.mean() <= max(xs) + 1e-12
    twin = ColdYield()
    twin.load_state_dict(y.state_dict())
    assert twin.mean() == y.mean() and twin.decay == y.decay
    if decay == 0:
        assert y.mean() == xs[-1]


def test_cold_yield_rejects_a_decay_outside_zero_one():
    with pytest.raises(ValueError, match="decay"):
        ColdYield(1.0)


def test_greedy_explores_exactly_when_the_frontier_has_no_pick_better_than_a_cold_draw():
    pool = QueryPool(PoolConfig(max_pool_size=10_000, exploration="greedy"), seed=0)
    # 100 seeds already measured as nearly solved (priors) and 300 never measured
    pool.add_seeds_bulk([f"s{i}" for i in range(100)], ["a"] * 100, "s", priors=[0.95] * 100)
    pool.add_seeds_bulk([f"c{i}" for i in range(300)], ["a"] * 300, "s")
    k = 16
    assert pool.better_than_cold() is None and cold_share(pool, k) == 0.25  # nothing known of cold draws yet
    ids = draw_batch(pool, k, 0)
    cold = [r for r in ids if pool.get(r).stat is None and pool.get(r).prior is None]
    assert len(cold) == 4
    pool.feedback({r: ((4, 8) if r in cold else (8, 8)) for r in ids}, 0)  # cold draws land on the target
    pool.reinsert(0, k)
    m = pool.metrics()
    assert m["pool/cold_distance"] == 0.0 and m["pool/better_than_cold"] == 4
    assert cold_share(pool, k) == pytest.approx(1 - 4 / k)  # 12 seats would go to records worse than a cold draw
    batch = draw_batch(pool, k, 1)
    assert sum(pool.get(r).stat is None for r in batch) == 12
    pool.feedback({r: (0, 8) for r in batch}, 1)  # cold draws come back hopeless: expected farther now ...
    pool.reinsert(1, k)
    assert 0.3 < pool.metrics()["pool/cold_distance"] < 0.5
    assert cold_share(pool, k) > 0.25  # ... but still nearer than anything measured
    pool.add_seeds_bulk([f"m{i}" for i in range(20)], ["a"] * 20, "s", priors=[0.5] * 20)
    assert pool.better_than_cold() >= 20 and cold_share(pool, k) == 0.25  # the frontier fills the batch again


def test_greedy_counts_children_as_the_frontier_draw_would_and_median_keeps_the_floor():
    pool = QueryPool(PoolConfig(max_pool_size=10_000), seed=0)  # the default rule
    pool.add_seeds_bulk([f"s{i}" for i in range(100)], ["a"] * 100, "s", priors=[0.95] * 100)
    pool.add_seeds_bulk([f"c{i}" for i in range(300)], ["a"] * 300, "s")
    ids = draw_batch(pool, 16, 0)
    cold = [r for r in ids if pool.get(r).prior is None]
    pool.feedback({r: ((4, 8) if r in cold else (8, 8)) for r in ids}, 0)
    pool.reinsert(0, 16)
    assert pool.better_than_cold(16) == 4 and cold_share(pool, 16) == 0.75
    median = QueryPool(PoolConfig(max_pool_size=10_000, boundary="median"), seed=0)
    median.load_state_dict(pool.state_dict())
    assert cold_share(median, 16) == 0.25  # the median draw is not centred on the target: the floor
    for j in range(12):  # children ranked at 0.5 (their parent's measured value)
        pool.add_child(f"k{j}", "a", "s", cold[0], 1.0, 0)
    # 4 seeds + 8 children (max_child_fraction 0.5 of 16): the draw fills 12 seats better than a cold draw
    assert pool.better_than_cold(16) == 12 and pool.better_than_cold() == 16
    assert cold_share(pool, 16) == 0.25


def test_revisit_penalty_counts_often_trained_seeds_as_farther():
    pool = cold_pool(400, exploration="greedy", revisit_penalty=0.1)
    train(pool, 16, 0)  # 16 seeds at 4/8, each trained once; cold draws measured on the target (d = 0)
    assert pool.better_than_cold(16) == 0 and cold_share(pool, 16) == 1.0  # 0.1 farther than a fresh cold draw
    plain = cold_pool(400, exploration="greedy")
    train(plain, 16, 0)
    assert plain.better_than_cold(16) == 16 and cold_share(plain, 16) == 0.25


def test_greedy_is_the_fixed_share_while_the_measured_frontier_is_rich():
    pool = cold_pool(400, exploration="greedy")
    for step in range(3):
        train(pool, 16, step)  # everything measured lands at 4/8: the frontier holds every scored seed
    assert pool.better_than_cold() >= 16 and cold_share(pool, 16) == 0.25


@pytest.mark.parametrize("bad", [{"exploration": "more"}, {"frontier_band": 1.5}, {"frontier_batches": -1},
                                 {"max_window_visits": 0}, {"window_seat": "any"}, {"metrics_window": 0},
                                 {"revisit_penalty": -0.1}])
def test_bad_exploration_knobs_name_the_field(bad):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        PoolConfig(**bad)


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 12), limit=st.integers(1, 3), window=st.integers(1, 6),
       exploration=st.sampled_from(["fixed", "adaptive", "greedy"]), seed=st.integers(0, 9))
def test_visits_per_window_are_bounded_while_cold_records_remain(k, limit, window, exploration, seed):
    pool = cold_pool(600, seed=seed, exploration=exploration, max_window_visits=limit, metrics_window=window)
    history = []
    for step in range(25):
        if len(pool._cold) < k:  # the bound holds only while never-measured records can take the seats
            break
        ids = train(pool, k, step)
        assert len(ids) == k and len(set(ids)) == k
        history.append(ids)
        recent = [r for batch in history[-window:] for r in batch]
        assert max(recent.count(r) for r in set(recent)) <= limit
        assert pool.metrics()["pool/window_max_visits"] <= limit


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 10), limit=st.integers(1, 3), window=st.integers(1, 6),
       boundary=st.sampled_from(["target", "signal", "progress"]), seed=st.integers(0, 9))
def test_the_bound_holds_after_the_cold_queue_is_empty(k, limit, window, boundary, seed):
    # At most k * window / limit records are saturated at once, so a pool this large always has k others.
    n = k * (window // limit + 2)
    pool = cold_pool(n, seed=seed, boundary=boundary, max_window_visits=limit, metrics_window=window)
    history = []
    for step in range(n // k + 3 * window + 5):
        ids = draw_batch(pool, k, step)
        pool.feedback({r: (r % 9, 8) for r in ids}, step)  # spread pass rates: the frontier prefers some records
        pool.reinsert(step, k)
        assert len(ids) == k and len(set(ids)) == k
        history.append(ids)
        recent = [r for batch in history[-window:] for r in batch]
        assert max(recent.count(r) for r in set(recent)) <= limit
    assert pool.num_cold == 0
    if limit < window:  # the bound binds: the frontier's favourites came back and were redrawn
        assert pool.metrics()["pool/revisit_cap_redraws"] > 0


@settings(max_examples=30, deadline=None)
@given(k=st.integers(2, 12), limit=st.integers(1, 2), seed=st.integers(0, 9))
def test_frontier_first_gives_a_bounded_seat_to_a_measured_record_while_one_is_free(k, limit, seed):
    window = 4
    pool = cold_pool(600, seed=seed, max_window_visits=limit, metrics_window=window, window_seat="frontier")
    history = []
    for step in range(20):
        before = pool.metrics()
        ids = draw_batch(pool, k, step)
        pool.feedback({r: (r % 9, 8) for r in ids}, step)
        pool.reinsert(step, k)
        after = pool.metrics()
        assert len(ids) == k and len(set(ids)) == k
        history.append(ids)
        recent = [r for batch in history[-window:] for r in batch]
        assert max(recent.count(r) for r in set(recent)) <= limit
        swaps = after["pool/revisit_cap_swaps"] - before["pool/revisit_cap_swaps"]
        if step >= window + 1:  # measured records outside the window exist (far more than k): they take the seats
            assert swaps == 0
    assert pool.metrics()["pool/revisit_cap_redraws"] > 0


def test_cold_first_and_frontier_first_send_a_bounded_seat_to_different_places():
    runs = {}
    for seat in ("cold", "frontier"):
        pool = cold_pool(400, seed=3, max_window_visits=1, metrics_window=3, window_seat=seat)
        for step in range(12):
            ids = draw_batch(pool, 8, step)
            pool.feedback({r: (r % 9, 8) for r in ids}, step)
            pool.reinsert(step, 8)
        runs[seat] = pool.metrics()
    assert runs["cold"]["pool/revisit_cap_swaps"] > 0 and runs["frontier"]["pool/revisit_cap_redraws"] > 0
    assert runs["frontier"]["pool/size_cold"] > runs["cold"]["pool/size_cold"]


def test_a_pool_too_small_for_the_bound_still_fills_the_batch():
    pool = cold_pool(12, max_window_visits=1, metrics_window=4)
    for step in range(6):
        ids = train(pool, 8, step)
        assert len(ids) == 8 and len(set(ids)) == 8
    # 12 records, 8 seats a step: from step 2 on, at most the 4 untrained in the last step are not saturated
    assert pool.metrics()["pool/window_max_visits"] > 1


def test_window_metrics_count_distinct_records_and_visits():
    w = SelectionWindow(steps=2)
    w.add(0, [1, 2])
    w.add(1, [1, 3])
    assert w.metrics() == {"pool/window_distinct": 3.0, "pool/window_visits": 4 / 3, "pool/window_max_visits": 2.0}
    w.add(2, [4])  # step 0 leaves the window
    assert w.metrics()["pool/window_distinct"] == 3.0 and w.saturated(1) == {1, 3, 4} and not w.saturated(2)
    twin = SelectionWindow(steps=2)
    twin.load_state_dict(w.state_dict())
    assert twin.metrics() == w.metrics()


def test_coverage_metrics_reach_the_log():
    pool = cold_pool(100, exploration="adaptive")
    train(pool, 10, 0)
    m = pool.metrics()
    assert m["pool/measured"] == 10 and m["pool/measured_share"] == pytest.approx(0.1)
    assert m["pool/frontier_size"] == 10 and m["pool/cold_share_drawn"] == 1.0
    assert m["pool/window_distinct"] == 10 and m["pool/window_visits"] == 1.0


@pytest.mark.parametrize("exploration", ["adaptive", "greedy"])
def test_checkpoint_round_trip_and_old_checkpoints_load(exploration):
    cfg = dict(exploration=exploration, max_window_visits=2, metrics_window=4)
    pool = cold_pool(300, seed=3, **cfg)
    for step in range(6):
        train(pool, 12, step)
    state = pool.state_dict()
    measured = pool.metrics()["pool/measured"]
    twin = QueryPool(PoolConfig(max_pool_size=10_000, **cfg), seed=99)
    twin.load_state_dict(state)
    assert twin.metrics() == pool.metrics()
    assert [train(twin, 12, s) for s in range(6, 9)] == [train(pool, 12, s) for s in range(6, 9)]
    old = dict(state)  # a checkpoint written before issue 23
    for key in ("window", "last_cold", "cold_yield"):
        old.pop(key)
    old["counters"] = {k: v for k, v in old["counters"].items() if k != "revisit_cap_swaps"}
    legacy = QueryPool(PoolConfig(max_pool_size=10_000), seed=0)
    legacy.load_state_dict(old)
    assert legacy.metrics()["pool/window_distinct"] == 0.0
    assert legacy.metrics()["pool/measured"] == measured  # recounted from the records
    assert legacy.metrics()["pool/cold_distance"] == -1.0 and cold_share(legacy, 12) == 0.25
