"""One launcher run interrupted in every way a cluster interrupts jobs, each start of the same command continuing
the one history (``recipe/heapa/ops/run_files.py``, ``ops/supervise.py``, ``ops/watchdog.py``,
``ops/preemption.py``). One run for all four faults, because each trainer start costs most of the time here.

``bash scripts/run_heapa_grpo_qwen.sh`` (the supervisor, ``MAX_RESTARTS`` 3; the embedded CPU default on the tiny
assets, 10 steps, a checkpoint every 2 steps), three times, five trainer starts in all:

1. **killed.** SIGKILL to the whole process session once step 3 is logged (last checkpoint: step 2), no clean-up of
   any kind.
2. The same command resumes at step 3 (supervisor attempt 1):

   a. **a killed worker.** Once its step 4 is logged (checkpoint 4 written), the hf rollout server of this run (the
      Ray actor serving generation, found by its process title and this run's metrics path in its environment) is
      killed with SIGKILL: verl's step 5 fails and the trainer exits. The supervisor sees a newer checkpoint than
      the attempt started from and restarts with ``trainer.resume_mode=auto``.
   b. **a stuck step.** The test hook ``VERL_EXT_TEST_HANG=7:900:2`` makes step 7 of attempt 2 (resumed at step 5)
      sleep for 900 s. An attempt's first step, warm-up included, takes ~5-10 s here alone and up to ~25 s beside
      another run (``.ci/run`` runs two test modules at once): ``watchdog.first_step_s=120`` covers it and the step
      after it, and from then on the limit is ``max(floor_s=20, factor=5 x the median of the attempt's later
      steps)``, here 5 x step 6 (~2-8 s). The watchdog reports step 7 stuck in stage ``test_hang`` after 20-40 s,
      dumps the trainer's threads (faulthandler) and the node's Ray workers (``ray stack``), and aborts; the
      supervisor restarts from step 6.
   c. **preempted.** Once attempt 3 has logged step 7, SIGTERM goes to every process of the launcher's process group,
      as Slurm's ``scancel`` and preemption, ``kill -- -PGID`` and a terminal's Ctrl-C deliver it. It reaches the
      driver directly and again through ``timeout`` and the supervisor (one preemption), but not the Ray processes,
      which run in sessions of their own (``ops/ray_session.py``): the trainer finishes the step in progress, writes
      a complete checkpoint of it (manifest included), records it in ``heapa_preempt.json`` and exits with
      ``heapa.run.requeue_exit_code`` (75) well inside ``heapa.run.grace_s``; the supervisor does not restart a
      preempted run (one restart was left), and its Ray cluster goes with it. (A signal to the launcher's first
      process only, as Kubernetes sends it, travels the same way without the direct copy:
      ``tests/integration/recipe/ops/test_supervise.py`` runs both deliveries through ``timeout`` and the
      supervisor.)
3. **finished.** The same command again trains the remaining steps.

Then: ``metrics.jsonl`` and ``trace.jsonl`` hold steps 1-10 once each, with the start that trained each, the steps
after the preemption say ``run/preempted`` 1; ``metrics.attempt-1.jsonl`` still has the killed start's step 3 and
its step-0 validation; and the killed start's step 3 and the resumed start's step 3 (both from ``global_step_2``)
trained exactly the same records: the checkpoint alone (pool, sampler RNG, dataloader) determines what the run does
next.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
psutil = pytest.importorskip("psutil")

STEPS = 10
GRACE_S = 240


def _train_lines(e2e_runner, path) -> list[dict]:
    """The training lines of a metrics file (validation-only lines carry no feedback metrics)."""
    return [row for row in e2e_runner.metric_lines(path) if "feedback/n_records" in row["data"]]


def _trace_steps(path) -> dict[int, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len({r["step"] for r in rows}) == len(rows), f"a step twice in {path.name}"
    return {row["step"]: row for row in rows}


def _step_logged(metrics, step: int, start: int):
    """True once trainer start ``start`` (1, 2, ...; counted over every launcher run and supervisor attempt) has
    logged training step ``step``: each start first moves the metrics file aside as ``metrics.attempt-<k>.jsonl``
    and cuts it at the resumed step, so before start k's own step the file holds no such line."""
    earlier = metrics.with_name(f"metrics.attempt-{start - 1}.jsonl")

    def logged() -> bool:
        if start > 1 and not earlier.exists():
            return False
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return any(f'"step":{step}' in line and "feedback/n_records" in line for line in lines)
    return logged


def _kill_rollout_server(metrics_path: str) -> int:
    killed = 0
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "HFServer" in " ".join(proc.info["cmdline"] or []) and \
                    proc.environ().get("VERL_FILE_LOGGER_PATH") == metrics_path:
                proc.kill()
                killed += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return killed


def _kill_worker_when(ready, metrics_path: str, killed: list[int], done: threading.Event) -> threading.Thread:
    def watch() -> None:
        while not done.is_set():
            if ready():
                n = _kill_rollout_server(metrics_path)
                if n:
                    killed.append(n)
                    return
            time.sleep(0.5)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_killed_restarted_stuck_then_preempted_launcher_run_finishes_with_one_history(
        tiny_assets, repo_root, e2e_runner, tmp_path):
    out = tmp_path / "run"
    ckpt = out / "ckpt"
    metrics = out / "metrics.jsonl"
    env = e2e_runner.trainer_env(metrics, {
        "FORCE_CPU": "1", "STEPS": str(STEPS), "OUT_DIR": str(out), "VERL_EXT_ASSETS": str(tiny_assets),
        "ASSETS_PROFILE": "tiny", "TRAIN_MAX_SAMPLES": "32", "PYTHON": sys.executable, "RESTART_BACKOFF_S": "1",
        "MAX_RESTARTS": "3", "VERL_EXT_TEST_HANG": "7:900:2",
    })
    cmd = ["bash", str(repo_root / "scripts" / "run_heapa_grpo_qwen.sh"), "+ray_kwargs.ray_init.address=local",
           "data.val_max_samples=16", "trainer.save_freq=2", f"heapa.trace_file={out / 'trace.jsonl'}",
           f"heapa.run.grace_s={GRACE_S}", "heapa.run.watchdog.floor_s=20", "heapa.run.watchdog.first_step_s=120",
           "heapa.run.watchdog.factor=5", "heapa.run.watchdog.poll_s=1", "heapa.run.watchdog.abort=true"]
    timeout = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
    logs = tmp_path / "logs"

    # 1. killed after step 3: the step-2 checkpoint is the latest
    first = e2e_runner.run_until_killed(cmd, env=env, log_path=logs / "run1.log", timeout_s=timeout,
                                        kill_when=_step_logged(metrics, 3, start=1), cwd=repo_root)
    assert first.returncode == -9, f"{first.summary()}\n{e2e_runner.tail(logs / 'run1.log')}"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"

    # 2. the same command resumes at step 3; its worker is killed after step 4, its second attempt hangs at step 7,
    # its third is preempted once its step 7 is logged
    killed: list[int] = []
    done = threading.Event()
    watcher = _kill_worker_when(_step_logged(metrics, 4, start=2), str(metrics), killed, done)
    try:
        second, sent_at = e2e_runner.run_and_signal(
            cmd, env=env, log_path=logs / "run2.log", timeout_s=1.5 * timeout, cwd=repo_root, group=True,
            signal_when=_step_logged(metrics, 7, start=4))  # three attempts, one of them hung
    finally:
        done.set()
        watcher.join(timeout=10)
    log2 = (logs / "run2.log").read_text(errors="replace")
    tail2 = e2e_runner.tail(logs / "run2.log")
    assert killed, f"the rollout server was never found and killed\n{tail2}"
    assert sent_at is not None, tail2
    assert not second.timed_out and second.returncode == 75, f"{second.summary()}\n{tail2}"
    second.assert_no_strays()  # its Ray cluster went with it, every attempt's
    # 2a. the killed worker
    assert "attempt 1 ended with exit code" in log2 and "restart 1 of 3 from step 4" in log2
    # 2b. the stuck step: named with its stage and the hung frame, both dumps, the abort, the restart. Read from the
    # watchdog's file: the trainer's stderr reaches the driver's log through Ray, late, and the last lines before
    # the abort were lost when the driver tore the cluster down first
    report = ckpt / "stuck_step_7.txt"
    assert f"attempt 2: the watchdog's report of a stuck step: {report}" in log2
    text = report.read_text(errors="replace")
    assert text.startswith("==== attempt 2, ")
    assert "step 7 is stuck" in text and "x median step" in text and "in stage 'test_hang'" in text
    assert "stacks of the trainer's process" in text and "maybe_hang_for_test" in text
    assert "`ray stack`" in text
    assert "watchdog.abort: ending the trainer" in text and "restart 2 of 3 from step 6" in log2
    # 2c. the preemption
    assert second.wall_s - sent_at < GRACE_S
    request = json.loads((ckpt / "heapa_preempt.json").read_text())
    step = request["saved_step"]
    assert request["signal"] == "SIGTERM" and 8 <= step < STEPS and not request["final"], request
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(step)
    assert (ckpt / f"global_step_{step}" / "heapa_manifest.json").exists()  # complete
    assert f"complete checkpoint at step {step}; training ends here" in log2
    assert "restart 3 of" not in log2  # not restarted on the node being taken away, though one restart was left
    assert [row["step"] for row in _train_lines(e2e_runner, metrics)] == list(range(1, step + 1))
    print(f"preempted in step {step}: exit {second.returncode} {second.wall_s - sent_at:.0f} s after the signal")

    # 3. the same command finishes the run
    third = e2e_runner.run_logged(cmd, env=env, log_path=logs / "run3.log", timeout_s=timeout, cwd=repo_root)
    assert not third.timed_out and third.returncode == 0, f"{third.summary()}\n{e2e_runner.tail(logs / 'run3.log')}"
    third.assert_no_strays()
    print(f"run 1: {first.summary()}; run 2: {second.summary()}; run 3: {third.summary()}")

    live = _train_lines(e2e_runner, metrics)
    assert [row["step"] for row in live] == list(range(1, STEPS + 1))  # one history, no step repeated or lost
    by_step = {row["step"]: row["data"] for row in live}
    attempts = [by_step[s]["run/attempt"] for s in range(1, STEPS + 1)]
    assert attempts[:step] == [1, 1, 1, 1, 2, 2] + [3] * (step - 6), attempts  # run 1, then run 2's attempts
    assert attempts[step:] == [1] * (STEPS - step), attempts  # run 3
    assert by_step[7]["run/restarts"] == 2 and all(by_step[s]["run/stuck_steps"] == 0 for s in by_step)
    assert all(by_step[s]["run/preempted"] == 1 for s in by_step if s > step)
    killed_lines = e2e_runner.metric_lines(out / "metrics.attempt-1.jsonl")
    assert [row["step"] for row in killed_lines if "feedback/n_records" in row["data"]][:3] == [1, 2, 3]  # kept
    assert any(row["step"] == 0 and "val-core/arith/acc/mean@1" in row["data"] for row in killed_lines)
    carried = [row for row in _train_lines(e2e_runner, out / "metrics.attempt-1.jsonl") if row["step"] <= 2]
    assert live[:2] == carried

    trace = _trace_steps(out / "trace.jsonl")
    assert sorted(trace) == list(range(1, STEPS + 1))
    trace_killed = _trace_steps(out / "trace.attempt-1.jsonl")
    assert sorted(trace_killed)[:3] == [1, 2, 3]
    assert trace[3]["trained"] == trace_killed[3]["trained"]  # the same batch from the same checkpoint
