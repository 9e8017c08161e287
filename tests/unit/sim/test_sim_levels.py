"""``levels_no_transfer`` (issue 29): difficulty levels that are separate skills, as on the CPU task.

The qualitative property the scenario exists for, on a smaller copy (1,000 seeds, 32 prompts a step, 300 steps):
the ``target`` frontier stops training the easy levels once they pass ~0.75 and ends below uniform sampling on
every seed, while the ``signal`` draw keeps them and does not. Plus the learner extension it needs: topics taken
from the mixture component, per-topic learning rates, and scenarios without them unchanged.
"""

import numpy as np
import pytest

from verl_ext.pool import ConfigError
from verl_ext.sim import load_scenario, run_simulation
from verl_ext.sim.config import ScenarioConfig, with_overrides
from verl_ext.sim.world import SyntheticWorld

SMALL = ["prompts.n_train=1000", "pool.max_pool_size=1500", "train.batch_size=32", "train.budget_rollouts=76800"]


def final(cfg, strategy, seeds=(0, 1)):
    return np.array([run_simulation(cfg, strategy, seed).final_accuracy for seed in seeds])


def test_target_ends_below_uniform_where_levels_do_not_transfer_and_signal_does_not():
    base = with_overrides(load_scenario("levels_no_transfer"), SMALL)
    uniform = final(base, "uniform")
    target = final(base, "boundary")
    signal = final(with_overrides(base, ["pool.boundary=signal"]), "boundary")
    assert (target < uniform - 0.01).all()  # measured: -2.4 to -2.9 points on seeds 0-2
    assert (signal > target + 0.01).all()
    assert signal.mean() >= uniform.mean() - 0.002


def test_levels_are_the_mixture_components_and_learn_at_their_own_rate():
    cfg = load_scenario("levels_no_transfer")
    streams = [np.random.default_rng(s) for s in range(3)]
    world = SyntheticWorld(cfg.prompts, cfg.learner, *streams)
    means = [c["mean"] for c in cfg.prompts.difficulty]
    for topic, mean in enumerate(means):
        assert abs(world.seed_difficulty[world.seed_topic == topic].mean() - mean) < 0.5
    assert set(np.unique(world.test_topic)) == set(range(cfg.prompts.n_topics))
    ids = np.arange(cfg.prompts.n_train)
    world.register(ids, world.seed_difficulty, world.seed_topic, np.ones(len(ids), dtype=bool))
    before = world.ability.copy()
    easy, hard = ids[world.seed_topic == 0][:8], ids[world.seed_topic == 5][:8]
    world.learn(np.concatenate([easy, hard]), np.full(16, 4), 8)
    gained = world.ability - before - 0.0  # drift is part of it; the rates dominate at one step
    assert gained[0] > 10 * abs(gained[5])


def test_rates_must_match_the_topics_and_components_the_levels():
    data = load_scenario("levels_no_transfer").to_dict()
    data["learner"]["topic_rates"] = [1.0, 1.0]
    with pytest.raises(ConfigError, match="topic_rates"):
        ScenarioConfig.from_dict(data)
    data = load_scenario("levels_no_transfer").to_dict()
    data["prompts"]["n_topics"] = 5
    data["learner"]["topic_rates"] = [1.0] * 5
    with pytest.raises(ConfigError, match="topic_per_component"):
        ScenarioConfig.from_dict(data)


def test_scenarios_without_levels_are_unchanged():
    """The default learner takes the same streams and numbers as before the extension (values recorded then)."""
    cfg = load_scenario("default")
    world = SyntheticWorld(cfg.prompts, cfg.learner, *(np.random.default_rng(s) for s in range(3)))
    assert world.topic_rates is None
    plain = load_scenario("default").to_dict()
    plain["prompts"].pop("topic_per_component")
    plain["learner"].pop("topic_rates")
    again = SyntheticWorld(ScenarioConfig.from_dict(plain).prompts, cfg.learner,
                           *(np.random.default_rng(s) for s in range(3)))
    assert np.array_equal(world.seed_topic, again.seed_topic)
    assert np.array_equal(world.test_difficulty, again.test_difficulty)
