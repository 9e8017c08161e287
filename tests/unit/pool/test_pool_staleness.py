"""Late feedback (an asynchronous trainer's): each estimate says which step's policy produced it
(``PromptRecord.measured_step``), and ``PoolConfig.stale_discount`` weighs an outcome heard d steps after its
selection by ``stale_discount ** d``."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_ext.pool import (
    BetaEstimator,
    EmaEstimator,
    LastEstimator,
    PoolConfig,
    PromptRecord,
    QueryPool,
    ReinsertionConfig,
)
from verl_ext.sim import ScenarioConfig, run_simulation


def _rec():
    return PromptRecord(0, "q", "a", "s")


@pytest.mark.parametrize("est", [LastEstimator(), EmaEstimator(alpha=0.5), BetaEstimator(decay=0.5)])
def test_a_first_measurement_counts_whole_and_weight_one_is_the_plain_update(est):
    weighed, plain = _rec(), _rec()
    est.update(weighed, 3, 4, weight=0.25)
    est.update(plain, 3, 4)
    assert weighed.stat == plain.stat  # nothing to weigh the first outcome against
    est.update(weighed, 0, 4, weight=1.0)
    est.update(plain, 0, 4)
    assert weighed.stat == plain.stat


def test_a_weighed_outcome_moves_each_estimate_less():
    last, rec = LastEstimator(), _rec()
    last.update(rec, 4, 4)
    last.update(rec, 0, 4, weight=0.25)
    assert last.value(rec) == pytest.approx(0.75)  # 0.25 * 0 + 0.75 * 1
    ema, rec = EmaEstimator(alpha=0.5), _rec()
    ema.update(rec, 4, 4)
    ema.update(rec, 0, 4, weight=0.5)
    assert ema.value(rec) == pytest.approx(0.75)  # alpha 0.5 * 0.5
    beta, rec = BetaEstimator(decay=1.0, alpha0=1.0, beta0=1.0), _rec()
    beta.update(rec, 4, 4)  # (5, 1)
    beta.update(rec, 0, 4, weight=0.5)  # two pseudo-failures, not four
    assert rec.stat == pytest.approx((5.0, 3.0))


def _pool(discount=1.0, estimator="last"):
    pool = QueryPool(PoolConfig(max_pool_size=50, stale_discount=discount, estimator=estimator,
                                reinsertion=ReinsertionConfig(trigger="always")), seed=0)
    ids = pool.add_seeds_bulk([f"q{i}" for i in range(4)], ["a"] * 4, "s")
    return pool, list(ids)


def _measure(pool, results, step, selected_at=None):
    pool.take(list(results), step=step)
    return pool.feedback(results, step, selected_at)


def test_the_record_keeps_the_step_that_selected_its_measurement():
    pool, ids = _pool()
    _measure(pool, {ids[0]: (4, 4), ids[1]: (2, 4)}, step=5, selected_at={ids[0]: 3})
    assert pool.get(ids[0]).measured_step == 3 and pool.get(ids[0]).last_trained_step == 5
    assert pool.get(ids[1]).measured_step == 5  # no selection step given: heard when selected (synchronous)
    assert pool.get(ids[2]).measured_step is None  # never measured


def test_without_a_discount_a_late_outcome_counts_whole():
    late, _ = _pool()
    sync, ids = _pool()
    for pool, selected in ((late, {ids[0]: 1}), (sync, None)):
        _measure(pool, {ids[0]: (4, 4)}, step=2, selected_at=selected)
        pool.reinsert(2, 4)
        _measure(pool, {ids[0]: (0, 4)}, step=6, selected_at={ids[0]: 2} if selected else None)
    assert late.measured_value(ids[0]) == sync.measured_value(ids[0]) == 0.0


def test_a_discount_weighs_an_outcome_by_its_delay():
    pool, ids = _pool(discount=0.5)
    _measure(pool, {ids[0]: (4, 4)}, step=2)
    pool.reinsert(2, 4)
    _measure(pool, {ids[0]: (0, 4)}, step=6, selected_at={ids[0]: 4})  # 2 steps late: weight 0.25
    assert pool.measured_value(ids[0]) == pytest.approx(0.75)


def test_a_selection_after_the_hearing_step_is_refused_before_anything_changes():
    pool, ids = _pool()
    pool.take([ids[0]], step=3)
    with pytest.raises(ValueError, match="selected after step 3"):
        pool.feedback({ids[0]: (1, 4)}, 3, {ids[0]: 4})
    assert pool.get(ids[0]).visits == 0 and pool.status(ids[0]) == "in_flight"


def test_the_measured_step_round_trips_and_a_checkpoint_without_it_loads():
    pool, ids = _pool()
    _measure(pool, {ids[0]: (4, 4)}, step=5, selected_at={ids[0]: 3})
    state = json.loads(json.dumps(pool.state_dict()))
    again = QueryPool(PoolConfig(max_pool_size=50, estimator="last"), seed=0)
    again.load_state_dict(state)
    assert again.get(ids[0]).measured_step == 3
    assert state["record_fields"][-1] == "measured_step"  # written before it: the rows lack the last field
    state["record_fields"] = state["record_fields"][:-1]
    state["records"] = [row[:-1] for row in state["records"]]
    old = QueryPool(PoolConfig(max_pool_size=50, estimator="last"), seed=0)
    old.load_state_dict(state)
    assert old.get(ids[0]).measured_step is None and old.measured_value(ids[0]) == 1.0
    state["record_fields"] = state["record_fields"][:-1]  # two fields short: not this code's checkpoint
    with pytest.raises(ValueError, match="record fields"):
        QueryPool(PoolConfig(max_pool_size=50, estimator="last"), seed=0).load_state_dict(state)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3)), min_size=1, max_size=12),
       st.sampled_from([0.3, 0.7]), st.sampled_from(["last", "ema"]))
def test_a_late_outcome_moves_the_estimate_towards_it_by_its_weight(outcomes, discount, estimator):
    """Whatever the delays: a discounted estimate moves towards the new outcome, never past it, and by the
    undiscounted move times ``discount ** delay``."""
    pool, ids = _pool(discount, estimator)
    alpha = 1.0 if estimator == "last" else 0.5
    step = 0
    for passes, delay in outcomes:
        step += delay + 1
        before, p = pool.measured_value(ids[0]), passes / 8
        _measure(pool, {ids[0]: (passes, 8)}, step, {ids[0]: step - delay})
        pool.reinsert(step, 4)
        after = pool.measured_value(ids[0])
        if before is None:
            assert after == p
        else:
            assert min(before, p) - 1e-12 <= after <= max(before, p) + 1e-12
            assert after - before == pytest.approx(alpha * discount ** delay * (p - before), abs=1e-12)


def _scenario(**pool) -> ScenarioConfig:
    return ScenarioConfig.from_dict({
        "name": "stale", "prompts": {"n_train": 300, "n_test": 200, "n_topics": 2},
        "train": {"batch_size": 16, "n": 8, "budget_rollouts": 16 * 8 * 30, "feedback_delay": 2},
        "pool": {"max_pool_size": 450, "reinsertion": {"trigger": "always"}, **pool},
    })


def test_the_simulator_hands_the_pool_its_selection_steps():
    base = run_simulation(_scenario(), "heapa", seed=1)
    assert run_simulation(_scenario(stale_discount=1.0), "heapa", seed=1).same_outcome(base)
    assert not run_simulation(_scenario(stale_discount=0.5), "heapa", seed=1).same_outcome(base)
