"""The GPU launchers' start-up environment, checked with ``FORCE_GPU=1 DRY_RUN=1`` (stderr; stdout stays the
overrides): wandb online only when this node has a key, offline with a ``wandb sync`` hint otherwise; the GPU memory
estimate when the model's config.json is on this machine, a one-line note how to run it when it is not."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
QWEN3_4B = REPO / "tests" / "unit" / "gpu_plan" / "qwen3_4b_config.json"


def launch(home: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    run_env = dict(os.environ, DRY_RUN="1", FORCE_GPU="1", TEACHER_MODEL="judge", HOME=str(home), GPU_PLAN="0",
                   HF_HOME=str(home / "hf"))
    run_env.update(env)
    for key in ("FORCE_CPU", "WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "NETRC", "HF_HUB_CACHE"):
        if key not in env:
            run_env.pop(key, None)
    return subprocess.run(["bash", str(REPO / "scripts" / "run_grpo_qwen.sh"), *extra], env=run_env,
                          capture_output=True, text=True, check=True, timeout=120)


def test_wandb_offline_without_a_key(tmp_path):
    out = launch(tmp_path, CKPT_DIR=str(tmp_path / "ckpt"))
    assert "[verl-heapa] WANDB_MODE=offline" in out.stderr
    hint = next(line for line in out.stderr.splitlines() if "wandb sync" in line)
    assert f"wandb sync {tmp_path / 'ckpt'}/wandb/offline-run-*" in hint
    assert all("=" in line and not line.startswith("[") for line in out.stdout.splitlines())  # overrides only


def test_wandb_online_with_a_key_in_env_or_netrc(tmp_path):
    assert "WANDB_MODE=online" in launch(tmp_path, WANDB_API_KEY="x" * 40).stderr
    (tmp_path / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "x" * 40 + "\n")
    out = launch(tmp_path)
    assert "WANDB_MODE=online" in out.stderr and "wandb sync" not in out.stderr


def test_explicit_wandb_mode_and_no_wandb_logger(tmp_path):
    assert "WANDB_MODE=disabled" in launch(tmp_path, WANDB_MODE="disabled").stderr
    assert "WANDB_MODE" not in launch(tmp_path, LOGGERS="[console,file]").stderr


def test_memory_estimate_when_the_config_is_local(tmp_path):
    model = tmp_path / "Qwen3-4B"
    model.mkdir()
    (model / "config.json").write_text(QWEN3_4B.read_text())
    out = launch(tmp_path, GPU_PLAN="1", MODEL_PATH=str(model), GPU_GB="48")
    assert "## GPU memory plan: grpo on 8 x 48 GiB" in out.stderr and "| actor update |" in out.stderr
    assert "## GPU memory plan" not in out.stdout


def test_note_when_the_model_is_a_hub_name_not_cached(tmp_path):
    out = launch(tmp_path, GPU_PLAN="1")
    note = [line for line in out.stderr.splitlines() if "GPU memory estimate" in line]
    assert len(note) == 1 and "--model-config" in note[0] and "Qwen/Qwen3-4B-Instruct-2507" in note[0]


def test_a_cached_hub_model_is_found(tmp_path):
    snap = tmp_path / "hf" / "hub" / "models--Qwen--Qwen3-4B-Instruct-2507" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(json.loads(QWEN3_4B.read_text())))
    out = launch(tmp_path, GPU_PLAN="1")
    assert "## GPU memory plan: grpo on 8 x 80 GiB" in out.stderr and str(snap / "config.json") in out.stderr
