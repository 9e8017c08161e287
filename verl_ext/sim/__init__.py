"""Offline simulator for comparing selection strategies before spending GPU hours (see docs/sim.md).

A synthetic learner (item-response solve probabilities, learning only from mixed groups) driven through the real
``QueryPool``, the real strategies, the real lineage refresher and the real augmentation parent selection.
Pure Python + numpy (+ PyYAML for scenario files; matplotlib optional for the plot).
"""

from verl_ext.sim.config import (
    LearnerConfig,
    PromptsConfig,
    ScenarioConfig,
    SimAugmentConfig,
    TrainConfig,
    available_scenarios,
    load_scenario,
)
from verl_ext.sim.runner import SIM_STRATEGIES, RunResult, SimStrategy, build_sim_strategy, run_simulation
from verl_ext.sim.world import SyntheticWorld

__all__ = [
    "LearnerConfig", "PromptsConfig", "RunResult", "SIM_STRATEGIES", "ScenarioConfig", "SimAugmentConfig",
    "SimStrategy", "SyntheticWorld", "TrainConfig", "available_scenarios", "build_sim_strategy", "load_scenario",
    "run_simulation",
]
