"""The README's main command, ``bash scripts/run_heapa_dapo_qwen.sh``, on a machine without a GPU.

It must fall back to the embedded default (tiny assets, CPU backend), say so, and train: a short run (STEPS=2)
writes pool and augmentation metrics for both steps and a validation score before training.
"""

from __future__ import annotations

import os
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_main_command_runs_the_embedded_default(tiny_assets, repo_root, e2e_runner, tmp_path):
    out = tmp_path / "run"
    env = e2e_runner.trainer_env(out / "metrics.jsonl", {
        "FORCE_CPU": "1", "STEPS": "2", "OUT_DIR": str(out), "VERL_EXT_ASSETS": str(tiny_assets),
        "TRAIN_MAX_SAMPLES": "32", "PYTHON": sys.executable,
    })
    cmd = ["bash", str(repo_root / "scripts" / "run_heapa_dapo_qwen.sh"), "+ray_kwargs.ray_init.address=local",
           "data.val_max_samples=16"]
    timeout = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
    res = e2e_runner.run_logged(cmd, env=env, log_path=tmp_path / "launcher.log", timeout_s=timeout, cwd=repo_root)
    log = e2e_runner.tail(tmp_path / "launcher.log")
    assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{log}"
    assert "no GPU found: running the embedded default" in (tmp_path / "launcher.log").read_text()
    metrics = e2e_runner.read_metrics(out / "metrics.jsonl")
    assert {0, 1, 2} <= set(metrics)
    assert "val-core/arith/acc/mean@1" in metrics[0]
    for step in (1, 2):
        assert metrics[step]["feedback/n_records"] >= 8
        assert "pool/size_archive" in metrics[step] and "augment/fired" in metrics[step]
    assert (out / "ckpt" / "global_step_2" / "heapa_state.json").exists()  # verl saves at the last step
