"""A step that hangs: the watchdog logs the stage and the stacks within its limit and, with ``abort`` on, ends the
trainer; the supervisor restarts the run from its latest checkpoint and it finishes (``recipe/heapa/ops/watchdog.py``).

``heapa_grpo``, 3 steps, a checkpoint at every step, under ``python -m recipe.heapa.ops.supervise`` (what the launchers
run). The test hook ``VERL_EXT_TEST_HANG=2:900:1`` makes step 2 of the first attempt sleep for 900 s. With
``watchdog.floor_s=60`` and ``factor=5`` (step 1, warm-up included, takes ~5-10 s here alone and up to ~25 s
beside another run: ``.ci/run`` runs two test modules at once, so a 20 s floor could call a slow first step stuck),
the watchdog reports step 2 stuck in stage ``test_hang`` after 60-125 s, dumps the trainer's threads
(faulthandler) and the node's Ray workers (``ray stack``), and aborts; attempt 2 resumes from step 1 and trains
steps 2-3.
"""

from __future__ import annotations

import sys

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_hung_step_is_reported_and_restarted(tiny_assets, repo_root, e2e_runner, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    overrides = e2e_runner.recipe_overrides(tiny_assets, out, "heapa_grpo", steps=3, save_freq=1)
    overrides += ["heapa.run.watchdog.floor_s=60", "heapa.run.watchdog.factor=5", "heapa.run.watchdog.poll_s=1",
                  "heapa.run.watchdog.abort=true"]
    cmd = [sys.executable, "-m", "recipe.heapa.ops.supervise", "--ckpt-dir", str(out / "ckpt"), "--backoff-s", "1",
           "--max-restarts", "1", "--", sys.executable, "-m", "recipe.heapa.main_heapa", *overrides]
    env = e2e_runner.trainer_env(out / "metrics.jsonl", {"VERL_EXT_TEST_HANG": "2:900:1"})
    res = e2e_runner.run_logged(cmd, env=env, log_path=out / "run.log", timeout_s=900, cwd=repo_root)
    log = (out / "run.log").read_text(errors="replace")
    assert not res.timed_out and res.returncode == 0, f"{res.summary()}\n{e2e_runner.tail(out / 'run.log')}"
    res.assert_no_strays()  # its Ray cluster went with it
    assert "step 2 is stuck" in log and "in stage 'test_hang'" in log
    assert "stacks of the trainer's process" in log and "maybe_hang_for_test" in log  # the hung frame is named
    assert "`ray stack`" in log
    assert "watchdog.abort: ending the trainer" in log and "restart 1 of 1 from step 1" in log
    lines = e2e_runner.metric_lines(out / "metrics.jsonl")
    assert [row["step"] for row in lines] == [1, 2, 3]
    assert lines[-1]["data"]["run/restarts"] == 1 and lines[-1]["data"]["run/stuck_steps"] == 0
