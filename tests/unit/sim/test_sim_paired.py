"""The paired comparison CLI (``verl_ext.sim.paired``) and the rollout realisations it averages
(``train.rollout_stream``)."""

import json
import math

import pytest

from verl_ext.sim import ScenarioConfig, paired
from verl_ext.sim.runner import run_simulation


def tiny(rollout_stream=None):
    train = {"batch_size": 16, "n": 8, "budget_rollouts": 16 * 8 * 20, "target_accuracy": 0.55}
    if rollout_stream is not None:
        train["rollout_stream"] = rollout_stream
    return ScenarioConfig.from_dict({"name": "tiny", "prompts": {"n_train": 300, "n_test": 200, "n_topics": 2},
                                     "train": train, "pool": {"max_pool_size": 450}})


def record(scenario, strategy, seed, reach_at, acc, target=0.5):
    """A bench record: evaluations every 100 rollouts up to 400; the target first reached at ``reach_at`` (None:
    never), ``acc`` at the budget."""
    rollouts = [0, 100, 200, 300, 400]
    accuracy = [0.1, 0.2, 0.3, 0.4, acc]
    if reach_at is not None:
        accuracy = [target if r >= reach_at else 0.1 for r in rollouts[:-1]] + [max(acc, target)]
    return {"scenario": scenario, "strategy": strategy, "seed": seed, "rollouts": rollouts, "accuracy": accuracy,
            "target_accuracy": target, "budget_rollouts": 400}


def write(tmp_path, name, records):
    path = tmp_path / name
    path.write_text(json.dumps(records))
    return str(path)


def test_a_seed_is_the_mean_of_its_realisations_and_the_ratio_is_paired(tmp_path, capsys):
    a0 = write(tmp_path, "a0.json", [record("s", "m", 0, 100, 0.6), record("s", "m", 1, 200, 0.6),
                                     record("s", "b", 0, 200, 0.5), record("s", "b", 1, 200, 0.5)])
    a1 = write(tmp_path, "a1.json", [record("s", "m", 0, 300, 0.6), record("s", "m", 1, 200, 0.6),
                                     record("s", "b", 0, 200, 0.5), record("s", "b", 1, 200, 0.5)])
    assert paired.main([f"m=m:{a0},{a1}", f"b=b:{a0},{a1}", "--baseline", "b"]) == 0
    row = [c.strip() for c in capsys.readouterr().out.splitlines()[2].strip("|").split("|")]
    # seed 0: the method's mean of 100 and 300 over 200; seed 1: 200 over 200 -> both ratios 1
    assert row[0] == "s" and row[1] == "200.00 (4/4), 0.600" and row[3].startswith("1.00x [1.00x, 1.00x]")
    assert row[4].startswith("+10.0")


def test_unreached_runs_count_at_the_budget_and_seeds_neither_reached_drop_out(tmp_path):
    runs = write(tmp_path, "r.json", [record("s", "m", 0, None, 0.4), record("s", "b", 0, 100, 0.6),
                                      record("s", "m", 1, None, 0.4), record("s", "b", 1, None, 0.4),
                                      record("s", "u", 0, 400, 0.5), record("s", "u", 1, 400, 0.5)])
    arms = [paired.load_arm(f"{x}={x}:{runs}") for x in ("m", "b", "u")]
    text = paired.table(arms, arms[1], uniform=arms[2], better=[arms[1]])
    row = [c.strip() for c in text.splitlines()[2].strip("|").split("|")]
    assert row[1] == ">1.00x (0/2), 0.400"  # never reached: its rollouts at the budget, a lower bound
    ratio = math.exp(math.log(400 / 100))  # seed 1 (neither reached it) is left out
    assert row[4].startswith(f"{ratio:.2f}x") and row[5] == f"{400 / 250:.3f}x"


def test_bad_arms_are_named(tmp_path):
    old = write(tmp_path, "old.json", [{k: v for k, v in record("s", "m", 0, 100, 0.6).items() if k != "scenario"}])
    with pytest.raises(SystemExit, match="LABEL=STRATEGY:FILE"):
        paired.load_arm("m:x.json")
    with pytest.raises(SystemExit, match="record 0: no 'scenario'"):
        paired.load_arm(f"m=m:{old}")
    with pytest.raises(SystemExit, match="no runs of strategy 'z'"):
        paired.load_arm(f"z=z:{write(tmp_path, 'ok.json', [record('s', 'm', 0, 100, 0.6)])}")
    with pytest.raises(SystemExit, match="cannot read"):
        paired.load_arm(f"m=m:{tmp_path / 'missing.json'}")


def test_a_rollout_realisation_keeps_the_data_and_draws_other_rollouts():
    """``train.rollout_stream`` 0 is the seed's own run; k > 0 keeps its data (the step-0 accuracy) and draws
    other rollouts."""
    base = run_simulation(tiny(), "uniform", seed=2)
    same = run_simulation(tiny(0), "uniform", seed=2)
    other = run_simulation(tiny(1), "uniform", seed=2)
    assert base.same_outcome(same)
    assert other.accuracy[0] == base.accuracy[0] and other.accuracy != base.accuracy
