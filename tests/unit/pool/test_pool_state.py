"""Checkpointing: a restored pool (through JSON) continues exactly like the original."""

import json

import numpy as np
import pytest

from verl_ext.pool import ConfigError, PoolConfig, QueryPool, ReinsertionConfig
from verl_ext.selection import UniformStrategy
from verl_ext.selection.frontier import draw_batch

CFG = dict(max_pool_size=60, archive_capacity=25, sampling_mode="mixed", estimator="beta",
           reinsertion=ReinsertionConfig(trigger="below_batch", rate=7, drop_solved_streak=2))


def run_steps(pool, rng, steps, start):
    """A synthetic training loop touching every path; returns a trace of everything observable."""
    trace = []
    for step in range(start, start + steps):
        pool.reinsert(step, batch_size=8)
        batch = draw_batch(pool, 8, step)
        keep, back = batch[:-1], batch[-1:]
        pool.release(back)
        outcome = {rid: (int(rng.integers(0, 5)), 4) for rid in keep}
        summary = pool.feedback(outcome, step)
        for rid in keep[:4]:
            if rid in pool:
                pool.add_child(f"child of {rid}", "a", "s", rid, float(rng.uniform(0.75, 1.33)), step)
        if step % 3 == 0:
            pool.add_seed(f"late {step}", "a", "s")
        live = [rid for rid in pool.available_ids().tolist()]
        if live:
            pool.set_ranking_value(live[0], float(rng.uniform()))
        trace.append((batch, summary.pass_rates, pool.drain_evicted(), pool.drain_changed(), pool.metrics()))
    return trace


def test_round_trip_mid_run_gives_identical_future():
    pool = QueryPool(PoolConfig(**CFG), seed=3)
    pool.add_seeds_bulk([[{"role": "user", "content": f"q{i}"}] for i in range(40)], ["a"] * 40, "s",
                        extras=[{"row": i} for i in range(40)])
    rng = np.random.default_rng(0)
    run_steps(pool, rng, steps=12, start=0)
    state = json.loads(json.dumps(pool.state_dict()))
    rng_state = rng.bit_generator.state

    restored = QueryPool(PoolConfig(**CFG), seed=999)  # the seed is overwritten by the state
    restored.load_state_dict(state)
    assert json.loads(json.dumps(restored.state_dict())) == state
    expected = run_steps(pool, rng, steps=10, start=12)
    rng.bit_generator.state = rng_state
    assert run_steps(restored, rng, steps=10, start=12) == expected
    restored._scored.check()


def test_uniform_strategy_round_trip():
    def fresh():
        pool = QueryPool(PoolConfig(), seed=0)
        pool.add_seeds_bulk([f"q{i}" for i in range(100)], ["a"] * 100, "s", priors=list(np.linspace(0, 1, 100)))
        return pool

    pool, strat = fresh(), UniformStrategy(seed=4)
    strat.select(pool, 5, step=0)
    pool_state, strat_state = json.loads(json.dumps(pool.state_dict())), json.loads(json.dumps(strat.state_dict()))
    pool2, strat2 = fresh(), UniformStrategy(seed=0)
    pool2.load_state_dict(pool_state)
    strat2.load_state_dict(strat_state)
    assert strat.select(pool, 7, step=1) == strat2.select(pool2, 7, step=1)


def test_load_errors():
    pool = QueryPool(PoolConfig(), seed=0)
    pool.add_seed("q", "a", "s")
    state = pool.state_dict()
    with pytest.raises(ValueError, match="schema_version"):
        QueryPool().load_state_dict({**state, "schema_version": 99})
    with pytest.raises(ConfigError, match="estimator"):
        QueryPool(PoolConfig(estimator="ema")).load_state_dict(state)
    broken = json.loads(json.dumps(state))
    broken["cold"] = []
    with pytest.raises(ValueError, match="inconsistent"):
        QueryPool().load_state_dict(broken)
    pool.add_seed("r", "a", "s")
    with pytest.raises(ValueError, match="max_pool_size"):
        QueryPool(PoolConfig(max_pool_size=1)).load_state_dict(pool.state_dict())


def test_schema_1_checkpoint_loads_into_buckets():
    """A pool saved before the value buckets (two heaps, schema 1) resumes: every pooled record is placed by its
    value again."""
    pool = QueryPool(PoolConfig(**CFG), seed=3)
    pool.add_seeds_bulk([f"q{i}" for i in range(20)], ["a"] * 20, "s", priors=[i / 20 for i in range(20)])
    state = json.loads(json.dumps(pool.state_dict()))
    pooled = [rid for row in state.pop("buckets") for rid in row[1:]]
    state.update(schema_version=1, layout={"hard_lo": pooled[:10], "hard_hi": [], "easy_lo": pooled[10:],
                                           "easy_hi": []})
    for key in ("resolution", "child_calibration"):
        state.pop(key)
    old = QueryPool(PoolConfig(**CFG), seed=0)
    old.load_state_dict(state)
    old._scored.check()
    assert sorted(old.available_ids().tolist()) == list(range(20))
    assert all(old._scored.locate(r)[1] == old._scored.bucket_of_value(r / 20) for r in range(20))


def test_a_config_field_newer_than_the_checkpoint_loads_quietly(caplog):
    """A checkpoint written before a config field existed holds no value for it: the field was at its default
    then, so no 'config changed' warning; a field that did change is named."""
    pool = QueryPool(PoolConfig(max_pool_size=60), seed=0)
    pool.add_seeds_bulk([f"q{i}" for i in range(10)], ["a"] * 10, "s")
    state = json.loads(json.dumps(pool.state_dict()))
    del state["config"]["signal_share"]
    with caplog.at_level("WARNING", logger="verl_ext.pool.state"):
        QueryPool(PoolConfig(max_pool_size=60), seed=0).load_state_dict(state)
    assert not caplog.records
    with caplog.at_level("WARNING", logger="verl_ext.pool.state"):
        QueryPool(PoolConfig(max_pool_size=60, signal_share=0.5), seed=0).load_state_dict(state)
    assert [r.getMessage() for r in caplog.records] == [
        "pool config changed on resume (signal_share); the current config applies"]
