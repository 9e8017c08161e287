"""scripts/run_ar3po_qwen.sh, run_hive_qwen.sh and run_reinforce_ada_qwen.sh: their overrides compose, validate and set the method's
knobs, on GPU (paper scale) and CPU (embedded default); a wrong METHOD fails before anything starts."""

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
CASES = [("run_ar3po_qwen.sh", m) for m in ("ar3po_grpo", "ar3po_dapo", "heapa_ar3po")] + \
        [("run_hive_qwen.sh", m) for m in ("hive_grpo", "hive_dapo")] + \
        [("run_reinforce_ada_qwen.sh", m) for m in ("reinforce_ada", "reinforce_ada_dapo", "heapa_reinforce_ada")]


def _dry_run(script: str, device: str, *extra: str, method: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, DRY_RUN="1", TEACHER_MODEL="judge-model", **{f"FORCE_{device.upper()}": "1"})
    env.pop("METHOD", None)
    if method:
        env["METHOD"] = method
    return subprocess.run(["bash", str(REPO / "scripts" / script), *extra], env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("script, method", CASES)
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_launcher_composes_validates_and_sets_the_stages(script, method, device, monkeypatch):
    monkeypatch.setenv("TEACHER_MODEL", "judge-model")  # heapa_ar3po augments on GPU: the teacher needs a model
    out = _dry_run(script, device, "trainer.total_training_steps=3", method=method)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert f"method={method}" in args and args[-1] == "trainer.total_training_steps=3"
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=args)
    with open_dict(cfg):
        cfg.heapa.method = method
    s = parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))
    n = cfg.actor_rollout_ref.rollout.n
    if "ar3po" in method:
        assert s.ar3po.enabled and s.ar3po.max_per_prompt == n
        # GPU: stages of 4 up to GRPO's n=16; CPU: stages of 4 up to the embedded default's n=8 (the settings the
        # CPU comparison measured); every preset extends mixed groups, heapa_ar3po too (docs/ar3po.md)
        ceiling = 16 if device == "gpu" else 8
        assert (n, s.ar3po.k1, s.ar3po.k_s, s.ar3po.max_responses()) == (ceiling, 4, 4, ceiling)
        assert s.ar3po.extend == "mixed"
    elif "reinforce_ada" in method:  # the kept group is GRPO's n; rounds of n up to 4n
        assert s.reinforce_ada.enabled and not s.ar3po.enabled and n == (16 if device == "gpu" else 8)
        assert s.reinforce_ada.exit == "balanced" and s.reinforce_ada.sizes(n) == (n, 4 * n)
        assert s.selection_name == ("boundary" if method.startswith("heapa") else "uniform")
    else:
        assert s.selection_name == "hive" and s.hive.verify and not s.ar3po.enabled
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_default_methods_and_user_overrides_win():
    ar3po = _dry_run("run_ar3po_qwen.sh", "cpu", "heapa.ar3po.k1=1").stdout.splitlines()
    assert "method=ar3po_grpo" in ar3po and ar3po[-1] == "heapa.ar3po.k1=1"  # the user's override comes last
    assert "method=hive_grpo" in _dry_run("run_hive_qwen.sh", "cpu").stdout.splitlines()


@pytest.mark.parametrize("script", ["run_ar3po_qwen.sh", "run_hive_qwen.sh"])
def test_a_method_of_another_family_is_refused(script):
    out = _dry_run(script, "cpu", method="grpo")
    assert out.returncode == 2 and "METHOD must be" in out.stderr
