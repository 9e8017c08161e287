"""A scheduler's SIGTERM during a step: a complete checkpoint of that step within the grace period, exit code 75,
and the next start continues from it (``recipe/heapa/ops/preemption.py``).

Run P (``heapa_grpo``, 4 steps, no periodic checkpoint) gets SIGTERM on its driver once step 1 is logged. It must
finish the step in progress, write a complete checkpoint of it (manifest included), record the step in
``heapa_preempt.json`` and exit with ``heapa.run.requeue_exit_code`` (75) well inside ``heapa.run.grace_s``.
Run R1 is the same command started again (``resume_mode=auto``): it trains the remaining steps, one metrics
history 1-4, ``run/preempted`` 1. Run R2 resumes a copy of the same checkpoint for one step: it selects exactly
R1's first batch, so the checkpoint alone determines what the run does next (pool, sampler RNG, dataloader).
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GRACE_S = 240


def test_sigterm_checkpoints_the_step_and_the_next_start_continues(tiny_assets, repo_root, e2e_runner, tmp_path):
    out = tmp_path / "p"
    metrics = out / "metrics.jsonl"
    overrides = e2e_runner.recipe_overrides(tiny_assets, out, "heapa_grpo", steps=4, save_freq=100)
    overrides += [f"heapa.run.grace_s={GRACE_S}"]
    cmd = [sys.executable, "-m", "recipe.heapa.main_heapa", *overrides]
    out.mkdir(parents=True)

    def step_one_logged() -> bool:
        return metrics.exists() and any('"step":1' in line for line in metrics.read_text().splitlines())

    res, sent_at = e2e_runner.run_and_signal(cmd, env=e2e_runner.trainer_env(metrics), log_path=out / "run.log",
                                             timeout_s=600, signal_when=step_one_logged, cwd=repo_root)
    log = (out / "run.log").read_text(errors="replace")
    assert sent_at is not None, e2e_runner.tail(out / "run.log")
    assert not res.timed_out and res.returncode == 75, f"{res.summary()}\n{e2e_runner.tail(out / 'run.log')}"
    res.assert_no_strays()  # its Ray cluster went with it
    assert res.wall_s - sent_at < GRACE_S
    request = json.loads((out / "ckpt" / "heapa_preempt.json").read_text())
    step = request["saved_step"]
    assert request["signal"] == "SIGTERM" and 2 <= step < 4 and not request["final"]
    assert (out / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == str(step)
    assert (out / "ckpt" / f"global_step_{step}" / "heapa_manifest.json").exists()  # complete
    assert f"complete checkpoint at step {step}; training ends here" in log
    assert [row["step"] for row in e2e_runner.metric_lines(metrics)] == list(range(1, step + 1))
    print(f"preempted in step {step}: exit {res.returncode} {res.wall_s - sent_at:.0f} s after the signal")
    copy = tmp_path / "copy" / f"global_step_{step}"
    shutil.copytree(out / "ckpt" / f"global_step_{step}", copy)

    resume = [o for o in overrides if not o.startswith("trainer.resume_mode")] + ["trainer.resume_mode=auto"]
    e2e_runner.run_recipe(repo_root, out, resume)  # R1: the same command again, as a requeued job runs it
    lines = e2e_runner.metric_lines(metrics)
    assert [row["step"] for row in lines] == [1, 2, 3, 4]  # one history, no step repeated or lost
    assert all(row["data"]["run/preempted"] == 1 for row in lines if row["step"] > step)
    first = e2e_runner.read_trace(out / "trace.jsonl")[step + 1]["trained"]

    r2 = tmp_path / "r2"
    again = e2e_runner.recipe_overrides(tiny_assets, r2, "heapa_grpo", steps=step + 1, save_freq=100,
                                        resume_from=copy)
    e2e_runner.run_recipe(repo_root, r2, again)
    assert e2e_runner.read_trace(r2 / "trace.jsonl")[step + 1]["trained"] == first
