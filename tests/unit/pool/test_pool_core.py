"""QueryPool behaviour on small hand-built pools: cold queue, boundary sampling, in-flight, feedback, capacity,
lineage hooks and misuse errors."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import (
    PoolConfig,
    PoolFullError,
    QueryPool,
    RecordStateError,
    UnknownRecordError,
    child_initial_estimate,
)
from verl_ext.pool.errors import DuplicateRecordError
from verl_ext.selection.frontier import draw_batch


def scored_pool(values, seed=0, **cfg):
    """Paper-configured pool whose record i has ranking value values[i] (ids 0..n-1)."""
    pool = QueryPool(PoolConfig.paper(**{"max_pool_size": 1000, **cfg}), seed=seed)
    pool.add_seeds_bulk([f"q{i}" for i in range(len(values))], ["a"] * len(values), "src", priors=values)
    return pool


def test_cold_queue_is_fifo_and_served_first():
    pool = scored_pool([0.5, 0.6])
    cold = [pool.add_seed(f"c{i}", "a", "src") for i in range(3)]
    assert pool.status(cold[0]) == "cold" and pool.status(0) == "pooled"
    assert draw_batch(pool, 2, step=0) == cold[:2]
    batch = draw_batch(pool, 3, step=0)
    assert batch[0] == cold[2] and set(batch[1:]) == {0, 1}
    assert draw_batch(pool, 1, step=0) == []  # nothing left


def test_boundary_sampling_takes_the_records_nearest_the_split():
    values = [i / 10 for i in range(10)]  # hard = 0..4, easy = 5..9
    for seed in range(5):
        pool = QueryPool(PoolConfig.paper(), seed=seed)
        pool.add_seeds_bulk([f"q{i}" for i in range(10)], ["a"] * 10, "s", priors=values)
        assert set(draw_batch(pool, 1, step=0)) <= {4, 5}
        pool = QueryPool(PoolConfig.paper(), seed=seed)
        pool.add_seeds_bulk([f"q{i}" for i in range(10)], ["a"] * 10, "s", priors=values)
        batch = draw_batch(pool, 2, step=0)
        assert len(batch) == 2 and set(batch) <= {3, 4, 5, 6}
        pool._scored.check()


def test_mixed_mode_takes_half_from_the_easiest():
    values = [i / 10 for i in range(10)]
    pool = scored_pool(values, sampling_mode="mixed")
    batch = draw_batch(pool, 4, step=0)
    assert set(batch[:2]) == {9, 8} and set(batch[2:]) <= {2, 3, 4, 5}
    assert pool.counters()["sampled_extreme"] == 2 and pool.counters()["sampled_boundary"] == 2


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.integers(0, 100), min_size=1, max_size=40, unique=True),
    k=st.integers(1, 6),
    low_fraction=st.sampled_from([0.25, 0.5, 0.75]),
    seed=st.integers(0, 3),
)
def test_sampling_few_returns_nearest_split(values, k, low_fraction, seed):
    keys = [v / 100 for v in values]  # ten buckets apart: no ties at resolution 1000
    pool = QueryPool(PoolConfig.paper(low_fraction=low_fraction), seed=seed)
    pool.add_seeds_bulk([str(v) for v in values], ["a"] * len(values), "s", priors=keys)
    ranked = sorted(range(len(keys)), key=lambda i: keys[i])
    n_hard = int(low_fraction * len(keys))
    hard, easy = ranked[:n_hard][::-1], ranked[n_hard:]  # each nearest-the-split first
    need = min(k, len(keys))
    c = min(2 * need, len(keys))
    n_easy = min(len(easy), max((c + 1) // 2, c - len(hard)))
    allowed = set(easy[:n_easy]) | set(hard[: c - n_easy])
    batch = draw_batch(pool, k, step=0)
    assert len(batch) == need and len(set(batch)) == need and set(batch) <= allowed


def test_take_release_and_status():
    pool = scored_pool([0.2, 0.8])
    cold = [pool.add_seed(f"c{i}", "a", "src") for i in range(3)]
    assert pool.take([cold[2], 1], step=3) == [cold[2], 1]
    assert pool.status(1) == "in_flight" and pool.in_flight_ids() == [cold[2], 1]
    with pytest.raises(RecordStateError, match="not available"):
        pool.take([1], step=3)
    with pytest.raises(ValueError, match="duplicate"):
        pool.take([0, 0], step=3)
    pool.release([cold[2], 1])
    assert pool.status(1) == "pooled" and pool.status(cold[2]) == "cold"
    assert draw_batch(pool, 1, step=4) == [cold[2]]  # released cold records go to the front
    with pytest.raises(RecordStateError, match="not in flight"):
        pool.release([0])
    with pytest.raises(UnknownRecordError):
        pool.release([999])


def test_feedback_updates_archives_and_is_atomic():
    pool = QueryPool(PoolConfig(), seed=0)
    ids = [pool.add_seed(f"q{i}", "a", "s") for i in range(4)]
    batch = draw_batch(pool, 3, step=1)
    with pytest.raises(RecordStateError, match="not in flight"):
        pool.feedback({batch[0]: (1, 4), ids[3]: (1, 4)}, step=1)
    with pytest.raises(UnknownRecordError):
        pool.feedback({12345: (1, 4)}, step=1)
    for bad in [(5, 4), (1, 0), (-1, 4), (1.5, 4), "xx"]:
        with pytest.raises(ValueError):
            pool.feedback({batch[0]: bad}, step=1)
    assert pool.get(batch[0]).visits == 0  # nothing was applied
    summary = pool.feedback({batch[0]: (4, 4), batch[1]: (0, 4), batch[2]: (2, 4)}, step=1)
    assert summary.n_records == 3 and summary.n_rollouts == 12
    assert summary.mean_pass_rate == pytest.approx(0.5)
    assert summary.frac_all_correct == pytest.approx(1 / 3) and summary.frac_all_wrong == pytest.approx(1 / 3)
    assert summary.pass_rates == {batch[0]: 1.0, batch[1]: 0.0, batch[2]: 0.5}
    rec = pool.get(batch[2])
    assert (rec.status, rec.visits, rec.last_trained_step, rec.last_pass) == ("archived", 1, 1, 0.5)
    assert pool.archived_ids() == batch
    assert sorted(pool.drain_changed()) == sorted(batch) and pool.drain_changed() == []
    assert "feedback/mean_pass_rate" in summary.metrics()


def test_feedback_reports_prior_error_of_children():
    pool = scored_pool([0.75])
    child = pool.add_child("c", "a", "s", parent_id=0, difficulty_factor=1.25, step=1)
    assert pool.base_value(child) == pytest.approx(0.7)
    pool.take([child], step=2)
    summary = pool.feedback({child: (1, 2)}, step=2)
    assert summary.n_prior_checked == 1 and summary.prior_abs_error == pytest.approx(0.2)
    assert summary.prior_bias == pytest.approx(0.2)


def test_add_child_prior_depth_and_errors():
    pool = scored_pool([0.25])
    child = pool.add_child("c", "a", "s", 0, 1.2, step=5, extra={"why": "test"})
    rec = pool.get(child)
    assert (rec.origin, rec.parent_id, rec.depth, rec.created_step) == ("augmented", 0, 1, 5)
    assert rec.prior == pytest.approx(child_initial_estimate(0.25, 1.2)) and pool.status(child) == "pooled"
    grandchild = pool.add_child("g", "a", "s", child, 1.0, step=6)
    assert pool.get(grandchild).depth == 2
    with pytest.raises(UnknownRecordError, match="parent"):
        pool.add_child("c", "a", "s", 777, 1.0, step=5)
    with pytest.raises(ValueError, match="difficulty_factor"):
        pool.add_child("c", "a", "s", 0, 0.0, step=5)
    seed = pool.add_seed("cold", "a", "s")  # no value yet -> its child starts cold
    orphan = pool.add_child("c", "a", "s", seed, 1.0, step=5)
    assert pool.status(orphan) == "cold" and pool.counters()["added_child_unscored"] == 1


def test_capacity_eviction_rules():
    pool = scored_pool([0.1, 0.3, 0.9], max_pool_size=3)
    child = pool.add_child("c", "a", "s", 1, 1.0, step=0)  # prior 0.3: evicts the hardest (id 0)
    assert 0 not in pool and child in pool and pool.drain_evicted() == [0]
    hard_child = pool.add_child("c", "a", "s", 1, 1.33, step=0)  # prior 0.234 < every value: evicts itself
    assert hard_child not in pool and pool.drain_evicted() == [hard_child]
    seed = pool.add_seed("s", "a", "s")  # unscored: evicts the easiest (id 2)
    assert 2 not in pool and pool.status(seed) == "cold" and pool.drain_evicted() == [2]
    m = pool.metrics()
    assert m["pool/evicted_capacity_hard"] == 2 and m["pool/evicted_capacity_easy"] == 1 and m["pool/evicted"] == 3
    assert m["pool/size_live"] <= 3
    pool.add_seed("s2", "a", "s")
    pool.add_seed("s3", "a", "s")
    with pytest.raises(PoolFullError, match="capacity 3"):
        pool.add_seed("s4", "a", "s")
    with pytest.raises(PoolFullError):
        pool.add_seeds_bulk(["x"], ["a"], "s")
    assert pool.counters()["rejected_full"] == 2


def test_bulk_scored_load_beyond_capacity_keeps_the_easiest():
    pool = QueryPool(PoolConfig.paper(max_pool_size=2000, resolution=3000), seed=0)
    values = [(i * 7919 % 3000 + 0.5) / 3000 for i in range(3000)]  # one value per bucket
    ids = pool.add_seeds_bulk(["q"] * 3000, ["a"] * 3000, "s", priors=values)
    kept = sorted(range(3000), key=lambda i: values[i])[1000:]
    assert sorted(pool.available_ids().tolist()) == sorted(ids[i] for i in kept)
    assert len(pool.drain_evicted()) == 1000 and pool.metrics()["pool/evicted_capacity_hard"] == 1000
    pool._scored.check()


def test_in_flight_counts_towards_capacity_and_release_never_evicts():
    pool = QueryPool(PoolConfig(max_pool_size=2), seed=0)
    a = pool.add_seed("a", "a", "s")
    pool.add_seed("b", "a", "s")
    draw_batch(pool, 1, step=0)
    with pytest.raises(PoolFullError):
        pool.add_seed("c", "a", "s")
    pool.release([a])
    assert pool.num_available == 2 and pool.drain_evicted() == []


def test_archive_is_bounded_fifo():
    pool = QueryPool(PoolConfig(archive_capacity=2), seed=0)
    ids = [pool.add_seed(f"q{i}", "a", "s") for i in range(3)]
    draw_batch(pool, 3, step=0)
    pool.feedback({i: (1, 2) for i in ids}, step=0)
    assert pool.archived_ids() == ids[1:] and ids[0] not in pool
    assert pool.drain_evicted() == [ids[0]] and pool.metrics()["pool/evicted_archive_full"] == 1


def test_lineage_hooks():
    pool = scored_pool([0.2, 0.4, 0.6, 0.8])
    assert pool.ranking_value(0) == pool.base_value(0) == 0.2
    pool.set_ranking_value(0, 0.9)  # the hardest becomes the easiest
    assert pool.ranking_value(0) == 0.9 and pool.base_value(0) == 0.2
    assert pool._scored.locate(0) == (0, 900)
    pool._scored.check()
    with pytest.raises(ValueError):
        pool.set_ranking_value(0, 1.2)
    pool.take([0], step=1)
    pool.set_ranking_value(0, 0.3)  # in flight: just recorded
    pool.feedback({0: (1, 4)}, step=1)
    assert pool.ranking_value(0) == 0.25  # feedback resets the override
    pool.set_ranking_value(0, 0.5)  # archived: recorded, used on reinsertion
    assert pool.ranking_value(0) == 0.5
    cold = pool.add_seed("c", "a", "s")
    assert pool.base_value(cold) is None and pool.ranking_value(cold) is None
    pool.set_ranking_value(cold, 0.45)  # a cold record with a refreshed value becomes scored
    assert pool.status(cold) == "pooled"
    with pytest.raises(UnknownRecordError):
        pool.base_value(404)


def test_available_ids_and_positions_agree():
    pool = scored_pool([0.3, 0.7, 0.5])
    pool.add_seed("c", "a", "s")
    ids = pool.available_ids()
    assert sorted(ids.tolist()) == [0, 1, 2, 3] and pool.num_available == 4
    assert pool.ids_at(range(4)) == ids.tolist()


def test_misuse_errors():
    pool = QueryPool(PoolConfig(), seed=0)
    pool.add_seed("q", "a", "s", record_id=10)
    with pytest.raises(DuplicateRecordError):
        pool.add_seed("q", "a", "s", record_id=10)
    assert pool.add_seed("q", "a", "s") == 11  # automatic ids never collide with explicit ones
    with pytest.raises(ValueError, match="prompt"):
        pool.add_seed({"not": "a prompt"}, "a", "s")
    with pytest.raises(ValueError, match="row 1"):
        pool.add_seeds_bulk(["q", 3], ["a", "a"], "s")
    with pytest.raises(ValueError, match="differ in length"):
        pool.add_seeds_bulk(["q"], ["a", "b"], "s")
    with pytest.raises(DuplicateRecordError):
        pool.add_seeds_bulk(["q", "r"], ["a", "b"], "s", record_ids=[1, 1])
    with pytest.raises(ValueError, match="k must be"):
        draw_batch(pool, -1, step=0)
    with pytest.raises(UnknownRecordError, match="not in the pool"):
        pool.get(99)
    assert 10 in pool and 99 not in pool and len(pool) == 2


def test_numpy_ids_are_accepted_and_stored_as_ints():
    pool = scored_pool([0.2, 0.4, 0.6])
    ids = pool.available_ids()[:2]  # numpy int64
    pool.take(ids, step=0)
    pool.feedback({ids[0]: (1, 2)}, step=0)
    pool.release(ids[1:])
    json.dumps(pool.state_dict())
    with pytest.raises(ValueError, match="record ids are ints"):
        pool.take(["0"], step=0)


def test_metrics_are_floats_and_json_safe():
    pool = scored_pool([0.2, 0.8])
    pool.add_seed("c", "a", "s")
    m = pool.metrics()
    for key in ("pool/size_cold", "pool/size_scored", "pool/size_in_flight", "pool/size_archive", "pool/center",
                "pool/added_seed", "pool/evicted_capacity_hard", "pool/reinserted", "pool/sampled_boundary",
                "pool/child_invalid_rate", "pool/frac_near_target"):
        assert key in m
    assert m["pool/size_cold"] == 1 and m["pool/size_scored"] == 2 and m["pool/center"] == 0.8  # the median (paper mode)
    assert m["pool/value_min"] == 0.2 and m["pool/value_max"] == pytest.approx(0.801)
    assert all(isinstance(v, float) for v in m.values())
    json.dumps(m)
