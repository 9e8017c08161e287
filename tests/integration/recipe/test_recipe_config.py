"""The recipe's Hydra config: every preset composes and validates; bad values fail at start, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from recipe.heapa.settings import HeapaConfigError, parse_settings, strategy_kwargs
from verl_ext.selection import available_strategies, build_strategy, get_strategy_class
from verl_ext.cpu.overrides import CPU_OVERRIDES

CONFIG_DIR = str(Path(__file__).resolve().parents[3] / "recipe" / "heapa" / "config")
METHODS = ["grpo", "dapo", "heapa_grpo", "heapa_dapo", "ps", "ar3po_grpo", "ar3po_dapo", "heapa_ar3po", "hive_grpo",
           "hive_dapo", "reinforce_ada", "reinforce_ada_dapo", "heapa_reinforce_ada"]
SELECTION = {"grpo": "uniform", "dapo": "uniform", "ps": "prioritized", "ar3po_grpo": "uniform",
             "ar3po_dapo": "uniform", "hive_grpo": "hive", "hive_dapo": "hive", "reinforce_ada": "uniform",
             "reinforce_ada_dapo": "uniform"}


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="heapa_trainer", overrides=list(overrides))


def _settings(cfg):
    with open_dict(cfg):
        cfg.heapa.method = "test"  # `${hydra:...}` resolves only inside a running Hydra app
    return parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))  # the rest resolves against the root


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_every_preset_composes_and_validates(method, platform):
    cfg = _compose(f"method={method}", f"platform={platform}", "heapa.teacher.model=judge",
                   "actor_rollout_ref.rollout.n=16")
    s = _settings(cfg)
    assert s.platform == platform
    assert cfg.reward.reward_manager.name == "heapa"
    dapo = method.endswith("dapo")
    # AR3PO replaces dynamic sampling (filter_groups would evict the all-wrong groups reuse is meant to fill)
    assert bool(cfg.algorithm.filter_groups.enable) == (dapo and method != "ar3po_dapo")
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == ("token-mean" if dapo else "seq-mean-token-mean")
    assert cfg.reward.reward_kwargs.format == ("dapo" if dapo else "boxed")
    assert s.selection_name == SELECTION.get(method, "boundary")
    assert s.lineage.enabled == method.startswith("heapa")
    assert s.augmentation.enabled == method.startswith("heapa")
    ar3po, rounds = "ar3po" in method, "reinforce_ada" in method
    assert s.ar3po.enabled == ar3po and s.reinforce_ada.enabled == rounds
    manager = cfg.actor_rollout_ref.rollout.agent.get("agent_loop_manager_class")
    assert (manager == "verl_ext.adapters.ar3po_agent_loop.StagedAgentLoopManager") == (ar3po or rounds)
    # Reinforce-Ada's published runs centre the advantage without dividing by the deviation
    assert cfg.algorithm.norm_adv_by_std_in_grpo == (not rounds)
    if ar3po:  # the ceiling follows rollout.n, so "AR3PO vs GRPO with the same n" is one override
        assert s.ar3po.max_per_prompt == 16 and s.ar3po.max_responses() == 16
    if s.selection_name == "hive":
        assert s.hive.verify
    # selecting strategies get trained records back before the next selection; uniform baselines serve epochs
    selecting = s.selection_name != "uniform"
    assert s.pool.reinsertion.trigger == ("always" if selecting else "below_batch")
    if s.selection_name == "boundary":
        # heapa_grpo, heapa_dapo and heapa_ar3po draw by the measured split, heapa_reinforce_ada by v(1-v), each
        # training a record at most once per window (without the bound they fell below their baselines late or
        # re-trained 2.5 times per window, issue 29); any other boundary preset keeps the pool's default
        bounded = method in ("heapa_grpo", "heapa_dapo", "heapa_ar3po", "heapa_reinforce_ada")
        boundary = {"heapa_grpo": "progress", "heapa_dapo": "progress", "heapa_ar3po": "progress",
                    "heapa_reinforce_ada": "signal"}.get(method, "target")
        assert (s.pool.boundary, s.pool.estimator, s.pool.eviction) == (boundary, "beta", "farthest")
        assert s.pool.max_window_visits == (1 if bounded else None)
        # heapa_dapo's bounded seat goes to the frontier's next pick first: fewer groups for DAPO to drop
        assert s.pool.window_seat == ("frontier" if method == "heapa_dapo" else "cold")
        # cold seats by group on GRPO, DAPO and AR3PO; Reinforce-Ada's rounds keep arrival order (not measured)
        assert s.pool.cold_draw == ("arrival" if method == "heapa_reinforce_ada" else "signal")


def test_ar3po_ceiling_follows_rollout_n_and_a_too_small_n_is_named():
    cfg = _compose("method=ar3po_grpo", "actor_rollout_ref.rollout.n=8", "heapa.ar3po.k1=2", "heapa.ar3po.k_s=2",
                   "heapa.teacher.model=judge")
    s = _settings(cfg)
    assert (s.ar3po.k1, s.ar3po.k_s, s.ar3po.max_per_prompt, s.ar3po.max_responses()) == (2, 2, 8, 8)
    with pytest.raises(HeapaConfigError, match=r"heapa\.ar3po.*rollout\.n"):
        _settings(_compose("method=ar3po_grpo", "actor_rollout_ref.rollout.n=2", "heapa.teacher.model=judge"))


def test_dapo_preset_matches_the_paper_recipe():
    cfg = _compose("method=heapa_dapo")
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert cfg.algorithm.filter_groups.metric == "acc"
    assert cfg.reward.reward_kwargs.overlong_buffer.enable is True


DAPO_PRESETS = [m for m in METHODS if m.endswith("dapo")]


@pytest.mark.parametrize("method", DAPO_PRESETS)
@pytest.mark.parametrize("platform", ["gpu", "cpu"])
def test_dapo_presets_take_verls_dapo_optimizer_and_dual_clip(method, platform):
    # verl's recipe/dapo/run_dapo_qwen2.5_32b.sh: weight_decay=0.1, lr_warmup_steps=10, clip_ratio_c=10.0
    assert DAPO_PRESETS == ["dapo", "heapa_dapo", "ar3po_dapo", "hive_dapo", "reinforce_ada_dapo"]
    actor = _compose(f"method={method}", f"platform={platform}").actor_rollout_ref.actor
    assert (actor.optim.weight_decay, actor.optim.lr_warmup_steps, actor.clip_ratio_c) == (0.1, 10, 10.0)


@pytest.mark.parametrize("method", [m for m in METHODS if not m.endswith("dapo")])
def test_grpo_presets_keep_verls_defaults_for_those_three(method):
    actor = _compose(f"method={method}").actor_rollout_ref.actor
    assert (actor.optim.weight_decay, actor.optim.lr_warmup_steps, actor.clip_ratio_c) == (0.01, -1, 3.0)


def test_cpu_preset_mirrors_the_cpu_override_list():
    cfg = _compose("platform=cpu")
    for item in CPU_OVERRIDES:
        key, value = item.lstrip("+").split("=", 1)
        got = OmegaConf.select(cfg, key)
        assert str(got) == value or str(got).lower() == value.lower(), (key, got, value)


def test_the_cold_group_draw_is_a_strategy_option():
    cfg = _compose("method=heapa_grpo", "heapa.teacher.model=judge", "++heapa.selection.kwargs.cold_draw=signal",
                   "++heapa.selection.kwargs.cold_group_key=extra_info.level")
    s = _settings(cfg)
    assert (s.pool.cold_draw, s.pool.cold_group_key) == ("signal", "extra_info.level")


@pytest.mark.parametrize(
    "override, needle",
    [
        ("heapa.pool.low_fraction=2.0", "heapa.pool.low_fraction"),
        ("++heapa.selection.kwargs.low_fraction=2.0", "heapa.selection.kwargs.low_fraction"),
        ("++heapa.selection.kwargs.cold_fracton=0.3", "unknown keys"),
        ("++heapa.selection.kwargs.cold_draw=topic", "heapa.selection.kwargs.cold_draw"),
        ("heapa.selection.name=nope", "heapa.selection.name"),
        ("heapa.lineage.method=mean", "heapa.lineage"),
        ("heapa.platform=tpu", "heapa.platform"),
        ("heapa.augmentation.num_per_prompt=0", "heapa.augmentation"),
        ("heapa.teacher.model=''", "model"),
        ("+heapa.typo=1", "unknown keys"),
        ("heapa.ar3po.reuse.mode=swap", "heapa.ar3po"),
        ("+heapa.ar3po.k2=3", "heapa.ar3po"),
        ("heapa.hive.tail_tokens=-1", "heapa.hive"),
        ("heapa.allocation.minimum=0", "heapa.allocation.minimum"),
    ],
)
def test_bad_values_fail_with_the_key_named(override, needle):
    cfg = _compose("method=heapa_dapo", "heapa.teacher.model=judge", override)
    with pytest.raises(HeapaConfigError, match=needle):
        _settings(cfg)


@pytest.mark.parametrize("method", ["ar3po_grpo", "reinforce_ada"])
def test_allocation_and_a_staged_rollout_are_one_or_the_other(method):
    staged = "ar3po" if method.startswith("ar3po") else "reinforce_ada"
    with pytest.raises(HeapaConfigError, match=rf"heapa\.allocation\.enabled.*heapa\.{staged}\.enabled.*pick one"):
        _settings(_compose(f"method={method}", "actor_rollout_ref.rollout.n=16", "heapa.allocation.enabled=true"))
    cfg = _compose("method=heapa_grpo", "heapa.teacher.model=judge", "heapa.allocation.enabled=true")
    assert _settings(cfg).allocation.enabled


def test_prepare_forwards_platform_and_wandb_tags_to_ray_workers(monkeypatch):
    from recipe.heapa.main_heapa import prepare

    for key in ("WANDB_TAGS", "WANDB_RUN_GROUP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # prepare() selects it for platform=cpu; keep the test hermetic
    cfg = _compose("method=heapa_grpo", "platform=cpu", "heapa.method=heapa_grpo", "trainer.logger=[console,wandb]",
                   "heapa.teacher.backend=programmatic",
                   "trainer.project_name=cmp", "actor_rollout_ref.model.path=/nonexistent",
                   "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                   "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                   "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
                   "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8")
    prepare(cfg)
    env = cfg.ray_kwargs.ray_init.runtime_env.env_vars
    assert env.VERL_PLATFORM == "cpu" and env.VERL_ENGINE_DEVICE == "cuda"
    assert env.WANDB_RUN_GROUP == "cmp/heapa_grpo"
    assert "method:heapa_grpo" in env.WANDB_TAGS.split(",") and "selection:boundary" in env.WANDB_TAGS


@pytest.mark.parametrize("name", available_strategies())
def test_heapa_seed_reaches_every_strategy_that_takes_one(name):
    """``heapa.seed`` used to stop at the pool: every strategy ran on its default seed 0."""
    import inspect

    takes_seed = "seed" in inspect.signature(get_strategy_class(name)).parameters
    kwargs = strategy_kwargs(name, {}, seed=7)
    assert ("seed" in kwargs) == takes_seed
    if not takes_seed:
        return
    assert kwargs["seed"] == 7
    required = {"true_pass_rate": lambda ids: ids * 0.0} if name == "oracle" else {}  # simulator-only strategy
    seeded = build_strategy(name, **required, **kwargs).state_dict()
    assert seeded == build_strategy(name, **required, seed=7).state_dict()
    assert seeded != build_strategy(name, **required, seed=0).state_dict()
    assert strategy_kwargs(name, {"seed": 3}, seed=7)["seed"] == 3  # the user's own kwargs win


def test_recipe_wiring_reaches_only_strategies_that_declare_it():
    probe = lambda ids: {i: 1.0 for i in ids}  # noqa: E731
    assert strategy_kwargs("hive", {}, 0, prompt_entropy=probe)["prompt_entropy"] is probe
    assert "prompt_entropy" not in strategy_kwargs("uniform", {}, 0, prompt_entropy=probe)
    assert "prompt_entropy" not in strategy_kwargs("hive", {}, 0, prompt_entropy=None)


def test_signal_rows_needs_a_sequence_mean_loss_and_a_known_value():
    from recipe.heapa.main_heapa import prepare

    cfg = _compose("method=dapo", "platform=cpu", "heapa.method=dapo", "heapa.update.sequence_mean_over=signal_rows")
    with pytest.raises(HeapaConfigError, match="signal_rows needs a sequence-mean .*token-mean"):
        prepare(cfg)
    with pytest.raises(HeapaConfigError, match=r"heapa\.update\.sequence_mean_over must be one of"):
        _settings(_compose("method=grpo", "platform=cpu", "heapa.update.sequence_mean_over=tokens"))
    assert _settings(_compose("method=grpo", "platform=cpu")).update.sequence_mean_over == "all_rows"


@pytest.mark.parametrize(("method", "extra", "key"), [
    ("ar3po_grpo", [], r"heapa\.ar3po\.enabled with trainer\.v1\.trainer_mode=colocate_async: AR3PO"),
    ("reinforce_ada", [], r"heapa\.reinforce_ada\.enabled"),
    ("hive_grpo", [], r"heapa\.hive\.verify"),
    ("grpo", ["heapa.allocation.enabled=true"], r"heapa\.allocation\.enabled"),
    ("grpo", ["+trainer.v1.colocate_async.parameter_sync_step=2"],
     r"trainer\.v1\.colocate_async\.parameter_sync_step=2"),
])
def test_colocate_async_refuses_what_it_does_not_run_naming_the_key(method, extra, key):
    from recipe.heapa.trainer_mode import check_trainer_mode

    cfg = _compose(f"method={method}", "platform=cpu", "actor_rollout_ref.rollout.n=8",
                   "heapa.teacher.backend=programmatic", "trainer.v1.trainer_mode=colocate_async", *extra)
    with pytest.raises(HeapaConfigError, match=key):
        check_trainer_mode(cfg, _settings(cfg))


@pytest.mark.parametrize("method", ["grpo", "heapa_grpo", "ps", "dapo", "heapa_dapo"])
def test_colocate_async_starts_for_the_pool_presets(method):
    from recipe.heapa.trainer_mode import check_trainer_mode
    from recipe.heapa.trainer import HeapaColocateAsyncTrainer, HeapaTrainer, trainer_class

    cfg = _compose(f"method={method}", "platform=cpu", "heapa.teacher.backend=programmatic",
                   "trainer.v1.trainer_mode=colocate_async")
    check_trainer_mode(cfg, _settings(cfg))
    assert trainer_class(cfg.trainer.v1.trainer_mode) is HeapaColocateAsyncTrainer
    assert trainer_class("sync") is HeapaTrainer


def test_an_overlong_buffer_longer_than_the_responses_fails_at_start_naming_the_keys():
    """verl's reward workers refuse it only once Ray has started them, and the run then dies in the replay buffer
    ("no materializable trajectories"), far from the cause."""
    from recipe.heapa.main_heapa import prepare

    cfg = _compose("method=dapo", "platform=cpu", "heapa.method=dapo", "data.max_response_length=16")
    with pytest.raises(HeapaConfigError, match=r"overlong_buffer\.len=4096 must lie in \[0, "
                                               r"data\.max_response_length=16\]"):
        prepare(cfg)
