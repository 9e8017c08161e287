"""Scenario configuration: shipped files, unknown keys and bad values fail loudly, YAML round trip."""

import pytest
import yaml

from verl_ext.pool.errors import ConfigError
from verl_ext.sim import ScenarioConfig, available_scenarios, load_scenario
from verl_ext.sim.config import with_overrides


def test_shipped_scenarios_load_and_mirror_the_dataclasses():
    names = available_scenarios()
    assert {"default", "mostly_too_hard", "mostly_solved", "bimodal"} <= set(names)
    for name in names:
        cfg = load_scenario(name)
        assert cfg.name == name
        assert ScenarioConfig.from_dict(cfg.to_dict()) == cfg
    bimodal = load_scenario("bimodal")
    assert (bimodal.train.n, bimodal.train.batch_size, len(bimodal.prompts.difficulty)) == (16, 32, 3)


def test_load_by_path_and_missing_names(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "train": {"batch_size": 8}}))
    cfg = load_scenario(path)
    assert cfg.name == "mine" and cfg.train.batch_size == 8 and cfg.train.n == 8
    with pytest.raises(ConfigError, match="unknown scenario 'nope'.*default"):
        load_scenario("nope")
    with pytest.raises(ConfigError, match="does not exist"):
        load_scenario(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_scenario(bad)


@pytest.mark.parametrize("data, match", [
    ({"nmae": "x"}, "scenario: unknown keys"),
    ({"train": {"batchsize": 4}}, r"train: unknown keys \['batchsize'\]"),
    ({"train": {"n": 0}}, r"train.n must be an integer >= 1"),
    ({"train": {"target_accuracy": 1.5}}, "train.target_accuracy"),
    ({"prompts": {"difficulty": []}}, "prompts.difficulty must be a non-empty list"),
    ({"prompts": {"difficulty": [{"weight": 0, "mean": 0, "std": 1}]}}, r"difficulty\[0\].weight"),
    ({"prompts": {"difficulty": [{"mean": 0, "std": 1}]}}, r"difficulty\[0\]\.weight: Field required"),
    ({"learner": {"transfer": 2}}, "learner.transfer"),
    ({"learner": {"discrimination": 0}}, "learner.discrimination"),
    ({"learner": {"repeat_decay": 1.5}}, "learner.repeat_decay"),
    ({"learner": {"repeat_harm": -0.1}}, "learner.repeat_harm"),
    ({"augment": {"invalid_rate": -0.1}}, "augment.invalid_rate"),
    ({"augment": {"parents": {"num_parent": 3}}}, "augment.parents: unknown keys"),
    ({"augment": {"parents": {"parent_selection": "top"}}}, "augment.parents"),
    ({"pool": {"max_pool_size": 10}}, "below prompts.n_train"),
    ({"pool": {"max_poolsize": 10}}, "pool: unknown keys"),
    ({"pool": {"track_changes": True}}, "set by the simulator"),
    ({"lineage": {"methd": "pathagg"}}, "lineage"),
    ({"lineage": {"method": "sum"}}, "lineage.method"),
    ({"strategies": {"mopps": 3}}, "strategies.mopps"),
    ({"name": ""}, r"scenario\.name must be a non-empty string"),
    ({"train": [1]}, "scenario.train must be a mapping"),
])
def test_bad_configs_name_the_field(data, match):
    with pytest.raises(ConfigError, match=match):
        ScenarioConfig.from_dict(data)


def test_small_batch_scenarios_of_issue_23():
    ratios = {name: load_scenario(name).train.batch_size / load_scenario(name).prompts.n_train
              for name in ("cpu_comparison", "small_batch", "large_pool", "huge_pool")}
    assert ratios["small_batch"] == pytest.approx(1 / 100) and ratios["huge_pool"] == pytest.approx(1 / 1000)
    cpu = load_scenario("cpu_comparison")
    assert (cpu.prompts.n_train, cpu.train.batch_size, cpu.train.budget_rollouts // (16 * 8)) == (2000, 16, 30)


def test_overrides_replace_one_field_and_are_validated():
    base = load_scenario("small_batch")
    assert base.learner.repeat_decay == 1.0  # off in every shipped scenario but cpu_levels
    cfg = with_overrides(base, ["learner.repeat_decay=0.7", "pool.exploration=fixed"])
    assert cfg.learner.repeat_decay == 0.7 and cfg.pool["exploration"] == "fixed" and cfg.name == base.name
    assert cfg.train == base.train and base.learner.repeat_decay == 1.0
    for bad, match in (("learner.repeat_decay", "SECTION.KEY=VALUE"), ("nosuch.x=1", "SECTION.KEY=VALUE"),
                       ("learner.nosuch=1", "learner: unknown keys"), ("learner.repeat_decay=2", "repeat_decay")):
        with pytest.raises(ConfigError, match=match):
            with_overrides(base, [bad])
