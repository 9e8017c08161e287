"""The verl internals the recipe relies on (recipe/heapa/verl_contract.py) are still there, and the two rules it
re-states still match verl's own ``_init_dataloader``: a verl upgrade that changes either fails here, naming it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from recipe.heapa import verl_contract
from recipe.heapa.verl_contract import NON_PRIVATE_NAMES, PRIVATE_NAMES, VerlName, check, gen_batch_size, record_gen_batch_size, \
    set_training_horizon

CONFIG_DIR = str(Path(__file__).resolve().parents[3] / "recipe" / "heapa" / "config")


@pytest.mark.parametrize("name", PRIVATE_NAMES + NON_PRIVATE_NAMES, ids=lambda n: n.symbol)
def test_every_private_verl_name_is_still_there(name):
    assert check(name) is None


def test_a_changed_name_is_reported_by_symbol():
    gone = VerlName("verl.trainer.ppo.v1.trainer_sync", "PPOTrainerSync._no_such_hook", ("self",), used_by="x")
    assert "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync._no_such_hook: gone" in check(gone)
    resigned = VerlName(verl_contract.BUFFER, "ReplayBuffer._clear_groups", ("self", "partition", "uids"), used_by="y")
    assert "parameters ('self', 'partition_id', 'uids')" in check(resigned)
    unset = VerlName(verl_contract.BUFFER, "ReplayBuffer.__init__", attr="no_such_field", used_by="z")
    assert "no longer sets self.no_such_field" in check(unset)
    assert verl_contract.problems() == []


class _Bare:
    """Just what ``_init_dataloader`` reads from a trainer."""


@pytest.mark.parametrize("overrides", [
    [],
    ["algorithm.filter_groups.enable=true"],
    ["trainer.v1.sampler.sync_refill_failed_groups=true"],
    ["trainer.total_training_steps=null", "trainer.total_epochs=3"],
    ["data.gen_batch_size=8"],
])
def test_restated_rules_match_verls_init_dataloader(tiny_assets, overrides):
    from transformers import AutoTokenizer

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=[
            "method=grpo", "platform=cpu", f"data.train_files={tiny_assets / 'data' / 'train.parquet'}",
            f"data.val_files={tiny_assets / 'data' / 'val.parquet'}", "data.train_batch_size=16",
            "trainer.total_training_steps=40", *overrides])
    with open_dict(cfg):
        cfg.heapa.method = "grpo"
    verls, ours = _Bare(), _Bare()
    for t in (verls, ours):
        t.config, t.trainer_mode, t.parameter_sync_step = copy.deepcopy(cfg), "sync", 1
    verls.tokenizer, verls.processor = AutoTokenizer.from_pretrained(tiny_assets / "model"), None
    PPOTrainer._init_dataloader(verls)
    before = copy.deepcopy(ours.config)
    assert gen_batch_size(ours.config, ours.trainer_mode) == verls.train_dataloader.batch_size
    assert ours.config == before  # asking is pure
    record_gen_batch_size(ours.config, ours.trainer_mode)
    set_training_horizon(ours, len(verls.train_dataset))
    assert ours.config.data.get("gen_batch_size") == verls.config.data.get("gen_batch_size")
    assert (ours.steps_per_epoch, ours.total_training_steps) == (verls.steps_per_epoch, verls.total_training_steps)
    assert ours.config.actor_rollout_ref.actor.optim.total_training_steps == \
        verls.config.actor_rollout_ref.actor.optim.total_training_steps


@pytest.mark.parametrize("mode", ["sync", "colocate_async"])
@pytest.mark.parametrize("overrides", [
    [],
    ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
     "algorithm.filter_groups.max_inflight_gen_batches=3"],
    ["trainer.v1.sampler.sync_refill_failed_groups=true"],
    ["data.gen_batch_size=8"],
])
def test_the_feedback_buffer_gets_what_verl_gives_its_own(overrides, mode):
    """The recipe's replay buffer goes in through ``trainer.v1.sampler.custom_sampler``; verl's own buffer and
    the recipe's, built by verl's ``_build_replay_buffer`` from the same config, filter groups the same way."""
    from recipe.heapa.step.replay_buffer import PATH, FeedbackReplayBuffer, FeedbackReplayBufferAsync
    from recipe.heapa.verl_contract import FILTER_KWARGS, replay_buffer_filter_kwargs
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=["method=grpo", "platform=cpu",
                                                              "data.train_batch_size=16", *overrides])
    verls_cls, ours_cls = ((ReplayBuffer, FeedbackReplayBuffer) if mode == "sync"
                           else (ReplayBufferAsync, FeedbackReplayBufferAsync))
    built = {}
    for name in ("verl", "ours"):
        t = _Bare()
        t.config, t.trainer_mode = copy.deepcopy(cfg), mode
        t._add_prompts_to_generate = lambda *a, **k: None
        t._resolve_filter_groups_metric = lambda t=t: PPOTrainer._resolve_filter_groups_metric(t)
        if name == "ours":
            with open_dict(t.config):
                t.config.trainer.v1.sampler.custom_sampler = {"path": PATH, "name": ours_cls.__name__}
                t.config.trainer.v1.sampler.sampler_kwargs = replay_buffer_filter_kwargs(t)
        built[name] = PPOTrainer._build_replay_buffer(t)
    assert type(built["verl"]) is verls_cls and type(built["ours"]) is ours_cls
    for key in FILTER_KWARGS:
        assert getattr(built["ours"], key) == getattr(built["verl"], key), key
    assert dict(built["ours"].sampler_kwargs) == {}
