"""The generated ``heapa_{defaults,internals,deprecated}.yaml`` match the config models, the public block stays
small, every model field is a plain Hydra override, and a key that moved still applies, with a warning."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from recipe.heapa.config_defaults import (CONTENTS, DEFAULTS_FILE, defaults, differences, internals, load_file, main,
                                          model_defaults, render)
from recipe.heapa.config_surface import INTERNAL_KEYS, MOVED_KEYS, PUBLIC_LEAF_LIMIT
from recipe.heapa.settings import HeapaConfigError, parse_settings

CONFIG_DIR = str(Path(__file__).resolve().parents[3] / "recipe" / "heapa" / "config")
RECIPE_ONLY = {"heapa.augmentation.prompt_preset"}  # resolved by the recipe into AugmentConfig prompt fields


def _leaves(data: dict, key: str = "heapa") -> list[str]:
    out = []
    for name, value in data.items():
        sub = f"{key}.{name}"
        out.extend(_leaves(value, sub) if isinstance(value, dict) and value else [sub])
    return out


def _settings(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=["heapa.method=x", "heapa.teacher.model=judge",
                                                              "actor_rollout_ref.rollout.n=8", *overrides])
    return parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))


def test_generated_files_match_the_models():
    for path, content in CONTENTS.items():
        diff = differences(content(), load_file(path))
        assert not diff, f"{path.name} is stale (python -m recipe.heapa.config_defaults):\n" + "\n".join(diff)
        assert path.read_text(encoding="utf-8") == render(path)
    assert main(["--check"]) == 0


def test_differences_name_the_key():
    stale = defaults()
    stale["pool"]["max_pool_size"] = 5
    del stale["hive"]["tail_tokens"]
    stale["lineage"]["typo"] = 1
    assert differences(defaults(), stale) == ["heapa.pool.max_pool_size: model 100000 != YAML 5",
                                             "heapa.lineage.typo: in the YAML but not a model field",
                                             "heapa.hive.tail_tokens: missing from the YAML"]


def test_the_public_block_is_small_and_the_three_files_split_every_field():
    public, internal = set(_leaves(defaults())), set(_leaves(internals()))
    moved = {f"heapa.{key}" for key in MOVED_KEYS}
    assert len(public) <= PUBLIC_LEAF_LIMIT, sorted(public)
    assert internal == {f"heapa.{key}" for key in INTERNAL_KEYS}
    assert not (public & internal or public & moved or internal & moved)
    assert public | internal | moved == set(_leaves(model_defaults()))


def test_recipe_choices_name_only_model_fields():
    block = yaml.safe_load((Path(CONFIG_DIR) / "heapa_trainer.yaml").read_text(encoding="utf-8"))["heapa"]
    fields = set(_leaves(model_defaults()))
    assert set(_leaves(block)) - fields - RECIPE_ONLY == set()


def test_every_model_field_is_a_plain_override():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=["method=grpo", "heapa.teacher.latency_window=7",
                                                              "heapa.pool.reinsertion.rate=3",
                                                              "heapa.pool.cold_fraction=0.3"])
    assert cfg.heapa.teacher.latency_window == 7 and cfg.heapa.pool.reinsertion.rate == 3
    assert cfg.heapa.pool.cold_fraction == 0.3  # a moved key: still a plain override
    composed = set(_leaves(OmegaConf.to_container(cfg.heapa, resolve=False)))
    assert (set(_leaves(defaults())) | set(_leaves(internals()))) - composed == set()
    assert {f"heapa.{key}" for key in MOVED_KEYS} - composed == set()


def test_the_boundary_strategy_options_set_the_pool(caplog):
    with caplog.at_level(logging.WARNING):
        settings = _settings("method=heapa_grpo", "heapa.selection.kwargs.boundary=target",
                             "++heapa.selection.kwargs.cold_fraction=0.4", "heapa.feedback.pass_threshold=0.3")
    assert (settings.pool.boundary, settings.pool.cold_fraction, settings.pool.max_window_visits) == ("target", 0.4, 1)
    assert settings.ar3po.success_threshold == 0.3  # AR3PO counts a pass by the one threshold
    assert "deprecated" not in caplog.text
    assert _settings("method=grpo").pool.boundary == "target"


def test_a_moved_key_still_applies_with_a_warning_naming_its_new_home(caplog):
    with caplog.at_level(logging.WARNING):
        settings = _settings("method=heapa_ar3po", "heapa.pool.boundary=signal", "heapa.pool.revisit_penalty=0.05",
                             "heapa.ar3po.success_threshold=0.3")
    assert (settings.pool.boundary, settings.pool.revisit_penalty) == ("signal", 0.05)  # over the preset's progress
    assert settings.ar3po.success_threshold == 0.3 and settings.feedback.pass_threshold == 0.5
    for old, new in [("pool.boundary", "selection.kwargs.boundary"), ("pool.revisit_penalty",
                     "selection.kwargs.revisit_penalty"), ("ar3po.success_threshold", "feedback.pass_threshold")]:
        assert f"heapa.{old} is deprecated" in caplog.text and f"set heapa.{new} instead" in caplog.text
    assert ("heapa.pool.boundary='signal' (deprecated) overrides heapa.selection.kwargs.boundary='progress'"
            in caplog.text)
    # a moved key applies under any strategy, where it applied before (the pool's frontier metrics)
    assert _settings("method=grpo", "heapa.pool.target_pass_rate=0.4").pool.target_pass_rate == 0.4


def test_switching_a_heapa_preset_to_another_strategy_says_how_to_clear_its_options():
    with pytest.raises(HeapaConfigError, match="boundary strategy's options.*remove them with "
                       "~heapa.selection.kwargs.boundary ~heapa.selection.kwargs.cold_draw "
                       "~heapa.selection.kwargs.max_window_visits"):
        _settings("method=heapa_grpo", "heapa.selection.name=uniform")
    assert _settings("method=heapa_grpo", "heapa.selection.name=uniform", "~heapa.selection.kwargs.boundary",
                     "~heapa.selection.kwargs.cold_draw", "~heapa.selection.kwargs.max_window_visits"
                     ).pool.boundary == "target"
