"""Plain GRPO through verl's real trainer (``python -m verl.trainer.main_ppo``) on the CPU backend.

One run: 2 steps, validation and a checkpoint at step 2. (Resuming is the recipe's to check, where it restores more
than verl's state: ``tests/e2e/test_pinned_run.py`` resumes a run and checks that the restored weights reach the fresh
rollout server the same way, ``training/rollout_probs_diff_max`` after the resume; the launcher tests resume with
``resume_mode=auto``.)

Checked from verl's JSONL metrics (``trainer.logger=[console,file]``), i.e. real effects, not exit codes:
- the policy moved: ``actor/grad_norm`` > 0 at step 1 or 2 (warm-started assets give mixed-reward groups; with
  8 groups of 8 one step whose every group is all-right or all-wrong is possible, two in a row is not);
- the rollout serves the *updated* policy: ``training/rollout_probs_diff_max`` (max |p_rollout - p_actor| over
  sampled tokens) < 1e-4 at steps 2 and 3. Everything runs in fp32, so a synced rollout differs by ~1e-6; with
  lr 1e-3, weights that silently stop reaching the rollout leave a difference of ~0.7 (measured; docs/cpu_backend.md);
- validation ran at step 2 (``val-core/arith/acc/mean@1``);
- the checkpoint is on disk (``global_step_2/actor``, ``global_step_2/data.pt``, ``latest_checkpointed_iteration.txt``).

Each run is a subprocess in its own session with a hard wall-clock limit (a Ray resource shortfall hangs rather
than fails); on failure the last 80 lines of its log are shown. ``VERL_EXT_E2E_TIMEOUT`` (seconds, default 600)
sets the limit per run.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from verl_ext.cpu.overrides import CPU_OVERRIDES

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN_TIMEOUT_S = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
SYNC_BOUND = 1e-4  # synced fp32 rollout: ~8e-7; rollout left on stale weights at lr 1e-3: ~0.7
SAVE_STEP = 2


def grpo_overrides(assets: Path, ckpt_dir: Path, *, total_steps: int, resume: str) -> list[str]:
    """Plain GRPO on the tiny arithmetic task; the project's own reward manager (``heapa``) scores it."""
    return [
        *CPU_OVERRIDES,
        "+ray_kwargs.ray_init.address=local",  # a fresh local cluster, even if another one is running here
        "algorithm.adv_estimator=grpo",
        f"data.train_files={assets / 'data' / 'train.parquet'}",
        f"data.val_files={assets / 'data' / 'val.parquet'}",
        "data.train_batch_size=8",
        "data.val_batch_size=32",
        "data.val_max_samples=32",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        f"actor_rollout_ref.model.path={assets / 'model'}",
        "actor_rollout_ref.actor.optim.lr=1e-3",  # large enough that one update visibly moves probabilities
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.n=8",  # with 4, CI once drew 8 all-equal groups at step 1 (score mean 0.125)
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        "reward.reward_manager.source=register",
        "reward.reward_manager.name=heapa",
        "trainer.logger=[console,file]",
        "trainer.project_name=verl_ext_e2e",
        "trainer.experiment_name=grpo_cpu",
        f"trainer.total_training_steps={total_steps}",
        f"trainer.save_freq={SAVE_STEP}",
        f"trainer.test_freq={SAVE_STEP}",
        "trainer.val_before_train=False",
        f"trainer.default_local_dir={ckpt_dir}",
        f"trainer.resume_mode={resume}",
    ]


class TrainerRun:
    """One finished ``main_ppo`` subprocess: its result, metrics per step and a failure helper."""

    def __init__(self, runner, name: str, workdir: Path, assets: Path, ckpt_dir: Path, *, total_steps: int,
                 resume: str):
        self.name = name
        self.metrics_path = workdir / f"{name}.metrics.jsonl"
        cmd = runner.main_ppo_command(grpo_overrides(assets, ckpt_dir, total_steps=total_steps, resume=resume))
        self.result = runner.run_logged(cmd, env=runner.trainer_env(self.metrics_path),
                                        log_path=workdir / f"{name}.log", timeout_s=RUN_TIMEOUT_S, cwd=workdir)
        self._tail = runner.tail
        print(f"[e2e {name}] {self.result.summary()} log={self.result.log_path}")
        (workdir / f"{name}.report.json").write_text(json.dumps({
            "wall_s": round(self.result.wall_s, 1), "peak_pss_gib": round(self.result.peak_pss_bytes / 2**30, 2),
            "peak_rss_sum_gib": round(self.result.peak_rss_bytes / 2**30, 2), "peak_procs": self.result.peak_procs,
            "returncode": self.result.returncode, "timed_out": self.result.timed_out,
            "stray_pids": self.result.stray_pids,
        }))
        self.steps = runner.read_metrics(self.metrics_path) if self.metrics_path.exists() else {}

    def fail(self, message: str) -> None:
        pytest.fail(f"[{self.name}] {message}\n{self.result.summary()}\n"
                    f"--- last 80 lines of {self.result.log_path} ---\n{self._tail(self.result.log_path, 80)}",
                    pytrace=False)

    def check(self, condition: bool, message: str) -> None:
        if not condition:
            self.fail(message)

    def require_success(self) -> None:
        if self.result.timed_out:
            self.fail(f"main_ppo did not finish within {RUN_TIMEOUT_S:.0f}s (a hang: Ray resources? "
                      "raise VERL_EXT_E2E_TIMEOUT on a slow machine)")
        self.check(self.result.returncode == 0, f"main_ppo exited with {self.result.returncode}")
        self.check(bool(self.steps), f"no metrics were logged to {self.metrics_path}")

    def check_no_strays(self) -> None:
        # the runner killed them already; a run that leaves a process behind is a defect all the same
        self.check(not self.result.stray_pids, f"processes outlived main_ppo by 15 s and were killed: "
                                               f"{self.result.stray_pids}")

    def metric(self, step: int, key: str) -> float:
        if step not in self.steps:
            self.fail(f"no metrics for step {step} (logged steps: {sorted(self.steps)})")
        if key not in self.steps[step]:
            near = sorted(k for k in self.steps[step] if key.split("/")[0] in k)[:20]
            self.fail(f"metric {key!r} missing at step {step}; related keys: {near}")
        value = float(self.steps[step][key])
        self.check(math.isfinite(value), f"{key} at step {step} is {value}")
        return value

    def check_synced(self, step: int) -> None:
        diff = self.metric(step, "training/rollout_probs_diff_max")
        self.check(diff < SYNC_BOUND,
                   f"rollout and actor disagree at step {step}: training/rollout_probs_diff_max={diff:.3g} >= "
                   f"{SYNC_BOUND:g} — the rollout server is not serving the updated policy (weight push broken?)")


@pytest.fixture(scope="module")
def e2e_dirs(tmp_path_factory) -> tuple[Path, Path]:
    workdir = tmp_path_factory.mktemp("grpo_cpu")
    return workdir, workdir / "ckpt"


@pytest.fixture(scope="module")
def first_run(e2e_runner, tiny_assets, e2e_dirs) -> TrainerRun:
    workdir, ckpt = e2e_dirs
    return TrainerRun(e2e_runner, "run1_steps1-2", workdir, tiny_assets, ckpt, total_steps=SAVE_STEP, resume="disable")


def test_grpo_trains_validates_and_checkpoints(first_run):
    run = first_run
    run.require_success()
    run.check(sorted(run.steps) == [1, 2], f"expected steps [1, 2], logged {sorted(run.steps)}")
    grads = [run.metric(s, "actor/grad_norm") for s in (1, 2)]
    run.check(max(grads) > 0, f"actor/grad_norm is 0 at steps 1 and 2 ({grads}): no learning signal "
                              "(all-equal rewards in every group?)")
    run.check_synced(1)
    run.check_synced(2)  # after step 1's update: only a working weight push keeps this tiny
    acc = run.metric(2, "val-core/arith/acc/mean@1")
    run.check(0.0 <= acc <= 1.0, f"validation accuracy {acc} out of range")
    ckpt = run.result.log_path.parent / "ckpt"
    for needed in ("latest_checkpointed_iteration.txt", "global_step_2/actor", "global_step_2/data.pt"):
        run.check((ckpt / needed).exists(), f"checkpoint incomplete: {ckpt / needed} missing")
    latest = (ckpt / "latest_checkpointed_iteration.txt").read_text().strip()
    run.check(latest == "2", f"latest_checkpointed_iteration.txt says {latest!r}, expected '2'")
    run.check_no_strays()
