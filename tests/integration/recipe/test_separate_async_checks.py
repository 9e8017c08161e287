"""``trainer.v1.trainer_mode=separate_async``: what it needs is checked before Ray starts, each refusal naming its
key and the fix (``recipe/heapa/trainer_mode.py``); a setting that has them starts with the recipe's trainer."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from recipe.heapa.main_heapa import attach_to_running_cluster
from recipe.heapa.settings import HeapaConfigError, parse_settings
from recipe.heapa.trainer_mode import CPU_ENGINE, check_trainer_mode

CONFIG_DIR = str(Path(__file__).resolve().parents[3] / "recipe" / "heapa" / "config")
# what a CPU user sets (docs/async.md): the engine, one rollout replica on its own logical GPU, one update per step
RUNS = ["trainer.v1.trainer_mode=separate_async", *CPU_ENGINE.split(), "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1", "ray_kwargs.ray_init.num_gpus=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=16", "data.train_batch_size=16"]


def _check(*overrides: str, address: str = "local") -> None:
    """What ``main_heapa.prepare`` does: attach (a no-op for a local cluster), then check."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=["platform=cpu", "heapa.teacher.backend=programmatic",
                                                               f"+ray_kwargs.ray_init.address={address}", *overrides])
    with open_dict(cfg):
        cfg.heapa.method = "test"
    attach_to_running_cluster(cfg)
    check_trainer_mode(cfg, parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True)))


def _without(key: str) -> list[str]:
    return [o for o in RUNS if not o.startswith(key)]


@pytest.mark.parametrize("method", ["grpo", "heapa_grpo", "dapo", "heapa_dapo", "ps"])
def test_the_pool_presets_start_with_what_it_needs(method):
    from recipe.heapa.trainer import HeapaSeparateAsyncTrainer, trainer_class

    _check(f"method={method}", *RUNS)
    assert trainer_class("separate_async") is HeapaSeparateAsyncTrainer


@pytest.mark.parametrize(("overrides", "message"), [
    (_without("actor_rollout_ref.rollout.checkpoint_engine"),
     r"checkpoint_engine\.backend=naive with .*separate_async: .*set actor_rollout_ref\.rollout\.checkpoint_engine"
     r"\.backend=ray_store actor_rollout_ref\.rollout\.checkpoint_engine\.custom_backend_module=verl_ext"),
    (_without("actor_rollout_ref.actor.ppo_mini_batch_size"),
     r"ppo_mini_batch_size=\d+ with .*separate_async: .*set it to data\.train_batch_size=16"),
    (_without("actor_rollout_ref.rollout.nnodes") + ["actor_rollout_ref.rollout.nnodes=0"],
     r"actor_rollout_ref\.rollout\.nnodes=0, n_gpus_per_node=1 .*a pool of its own"),
    (_without("ray_kwargs.ray_init.num_gpus"),
     r"ray_kwargs\.ray_init\.num_gpus=1 with .*need 2; set it to 2"),
    ([*RUNS, "heapa.ar3po.enabled=true"], r"heapa\.ar3po\.enabled with trainer\.v1\.trainer_mode=separate_async"),
    ([*RUNS, "trainer.v1.separate_async.parameter_sync_step=2"],
     r"trainer\.v1\.separate_async\.parameter_sync_step=2: .*set it to 1"),
])
def test_what_it_lacks_fails_naming_the_key_and_the_fix(overrides, message):
    with pytest.raises(HeapaConfigError, match=message):
        _check("method=heapa_grpo", *overrides)


def test_an_attached_cluster_brings_its_own_gpus():
    # ray.init will connect: attaching drops the platform's num_gpus=1, the cluster's nodes declared their own
    _check("method=grpo", *_without("ray_kwargs.ray_init.num_gpus"), address="127.0.0.1:6379")


def test_an_unknown_mode_names_the_modes():
    with pytest.raises(HeapaConfigError, match=r"trainer_mode=fast: verl's trainer modes are sync, colocate_async"):
        _check("method=grpo", "trainer.v1.trainer_mode=fast")
