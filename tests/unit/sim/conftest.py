"""The small scenario several simulator tests run (200 prompts, batches of 8 x 8 for 12 steps), as a factory:
``small_scenario(train={...}, ...)`` merges each section over the small one."""

from __future__ import annotations

import pytest

from verl_ext.sim import ScenarioConfig

SMALL = {"name": "small", "prompts": {"n_train": 200, "n_test": 100, "n_topics": 2},
         "learner": {"learning_rate": 0.03},
         "train": {"batch_size": 8, "n": 8, "budget_rollouts": 8 * 8 * 12, "target_accuracy": 0.5, "eval_every": 4},
         "pool": {"max_pool_size": 300}}


@pytest.fixture
def small_scenario():
    def make(**sections) -> ScenarioConfig:
        return ScenarioConfig.from_dict({**SMALL, **{key: {**SMALL.get(key, {}), **value}
                                                      for key, value in sections.items()}})
    return make
