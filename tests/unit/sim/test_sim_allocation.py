"""The allocator's rollout in the simulator: the same total as fixed n, responses moved to the prompts whose
estimate needs a larger group to mix, and no AR3PO stages on top of it."""

import numpy as np
import pytest

from verl_ext.allocation import AllocationConfig
from verl_ext.pool import PoolConfig, QueryPool
from verl_ext.sim import SIM_STRATEGIES, run_simulation
from verl_ext.sim.config import LearnerConfig, PromptsConfig
from verl_ext.sim.rollout import AllocatedRollout
from verl_ext.sim.runner import SimStrategy
from verl_ext.sim.world import SyntheticWorld

@pytest.mark.parametrize("name", ["uniform_alloc", "heapa_alloc", "heapa_signal_alloc"])
def test_allocated_runs_spend_fixed_ns_budget_in_uneven_groups(name, small_scenario):
    res = run_simulation(small_scenario(), name, seed=5)
    assert res.responses == 768 and res.responses_per_prompt == 8.0 and res.steps == 12
    assert res.same_outcome(run_simulation(small_scenario(), name, seed=5))


def test_the_allocation_follows_the_pools_estimates():
    rngs = [np.random.default_rng(s) for s in range(3)]
    world = SyntheticWorld(PromptsConfig(n_train=4, n_test=4, n_topics=1), LearnerConfig(drift_std=0.0), *rngs)
    pool = QueryPool(PoolConfig(max_pool_size=10), seed=0)
    ids = np.asarray(pool.add_seeds_bulk([f"p{i}" for i in range(4)], ["0"] * 4, "sim"))
    world.register(ids, np.zeros(4), np.zeros(4, dtype=np.int64), np.ones(4, dtype=bool))
    rollout = AllocatedRollout(AllocationConfig(), world, pool, n=8)
    first = rollout(ids, 0)  # nothing measured: one belief for all, fixed n
    assert first.sizes.tolist() == [8, 8, 8, 8]
    pool.take(ids.tolist(), 0)
    pool.feedback({int(ids[0]): (4, 8), int(ids[1]): (0, 8), int(ids[2]): (8, 8), int(ids[3]): (4, 8)}, 0)
    sizes = rollout(ids, 1).sizes
    assert sizes.sum() == 32 and sizes[1] > 8 and sizes[2] > 8 and sizes[0] < 8 and sizes[3] < 8


def test_stages_and_allocation_do_not_combine(monkeypatch, small_scenario):
    monkeypatch.setitem(SIM_STRATEGIES, "both", SimStrategy("uniform", ar3po={}, allocation={}))
    with pytest.raises(ValueError, match="each size the groups"):
        run_simulation(small_scenario(), "both", seed=0)


@pytest.mark.parametrize("name", ["reinforce_ada", "reinforce_ada_positive", "heapa_reinforce_ada"])
def test_reinforce_ada_samples_more_and_updates_on_groups_of_n(name, small_scenario):
    res = run_simulation(small_scenario(), name, seed=5)
    assert res.responses >= 768 and res.responses_per_prompt >= 8.0  # the budget runs out in fewer steps
    assert res.steps < 12 or res.responses_per_prompt == 8.0
    assert res.same_outcome(run_simulation(small_scenario(), name, seed=5))


def test_a_prompt_leaves_its_rounds_once_balanced_or_capped():
    from verl_ext.allocation import RoundsConfig
    from verl_ext.sim.rollout import RoundsRollout

    rngs = [np.random.default_rng(s) for s in range(3)]
    world = SyntheticWorld(PromptsConfig(n_train=3, n_test=4, n_topics=1), LearnerConfig(drift_std=0.0), *rngs)
    ids = np.arange(3)
    world.register(ids, np.array([0.0, 12.0, -12.0]), np.zeros(3, dtype=np.int64), np.ones(3, dtype=bool))
    draw = RoundsRollout(RoundsConfig(), world, n=8)(ids, 0)
    assert draw.sizes[1] == draw.sizes[2] == 32  # (almost) never / always solved: the cap
    assert draw.learn_sizes.tolist() == [8, 8, 8] and draw.learn_passes[0] == 4
    assert draw.learn_passes[1] == min(draw.passes[1], 4) and draw.learn_passes[2] == 8 - min(32 - draw.passes[2], 4)
