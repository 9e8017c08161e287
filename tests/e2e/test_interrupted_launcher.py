"""One launcher run interrupted twice, as a cluster interrupts jobs: killed with SIGKILL, then stopped by a
scheduler's SIGTERM; each start of the same command continues the one history (``recipe/heapa/ops/run_files.py``,
``recipe/heapa/ops/preemption.py``). One run for both, because each trainer start costs most of the time here.

``bash scripts/run_heapa_grpo_qwen.sh`` (the embedded CPU default on the tiny assets, 6 steps, a checkpoint every 2
steps), three times:

1. **killed.** SIGKILL to the whole process session once step 3 is logged (last checkpoint: step 2), no clean-up of
   any kind.
2. **preempted.** The same command resumes at step 3; once its step 3 is logged, SIGTERM goes to every process of
   the launcher's process group, as Slurm's ``scancel`` and preemption, ``kill -- -PGID`` and a terminal's Ctrl-C
   deliver it. It reaches the driver directly and again through ``timeout`` and the supervisor (one preemption:
   ``ops/preemption.py``), but not the Ray processes, which run in sessions of their own (``ops/ray_session.py``):
   the trainer finishes the step in progress, writes a complete checkpoint of it (manifest included), records it in
   ``heapa_preempt.json`` and exits with ``heapa.run.requeue_exit_code`` (75) well inside ``heapa.run.grace_s``;
   the supervisor does not restart a preempted run, and its Ray cluster goes with it. (A signal to the launcher's
   first process only, as Kubernetes sends it, travels the same way without the direct copy:
   ``tests/integration/recipe/ops/test_supervise.py`` runs both deliveries through ``timeout`` and the supervisor.)
3. **finished.** The same command again trains the remaining steps.

Then: ``metrics.jsonl`` and ``trace.jsonl`` hold steps 1-6 once each, the steps after the preemption say
``run/preempted`` 1; ``metrics.attempt-1.jsonl`` still has the killed attempt's step 3 and its step-0 validation;
and the killed attempt's step 3 and the resumed attempt's step 3 (both from ``global_step_2``) trained exactly the
same records: the checkpoint alone (pool, sampler RNG, dataloader) determines what the run does next.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 6
GRACE_S = 240


def _train_lines(e2e_runner, path) -> list[dict]:
    """The training lines of a metrics file (validation-only lines carry no feedback metrics)."""
    return [row for row in e2e_runner.metric_lines(path) if "feedback/n_records" in row["data"]]


def _trace_steps(path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len({r["step"] for r in rows}) == len(rows), f"a step twice in {path.name}"
    return {row["step"]: row for row in rows}


def _step_logged(metrics, step: int, attempt: int):
    """True once attempt ``attempt`` (1, 2, ...) has logged training step ``step``: each start first moves the
    metrics file aside as ``metrics.attempt-<k>.jsonl`` and cuts it at the resumed step, so before attempt k's
    own step the file holds no such line."""
    earlier = metrics.with_name(f"metrics.attempt-{attempt - 1}.jsonl")

    def logged() -> bool:
        if attempt > 1 and not earlier.exists():
            return False
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return any(f'"step":{step}' in line and "feedback/n_records" in line for line in lines)
    return logged


def test_a_killed_then_preempted_launcher_run_finishes_with_one_history(tiny_assets, repo_root, e2e_runner,
                                                                       tmp_path):
    out = tmp_path / "run"
    ckpt = out / "ckpt"
    metrics = out / "metrics.jsonl"
    env = e2e_runner.trainer_env(metrics, {
        "FORCE_CPU": "1", "STEPS": str(STEPS), "OUT_DIR": str(out), "VERL_EXT_ASSETS": str(tiny_assets),
        "ASSETS_PROFILE": "tiny", "TRAIN_MAX_SAMPLES": "32", "PYTHON": sys.executable,
    })
    cmd = ["bash", str(repo_root / "scripts" / "run_heapa_grpo_qwen.sh"), "+ray_kwargs.ray_init.address=local",
           "data.val_max_samples=16", "trainer.save_freq=2", f"heapa.trace_file={out / 'trace.jsonl'}",
           f"heapa.run.grace_s={GRACE_S}"]
    timeout = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
    logs = tmp_path / "logs"

    # 1. killed after step 3: the step-2 checkpoint is the latest
    first = e2e_runner.run_until_killed(cmd, env=env, log_path=logs / "attempt1.log", timeout_s=timeout,
                                        kill_when=_step_logged(metrics, 3, attempt=1), cwd=repo_root)
    assert first.returncode == -9, f"{first.summary()}\n{e2e_runner.tail(logs / 'attempt1.log')}"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"

    # 2. the same command resumes at step 3 and is preempted once its step 3 is logged
    second, sent_at = e2e_runner.run_and_signal(cmd, env=env, log_path=logs / "attempt2.log", timeout_s=timeout,
                                                signal_when=_step_logged(metrics, 3, attempt=2), cwd=repo_root,
                                                group=True)
    log2 = (logs / "attempt2.log").read_text(errors="replace")
    assert sent_at is not None, e2e_runner.tail(logs / "attempt2.log")
    assert not second.timed_out and second.returncode == 75, \
        f"{second.summary()}\n{e2e_runner.tail(logs / 'attempt2.log')}"
    second.assert_no_strays()  # its Ray cluster went with it
    assert second.wall_s - sent_at < GRACE_S
    request = json.loads((ckpt / "heapa_preempt.json").read_text())
    step = request["saved_step"]
    assert request["signal"] == "SIGTERM" and 4 <= step < STEPS and not request["final"], request
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(step)
    assert (ckpt / f"global_step_{step}" / "heapa_manifest.json").exists()  # complete
    assert f"complete checkpoint at step {step}; training ends here" in log2
    assert "restart 1 of" not in log2  # a preempted run is not restarted on the node being taken away
    assert [row["step"] for row in _train_lines(e2e_runner, metrics)] == list(range(1, step + 1))
    print(f"preempted in step {step}: exit {second.returncode} {second.wall_s - sent_at:.0f} s after the signal")

    # 3. the same command finishes the run
    third = e2e_runner.run_logged(cmd, env=env, log_path=logs / "attempt3.log", timeout_s=timeout, cwd=repo_root)
    assert not third.timed_out and third.returncode == 0, \
        f"{third.summary()}\n{e2e_runner.tail(logs / 'attempt3.log')}"
    third.assert_no_strays()
    print(f"attempt 1: {first.summary()}; attempt 2: {second.summary()}; attempt 3: {third.summary()}")

    live = _train_lines(e2e_runner, metrics)
    assert [row["step"] for row in live] == list(range(1, STEPS + 1))  # one history, no step repeated or lost
    assert all(row["data"]["run/preempted"] == 1 for row in live if row["step"] > step)
    killed = e2e_runner.metric_lines(out / "metrics.attempt-1.jsonl")
    assert [row["step"] for row in killed if "feedback/n_records" in row["data"]][:3] == [1, 2, 3]  # kept
    assert any(row["step"] == 0 and "val-core/arith/acc/mean@1" in row["data"] for row in killed)
    carried = [row for row in _train_lines(e2e_runner, out / "metrics.attempt-1.jsonl") if row["step"] <= 2]
    assert live[:2] == carried

    trace = _trace_steps(out / "trace.jsonl")
    assert sorted(trace) == list(range(1, STEPS + 1))
    trace_killed = _trace_steps(out / "trace.attempt-1.jsonl")
    assert sorted(trace_killed)[:3] == [1, 2, 3]
    assert trace[3]["trained"] == trace_killed[3]["trained"]  # the same batch from the same checkpoint
