"""A Ray worker killed mid-step: the launcher's supervisor (recipe/heapa/ops/supervise.py) restarts the run from its
latest checkpoint and it finishes the requested steps, with one metrics history.

The embedded CPU default (tiny assets) runs 4 heapa_grpo steps with a checkpoint at every step. Once step 2 is
logged (its checkpoint written), the hf rollout server of this run (the Ray actor serving generation, found by its
process title and this run's metrics path in its environment) is killed with SIGKILL: verl's step 3 fails and the
trainer exits. The supervisor sees a newer checkpoint than the attempt started from, restarts with
``trainer.resume_mode=auto`` and the second attempt trains steps 3 and 4.
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


def test_a_killed_rollout_server_is_survived(tiny_assets, repo_root, e2e_runner, tmp_path):
    out = tmp_path / "run"
    metrics = out / "metrics.jsonl"
    env = e2e_runner.trainer_env(metrics, {
        "FORCE_CPU": "1", "STEPS": "4", "OUT_DIR": str(out), "VERL_EXT_ASSETS": str(tiny_assets),
        "ASSETS_PROFILE": "tiny", "TRAIN_MAX_SAMPLES": "32", "PYTHON": sys.executable, "RESTART_BACKOFF_S": "1",
    })
    cmd = ["bash", str(repo_root / "scripts" / "run_heapa_grpo_qwen.sh"), "+ray_kwargs.ray_init.address=local",
           "data.val_max_samples=16", "trainer.save_freq=1", "trainer.test_freq=-1", "trainer.val_before_train=False"]
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
    timeout = float(os.environ.get("VERL_EXT_E2E_TIMEOUT", "600"))
    try:
        res = e2e_runner.run_logged(cmd, env=env, log_path=tmp_path / "launcher.log", timeout_s=timeout,
                                    cwd=repo_root)
    finally:
        done.set()
        watcher.join(timeout=10)
    log = (tmp_path / "launcher.log").read_text(errors="replace")
    assert killed, f"the rollout server was never found and killed\n{e2e_runner.tail(tmp_path / 'launcher.log')}"
    assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{e2e_runner.tail(tmp_path / 'launcher.log')}"
    res.assert_no_strays()  # its Ray cluster went with it
    assert "attempt 1 ended with exit code" in log and "restart 1 of 2 from step 2" in log
    live = e2e_runner.metric_lines(metrics)
    train = [row for row in live if "feedback/n_records" in row["data"]]
    assert [row["step"] for row in train] == [1, 2, 3, 4]  # one history, no repeated step
    by_step = {row["step"]: row["data"] for row in train}
    assert by_step[1]["run/attempt"] == 1 and by_step[4]["run/attempt"] == 2 and by_step[4]["run/restarts"] == 1
