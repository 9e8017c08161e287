"""The generated ``heapa_defaults.yaml`` matches the config models, and every model field is a plain Hydra override."""

from __future__ import annotations

from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from recipe.heapa.config_defaults import DEFAULTS_FILE, defaults, differences, load_file, main, render

CONFIG_DIR = str(Path(__file__).resolve().parents[3] / "recipe" / "heapa" / "config")
RECIPE_ONLY = {"heapa.augmentation.prompt_preset"}  # resolved by the recipe into AugmentConfig prompt fields


def _leaves(data: dict, key: str = "heapa") -> list[str]:
    out = []
    for name, value in data.items():
        sub = f"{key}.{name}"
        out.extend(_leaves(value, sub) if isinstance(value, dict) and value else [sub])
    return out


def test_generated_defaults_match_the_models():
    diff = differences(defaults(), load_file())
    assert not diff, "heapa_defaults.yaml is stale (python -m recipe.heapa.config_defaults):\n" + "\n".join(diff)
    assert DEFAULTS_FILE.read_text(encoding="utf-8") == render()
    assert main(["--check"]) == 0


def test_differences_name_the_key():
    stale = defaults()
    stale["pool"]["cold_fraction"] = 0.3
    del stale["hive"]["tail_tokens"]
    stale["lineage"]["typo"] = 1
    assert differences(defaults(), stale) == ["heapa.pool.cold_fraction: model 0.25 != YAML 0.3",
                                             "heapa.lineage.typo: in the YAML but not a model field",
                                             "heapa.hive.tail_tokens: missing from the YAML"]


def test_recipe_choices_name_only_model_fields():
    block = yaml.safe_load((Path(CONFIG_DIR) / "heapa_trainer.yaml").read_text(encoding="utf-8"))["heapa"]
    fields = set(_leaves(defaults()))
    assert set(_leaves(block)) - fields - RECIPE_ONLY == set()


def test_every_model_field_is_a_plain_override():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=["heapa.teacher.latency_window=7",
                                                              "heapa.pool.reinsertion.rate=3"])
    assert cfg.heapa.teacher.latency_window == 7 and cfg.heapa.pool.reinsertion.rate == 3
    composed = set(_leaves(OmegaConf.to_container(cfg.heapa, resolve=False)))
    assert set(_leaves(defaults())) - composed == set()
