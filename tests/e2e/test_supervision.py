"""Two failures of one supervised launcher run, each restarted from the latest checkpoint: a Ray worker killed
mid-run, then a step that hangs (``recipe/heapa/ops/supervise.py``, ``recipe/heapa/ops/watchdog.py``). One run for
both, because each trainer start costs most of the time here.

The embedded CPU default (tiny assets) runs 6 ``heapa_grpo`` steps through ``scripts/run_heapa_grpo_qwen.sh`` (the
supervisor, ``MAX_RESTARTS`` 2) with a checkpoint at every step:

1. **a killed worker.** Once step 2 is logged (its checkpoint written), the hf rollout server of this run (the Ray
   actor serving generation, found by its process title and this run's metrics path in its environment) is killed
   with SIGKILL: verl's step 3 fails and the trainer exits. The supervisor sees a newer checkpoint than the attempt
   started from and restarts with ``trainer.resume_mode=auto``.
2. **a stuck step.** The test hook ``VERL_EXT_TEST_HANG=5:900:2`` makes step 5 of the second attempt sleep for 900 s.
   An attempt's first step, warm-up included, takes ~5-10 s here alone and up to ~25 s beside another run
   (``.ci/run`` runs two test modules at once): ``watchdog.first_step_s=120`` covers it and the step after it, and
   from then on the limit is ``max(floor_s=20, factor=5 x the median of the attempt's later steps)``, here 5 x step
   4 (~2-8 s). The watchdog reports step 5 stuck in stage ``test_hang`` after 20-40 s, dumps the trainer's threads
   (faulthandler) and the node's Ray workers (``ray stack``), and aborts; the third attempt resumes from step 4 and
   trains steps 5-6.

The metrics history is one history: steps 1-6 once each, with the attempt that trained each.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
psutil = pytest.importorskip("psutil")


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


def test_a_killed_worker_and_a_hung_step_are_each_restarted(tiny_assets, repo_root, e2e_runner, tmp_path):
    out = tmp_path / "run"
    metrics = out / "metrics.jsonl"
    env = e2e_runner.trainer_env(metrics, {
        "FORCE_CPU": "1", "STEPS": "6", "OUT_DIR": str(out), "VERL_EXT_ASSETS": str(tiny_assets),
        "ASSETS_PROFILE": "tiny", "TRAIN_MAX_SAMPLES": "32", "PYTHON": sys.executable, "RESTART_BACKOFF_S": "1",
        "VERL_EXT_TEST_HANG": "5:900:2",
    })
    cmd = ["bash", str(repo_root / "scripts" / "run_heapa_grpo_qwen.sh"), "+ray_kwargs.ray_init.address=local",
           "data.val_max_samples=16", "trainer.save_freq=1", "trainer.test_freq=-1", "trainer.val_before_train=False",
           "heapa.run.watchdog.floor_s=20", "heapa.run.watchdog.first_step_s=120", "heapa.run.watchdog.factor=5",
           "heapa.run.watchdog.poll_s=1", "heapa.run.watchdog.abort=true"]
    killed: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set() and not killed:
            lines = metrics.read_text().splitlines() if metrics.exists() else []
            if any('"step":2' in line and "feedback/n_records" in line for line in lines):
                n = _kill_rollout_server(str(metrics))
                if n:
                    killed.append(n)
                    return
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    timeout = 1.5 * float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))  # three attempts, one of them hung
    try:
        res = e2e_runner.run_logged(cmd, env=env, log_path=tmp_path / "launcher.log", timeout_s=timeout,
                                    cwd=repo_root)
    finally:
        done.set()
        watcher.join(timeout=10)
    log = (tmp_path / "launcher.log").read_text(errors="replace")
    tail = e2e_runner.tail(tmp_path / "launcher.log")
    assert killed, f"the rollout server was never found and killed\n{tail}"
    assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{tail}"
    res.assert_no_strays()  # its Ray cluster went with it, every attempt's
    # 1. the killed worker
    assert "attempt 1 ended with exit code" in log and "restart 1 of 2 from step 2" in log
    # 2. the stuck step: named with its stage and the hung frame, both dumps, the abort, the restart. Read from the
    # watchdog's file: the trainer's stderr reaches the driver's log through Ray, late, and the last lines before
    # the abort were lost when the driver tore the cluster down first
    report = out / "ckpt" / "stuck_step_5.txt"
    assert f"attempt 2: the watchdog's report of a stuck step: {report}" in log
    text = report.read_text(errors="replace")
    assert text.startswith("==== attempt 2, ")
    assert "step 5 is stuck" in text and "x median step" in text and "in stage 'test_hang'" in text
    assert "stacks of the trainer's process" in text and "maybe_hang_for_test" in text
    assert "`ray stack`" in text
    assert "watchdog.abort: ending the trainer" in text and "restart 2 of 2 from step 4" in log
    # one history
    train = [row for row in e2e_runner.metric_lines(metrics) if "feedback/n_records" in row["data"]]
    assert [row["step"] for row in train] == [1, 2, 3, 4, 5, 6]  # no repeated step
    by_step = {row["step"]: row["data"] for row in train}
    assert [by_step[s]["run/attempt"] for s in range(1, 7)] == [1, 1, 2, 2, 3, 3]
    assert by_step[6]["run/restarts"] == 2 and by_step[6]["run/stuck_steps"] == 0
