"""The run_*_qwen.sh launchers: their Hydra overrides compose and validate, on GPU (paper scale) and CPU (embedded).

The GPU path cannot run here, so its argument list is checked the way the trainer would see it: composed with the
recipe config, validated by the recipe and by verl's own ``validate_config``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from recipe.heapa.settings import parse_settings

REPO = Path(__file__).resolve().parents[3]
CONFIG_DIR = str(REPO / "recipe" / "heapa" / "config")
SCRIPTS = {"heapa_dapo": "run_heapa_dapo_qwen.sh", "heapa_grpo": "run_heapa_grpo_qwen.sh", "grpo": "run_grpo_qwen.sh",
           "dapo": "run_dapo_qwen.sh", "ps": "run_ps_qwen.sh"}


def _dry_run(script: str, device: str, *extra: str, env: dict | None = None) -> list[str]:
    env = dict(os.environ, DRY_RUN="1", **{f"FORCE_{device.upper()}": "1"}, **(env or {}))
    out = subprocess.run(["bash", str(REPO / "scripts" / script), *extra], env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.splitlines()


@pytest.mark.parametrize("method", sorted(SCRIPTS))
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_launcher_overrides_compose_and_validate(method, device, monkeypatch):
    monkeypatch.setenv("TEACHER_MODEL", "judge-model")
    args = _dry_run(SCRIPTS[method], device, "trainer.total_training_steps=3")
    assert f"method={method}" in args and f"platform={device}" in args
    assert args[-1] == "trainer.total_training_steps=3"  # extra overrides pass through last
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=args)
    block = OmegaConf.to_container(cfg.heapa, resolve=False)
    block["method"] = method
    settings = parse_settings(OmegaConf.to_container(OmegaConf.create(block), resolve=True))
    assert settings.platform == device
    if device == "gpu":
        assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.data.train_batch_size == 512
        assert cfg.actor_rollout_ref.rollout.n == 16 and cfg.actor_rollout_ref.actor.optim.lr == 1e-6
        if method.startswith("heapa"):
            assert settings.teacher.backend == "openai" and settings.teacher.model == "judge-model"
    else:
        assert cfg.actor_rollout_ref.rollout.name == "hf"
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with open_dict(cfg):
        cfg.heapa.method = method
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


@pytest.mark.parametrize("method", ["grpo", "dapo", "ps"])
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_methods_without_augmentation_need_no_teacher_model(method, device, monkeypatch):
    monkeypatch.delenv("TEACHER_MODEL", raising=False)
    args = _dry_run(SCRIPTS[method], device)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=args)
    block = OmegaConf.to_container(cfg.heapa, resolve=False)
    block["method"] = method
    settings = parse_settings(OmegaConf.to_container(OmegaConf.create(block), resolve=True))
    assert not settings.augmentation.enabled and settings.teacher.backend == "programmatic"


def test_tilde_paths_are_expanded_even_inside_quoted_lists(tmp_path):
    env = {"HOME": str(tmp_path), "TRAIN_FILE": "~/data/train.parquet", "MODEL_PATH": "~/models/m",
           "VAL_FILES": "[~/eval/aime24.parquet,~/eval/math500.parquet]", "CKPT_DIR": "~/ckpt"}
    args = _dry_run(SCRIPTS["heapa_dapo"], "gpu", env=env)
    assert f"data.train_files={tmp_path}/data/train.parquet" in args
    assert f"data.val_files=[{tmp_path}/eval/aime24.parquet,{tmp_path}/eval/math500.parquet]" in args
    assert f"actor_rollout_ref.model.path={tmp_path}/models/m" in args
    assert f"trainer.default_local_dir={tmp_path}/ckpt" in args
    assert not any("~" in a for a in args)
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):  # and Hydra's grammar accepts them
        cfg = compose(config_name="heapa_trainer", overrides=args)
    assert list(cfg.data.val_files) == [f"{tmp_path}/eval/aime24.parquet", f"{tmp_path}/eval/math500.parquet"]


def test_gpu_runs_also_write_metrics_to_a_file():
    assert "trainer.logger=[console,wandb,file]" in _dry_run(SCRIPTS["grpo"], "gpu")


def test_cpu_runs_log_to_the_console_a_file_and_offline_wandb():
    args = _dry_run(SCRIPTS["grpo"], "cpu")
    assert "trainer.logger=[console,file,wandb]" in args  # WANDB_DIR=<OUT>: outputs/<exp>/wandb, WANDB_MODE=offline
    assert "trainer.logger=[console,file]" in _dry_run(SCRIPTS["grpo"], "cpu", env={"LOGGERS": "[console,file]"})
    assert not any(a.startswith("data.val_batch_size=") for a in args)  # deprecated in verl 0.9.1: a notice per run
