"""A launcher run on a machine without a GPU, killed with SIGKILL and started again, resumes and keeps the killed
attempt's metrics.

The README's main command itself (``bash scripts/run_heapa_dapo_qwen.sh`` falling back to the embedded default,
saying so, and training with pool and augmentation metrics at every step) is run as written by
``test_readme_cpu_walk.py``, which checks what a short run of it must leave.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _train_steps(lines: list[dict]) -> list[int]:
    """Steps of the training lines (validation-only lines carry no feedback metrics)."""
    return [row["step"] for row in lines if "feedback/n_records" in row["data"]]


def test_a_killed_and_resumed_launcher_run_keeps_every_attempts_metrics(tiny_assets, repo_root, e2e_runner,
                                                                        tmp_path):
    """kill -9 after step 3 (last checkpoint: step 2), then the same command again: it resumes at step 3.

    The killed attempt's metrics (step 3 included) survive as metrics.attempt-1.jsonl; metrics.jsonl and the trace
    hold each training step exactly once.
    """
    out = tmp_path / "run"
    metrics = out / "metrics.jsonl"
    env = e2e_runner.trainer_env(metrics, {
        "FORCE_CPU": "1", "STEPS": "4", "OUT_DIR": str(out), "VERL_EXT_ASSETS": str(tiny_assets),
        "ASSETS_PROFILE": "tiny", "TRAIN_MAX_SAMPLES": "32", "PYTHON": sys.executable,
    })
    cmd = ["bash", str(repo_root / "scripts" / "run_heapa_grpo_qwen.sh"), "+ray_kwargs.ray_init.address=local",
           "data.val_max_samples=16", "trainer.save_freq=2", f"heapa.trace_file={out / 'trace.jsonl'}"]
    timeout = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))

    def step_3_logged() -> bool:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return any('"step":3' in line and "feedback/n_records" in line for line in lines)

    first = e2e_runner.run_until_killed(cmd, env=env, log_path=tmp_path / "attempt1.log", timeout_s=timeout,
                                        kill_when=step_3_logged, cwd=repo_root)
    assert first.returncode == -9, f"{first.summary()}\n{e2e_runner.tail(tmp_path / 'attempt1.log')}"
    assert (out / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    second = e2e_runner.run_logged(cmd, env=env, log_path=tmp_path / "attempt2.log", timeout_s=timeout,
                                   cwd=repo_root)
    assert not second.timed_out and second.returncode == 0, \
        f"{second.summary()}\n{e2e_runner.tail(tmp_path / 'attempt2.log')}"
    print(f"attempt 1: {first.summary()}; attempt 2: {second.summary()}")

    kept = e2e_runner.metric_lines(out / "metrics.attempt-1.jsonl")
    assert _train_steps(kept)[:3] == [1, 2, 3]  # the killed attempt's step 3 was not overwritten
    assert any(row["step"] == 0 and "val-core/arith/acc/mean@1" in row["data"] for row in kept)
    live = e2e_runner.metric_lines(metrics)
    assert _train_steps(live) == [1, 2, 3, 4]  # one history: steps 1-2 carried over, 3-4 from the resumed attempt
    carried = [row for row in kept if row["step"] <= 2]
    assert live[: len(carried)] == carried
    trace = [json.loads(line)["step"] for line in (out / "trace.jsonl").read_text().splitlines()]
    assert trace == [1, 2, 3, 4]
    trace_kept = [json.loads(line)["step"] for line in (out / "trace.attempt-1.jsonl").read_text().splitlines()]
    assert trace_kept[:3] == [1, 2, 3]
