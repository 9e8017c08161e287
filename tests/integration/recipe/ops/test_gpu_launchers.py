"""The GPU path's first run, checked without a GPU: what every launcher needs is in the GPU set and sized to fit.

No GPU is lent to CI, so the checks read what the run would meet: the overrides of every launcher under
``FORCE_GPU=1``, composed with the recipe and passed through the recipe's own start-up rules (``gpu_fit``), verl's
``RolloutConfig`` built from them, and ``scripts/constraints-gpu.txt`` (the set the ``gpu`` extra resolves to, by
pip's report; ``scripts/lock_gpu.sh``). Each check fails on the configuration that made the first run fail:
verl's default ``flash_attention_2`` without flash-attn in the set, vLLM sized for the model's whole context.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from recipe.heapa.ops.gpu_fit import ATTN_KEY, NEEDS_MODULE, PACKED_OK, fit_attention, fit_context, fit_gpu
from recipe.heapa.settings import parse_settings

REPO = Path(__file__).resolve().parents[4]
CONFIG_DIR = str(REPO / "recipe" / "heapa" / "config")
LOCK = REPO / "scripts" / "constraints-gpu.txt"
# every preset, through the script a user runs for it (METHOD picks among a script's presets)
LAUNCHERS = {
    "grpo": ("run_grpo_qwen.sh", None), "dapo": ("run_dapo_qwen.sh", None), "ps": ("run_ps_qwen.sh", None),
    "heapa_grpo": ("run_heapa_grpo_qwen.sh", None), "heapa_dapo": ("run_heapa_dapo_qwen.sh", None),
    "ar3po_grpo": ("run_ar3po_qwen.sh", "ar3po_grpo"), "ar3po_dapo": ("run_ar3po_qwen.sh", "ar3po_dapo"),
    "heapa_ar3po": ("run_ar3po_qwen.sh", "heapa_ar3po"),
    "hive_grpo": ("run_hive_qwen.sh", "hive_grpo"), "hive_dapo": ("run_hive_qwen.sh", "hive_dapo"),
    **{m: ("run_reinforce_ada_qwen.sh", m) for m in ("reinforce_ada", "reinforce_ada_dapo", "heapa_reinforce_ada")},
}
# the package that provides each module an attention implementation imports
MODULE_PACKAGE = {"flash_attn": "flash-attn", "flash_attn_interface": "flash-attn-3"}


@pytest.fixture(autouse=True)
def _teacher(monkeypatch):
    monkeypatch.setenv("TEACHER_MODEL", "judge-model")  # read by the recipe's YAML when composed here


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def gpu_set() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[_norm(name)] = version
    return pins


def in_gpu_set(module: str) -> bool:
    """``available`` for gpu_fit: would this module import in the environment the gpu extra resolves to?"""
    return _norm(MODULE_PACKAGE.get(module, module)) in gpu_set()


def dry_run(method: str, *extra: str, env: dict | None = None) -> list[str]:
    script, preset = LAUNCHERS[method]
    run_env = dict(os.environ, DRY_RUN="1", FORCE_GPU="1", TEACHER_MODEL="judge-model", **(env or {}))
    run_env.pop("FORCE_CPU", None)
    if preset:
        run_env["METHOD"] = preset
    out = subprocess.run(["bash", str(REPO / "scripts" / script), *extra], env=run_env, capture_output=True,
                         text=True, check=True, timeout=60)
    return out.stdout.splitlines()


def compose_cfg(args: list[str], method: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="heapa_trainer", overrides=args)
    with open_dict(cfg):
        cfg.heapa.method = method  # `${hydra:...}` resolves only inside a running Hydra app
    return cfg


def check_first_run(cfg) -> list[str]:
    """What would stop the first GPU run at model load or vLLM start-up; empty when nothing would."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import RolloutConfig

    problems = []
    model = cfg.actor_rollout_ref.model
    impl = (model.get("override_config") or {}).get("attn_implementation", "flash_attention_2")  # verl's default
    module = NEEDS_MODULE.get(impl)
    if module and not in_gpu_set(module):
        problems.append(f"attention {impl} needs {MODULE_PACKAGE[module]}, which the gpu set does not install")
    if model.get("use_remove_padding") and impl not in PACKED_OK:
        problems.append(f"use_remove_padding with {impl}: a packed batch needs flash attention or sdpa")
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # as verl's workers build it (its _target_)
    assert isinstance(rollout, RolloutConfig)
    need = cfg.data.max_prompt_length + cfg.data.max_response_length
    if rollout.max_model_len is None:
        problems.append("rollout.max_model_len unset: vLLM reserves the model's whole context")
    elif rollout.max_model_len < need:
        problems.append(f"rollout.max_model_len {rollout.max_model_len} < prompt + response {need}")
    return problems


def test_gpu_set_is_verl_vllm_set_without_flash_attn():
    pins = gpu_set()
    assert pins["verl"] == "0.9.1" and pins["vllm"] == "0.24.0" and pins["torch"] == "2.11.0"
    assert pins["transformers"].startswith("5.")
    assert any(name.startswith("nvidia-") and name.endswith("cu13") for name in pins), "torch's CUDA 13 wheels"
    assert "flash-attn" not in pins  # if a future set brings it, the launchers' auto choice takes it
    assert "verl-heapa" not in pins


@pytest.mark.parametrize("method", sorted(LAUNCHERS))
def test_every_gpu_launcher_fits_the_gpu_set(method, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "flash_attn", raising=False)
    args = dry_run(method)
    assert f"method={method}" in args and "platform=gpu" in args
    cfg = compose_cfg(args, method)
    settings = parse_settings(OmegaConf.to_container(cfg.heapa, resolve=True))
    assert settings.platform == "gpu"
    if method.startswith("heapa"):  # a runaway teacher reply is bounded, not left to run into the timeout
        assert settings.teacher.backend == "openai" and settings.teacher.max_tokens == 1024
    chosen = fit_gpu(cfg, available=in_gpu_set)  # what main_heapa.prepare does on platform=gpu
    # packed sdpa: padded rows would pad a 24k-token micro-batch to rows x its longest (tests/integration/gpu_plan)
    assert chosen["attn_implementation"] == "sdpa" and chosen["use_remove_padding"] is True
    assert chosen["max_model_len"] == 2048 + 20480
    assert check_first_run(cfg) == []
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_the_check_catches_verls_defaults():
    """Without the launcher's and recipe's settings, verl's defaults fail both checks (today's main did)."""
    cfg = compose_cfg(["method=grpo", "platform=gpu", "actor_rollout_ref.model.use_remove_padding=True",
                       "actor_rollout_ref.rollout.name=vllm"], "grpo")
    problems = check_first_run(cfg)
    assert any("flash_attention_2 needs flash-attn" in p for p in problems)
    assert any("max_model_len unset" in p for p in problems)
    fit_gpu(cfg, available=in_gpu_set)
    assert check_first_run(cfg) == []


def test_lengths_from_the_environment_size_vllm():
    args = dry_run("heapa_dapo", env={"MAX_PROMPT_LENGTH": "1024", "MAX_RESPONSE_LENGTH": "8192"})
    assert "actor_rollout_ref.rollout.max_model_len=9216" in args
    assert check_first_run(compose_cfg(args, "heapa_dapo")) == []


def test_flash_attention_is_chosen_when_it_imports(tmp_path):
    (tmp_path / "flash_attn").mkdir()
    (tmp_path / "flash_attn" / "__init__.py").write_text("")
    args = dry_run("grpo", env={"PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"})
    assert "++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2" in args
    assert "actor_rollout_ref.model.use_remove_padding=True" in args
    sdpa = dry_run("grpo")
    assert "++actor_rollout_ref.model.override_config.attn_implementation=sdpa" in sdpa
    assert "actor_rollout_ref.model.use_remove_padding=True" in sdpa
    eager = dry_run("grpo", env={"ATTN_IMPL": "eager"})
    assert "++actor_rollout_ref.model.override_config.attn_implementation=eager" in eager
    assert "actor_rollout_ref.model.use_remove_padding=False" in eager


def test_fit_attention_rules():
    base = ["method=grpo", "platform=gpu"]
    cfg = compose_cfg(base + ["actor_rollout_ref.model.use_remove_padding=True"], "grpo")
    assert fit_attention(cfg, available=lambda m: True) == "flash_attention_2"
    assert cfg.actor_rollout_ref.model.use_remove_padding is True
    cfg = compose_cfg(base + ["actor_rollout_ref.model.use_remove_padding=True"], "grpo")
    assert fit_attention(cfg, available=lambda m: False) == "sdpa"
    assert cfg.actor_rollout_ref.model.use_remove_padding is True  # packed sdpa
    cfg = compose_cfg(base + ["actor_rollout_ref.model.use_remove_padding=True"], "grpo")
    assert fit_attention(cfg, available=lambda m: False, packs=lambda: False) == "sdpa"
    assert cfg.actor_rollout_ref.model.use_remove_padding is False  # a transformers without packed masks
    cfg = compose_cfg(base + ["actor_rollout_ref.model.use_remove_padding=True", f"++{ATTN_KEY}=eager"], "grpo")
    assert fit_attention(cfg, available=lambda m: False) == "eager"
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    cfg = compose_cfg(base + [f"++{ATTN_KEY}=flash_attention_2"], "grpo")
    with pytest.raises(ValueError, match=re.escape(ATTN_KEY)):
        fit_attention(cfg, available=lambda m: False)


def test_fit_context_rules():
    cfg = compose_cfg(["method=grpo", "platform=gpu", "data.max_prompt_length=100", "data.max_response_length=50"],
                      "grpo")
    assert fit_context(cfg) == 150 and cfg.actor_rollout_ref.rollout.max_model_len == 150
    cfg.actor_rollout_ref.rollout.max_model_len = 120
    with pytest.raises(ValueError, match="actor_rollout_ref.rollout.max_model_len=120"):
        fit_context(cfg)
    cfg.actor_rollout_ref.rollout.max_model_len = 4096
    assert fit_context(cfg) == 4096


def test_sdpa_model_loads_where_flash_attention_would_not(tiny_assets):
    """verl's own model config with the launcher's choice builds a model on a machine without flash-attn."""
    from transformers import AutoModelForCausalLM

    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import HFModelConfig

    args = dry_run("heapa_grpo", f"actor_rollout_ref.model.path={tiny_assets / 'model'}")
    cfg = compose_cfg(args, "heapa_grpo")
    fit_gpu(cfg, available=in_gpu_set)
    model_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.model, dataclass_type=HFModelConfig)
    assert model_cfg.hf_config._attn_implementation == "sdpa"
    AutoModelForCausalLM.from_config(model_cfg.hf_config)  # flash_attention_2 here raises ImportError
    with open_dict(cfg):
        cfg.actor_rollout_ref.model.override_config.attn_implementation = "flash_attention_2"
    fa_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.model, dataclass_type=HFModelConfig)
    with pytest.raises(ImportError, match="(?i)flash"):
        AutoModelForCausalLM.from_config(fa_cfg.hf_config)


def _pypi_reachable() -> bool:
    import urllib.request

    try:
        urllib.request.urlopen("https://pypi.org/simple/verl/", timeout=10).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_the_gpu_extra_resolves_to_the_gpu_set(tmp_path):
    """pip's own report (``--dry-run``: nothing is downloaded beyond metadata, nothing installed) for
    ``.[test,gpu]`` with the constraints file is exactly the set the checks above read: the file is not stale.
    ~1 min with pip >= 25, which reads the index's metadata files (``setup_env.sh`` upgrades pip; pip 23 downloads
    3.4 GB of wheels for this); needs the package index."""
    if not _pypi_reachable():
        pytest.skip("the package index is not reachable from here")
    import json

    report = tmp_path / "report.json"
    subprocess.run([__import__("sys").executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                    "--quiet", "--report", str(report), "-c", str(LOCK), f"{REPO}[test,gpu]"],
                   check=True, timeout=900, capture_output=True, text=True,
                   env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_CACHE_DIR=str(tmp_path / "cache")))
    resolved = {_norm(i["metadata"]["name"]): i["metadata"]["version"]
                for i in json.loads(report.read_text())["install"]}
    resolved.pop("verl-heapa")
    assert resolved == gpu_set()


def test_gpu_smoke_runs_compose_and_fit(monkeypatch):
    """scripts/gpu_smoke.sh's runs (every preset, one GPU, the project's assets) pass the same checks."""
    monkeypatch.delenv("DRY_RUN", raising=False)
    out = subprocess.run(["bash", str(REPO / "scripts" / "gpu_smoke.sh")], env=dict(os.environ, SMOKE_DRY_RUN="1"),
                         capture_output=True, text=True, check=True, timeout=300).stdout
    runs = {}
    for block in out.split("### ")[1:]:
        name, *args = block.strip().splitlines()
        runs[name] = args
    assert sorted(runs) == sorted(LAUNCHERS)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    for method, args in runs.items():
        cfg = compose_cfg(args, method)
        assert cfg.trainer.n_gpus_per_node == 1 and cfg.actor_rollout_ref.rollout.name == "vllm", method
        assert cfg.actor_rollout_ref.rollout.max_model_len == 64 + 16, method
        fit_gpu(cfg, available=in_gpu_set)
        assert check_first_run(cfg) == [], method
        validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


@pytest.mark.parametrize("method", ["dapo", "heapa_dapo", "grpo"])
def test_dapo_warm_up_on_gpu_none_in_the_short_cpu_default(method):
    """The DAPO presets keep verl's DAPO recipe (10 warm-up steps) on GPU; the 40-step CPU default runs every method
    on GRPO's schedule (no warm-up) so its comparison stays like for like (docs/presets.md)."""
    gpu = compose_cfg(dry_run(method), method).actor_rollout_ref.actor.optim.lr_warmup_steps
    assert gpu == (10 if "dapo" in method else -1)
    cpu_env = dict(os.environ, DRY_RUN="1", FORCE_CPU="1")
    cpu_env.pop("FORCE_GPU", None)
    args = subprocess.run(["bash", str(REPO / "scripts" / LAUNCHERS[method][0])], env=cpu_env, capture_output=True,
                          text=True, check=True, timeout=60).stdout.splitlines()
    assert compose_cfg(args, method).actor_rollout_ref.actor.optim.lr_warmup_steps == -1
