"""Simulator runs: determinism, the oracle as an upper reference, no learning without mixed groups, the real
pool/lineage/augmentation code paths."""

import numpy as np
import pytest

from verl_ext.selection import Strategy
from verl_ext.sim import SIM_STRATEGIES, ScenarioConfig, run_simulation
from verl_ext.sim.runner import build_sim_strategy

TINY = {
    "name": "tiny",
    "prompts": {"n_train": 300, "n_test": 200, "n_topics": 2},
    "learner": {"learning_rate": 0.03},
    "train": {"batch_size": 16, "n": 8, "budget_rollouts": 16 * 8 * 60, "target_accuracy": 0.55},
    "pool": {"max_pool_size": 450, "reinsertion": {"trigger": "always"}},
    "augment": {"parents": {"parent_selection": "band", "band_low": 0.05, "band_high": 0.95, "num_parents": 8,
                            "num_per_prompt": 2}},
}


def tiny(**sections):
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in TINY.items()}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return ScenarioConfig.from_dict(data)


def test_identical_seeds_give_identical_runs():
    cfg = tiny()
    for name in ("heapa", "hive", "mopps"):
        a, b = run_simulation(cfg, name, seed=3), run_simulation(cfg, name, seed=3)
        assert a.same_outcome(b)
    assert not run_simulation(cfg, "uniform", 3).same_outcome(run_simulation(cfg, "uniform", 4))
    # the data depends on the seed only: every strategy starts from the same test accuracy
    assert run_simulation(cfg, "uniform", 3).accuracy[0] == run_simulation(cfg, "oracle", 3).accuracy[0]


def test_oracle_needs_no_more_rollouts_than_uniform():
    cfg = tiny()

    def mean_cost(name):
        runs = [run_simulation(cfg, name, seed) for seed in range(4)]
        return np.mean([r.rollouts_to_target or r.rollouts[-1] for r in runs]), runs

    oracle, oracle_runs = mean_cost("oracle")
    uniform, uniform_runs = mean_cost("uniform")
    assert oracle <= uniform
    assert np.mean([r.zero_variance_share for r in oracle_runs]) < np.mean(
        [r.zero_variance_share for r in uniform_runs])


class SolvedOnly(Strategy):
    """Test-only: picks only prompts the policy already solves with certainty (true pass rate exactly 1)."""

    name = "solved_only"

    def __init__(self, world):
        self.world = world

    def select(self, pool, k, step):
        ids = pool.available_ids()
        solved = ids[self.world.solve_prob(ids) == 1.0][:k]
        return pool.take(solved.tolist(), step)


def test_training_only_on_solved_prompts_never_learns():
    cfg = tiny(prompts={"difficulty": [{"weight": 0.5, "mean": -60.0, "std": 0.0},
                                       {"weight": 0.5, "mean": 1.0, "std": 1.0}],
                        "test_difficulty": [{"weight": 1.0, "mean": 1.0, "std": 1.0}]},
               learner={"drift_std": 0.0})
    res = run_simulation(cfg, "solved_only", seed=0, strategy_factory=lambda world, seed: SolvedOnly(world))
    assert res.rollouts[-1] >= cfg.train.budget_rollouts
    assert res.zero_variance_share == 1.0
    assert len(set(res.accuracy)) == 1  # not one step of progress
    assert res.rollouts_to_target is None


def test_heapa_goes_through_add_child_and_lineage():
    res = run_simulation(tiny(), "heapa", seed=1)
    aug = res.augment
    assert aug["accepted"] > 0 and res.pool_metrics["pool/added_child"] == aug["accepted"]
    assert 0 < aug["linked"] <= aug["accepted"]
    assert aug["teacher_calls"] + aug["parse_failed"] == aug["generations"]
    assert aug["accepted"] + aug["rejected"] + aug["dropped_parent_gone"] <= aug["teacher_calls"]
    plain = run_simulation(tiny(), "heapa_nolineage", seed=1)
    assert plain.augment["linked"] == 0 and plain.augment["accepted"] > 0
    assert run_simulation(tiny(), "boundary", seed=1).augment == {}


def test_every_simulator_strategy_runs_and_counts_its_costs():
    cfg = tiny(train={"budget_rollouts": 16 * 8 * 5})
    for name in SIM_STRATEGIES:
        res = run_simulation(cfg, name, seed=0)
        if SIM_STRATEGIES[name].ar3po is not None:  # staged groups: fewer responses a step, so more steps
            assert res.steps > 5 and 16 * 8 * 5 <= res.rollouts[-1] == res.responses < 16 * 8 * 6
            assert len(res.accuracy) == res.steps + 1
            continue
        if SIM_STRATEGIES[name].rounds is not None:  # Reinforce-Ada's rounds: more responses a step, fewer steps
            assert res.steps < 5 and 16 * 8 * 5 <= res.rollouts[-1] == res.responses <= 16 * 8 * 5 + 16 * 32
            assert len(res.accuracy) == res.steps + 1
            continue
        if SIM_STRATEGIES[name].dynamic:  # DAPO's refills: more groups a step, fewer steps, one batch over at most
            assert res.steps <= 5 and 16 * 8 * 5 <= res.rollouts[-1] == res.responses < 16 * 8 * 6
            assert len(res.accuracy) == res.steps + 1
            continue
        assert res.steps == 5 and res.rollouts[-1] == 16 * 8 * 5 and len(res.accuracy) == 6
        assert (res.verify_forwards > 0) == name.startswith("hive")
    with pytest.raises(ValueError, match="unknown simulator strategy"):
        run_simulation(cfg, "nope")


def test_scenario_strategy_options_reach_the_strategy():
    cfg = tiny(train={"budget_rollouts": 16 * 8 * 3}, strategies={"hive": {"candidate_ratio": 1.0}})
    res = run_simulation(cfg, "hive", seed=0)
    assert res.verify_forwards == 3 * 16  # candidate_ratio 1: exactly k verified per step


def test_a_falling_prompt_entropy_makes_the_window_rule_prune_more():
    """``learner.prompt_entropy_decay`` shrinks every probe reading as the policy trains; HIVE's default ranks a
    verification's candidates among themselves and keeps pruning ~``prune_quantile`` (its run is unchanged),
    ``hive_window`` (the old rule) ranks them against older, higher readings and prunes far more."""
    cfg = tiny(train={"budget_rollouts": 16 * 8 * 12}, learner={"prompt_entropy_decay": 0.1})
    flat = tiny(train={"budget_rollouts": 16 * 8 * 12})
    rate = {}
    for name in ("hive", "hive_window"):
        built = []

        def factory(world, seed, name=name, built=built):
            built.append(build_sim_strategy(name, cfg, world, seed))
            return built[-1]

        run_simulation(cfg, name, seed=0, strategy_factory=factory)
        rate[name] = built[0].metrics()["hive/prune_rate"]  # the last step's
    assert rate["hive"] <= 0.15 and rate["hive_window"] > 2 * rate["hive"]
    # the default reads every probe value relative to its verification: a policy-wide scale changes nothing
    assert run_simulation(flat, "hive", seed=0).accuracy == run_simulation(cfg, "hive", seed=0).accuracy
    assert run_simulation(flat, "hive_window", seed=0).accuracy != run_simulation(cfg, "hive_window", seed=0).accuracy


def test_exploration_variants_run_on_their_own_pool_rule():
    """``heapa_fixed`` / ``heapa_adaptive`` / ``heapa_greedy`` / ``heapa_revisit`` (issue 23) override the
    scenario's pool: the adaptive rule explores more never-measured records while the frontier set is thin; the
    fixed one keeps ``cold_fraction``; ``heapa`` runs the default (greedy) and the revisit penalty explores more."""
    cfg = tiny(train={"budget_rollouts": 16 * 8 * 6})
    fixed = run_simulation(cfg, "heapa_fixed", seed=0).pool_metrics
    adaptive = run_simulation(cfg, "heapa_adaptive", seed=0).pool_metrics
    assert fixed["pool/cold_share_rule"] == 0.25
    assert adaptive["pool/measured"] >= fixed["pool/measured"]
    assert cfg.pool_config(exploration="adaptive").exploration == "adaptive"
    greedy = run_simulation(cfg, "heapa_greedy", seed=0)
    default = run_simulation(cfg, "heapa", seed=0)
    assert greedy.rollouts == default.rollouts and greedy.accuracy == default.accuracy
    assert greedy.pool_metrics["pool/cold_distance"] >= 0.0
    revisit = run_simulation(cfg, "heapa_revisit", seed=0).pool_metrics
    assert revisit["pool/measured"] >= greedy.pool_metrics["pool/measured"]


def test_repeat_decay_discounts_retrained_prompts_and_is_off_by_default():
    """The opt-in diminishing return (issue 23): a prompt's n-th training moves the ability by decay**(n-1) of
    what a fresh prompt with the same outcome would; memorisation is unchanged; 1.0 is today's world."""
    from verl_ext.sim.config import LearnerConfig, PromptsConfig
    from verl_ext.sim.world import SyntheticWorld

    def world(decay):
        rngs = [np.random.default_rng(i) for i in range(3)]
        w = SyntheticWorld(PromptsConfig(n_train=4, n_test=10, n_topics=1),
                           LearnerConfig(drift_std=0.0, repeat_decay=decay), *rngs)
        w.register(np.arange(4), np.zeros(4), np.zeros(4, dtype=np.int64), np.ones(4, dtype=bool))
        return w

    ids, passes = np.array([0, 1]), np.array([4, 4])
    gains = {}
    for decay in (1.0, 0.5):
        w = world(decay)
        steps = []
        for _ in range(3):
            before = w.ability.copy()
            w.learn(ids, passes, 8)
            steps.append(float((w.ability - before)[0]))
        gains[decay] = steps
        assert w.trained[:2].tolist() == [3.0, 3.0] and w.memo[0] == pytest.approx(3 * 0.2)
    assert gains[1.0] == pytest.approx([gains[0.5][0]] * 3)
    assert gains[0.5][1:] == pytest.approx([0.5 * gains[0.5][0], 0.25 * gains[0.5][0]])


def test_the_drift_on_its_own_stream_does_not_depend_on_the_responses_drawn():
    """``drift_stream: own``: two worlds of one seed that roll out different numbers of responses walk alike update
    by update (common random numbers); on the rollouts' stream (``roll``, the default) they part; ``own`` without
    its stream is refused."""
    from verl_ext.sim.config import LearnerConfig, PromptsConfig
    from verl_ext.sim.world import SyntheticWorld

    def walk(stream, prompts_rolled):
        rngs = [np.random.default_rng(i) for i in range(4)]
        w = SyntheticWorld(PromptsConfig(n_train=4, n_test=10, n_topics=3), LearnerConfig(drift_stream=stream),
                           *rngs[:3], rng_drift=rngs[3])
        w.register(np.arange(4), np.zeros(4), np.zeros(4, dtype=np.int64), np.ones(4, dtype=bool))
        for _ in range(5):
            w.rollout(np.arange(prompts_rolled), 8)
            w.learn(np.array([], dtype=np.int64), np.array([]), 8)  # no groups: the walk alone moves the ability
        return w.ability

    assert np.array_equal(walk("own", 2), walk("own", 4)) and not np.allclose(walk("own", 2), 0.0)
    assert not np.allclose(walk("roll", 2), walk("roll", 4))
    with pytest.raises(ValueError, match="rng_drift"):
        SyntheticWorld(PromptsConfig(n_train=4, n_test=10, n_topics=1), LearnerConfig(drift_stream="own"),
                       *[np.random.default_rng(i) for i in range(3)])


def test_the_drift_stream_leaves_everything_else_of_a_run_as_it_was():
    """``own`` changes the walk and nothing upstream of it: the data and the step-0 accuracy of a seed are those of
    ``roll``, and the default is ``roll`` (every published figure)."""
    from verl_ext.sim.config import LearnerConfig

    assert LearnerConfig().drift_stream == "roll"
    roll, own = (run_simulation(tiny(learner={"drift_stream": s}), "uniform", seed=3) for s in ("roll", "own"))
    assert roll.accuracy[0] == own.accuracy[0] and roll.accuracy != own.accuracy
