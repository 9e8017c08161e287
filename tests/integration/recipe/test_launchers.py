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


def _dry_run(script: str, device: str, *extra: str) -> list[str]:
    env = dict(os.environ, DRY_RUN="1", **{f"FORCE_{device.upper()}": "1"})
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
