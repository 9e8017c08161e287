"""recipe/heapa/ops/supervise.py: restarts after progress only, at most MAX_RESTARTS, resumes, passes signals on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from pathlib import Path

from recipe.heapa.ops.supervise import main

# A stand-in trainer: records its argv and attempt, writes a newer checkpoint step when told, exits with the code
# given for this attempt (the last one repeats).
CHILD = r"""
import json, os, sys
from pathlib import Path
ckpt, plan = Path(sys.argv[1]), json.loads(sys.argv[2])
attempt = int(os.environ["VERL_EXT_RUN_ATTEMPT"])
with open(ckpt / "calls.jsonl", "a") as f:
    f.write(json.dumps({"attempt": attempt, "restarts": os.environ["VERL_EXT_RUN_RESTARTS"],
                        "args": sys.argv[3:]}) + "\n")
step_add, rc = plan[min(attempt, len(plan)) - 1]
tracker = ckpt / "latest_checkpointed_iteration.txt"
step = int(tracker.read_text()) if tracker.exists() else 0
if step_add:
    tracker.write_text(str(step + step_add))
sys.exit(rc)
"""


def supervise(tmp_path: Path, plan, max_restarts: int = 2) -> tuple[int, list[dict]]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    rc = main(["--ckpt-dir", str(tmp_path), "--max-restarts", str(max_restarts), "--backoff-s", "0", "--",
               sys.executable, str(script), str(tmp_path), json.dumps(plan), "trainer.total_training_steps=9"])
    return rc, [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def test_a_crash_after_progress_restarts_with_resume_auto(tmp_path):
    rc, calls = supervise(tmp_path, [(2, 1), (3, 0)])
    assert rc == 0 and [c["attempt"] for c in calls] == [1, 2] and [c["restarts"] for c in calls] == ["0", "1"]
    assert calls[0]["args"][-1] == "trainer.total_training_steps=9"
    assert calls[1]["args"][-1] == "trainer.resume_mode=auto"  # the last override wins in Hydra


def test_no_progress_no_restart(tmp_path, caplog):
    rc, calls = supervise(tmp_path, [(0, 3)])
    assert rc == 3 and len(calls) == 1
    assert "not restarting" in caplog.text


def test_a_repeating_crash_without_progress_stops_the_loop(tmp_path, caplog):
    rc, calls = supervise(tmp_path, [(2, 1), (0, 1)])
    assert rc == 1 and len(calls) == 2 and "no checkpoint newer than step 2" in caplog.text


def test_a_preempted_attempt_is_not_restarted_here(tmp_path, caplog):
    rc, calls = supervise(tmp_path, [(2, 75), (3, 0)])  # progress, then the requeue code: the scheduler's call
    assert rc == 75 and len(calls) == 1 and "was preempted (exit code 75)" in caplog.text


def test_at_most_max_restarts(tmp_path, caplog):
    rc, calls = supervise(tmp_path, [(1, 1)], max_restarts=2)
    assert rc == 1 and len(calls) == 3 and "giving up" in caplog.text


def test_sigterm_is_passed_on_and_ends_the_loop(tmp_path):
    child = tmp_path / "sleeper.py"
    child.write_text("import signal, sys, time\n"
                     "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
                     "open(sys.argv[1], 'w').write('up')\n"
                     "time.sleep(60)\n")
    flag = tmp_path / "up"
    proc = subprocess.Popen([sys.executable, "-m", "recipe.heapa.ops.supervise", "--ckpt-dir", str(tmp_path),
                             "--backoff-s", "0", "--", sys.executable, str(child), str(flag)],
                            cwd=Path(__file__).resolve().parents[4], env=dict(os.environ))
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143


# The driver's half of a preemption (ops/preemption.py) behind the launcher's `timeout --foreground` and the
# supervisor: it finishes its "step" a second after the request, checkpoints, exits with the requeue code.
DRIVER = r"""
import sys, time
from recipe.heapa.ops.preemption import DriverPreemption, RunSettings, mark_saved
ckpt, flag = sys.argv[1], sys.argv[2]
ends = []
driver = DriverPreemption(RunSettings(grace_s=30), ckpt, exit_fn=ends.append)
driver.install()
open(flag, "w").write("up")
while driver.requested_at is None:
    time.sleep(0.05)
time.sleep(1.0)  # the step in progress; copies of a job-wide delivery arrive meanwhile
mark_saved(ckpt, 3)
sys.exit(99 if ends else driver.exit_code())  # a copy taken for a second signal would have ended it at once
"""


@pytest.mark.parametrize("delivery", ["first process (Kubernetes)", "process group (Slurm, Ctrl-C)"])
def test_a_scheduler_signal_through_timeout_and_the_supervisor_is_one_preemption(tmp_path, delivery):
    from recipe.heapa.ops.preemption import preemptions, read_request

    script, flag = tmp_path / "driver.py", tmp_path / "up"
    script.write_text(DRIVER)
    proc = subprocess.Popen(["timeout", "--foreground", "120", sys.executable, "-m", "recipe.heapa.ops.supervise",
                             "--ckpt-dir", str(tmp_path), "--backoff-s", "0", "--",
                             sys.executable, str(script), str(tmp_path), str(flag)],
                            cwd=Path(__file__).resolve().parents[4], env=dict(os.environ), start_new_session=True)
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if delivery.startswith("first"):
        proc.send_signal(signal.SIGTERM)  # the launcher's first process only; it reaches the driver forwarded
    else:
        os.killpg(proc.pid, signal.SIGTERM)  # every process: the driver directly and again forwarded
    assert proc.wait(timeout=60) == 75
    assert read_request(tmp_path)["signal"] == "SIGTERM" and preemptions(tmp_path) == 1
